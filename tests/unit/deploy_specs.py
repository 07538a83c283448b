"""The 3-node spec the deploy engine's unit tests render and run against (the sandbox's shape)."""

THREE_NODE_SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: sbx, admin_user: ubuntu}
nodes:
  - {name: head, address: 172.28.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "172.28.0.[11-12]", roles: [compute], gpus: {count: 2, fake: true}}
nfs: {exports: [/home]}
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: false, pyxis: false}
"""
