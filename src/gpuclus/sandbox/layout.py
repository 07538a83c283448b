"""Where a sandbox's parts go: node names, addresses, subnet, resource names, and the spec for them.

Pure: nothing here asks the host or a container engine anything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuclus.errors import UsageError
from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.sandbox.oses import DEFAULT_OS, node_os
from gpuclus.yamldoc.patterns import CLUSTER_NAME_PATTERN

SUBNET_POOL = ipaddress.ip_network("10.213.0.0/16")
FIRST_HOST = 10  # head is .10, compute nodes .11 onwards
MAX_NODES = 32
MAX_GPUS = 8
NFS_VOLUME_MOUNT = "/srv/nfs"
# The sandbox's NFS export on the volume (the head's own path; clients mount it at /shared).
NFS_EXPORT_PATH = f"{NFS_VOLUME_MOUNT}/shared"
# With this many nodes or more (head + 2 compute) the sandbox is HA: a backup
# controller on the first compute node, its state in the volume both mount.
BACKUP_FROM_NODES = 3
SLURM_STATE_DIR = f"{NFS_EXPORT_PATH}/slurm/state"
# The squashfs image every compute node builds for itself at setup (nodes.py):
# what `srun --container-image` and `gpuclus validate` run with Pyxis.
TEST_IMAGE = "/var/lib/gpuclus-sandbox/images/test.sqsh"
# Longest cluster name that keeps "<name>-gpu32" a valid 63-character host name.
MAX_CLUSTER_NAME = 40


@dataclass(frozen=True)
class SandboxNode:
    name: str
    address: str
    controller: bool
    gpus: int
    # The node's OS (oses.py); a record written before there was a choice is Debian 12's.
    os: str = DEFAULT_OS


@dataclass(frozen=True)
class SandboxLayout:
    cluster: str
    subnet: str
    nodes: tuple[SandboxNode, ...]
    gpus_per_node: int

    @property
    def network(self) -> str:
        return network_name(self.cluster)

    @property
    def volume(self) -> str:
        return f"gpuclus-{self.cluster}-nfs"

    @property
    def head(self) -> SandboxNode:
        return self.nodes[0]

    @property
    def compute(self) -> tuple[SandboxNode, ...]:
        return self.nodes[1:] if len(self.nodes) > 1 else self.nodes

    @property
    def backup_controller(self) -> SandboxNode | None:
        """The first compute node, from 3 nodes on: the spec gives it the backup slurmctld (Slurm HA)."""
        return self.nodes[1] if len(self.nodes) >= BACKUP_FROM_NODES else None

    def mounts_nfs_volume(self, node: SandboxNode) -> bool:
        """The head serves NFS from the volume; the first compute node mounts it too, at the same path, for the
        backup controller's shared state directory (also with 2 nodes, so `up --nodes 3` later needs no change)."""
        return node.controller or (len(self.nodes) > 1 and node == self.nodes[1])


def network_name(cluster: str) -> str:
    """The sandbox's private network; `down` and the subnet search know it by this name alone."""
    return f"gpuclus-{cluster}"


def check_cluster_name(name: str) -> None:
    if not re.fullmatch(CLUSTER_NAME_PATTERN, name) or len(name) > MAX_CLUSTER_NAME:
        raise UsageError(
            f"--name {name!r} is not a usable sandbox name",
            "a lower-case letter, then a-z, 0-9 and '-', at most 40 (it prefixes the node names)",
        )


def sandbox_layout(
    cluster: str,
    node_count: int,
    gpus_per_node: int,
    subnet: str,
    head_os: str = DEFAULT_OS,
    compute_os: str | None = None,
) -> SandboxLayout:
    """The nodes: the head runs ``head_os``, the compute nodes ``compute_os`` (default: the head's)."""
    check_cluster_name(cluster)
    node_os(head_os)
    compute_os = compute_os or head_os
    node_os(compute_os, "--compute-os")
    if not 1 <= node_count <= MAX_NODES:
        raise UsageError(f"--nodes {node_count}: the sandbox runs 1 to {MAX_NODES} nodes")
    if not 0 <= gpus_per_node <= MAX_GPUS:
        raise UsageError(f"--gpus-per-node {gpus_per_node}: use 0 to {MAX_GPUS} fake GPUs per node")
    network = ipaddress.ip_network(subnet)
    if network.num_addresses < FIRST_HOST + node_count + 1:
        raise UsageError(f"--subnet {subnet} is too small for {node_count} nodes", "use a /24")
    hosts = list(network.hosts())
    head = SandboxNode(
        f"{cluster}-head", str(hosts[FIRST_HOST - 1]), True, gpus_per_node if node_count == 1 else 0, head_os
    )
    compute = [
        SandboxNode(f"{cluster}-gpu{index:02d}", str(hosts[FIRST_HOST - 1 + index]), False, gpus_per_node, compute_os)
        for index in range(1, node_count)
    ]
    return SandboxLayout(cluster, str(network), (head, *compute), gpus_per_node)


def pick_subnet(requested: str | None, taken: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
    """The requested subnet if it is free, else the first free /24 of the pool."""
    used = list(taken)
    if requested is not None:
        try:
            network = ipaddress.ip_network(requested, strict=True)
        except ValueError as exc:
            raise UsageError(f"--subnet {requested!r}: {exc}", "give a network such as 10.213.5.0/24") from None
        if not isinstance(network, ipaddress.IPv4Network):
            raise UsageError(f"--subnet {requested}: the sandbox needs an IPv4 subnet")
        clash = next((other for other in used if network.overlaps(other)), None)
        if clash is not None:
            raise UsageError(
                f"--subnet {requested} overlaps {clash}, which this host already routes",
                "pick another subnet, or leave --subnet out to get a free one",
            )
        return str(network)
    for candidate in SUBNET_POOL.subnets(new_prefix=24):
        if not any(candidate.overlaps(other) for other in used):
            return str(candidate)
    raise UsageError(f"no free /24 left in {SUBNET_POOL}", "pass --subnet with a free network")


def sandbox_spec_text(layout: SandboxLayout, artifacts_dir: str | None = None, wheelhouse: str | None = None) -> str:
    """The spec for these nodes; with ``artifacts_dir`` (an absolute path on this host) Enroot and Pyxis are on,
    with ``wheelhouse`` (one too) Lmod and a node-local PyTorch environment."""
    from gpuclus.templating import render_template

    compute = [node for node in layout.nodes if not node.controller]
    backup = layout.backup_controller
    # The backup controller has an entry of its own; the rest stay one range
    # (which `gpuclus nodes remove` can shrink).
    ranged = [node for node in compute if node != backup]
    return render_template(
        "sandbox/sandbox.yaml.j2",
        layout=layout,
        admin_user=ADMIN_USER,
        backup=backup,
        compute_name=_range_of([node.name for node in ranged]),
        compute_address=_address_range([node.address for node in ranged]),
        state_dir=SLURM_STATE_DIR,
        nfs_path=NFS_EXPORT_PATH,
        artifacts_dir=artifacts_dir,
        wheelhouse=wheelhouse,
        test_image=TEST_IMAGE,
    )


def _range_of(names: list[str]) -> str:
    """Consecutive names <prefix>NN as one hostlist: gpu02, or gpu[02-05]."""
    if len(names) <= 1:
        return names[0] if names else ""
    first, last = names[0], names[-1]
    return f"{first[:-2]}[{first[-2:]}-{last[-2:]}]"


def _address_range(addresses: list[str]) -> str:
    if len(addresses) <= 1:
        return addresses[0] if addresses else ""
    first, last = addresses[0], addresses[-1]
    stem = first.rsplit(".", 1)[0]
    return f"{stem}.[{first.rsplit('.', 1)[1]}-{last.rsplit('.', 1)[1]}]"
