"""Bring sandbox nodes up, check them, take them down.

Every resource carries the label gpuclus.sandbox=<cluster> and a name derived
from the cluster name, so `down` finds all of it even after an interrupted
`up`, and a second `up` completes what the first left half-made. This module
never prints: progress goes through the ``say`` callback.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuclus.fileio import write_text_atomic
from gpuclus.sandbox import hostprep
from gpuclus.sandbox.engine import Engine, NodeContainer, SandboxError, docker_engine, podman_engine
from gpuclus.sandbox.image import ADMIN_USER, FAKE_GPU_CONFIG, build_image, host_recipe, image_present
from gpuclus.sandbox.plan import (
    NFS_VOLUME_MOUNT,
    SandboxNode,
    SandboxPlan,
    host_routes,
    pick_subnet,
    plan_sandbox,
)
from gpuclus.ssh.client import SshFailure, SshTarget, run_once
from gpuclus.state import StateDir

Say = Callable[[str], None]
STATE_FILE = "sandbox.json"
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


@dataclass
class UpResult:
    cluster: str
    engine: str
    engine_reason: str
    spec: str
    subnet: str
    image: str
    image_built: bool
    changed: bool
    nodes: list[NodeStatus]
    seconds: float
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 1)}


@dataclass(frozen=True)
class SandboxRecord:
    """What `up` made, stored in .gpuclus/sandbox.json for down, status and ssh."""

    cluster: str
    engine: str
    subnet: str
    image: str
    nodes: tuple[SandboxNode, ...]

    @property
    def plan(self) -> SandboxPlan:
        gpus = max((node.gpus for node in self.nodes), default=0)
        return SandboxPlan(self.cluster, self.subnet, self.nodes, gpus)

    def dumps(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, path: Path) -> SandboxRecord | None:
        try:
            data = json.loads(path.read_text())
            nodes = tuple(SandboxNode(**node) for node in data["nodes"])
            return cls(data["cluster"], data["engine"], data["subnet"], data["image"], nodes)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxError(f"{path} is damaged ({exc})", "run `gpuclus sandbox down --name NAME`") from None


def record_path(state: StateDir) -> Path:
    return state.root / STATE_FILE


def engine_named(kind: str) -> Engine:
    return docker_engine() if kind == "docker" else podman_engine()


# Up -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpOptions:
    spec_path: Path
    cluster: str
    nodes: int
    gpus_per_node: int
    engine: hostprep.EngineChoice
    subnet: str | None
    install: bool


def up(options: UpOptions, say: Say) -> UpResult:
    started = time.monotonic()
    # Bad options are refused before anything touches the host (an engine
    # install, a network listing): plan once with a placeholder subnet.
    plan_sandbox(options.cluster, options.nodes, options.gpus_per_node, "10.213.0.0/24")
    if options.subnet is not None:
        pick_subnet(options.subnet, [])
    hostprep.require_root()
    state = StateDir.beside(options.spec_path)
    existing = SandboxRecord.load(record_path(state))
    if existing is not None and existing.cluster != options.cluster:
        raise SandboxError(
            f"this directory already holds sandbox {existing.cluster!r}",
            f"run `gpuclus sandbox down` first, or use another directory for {options.cluster!r}",
        )
    pick = hostprep.pick_engine(
        existing.engine if existing else options.engine,  # type: ignore[arg-type]
        install=options.install,
        say=say,
    )
    engine = pick.engine
    say(f"engine: {engine.kind} ({pick.reason})")

    if existing is not None:
        plan = existing.plan
        if (len(plan.nodes), plan.gpus_per_node) != (options.nodes, options.gpus_per_node) or (
            options.subnet and options.subnet != plan.subnet
        ):
            raise SandboxError(
                f"sandbox {plan.cluster!r} is already up with {len(plan.nodes)} nodes, "
                f"{plan.gpus_per_node} GPUs each, on {plan.subnet}",
                "run `gpuclus sandbox down` first to change its shape",
            )
    else:
        subnet = pick_subnet(options.subnet, _taken_networks(engine, options.cluster))
        plan = plan_sandbox(options.cluster, options.nodes, options.gpus_per_node, subnet)

    recipe = host_recipe()
    image_built = False
    if not image_present(engine, recipe):
        hostprep.check_disk([Path("/var/tmp"), Path("/var/lib/containers"), state.root])
        debootstrap = hostprep.ensure_debootstrap(install=options.install, say=say)
        say(f"building the node image {recipe.tag} (first time only)")
        build_image(engine, recipe, debootstrap=debootstrap, say=say)
        image_built = True

    public_key = state.ensure_ssh_key()
    # Written before anything is created, so an interrupted up can be taken
    # down (or completed) by name.
    write_text_atomic(
        record_path(state),
        SandboxRecord(plan.cluster, engine.kind, plan.subnet, recipe.tag, plan.nodes).dumps(),
    )
    changed = image_built | _ensure_network(engine, plan, say) | _ensure_volume(engine, plan)
    created = _ensure_nodes(engine, plan, recipe.tag, say)
    changed |= bool(created)

    statuses = {status.name: status for status in inspect_nodes(engine, plan)}
    not_running = [name for name, status in statuses.items() if status.state != "running"]
    if not_running:
        raise SandboxError(f"node(s) {', '.join(not_running)} did not stay running", _logs_hint(engine))

    notes: list[str] = []
    # Only nodes that were just created or started are (re)configured: running
    # ones may hold what a deploy put there since.
    to_configure = [
        node for node in plan.nodes if node.name in created or image_built or not state.known_hosts.exists()
    ]
    if to_configure:
        say(f"waiting for systemd and sshd on {', '.join(node.name for node in to_configure)}")
        host_keys = _configure_nodes(engine, plan, to_configure, public_key, notes)
        state.set_known_host_keys({node.address: [host_keys[node.name]] for node in to_configure})

    spec_text = _spec_text(plan)
    if not options.spec_path.exists() or options.spec_path.read_text() != spec_text:
        write_text_atomic(options.spec_path, spec_text)
        changed = True

    checked = check_ssh(plan, state)
    failures = [status for status in checked if not status.ssh]
    if failures:
        names = ", ".join(f"{status.name} ({status.detail})" for status in failures)
        raise SandboxError(f"SSH to the sandbox failed: {names}", "see `gpuclus sandbox status`")
    return UpResult(
        cluster=plan.cluster,
        engine=engine.kind,
        engine_reason=pick.reason,
        spec=str(options.spec_path),
        subnet=plan.subnet,
        image=recipe.tag,
        image_built=image_built,
        changed=changed,
        nodes=checked,
        seconds=time.monotonic() - started,
        notes=notes,
    )


def _spec_text(plan: SandboxPlan) -> str:
    from gpuclus.sandbox.plan import sandbox_spec_text
    from gpuclus.spec.load import load_spec_text

    text = sandbox_spec_text(plan)
    loaded = load_spec_text(text, "sandbox.yaml")
    if not loaded.ok:  # a bug in the template, never the user's doing
        problems = "; ".join(f"{f.code} {f.path}: {f.message}" for f in loaded.findings if f.severity.value == "error")
        raise SandboxError(f"internal error: the sandbox spec does not pass its own check: {problems}")
    return text


def _taken_networks(engine: Engine, cluster: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = list(host_routes())
    names = [
        name
        for name in engine.run(engine.network_list(), what="listing networks").stdout.split()
        if name != f"gpuclus-{cluster}"
    ]
    if names:
        for network in engine.json_lines(engine.network_inspect(names), what="inspecting networks"):
            for subnet in _subnets_of(network):
                taken.append(ipaddress.ip_network(subnet, strict=False))
    return taken


def _subnets_of(network: dict[str, Any]) -> list[str]:
    # podman: {"subnets": [{"subnet": ...}]}; docker: {"IPAM": {"Config": [{"Subnet": ...}]}}
    found = [entry.get("subnet") for entry in network.get("subnets") or []]
    found += [entry.get("Subnet") for entry in (network.get("IPAM") or {}).get("Config") or []]
    return [subnet for subnet in found if subnet]


def _ensure_network(engine: Engine, plan: SandboxPlan, say: Say) -> bool:
    if engine.ok(engine.network_inspect([plan.network])):
        subnets = _subnets_of(engine.json_lines(engine.network_inspect([plan.network]), what="network")[0])
        if plan.subnet not in subnets:
            raise SandboxError(
                f"network {plan.network} exists with subnet {', '.join(subnets)}, not {plan.subnet}",
                "run `gpuclus sandbox down` to remove it",
            )
        return False
    say(f"creating network {plan.network} ({plan.subnet})")
    engine.run(engine.network_create(plan.network, plan.subnet, plan.cluster), what="creating the network")
    return True


def _ensure_volume(engine: Engine, plan: SandboxPlan) -> bool:
    existing = engine.run(engine.volume_list(plan.cluster), what="listing volumes").stdout.split()
    if plan.volume in existing:
        return False
    engine.run(engine.volume_create(plan.volume, plan.cluster), what="creating the NFS volume")
    return True


def _containers(plan: SandboxPlan, image: str) -> list[NodeContainer]:
    containers = []
    for node in plan.nodes:
        role = "controller" if node.controller else "compute"
        volumes = ((plan.volume, NFS_VOLUME_MOUNT),) if node.controller else ()
        containers.append(
            NodeContainer(
                name=node.name,
                address=node.address,
                network=plan.network,
                image=image,
                cluster=plan.cluster,
                volumes=volumes,
                labels=(("gpuclus.role", role),),
            )
        )
    return containers


def _ensure_nodes(engine: Engine, plan: SandboxPlan, image: str, say: Say) -> list[str]:
    """Create missing nodes, start stopped ones; returns the names created or started."""
    states = {status.name: status.state for status in inspect_nodes(engine, plan)}
    touched = []
    for container in _containers(plan, image):
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
        engine.run(engine.run_node(container), what=f"starting {container.name}")
        touched.append(container.name)
    return touched


def inspect_nodes(engine: Engine, plan: SandboxPlan) -> list[NodeStatus]:
    present = set(engine.run(engine.list_containers(plan.cluster), what="listing nodes").stdout.split())
    details: dict[str, dict[str, Any]] = {}
    names = [node.name for node in plan.nodes if node.name in present]
    if names:
        for item in engine.json_lines(engine.inspect(names), what="inspecting nodes"):
            details[str(item.get("Name", "")).lstrip("/")] = item
    statuses = []
    for node in plan.nodes:
        info = details.get(node.name)
        state = str((info or {}).get("State", {}).get("Status", "missing")) if info else "missing"
        statuses.append(
            NodeStatus(node.name, node.address, "controller" if node.controller else "compute", node.gpus, state)
        )
    return statuses


def _node_setup_script(plan: SandboxPlan, node: SandboxNode, public_key: str) -> str:
    hosts = "\n".join(
        ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        + [f"{other.address} {other.name}" for other in plan.nodes]
    )
    home = f"/home/{ADMIN_USER}"
    gpus = (
        f"mkdir -p /etc/gpuclus && echo {node.gpus} > {FAKE_GPU_CONFIG} && /usr/local/sbin/gpuclus-fake-gpus"
        if node.gpus
        else f"rm -f {FAKE_GPU_CONFIG}"
    )
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
cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub
"""


def wait_for_boot(engine: Engine, name: str, timeout: float = BOOT_TIMEOUT) -> str:
    """systemd's state once boot is over ("running" or "degraded").

    Right after the container starts, systemctl cannot reach systemd yet and
    prints nothing; `--wait` only helps once it can, so poll until it answers.
    """
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        result = engine.run(
            engine.exec(name, ["systemctl", "is-system-running", "--wait"]),
            what=f"waiting for {name} to boot",
            check=False,
            timeout=max(1.0, deadline - time.monotonic()),
        )
        state = result.stdout.strip()
        if state in {"running", "degraded", "maintenance", "stopping"}:
            return state
        time.sleep(0.3)
    return state


def _configure_nodes(
    engine: Engine, plan: SandboxPlan, nodes: list[SandboxNode], public_key: str, notes: list[str]
) -> dict[str, str]:
    """Wait for boot, then write /etc/hosts, fake GPUs and the admin key; returns host keys."""

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
            raise SandboxError(f"{node.name} did not finish booting (systemd says {state or 'nothing'})")
        script = _node_setup_script(plan, node, public_key)
        result = engine.run(
            engine.exec(node.name, ["sh", "-s"], interactive=True),
            what=f"configuring {node.name}",
            stdin_text=script,
            timeout=60,
        )
        key = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        if not key.startswith("ssh-ed25519 "):
            raise SandboxError(f"{node.name} has no SSH host key (got {key!r})")
        return node.name, key

    with ThreadPoolExecutor(max_workers=min(8, len(nodes))) as pool:
        return dict(pool.map(configure, nodes))


def check_ssh(plan: SandboxPlan, state: StateDir, attempts: int = 10) -> list[NodeStatus]:
    """Log in to every node as the admin user with gpuclus' key; sudo and hostname must work."""

    def probe(node: SandboxNode) -> NodeStatus:
        status = NodeStatus(
            node.name, node.address, "controller" if node.controller else "compute", node.gpus, "running"
        )
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

    with ThreadPoolExecutor(max_workers=min(8, len(plan.nodes))) as pool:
        return list(pool.map(probe, plan.nodes))


def _logs_hint(engine: Engine) -> str:
    return f"`{engine.kind} logs NODE` shows why"


# Status and down ----------------------------------------------------------------------


def status(spec_path: Path, *, check: bool = True) -> tuple[SandboxRecord | None, list[NodeStatus]]:
    state = StateDir.beside(spec_path)
    record = SandboxRecord.load(record_path(state))
    if record is None:
        return None, []
    engine = engine_named(record.engine)
    nodes = inspect_nodes(engine, record.plan)
    if check and state.known_hosts.exists():
        running = [
            node for node in record.plan.nodes if any(s.name == node.name and s.state == "running" for s in nodes)
        ]
        reached = {s.name: s for s in check_ssh(_subset(record.plan, running), state, attempts=1)} if running else {}
        for node in nodes:
            if node.name in reached:
                node.ssh, node.detail = reached[node.name].ssh, reached[node.name].detail
    return record, nodes


def _subset(plan: SandboxPlan, nodes: list[SandboxNode]) -> SandboxPlan:
    return SandboxPlan(plan.cluster, plan.subnet, tuple(nodes), plan.gpus_per_node)


@dataclass
class DownResult:
    cluster: str | None
    removed_nodes: list[str]
    removed_network: bool
    removed_volumes: list[str]
    removed_images: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def down(spec_path: Path, *, cluster: str | None, purge: bool, engine_choice: str | None, say: Say) -> DownResult:
    hostprep.require_root()
    state = StateDir.beside(spec_path)
    record = SandboxRecord.load(record_path(state))
    name = cluster or (record.cluster if record else None)
    kind = engine_choice if engine_choice and engine_choice != "auto" else (record.engine if record else "podman")
    engine = engine_named(kind)
    result = DownResult(name, [], False, [], [])
    if name is not None and engine.ok(engine.list_containers(name), timeout=30):
        nodes = engine.run(engine.list_containers(name), what="listing nodes").stdout.split()
        if nodes:
            say(f"removing {len(nodes)} node(s)")
            engine.run(engine.remove(nodes), what="removing nodes", timeout=120)
            result.removed_nodes = sorted(nodes)
        network = f"gpuclus-{name}"
        if engine.ok(engine.network_inspect([network])):
            engine.run(engine.network_remove(network), what="removing the network")
            result.removed_network = True
        volumes = engine.run(engine.volume_list(name), what="listing volumes").stdout.split()
        if volumes:
            engine.run(engine.volume_remove(volumes), what="removing volumes")
            result.removed_volumes = sorted(volumes)
    if purge and engine.ok(engine.image_list("localhost/gpuclus-node"), timeout=30):
        images = engine.run(engine.image_list("localhost/gpuclus-node"), what="listing images").stdout.split()
        if images:
            say(f"removing cached image(s) {', '.join(images)}")
            engine.run(engine.image_remove(images), what="removing images")
            result.removed_images = images
    if record is not None and (cluster is None or cluster == record.cluster):
        state.forget_known_hosts([node.address for node in record.nodes])
        record_path(state).unlink(missing_ok=True)
    return result
