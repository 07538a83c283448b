"""Bring sandbox nodes up, check them, take them down: the order of the steps, not the steps.

Every resource carries the label gpuclus.sandbox=<cluster> and a name derived
from the cluster name, so `down` finds all of it even after an interrupted
`up`, and a second `up` completes what the first left half-made. Names are
host-wide but a sandbox belongs to one directory: a second label names the
.gpuclus directory whose `up` made each resource, and no command touches
another directory's (see owner.py). This module never prints: progress goes
through the ``say`` callback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuclus.errors import ExitCode, UsageError
from gpuclus.fileio import FileTooLargeError, read_regular_file, refuse_link_or_special, write_text_atomic
from gpuclus.sandbox import hostprep
from gpuclus.sandbox.aptsources import check_mirror
from gpuclus.sandbox.engine import Engine, SandboxError, docker_engine, podman_engine
from gpuclus.sandbox.image import build_image, host_recipe, image_present, remove_cached_images
from gpuclus.sandbox.layout import SandboxLayout, SandboxNode, pick_subnet, sandbox_layout, sandbox_spec_text
from gpuclus.sandbox.network import ensure_network, remove_network, taken_networks
from gpuclus.sandbox.nodes import (
    NodeStatus,
    check_ssh,
    configure_nodes,
    ensure_nodes,
    inspect_nodes,
    logs_hint,
    node_status,
    remove_nodes,
)
from gpuclus.sandbox.oses import DEFAULT_OS, OSES, node_os
from gpuclus.sandbox.owner import owner_of, ownership
from gpuclus.sandbox.record import SandboxRecord, record_path
from gpuclus.sandbox.volume import ensure_volume, remove_volumes
from gpuclus.state import StateDir

Say = Callable[[str], None]


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
    # Compute nodes this `up` added to, or removed from, a sandbox that was
    # already up (--nodes changed); a fresh sandbox adds none.
    added_nodes: list[str] = field(default_factory=list)
    removed_nodes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 1)}


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
    mirror: str | None = None  # None: the host's own Debian mirror
    # --artifacts: Enroot's and Pyxis' release sources on this host; None: containers off.
    artifacts: Path | None = None
    # --wheelhouse: wheels for the nodes' PyTorch environment on this host; None: pytorch off.
    wheelhouse: Path | None = None
    # --os and --compute-os (oses.py): the head's OS and the compute nodes'. None: as
    # recorded for a sandbox that is up; for a new one Debian 12, and the compute nodes the head's.
    os: str | None = None
    compute_os: str | None = None

    @property
    def oses(self) -> tuple[str, str]:
        """(the head's OS, the compute nodes' OS) for a new sandbox."""
        head = self.os or DEFAULT_OS
        return head, self.compute_os or head


def wheelhouse_directory(path: Path, oses: tuple[str, ...] = (DEFAULT_OS,)) -> str:
    """``--wheelhouse PATH`` as the absolute directory the spec names: a directory holding the torch wheel
    for the Python of every node OS in ``oses`` (the nodes install it with --no-index)."""
    from gpuclus.spec.models import PyTorch

    version = PyTorch().version
    hint = (
        f"give a directory holding torch {version}'s wheel and its dependencies, e.g. filled by "
        f"`pip download torch=={version} numpy -d DIR` (scripts/wheelhouse.sh does it for the sandbox)"
    )
    absolute = path.expanduser().resolve()
    if not absolute.is_dir():
        state = "no such directory" if not absolute.exists() else "not a directory"
        raise UsageError(f"--wheelhouse {path}: {state}", hint)
    wheels = list(absolute.glob(f"torch-{version}[+-]*.whl"))
    if not wheels:
        raise UsageError(f"--wheelhouse {path} holds no torch {version} wheel", hint)
    for name in sorted(set(oses)):
        tag = "cp" + OSES[name].python.replace(".", "")
        if not any(f"-{tag}-" in wheel.name for wheel in wheels):
            raise UsageError(
                f"--wheelhouse {path} holds no torch {version} wheel for Python {OSES[name].python} "
                f"({name}'s python3; the wheel's name has -{tag}-)",
                f"leave --wheelhouse out on {name} nodes, or add that wheel and its dependencies (`pip download "
                f"--python-version {OSES[name].python} --only-binary=:all: torch=={version} numpy -d DIR`)",
            )
    return str(absolute)


def artifacts_directory(path: Path) -> str:
    """``--artifacts PATH`` as the absolute directory the spec names; anything but a directory is refused."""
    hint = "give the directory that holds enroot-<v>-src.tar.gz and pyxis-<v>-src.tar.gz"
    absolute = path.expanduser().resolve()
    if not absolute.exists():
        raise UsageError(f"--artifacts {path}: no such directory", hint)
    if not absolute.is_dir():
        raise UsageError(f"--artifacts {path} is not a directory", hint)
    # The sandbox builds both from source, at the spec's default versions.
    from gpuclus.spec.models import Containers

    defaults = Containers()
    wanted = (f"enroot-{defaults.enroot_version}-src.tar.gz", f"pyxis-{defaults.pyxis_version}-src.tar.gz")
    missing = [name for name in wanted if not (absolute / name).is_file()]
    if missing:
        raise UsageError(
            f"--artifacts {path} lacks {' and '.join(missing)}",
            "the sandbox builds Enroot and Pyxis from these release sources; put them there (docs/containers.md, "
            "'Offline: an artifacts directory')",
        )
    return str(absolute)


def _holds(path: Path, text: str) -> bool:
    """True when the regular file ``path`` holds exactly ``text`` (read no further than that)."""
    wanted = text.encode()
    try:
        return read_regular_file(path, len(wanted)) == wanted
    except (FileNotFoundError, FileTooLargeError):
        return False


def up(options: UpOptions, say: Say) -> UpResult:
    started = time.monotonic()
    # Bad options are refused before anything touches the host (an engine
    # install, a network listing): lay out once with a placeholder subnet.
    sandbox_layout(options.cluster, options.nodes, options.gpus_per_node, "10.213.0.0/24", *options.oses)
    if options.subnet is not None:
        pick_subnet(options.subnet, [])
    if options.mirror is not None:
        check_mirror(options.mirror)
    artifacts = artifacts_directory(options.artifacts) if options.artifacts is not None else None
    wheelhouse = wheelhouse_directory(options.wheelhouse, ()) if options.wheelhouse is not None else None
    # The spec is read back and rewritten below: a device or FIFO in its
    # place would hang the read or be replaced by a file, and a link is not
    # written through (refused now, not after the nodes are made).
    refuse_link_or_special(options.spec_path)
    hostprep.require_root()
    # A host with no Debian mirror to build from is refused before an engine is installed.
    for name in sorted(set(options.oses)):
        host_recipe(mirror=options.mirror, suite=node_os(name).suite)
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
    # The name is host-wide: a sandbox of this name made from another
    # directory is refused before anything here is written or created.
    owner = owner_of(state)
    held = ownership(engine, options.cluster, state, existing)
    if held.others:
        raise held.refusal()

    if existing is not None:
        layout = _reshaped_layout(existing, options)
        _refuse_phase_change(existing, artifacts, wheelhouse)
    else:
        subnet = pick_subnet(options.subnet, taken_networks(engine, options.cluster))
        layout = sandbox_layout(options.cluster, options.nodes, options.gpus_per_node, subnet, *options.oses)

    node_oses = sorted({node.os for node in layout.nodes})
    if options.wheelhouse is not None:
        # The wheels must suit the Python of the nodes that build the environment.
        wheelhouse_directory(options.wheelhouse, tuple({node.os for node in layout.compute} | {layout.head.os}))
    recipes = {name: host_recipe(mirror=options.mirror, suite=node_os(name).suite) for name in node_oses}
    # Checked before anything is built or started: a spec gpuclus itself
    # would refuse must not leave nodes behind.
    spec_text = _spec_text(layout, artifacts, wheelhouse)
    image_built = False
    for name, recipe in recipes.items():
        if not image_present(engine, recipe):
            hostprep.check_disk([Path("/var/tmp"), Path("/var/lib/containers"), state.root])
            debootstrap = hostprep.ensure_debootstrap(install=options.install, say=say)
            say(f"building the {name} node image {recipe.tag} (first time for this recipe only)")
            build_image(engine, recipe, debootstrap=debootstrap, say=say)
            image_built = True
    images = {name: recipe.tag for name, recipe in recipes.items()}

    # Every sandbox's nodes on this host share root's inotify instances.
    everyone = set(engine.run(engine.list_containers(), what="listing sandbox nodes").stdout.split())
    hostprep.ensure_inotify_instances(
        len(everyone | {node.name for node in layout.nodes}), install=options.install, say=say
    )
    public_key = state.ensure_ssh_key()
    added = [node.name for node in _nodes_not_in(layout, existing.layout)] if existing else []
    dropped = _nodes_not_in(existing.layout, layout) if existing else []
    # Removed before the record stops naming them: an interrupted shrink is
    # finished by the next `up` with the same --nodes, or by `down`.
    _remove_dropped_nodes(engine, state, dropped, {r.name for r in held.my("node")}, say)
    # Written before anything is created, so an interrupted up can be taken
    # down (or completed) by name.
    write_text_atomic(
        record_path(state),
        SandboxRecord(
            layout.cluster, engine.kind, layout.subnet, images[layout.head.os], layout.nodes, artifacts, wheelhouse
        ).dumps(),
    )
    changed = image_built | ensure_network(engine, layout, say, owner) | ensure_volume(engine, layout, owner)
    created = ensure_nodes(engine, layout, images, say, owner)
    changed |= bool(created) | bool(dropped)

    statuses = {status.name: status for status in inspect_nodes(engine, layout)}
    not_running = [name for name, status in statuses.items() if status.state != "running"]
    if not_running:
        raise SandboxError(f"node(s) {', '.join(not_running)} did not stay running", logs_hint(engine))

    notes: list[str] = _slurm_mix_notes(layout)
    # Only nodes that were just created or started, or whose host key was never
    # recorded, are (re)configured: running ones may hold what a deploy put there
    # since. A node an interrupted `up` started but never set up is running with
    # no recorded key, and is set up now (the setup script is idempotent).
    to_configure = [
        node for node in layout.nodes if node.name in created or image_built or not state.knows_host(node.address)
    ]
    if to_configure:
        say(f"waiting for systemd and sshd on {', '.join(node.name for node in to_configure)}")
        host_keys = configure_nodes(engine, layout, to_configure, public_key, notes)
        state.set_known_host_keys({node.address: [host_keys[node.name]] for node in to_configure})

    if not _holds(options.spec_path, spec_text):
        write_text_atomic(options.spec_path, spec_text)
        changed = True

    checked = check_ssh(layout.nodes, state)
    failures = [status for status in checked if not status.ssh]
    if failures:
        names = ", ".join(f"{status.name} ({status.detail})" for status in failures)
        raise SandboxError(f"SSH to the sandbox failed: {names}", "see `gpuclus sandbox status`")
    return UpResult(
        cluster=layout.cluster,
        engine=engine.kind,
        engine_reason=pick.reason,
        spec=str(options.spec_path),
        subnet=layout.subnet,
        image=" ".join(sorted(set(images.values()))),
        image_built=image_built,
        changed=changed,
        nodes=checked,
        seconds=time.monotonic() - started,
        notes=notes,
        added_nodes=added,
        removed_nodes=[node.name for node in dropped],
    )


def _slurm_mix_notes(layout: SandboxLayout) -> list[str]:
    """What a mixed sandbox cannot do: one Slurm cluster, where the releases' Slurm do not mix
    (deploy's preflight then leaves those compute nodes out, naming the releases)."""
    from gpuclus.slurm.releases import mix_problem

    head = OSES[layout.head.os]
    notes = []
    for name in sorted({node.os for node in layout.nodes} - {head.name}):
        problem = mix_problem(head.slurm, OSES[name].slurm)
        if problem is not None:
            notes.append(
                f"{name} compute nodes under a {head.name} head cannot join its Slurm ({problem}): "
                "deploy's preflight leaves them out; this mix serves the OS-level phases (base, NFS)"
            )
    return notes


# Changing the number of nodes of a sandbox that is up ---------------------------------------


def _reshaped_layout(existing: SandboxRecord, options: UpOptions) -> SandboxLayout:
    """The layout a re-up asks for: the recorded one, or it with compute nodes added or removed at the end.

    Only the number of compute nodes may change while a sandbox is up: the
    GPUs per node and the subnet are in every running node, and a 1-node
    sandbox's head is its compute node too. The nodes that stay keep their
    names and addresses: sandbox_layout places nodes by index alone.
    """
    layout = existing.layout
    refusal = _shape_refusal(layout, options)
    if refusal is not None:
        raise refusal
    if options.nodes == len(layout.nodes):
        return layout
    wanted = sandbox_layout(
        layout.cluster, options.nodes, layout.gpus_per_node, layout.subnet, layout.head.os, layout.compute[0].os
    )
    kept = min(len(layout.nodes), options.nodes)
    if wanted.nodes[:kept] != layout.nodes[:kept]:
        # A record whose nodes sit elsewhere (edited, or from another layout
        # scheme): adding or removing nodes would move the ones that stay.
        raise SandboxError(
            f"{_shape(layout)}, but its recorded nodes are not where `up` places them now",
            "run `gpuclus sandbox down` first to change its shape",
        )
    return wanted


def _shape_refusal(layout: SandboxLayout, options: UpOptions) -> SandboxError | None:
    """Why ``options`` cannot be applied to the sandbox that is up, or None when they can."""
    count = len(layout.nodes)
    recorded = (layout.head.os, layout.compute[0].os)
    asked = (("--os", options.os, recorded[0]), ("--compute-os", options.compute_os, recorded[1]))
    changed_os = next(((o, given, had) for o, given, had in asked if given is not None and given != had), None)
    if changed_os is not None:
        option, given, had = changed_os
        return SandboxError(
            f"{_shape(layout)}: {option} {given} cannot change a sandbox that is up (its "
            + ("head" if option == "--os" else "compute nodes")
            + f" run {had})",
            f"leave {option} out, or run `gpuclus sandbox down` first",
        )
    if options.gpus_per_node != layout.gpus_per_node:
        return SandboxError(
            f"{_shape(layout)}: --gpus-per-node {options.gpus_per_node} cannot change a sandbox that is up",
            f"pass --gpus-per-node {layout.gpus_per_node} (`up` only adds or removes compute nodes), "
            "or run `gpuclus sandbox down` first",
        )
    if options.subnet and options.subnet != layout.subnet:
        return SandboxError(
            f"{_shape(layout)}: --subnet {options.subnet} cannot change a sandbox that is up",
            "leave --subnet out (`up` only adds or removes compute nodes), or run `gpuclus sandbox down` first",
        )
    if options.nodes != count and 1 in (count, options.nodes):
        return SandboxError(
            f"{_shape(layout)}: --nodes {options.nodes} would turn "
            + ("its head into a controller only" if count == 1 else "its head into its only compute node"),
            "`up` adds or removes compute nodes between 2 nodes or more; "
            "run `gpuclus sandbox down` first to go to or from 1 node",
        )
    return None


def _refuse_phase_change(existing: SandboxRecord, artifacts: str | None, wheelhouse: str | None) -> None:
    """Like the shape: a re-up without --artifacts (--wheelhouse) must not quietly
    turn the containers (pytorch) phase off in the spec it rewrites, nor turn it on."""
    for option, had, wanted in (
        ("--artifacts", existing.artifacts_dir, artifacts),
        ("--wheelhouse", existing.wheelhouse_dir, wheelhouse),
    ):
        if had != wanted:
            raise SandboxError(
                f"sandbox {existing.cluster!r} is already up "
                + (f"with {option} {had}" if had else f"without {option}"),
                (f"pass {option} {had} again, or run" if had else "run") + " `gpuclus sandbox down` first to change it",
            )


def _shape(layout: SandboxLayout) -> str:
    count = len(layout.nodes)
    return (
        f"sandbox {layout.cluster!r} is already up with {count} node{'s' if count != 1 else ''}, "
        f"{layout.gpus_per_node} GPUs each, on {layout.subnet}"
    )


def _nodes_not_in(layout: SandboxLayout, other: SandboxLayout) -> list[SandboxNode]:
    """The nodes of ``layout`` that ``other`` does not have (by name), in layout order."""
    names = {node.name for node in other.nodes}
    return [node for node in layout.nodes if node.name not in names]


def _remove_dropped_nodes(
    engine: Engine, state: StateDir, dropped: list[SandboxNode], present: set[str], say: Say
) -> None:
    """Remove the containers of nodes a smaller --nodes leaves out, and their host keys.

    Only containers that are there (``present``: this directory's): a shrink
    interrupted after the removal is finished without asking the engine for
    containers that are gone. The nodes stay in a deployed cluster's Slurm:
    taking them out is `gpuclus nodes remove`'s job, before this.
    """
    if not dropped:
        return
    remove_nodes(engine, [node.name for node in dropped if node.name in present], say)
    # The address comes back with the next node of that index, with a new host key.
    state.forget_known_hosts([node.address for node in dropped])


def _spec_text(layout: SandboxLayout, artifacts: str | None, wheelhouse: str | None = None) -> str:
    from gpuclus.spec.load import load_spec_text

    text = sandbox_spec_text(layout, artifacts, wheelhouse)
    loaded = load_spec_text(text, "sandbox.yaml")
    if not loaded.ok:  # a bug in the template, never the user's doing
        problems = "; ".join(f"{f.code} {f.path}: {f.message}" for f in loaded.findings if f.severity.value == "error")
        raise SandboxError(f"internal error: the sandbox spec does not pass its own check: {problems}")
    return text


# Status and down ----------------------------------------------------------------------


def _forget_elsewhere(cluster: str, directories: list[str | None], say: Say) -> None:
    """After `down --name` removed a sandbox another directory started: that directory's record of it and
    its nodes' host keys go too, so its next `up` starts afresh instead of expecting nodes that are gone."""
    for directory in directories:
        if directory is None or not Path(directory).is_dir():
            continue
        state = StateDir.beside(Path(directory) / "sandbox.yaml")
        try:
            record = SandboxRecord.load(record_path(state))
        except SandboxError:
            continue  # a damaged record: left for that directory's own `down`
        if record is None or record.cluster != cluster:
            continue
        state.forget_known_hosts([node.address for node in record.nodes])
        record_path(state).unlink(missing_ok=True)
        say(f"forgot {directory}'s record of sandbox {cluster!r}")


def status(spec_path: Path, *, check: bool = True) -> tuple[SandboxRecord | None, list[NodeStatus], list[str | None]]:
    """The recorded sandbox, its nodes as this directory's containers show them, and where else its name is used.

    A node whose container another directory's `up` made is "missing" here and
    never checked over SSH; the third item names those directories (None:
    made by an older gpuclus, directory unknown).
    """
    state = StateDir.beside(spec_path)
    record = SandboxRecord.load(record_path(state))
    if record is None:
        return None, [], []
    engine = engine_named(record.engine)
    held = ownership(engine, record.cluster, state, record)
    states = {resource.name: resource.state for resource in held.my("node")}
    nodes = [node_status(node, states.get(node.name, "missing")) for node in record.nodes]
    if check and state.known_hosts.exists():
        running = {node.name for node in nodes if node.state == "running"}
        # Three tries a second apart: one refused connection on a loaded host
        # (CI's three lanes) is not yet a node whose sshd is down.
        reached = {s.name: s for s in check_ssh([n for n in record.nodes if n.name in running], state, attempts=3)}
        for node in nodes:
            if node.name in reached:
                node.ssh, node.detail = reached[node.name].ssh, reached[node.name].detail
    return record, nodes, held.elsewhere


def node_address(spec_path: Path, node: str) -> tuple[StateDir, str]:
    """The state directory and address for `sandbox ssh NODE`: only a node that this directory's `up` made."""
    state = StateDir.beside(spec_path)
    record = SandboxRecord.load(record_path(state))
    if record is None:
        raise UsageError("no sandbox is up here", "run `gpuclus sandbox up` first")
    address = next((n.address for n in record.nodes if n.name == node), None)
    if address is None:
        known = ", ".join(n.name for n in record.nodes)
        raise UsageError(f"no sandbox node named {node!r}", f"nodes: {known}")
    held = ownership(engine_named(record.engine), record.cluster, state, record)
    if node in {resource.name for resource in held.my("node")}:
        return state, address
    other = next((r for r in held.others if r.kind == "node" and r.name == node), None)
    if other is not None and other.directory is not None:
        raise SandboxError(
            f"{node} is a node of the sandbox {record.cluster!r} that runs from {other.directory}, not of this one",
            f"run `gpuclus sandbox ssh {node}` in {other.directory}",
            exit_code=ExitCode.USAGE,
        )
    if other is not None:
        raise SandboxError(
            f"{node} was made by an older gpuclus from a directory whose .gpuclus/sandbox.json names it, not this one",
            f"run `gpuclus sandbox ssh {node}` in that directory",
            exit_code=ExitCode.USAGE,
        )
    raise SandboxError(f"{node} is not up here (it has no container)", "see `gpuclus sandbox status`")


@dataclass
class DownResult:
    cluster: str | None
    removed_nodes: list[str]
    removed_network: bool
    removed_volumes: list[str]
    removed_images: list[str]
    # Directories whose sandbox of the same name was left alone (None: made by
    # an older gpuclus, directory unknown): only without --name.
    elsewhere: list[str | None] = field(default_factory=list)
    # With --name: the other directories whose `up` made what was removed.
    removed_from: list[str | None] = field(default_factory=list)

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
    # An engine that does not answer (not installed, daemon down) holds no sandbox to remove.
    if name is not None and engine.ok(engine.list_containers(name), timeout=30):
        # Without --name, only what this directory's `up` made, also after an
        # interrupted one: another directory's sandbox of the same name is left
        # alone. --name names the sandbox wherever it was started from.
        held = ownership(engine, name, state, record)
        targets = [*held.mine, *held.others] if cluster is not None else list(held.mine)
        result.removed_nodes = remove_nodes(engine, [r.name for r in targets if r.kind == "node"], say)
        result.removed_network = any(r.kind == "network" for r in targets) and remove_network(engine, name)
        result.removed_volumes = remove_volumes(engine, [r.name for r in targets if r.kind == "volume"])
        if cluster is None:
            result.elsewhere = held.elsewhere
        else:
            result.removed_from = held.elsewhere
            _forget_elsewhere(name, held.elsewhere, say)
    if purge:
        result.removed_images = remove_cached_images(engine, say)
    if record is not None and (cluster is None or cluster == record.cluster):
        state.forget_known_hosts([node.address for node in record.nodes])
        record_path(state).unlink(missing_ok=True)
    return result
