"""The sandbox's node containers: run them, wait for systemd, set them up, check them over SSH, remove them.

Setting a node up writes its /etc/hosts, its fake GPU device nodes and
gpuclus' public key for the admin user, builds the test image on compute
nodes, and reads back its SSH host key.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuclus.sandbox.engine import OS_LABEL, OWNER_LABEL, Engine, NodeContainer, SandboxError, engine_message
from gpuclus.sandbox.image import ADMIN_USER, FAKE_GPU_CONFIG
from gpuclus.sandbox.layout import NFS_VOLUME_MOUNT, TEST_IMAGE, SandboxLayout, SandboxNode
from gpuclus.sandbox.oses import DEFAULT_OS
from gpuclus.ssh.client import SshFailure, SshTarget, run_once
from gpuclus.state import StateDir

BOOT_TIMEOUT = 120


@dataclass
class NodeStatus:
    name: str
    address: str
    role: str
    gpus: int
    state: str  # running, exited, created, missing
    ssh: bool | None = None  # None: not checked
    detail: str = ""
    os: str = DEFAULT_OS


def node_status(node: SandboxNode, state: str) -> NodeStatus:
    return NodeStatus(
        node.name, node.address, "controller" if node.controller else "compute", node.gpus, state, os=node.os
    )


def node_containers(layout: SandboxLayout, images: Mapping[str, str], owner: str | None = None) -> list[NodeContainer]:
    """What the engine runs for each node; the controller (and the first compute node) mount the NFS volume.

    ``images`` maps each node OS to its image. ``owner`` (the .gpuclus
    directory that runs `up`) goes on every container as a label; so does the
    node's OS, which `sandbox list` shows.
    """
    containers = []
    for node in layout.nodes:
        role = "controller" if node.controller else "compute"
        volumes = ((layout.volume, NFS_VOLUME_MOUNT),) if layout.mounts_nfs_volume(node) else ()
        labels: tuple[tuple[str, str], ...] = (("gpuclus.role", role), (OS_LABEL, node.os))
        if owner is not None:
            labels += ((OWNER_LABEL, owner),)
        containers.append(
            NodeContainer(
                name=node.name,
                address=node.address,
                network=layout.network,
                image=images[node.os],
                cluster=layout.cluster,
                volumes=volumes,
                labels=labels,
            )
        )
    return containers


def ensure_nodes(
    engine: Engine,
    layout: SandboxLayout,
    images: Mapping[str, str],
    say: Callable[[str], None],
    owner: str | None = None,
) -> list[str]:
    """Create missing nodes, start stopped ones; returns the names created or started."""
    states = {status.name: status.state for status in inspect_nodes(engine, layout)}
    touched = []
    for container in node_containers(layout, images, owner):
        state = states.get(container.name, "missing")
        if state == "running":
            continue
        if state != "missing":
            say(f"starting {container.name} (was {state})")
            if engine.ok(engine.start([container.name])):
                touched.append(container.name)
                continue
            engine.run(engine.remove([container.name]), what=f"removing broken {container.name}")
        say(f"starting node {container.name} at {container.address}")
        started = engine.run(engine.run_node(container), what=f"starting {container.name}", check=False)
        if started.returncode != 0 and "already in use" in started.stderr and _storage_only(engine, container.name):
            # A podman `run` killed half-way (Ctrl-C) can leave storage under the name
            # that no container owns; it holds nothing of a node yet, so it goes. A
            # real container of that name (not gpuclus') is never touched.
            engine.run(engine.remove([container.name]), what=f"removing the remains of {container.name}")
            started = engine.run(engine.run_node(container), what=f"starting {container.name}", check=False)
        if started.returncode != 0:
            raise SandboxError(f"starting {container.name} failed: {engine_message(started.stderr) or 'no message'}")
        touched.append(container.name)
    return touched


def _storage_only(engine: Engine, name: str) -> bool:
    """Whether ``name`` is held by podman storage that no container (of any label) owns."""
    if engine.kind != "podman":
        return False
    everything = engine.run(engine.all_container_names(), what="listing containers", check=False)
    return everything.returncode == 0 and name not in everything.stdout.split()


def inspect_nodes(engine: Engine, layout: SandboxLayout) -> list[NodeStatus]:
    """Each node's container state ("missing" when there is no container)."""
    present = set(engine.run(engine.list_containers(layout.cluster), what="listing nodes").stdout.split())
    details: dict[str, dict[str, Any]] = {}
    names = [node.name for node in layout.nodes if node.name in present]
    if names:
        for item in engine.json_lines(engine.inspect(names), what="inspecting nodes"):
            details[str(item.get("Name", "")).lstrip("/")] = item
    statuses = []
    for node in layout.nodes:
        info = details.get(node.name)
        statuses.append(node_status(node, str(info.get("State", {}).get("Status", "missing")) if info else "missing"))
    return statuses


def remove_nodes(engine: Engine, nodes: Sequence[str], say: Callable[[str], None]) -> list[str]:
    """Remove these node containers; returns their names, sorted."""
    if nodes:
        say(f"removing {len(nodes)} node(s)")
        engine.run(engine.remove(nodes), what="removing nodes", timeout=120)
    return sorted(nodes)


def logs_hint(engine: Engine) -> str:
    return f"`{engine.kind} logs NODE` shows why"


# What the test image holds: the node's own binaries of these tools (sh is
# /bin/sh), each with the shared libraries ldd names for it, at their paths.
TEST_IMAGE_TOOLS = ("cat", "id", "ls", "grep", "head")
TEST_IMAGE_OS_RELEASE = 'NAME="gpuclus sandbox test image"\nID=gpuclus-test\nVERSION_ID=1\n'


def pyxis_image_script(path: str = TEST_IMAGE) -> str:
    """Shell that builds the tiny squashfs test image at ``path`` unless it is there; prints nothing on stdout.

    It lives on each compute node's local disk, not on the NFS export: the
    sandbox's compute nodes do not mount the export, since the kernel their
    containers share has no NFS client (see roles/nfs_client and
    validate/checks/storage.py), so a file there would not be seen by Pyxis.
    """
    directory, name = path.rsplit("/", 1)
    tools = " ".join(TEST_IMAGE_TOOLS)
    return f"""# The test image for `srun --container-image` (Pyxis) and `gpuclus validate`,
# on this node's own disk: the sandbox's compute nodes do not mount the NFS
# export (their kernel has no NFS client), so each node builds its own.
if [ ! -e {shlex.quote(path)} ]; then
  if ! command -v mksquashfs >/dev/null 2>&1; then
    echo "error: mksquashfs is not installed on $(uname -n), whose node image predates the sandbox's test image:" \\
      "run \\`gpuclus sandbox down\\` and \\`gpuclus sandbox up\\` to remake the nodes" >&2
    exit 1
  fi
  (
    root=$(mktemp -d)
    trap 'rm -rf "$root"' EXIT
    for binary in /bin/sh $(for tool in {tools}; do command -v "$tool"; done); do
      cp -L --parents "$binary" "$root"
      for library in $(ldd "$binary" | grep -o '/[^ ]*'); do
        [ -e "$root$library" ] || cp -L --parents "$library" "$root"
      done
    done
    mkdir -p "$root/etc" "$root/root" "$root/proc" "$root/sys" "$root/dev" "$root/tmp"
    chmod 1777 "$root/tmp"
    echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
    echo 'root:x:0:' > "$root/etc/group"
    printf '{TEST_IMAGE_OS_RELEASE}' > "$root/etc/os-release"
    install -d -m 0755 {shlex.quote(directory)}
    partial={shlex.quote(directory)}/.{name}.partial
    mksquashfs "$root" "$partial" -noappend -quiet -all-root -no-xattrs >&2
    chmod 0644 "$partial"
    mv -f "$partial" {shlex.quote(path)}
  )
fi
"""


def node_setup_script(layout: SandboxLayout, node: SandboxNode, public_key: str) -> str:
    """The shell script that sets a booted node up; its last line of output is the node's SSH host key.

    Compute nodes (in a 1-node sandbox, the head) also build the test image.
    """
    hosts = "\n".join(
        ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        + [f"{other.address} {other.name}" for other in layout.nodes]
    )
    home = f"/home/{ADMIN_USER}"
    gpus = (
        f"mkdir -p /etc/gpuclus && echo {node.gpus} > {FAKE_GPU_CONFIG} && /usr/local/sbin/gpuclus-fake-gpus"
        if node.gpus
        else f"rm -f {FAKE_GPU_CONFIG}"
    )
    test_image = pyxis_image_script() if node in layout.compute else ""
    return f"""set -eu
# /etc/hosts is a plain file in the node (--no-hosts): write it in place,
# unless a deploy's base role already manages it (a restarted node).
grep -q 'managed by gpuclus' /etc/hosts 2>/dev/null || cat > /etc/hosts <<'EOF'
{hosts}
EOF
{gpus}
install -d -m 700 -o {ADMIN_USER} -g {ADMIN_USER} {home}/.ssh
# Added, never overwritten: a deploy adds the cluster's own key next to it.
key={shlex.quote(public_key)}
touch {home}/.ssh/authorized_keys
grep -qxF "$key" {home}/.ssh/authorized_keys || printf '%s\\n' "$key" >> {home}/.ssh/authorized_keys
chown {ADMIN_USER}:{ADMIN_USER} {home}/.ssh/authorized_keys
chmod 600 {home}/.ssh/authorized_keys
{test_image}cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub
"""


def wait_for_boot(engine: Engine, name: str, timeout: float = BOOT_TIMEOUT) -> str:
    """systemd's state once boot is over ("running" or "degraded").

    Right after the container starts, systemctl cannot reach systemd yet and
    prints nothing; `--wait` only helps once it can, so poll until it answers.
    """
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        try:
            result = engine.run(
                engine.exec(name, ["systemctl", "is-system-running", "--wait"]),
                what=f"waiting for {name} to boot",
                check=False,
                timeout=max(1.0, deadline - time.monotonic()),
            )
        except SandboxError:
            # --wait outlived the deadline: boot is stuck, not the engine. What
            # systemd says now ("initializing", "starting") names that.
            return _boot_state_now(engine, name) or state
        state = result.stdout.strip()
        if state in {"running", "degraded", "maintenance", "stopping"}:
            return state
        time.sleep(0.3)
    return state


def _boot_state_now(engine: Engine, name: str) -> str:
    try:
        result = engine.run(
            engine.exec(name, ["systemctl", "is-system-running"]), what=f"asking {name}", check=False, timeout=10
        )
    except SandboxError:
        return ""
    return result.stdout.strip()


def configure_nodes(
    engine: Engine, layout: SandboxLayout, nodes: Sequence[SandboxNode], public_key: str, notes: list[str]
) -> dict[str, str]:
    """Wait for boot, then write /etc/hosts, fake GPUs and the admin key; returns host keys by node name.

    A node whose systemd is degraded still works for gpuclus: it adds a line to
    ``notes`` instead of failing.
    """

    def configure(node: SandboxNode) -> tuple[str, str]:
        state = wait_for_boot(engine, node.name)
        if state == "degraded":
            failed = engine.run(
                engine.exec(node.name, ["systemctl", "--failed", "--no-legend", "--plain"]),
                what="listing failed units",
                check=False,
            ).stdout.split()
            notes.append(f"{node.name}: systemd is degraded (failed: {' '.join(failed[:1]) or 'unknown'})")
        elif state != "running":
            raise SandboxError(
                f"{node.name} did not finish booting in {BOOT_TIMEOUT} s (systemd says {state or 'nothing'})",
                f"`{engine.kind} exec {node.name} systemctl list-jobs` shows what it waits for",
            )
        result = engine.run(
            engine.exec(node.name, ["sh", "-s"], interactive=True),
            what=f"configuring {node.name}",
            stdin_text=node_setup_script(layout, node, public_key),
            timeout=60,
        )
        key = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        if not key.startswith("ssh-ed25519 "):
            raise SandboxError(f"{node.name} has no SSH host key (got {key!r})")
        return node.name, key

    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        return dict(pool.map(configure, nodes))


def check_ssh(nodes: Sequence[SandboxNode], state: StateDir, attempts: int = 10) -> list[NodeStatus]:
    """Log in to each node as the admin user with gpuclus' key; sudo and hostname must work."""

    def probe(node: SandboxNode) -> NodeStatus:
        status = node_status(node, "running")
        target = SshTarget(node.address, ADMIN_USER, state.private_key, state.known_hosts)
        try:
            result = run_once(target, "sudo -n true && hostname", timeout=20, attempts=attempts)
        except SshFailure as failure:
            status.ssh, status.detail = False, str(failure)
            return status
        hostname = result.stdout.strip()
        if result.exit_status != 0:
            status.ssh, status.detail = False, f"sudo -n failed: {result.stderr.strip()}"
        elif hostname != node.name:
            status.ssh, status.detail = False, f"hostname is {hostname!r}"
        else:
            status.ssh = True
        return status

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        return list(pool.map(probe, nodes))
