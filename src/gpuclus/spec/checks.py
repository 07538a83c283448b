"""Semantic checks: rules across fields that the schema cannot express.

Each check is a small function returning findings; every one runs, so a spec
with five problems shows five findings at once. Codes are stable: scripts and
docs/spec.md refer to them, so never rename one, only add new ones.

The checks also run when part of the spec failed its structure (an unknown
key, a wrong type) or a node entry's hostlist does not expand: the loader
hands them the parts that parsed, in a ``SpecView`` that knows where the spec
is unsound. A check names the parts it ``needs`` whole; it is skipped while
one of them is unsound, so a dropped entry never comes back as a misleading
"no controller" or "partition names unknown nodes". Checks that need nothing
whole look at the parsed node entries only, where every finding is true
whatever the dropped entries say (two controllers among them are two too many).
"""

from __future__ import annotations

import fnmatch
import shlex
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file
from gpuclus.spec import hostlist
from gpuclus.spec.credentials import MAX_BYTES as CREDENTIALS_MAX_BYTES
from gpuclus.spec.credentials import credentials_problems
from gpuclus.spec.failover import STATE_SUBDIR, backup_controller, default_state_dir
from gpuclus.spec.models import ClusterSpec, NodeEntry, Role
from gpuclus.spec.software import outside_share
from gpuclus.spec.topology import Node, Topology
from gpuclus.users.load import LoadedUsers, load_users
from gpuclus.yamldoc.document import SpecFileError
from gpuclus.yamldoc.findings import Finding, Loc, Severity, error, info, warning
from gpuclus.yamldoc.grammar import address_problem, full_match

# The parts of a spec the checks name in ``needs``: a pydantic loc prefix each.
NODES: Loc = ("nodes",)
PARTITIONS: Loc = ("slurm", "partitions")
EXPORTS: Loc = ("nfs", "exports")
MONITORING: Loc = ("monitoring",)


@dataclass(frozen=True)
class SpecView:
    """What the checks read: the parts of a spec whose structure is sound.

    ``unsound`` holds the locs where the structure failed (as pydantic gives
    them) and ``("nodes", i)`` for each entry whose hostlists do not expand.
    A part that failed holds its default in ``spec`` (never read: the checks
    that read it are skipped), and a failed node entry is left out of
    ``entries``, ``spec.nodes`` and ``topology``. So ``spec.nodes`` is not
    indexed like the file: checks use ``entries`` (index, entry) instead.

    ``spec_dir`` is the directory of the spec file: the paths the spec names
    on the machine running gpuclus (containers.artifacts_dir, ...) are
    relative to it.
    """

    spec: ClusterSpec
    topology: Topology
    entries: tuple[tuple[int, NodeEntry], ...]
    unsound: frozenset[Loc] = field(default_factory=frozenset)
    spec_dir: Path = field(default_factory=Path)
    # The users file as the users_file check read it, by path: the spec's load keeps that reading (one
    # read, so what was checked is what is rendered).
    users_read: dict[Path, LoadedUsers] = field(default_factory=dict, compare=False)

    @classmethod
    def whole(cls, spec: ClusterSpec, topology: Topology, spec_dir: Path | None = None) -> SpecView:
        """A spec that passed the schema and whose every entry expanded."""
        return cls(spec, topology, tuple(enumerate(spec.nodes)), spec_dir=spec_dir or Path())

    def control_path(self, value: str) -> Path:
        """A path the spec names on the machine running gpuclus: absolute, or relative to the spec's directory."""
        return self.spec_dir / value

    def is_whole(self, part: Loc) -> bool:
        """True when nothing in ``part`` (nor anything holding it) failed."""
        return not any(_overlap(loc, part) for loc in self.unsound)


def _overlap(first: Loc, second: Loc) -> bool:
    # ("nodes", 2, "gpu") lies in ("nodes",); ("slurm",) holds ("slurm", "partitions").
    shorter = min(len(first), len(second))
    return first[:shorter] == second[:shorter]


SpecCheck = Callable[[SpecView], list[Finding]]


@dataclass(frozen=True)
class RegisteredCheck:
    function: SpecCheck
    needs: tuple[Loc, ...]  # parts that must be whole for the check's findings to be true

    @property
    def name(self) -> str:
        return self.function.__name__

    def can_run(self, view: SpecView) -> bool:
        return all(view.is_whole(part) for part in self.needs)


CHECKS: list[RegisteredCheck] = []


def _check(*needs: Loc) -> Callable[[SpecCheck], SpecCheck]:
    def register(function: SpecCheck) -> SpecCheck:
        CHECKS.append(RegisteredCheck(function, needs))
        return function

    return register


def run_checks(view: SpecView) -> list[Finding]:
    """Every check that ``view`` has the parts for; see ``skipped_checks``."""
    findings: list[Finding] = []
    for check in CHECKS:
        if check.can_run(view):
            findings.extend(check.function(view))
    return findings


def skipped_checks(view: SpecView) -> list[str]:
    """The checks that wait for the structure errors to be fixed."""
    return [check.name for check in CHECKS if not check.can_run(view)]


def _node_loc(index: int, field: str | None = None) -> Loc:
    return ("nodes", index) if field is None else ("nodes", index, field)


@_check(NODES)
def controller_missing(view: SpecView) -> list[Finding]:
    if view.topology.with_role(Role.CONTROLLER):
        return []
    return [
        error(
            "controller-count",
            "no node has the controller role",
            ("nodes",),
            hint="add 'controller' to the roles of exactly one node (it runs slurmctld)",
        )
    ]


@_check()
def controllers_multiple(view: SpecView) -> list[Finding]:
    controllers = view.topology.with_role(Role.CONTROLLER)
    if len(controllers) < 2:
        return []
    names = ", ".join(node.name for node in controllers)
    return [
        error(
            "controller-count",
            f"{len(controllers)} nodes have the controller role ({names}); exactly one may",
            _node_loc(controllers[1].entry, "roles"),
            hint="keep 'controller' on one node; give a second slurmctld the 'backup_controller' role instead",
        )
    ]


@_check(NODES)
def compute_present(view: SpecView) -> list[Finding]:
    if view.topology.compute:
        return []
    return [
        error(
            "no-compute",
            "no node has the compute role, so Slurm has nowhere to run jobs",
            ("nodes",),
            hint="add 'compute' to the roles of the GPU nodes",
        )
    ]


_NODE_NAME = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"


@_check()
def node_names(view: SpecView) -> list[Finding]:
    findings: list[Finding] = []
    reported_entries: set[int] = set()
    for node in view.topology.nodes:
        if not full_match(_NODE_NAME, node.name) and node.entry not in reported_entries:
            reported_entries.add(node.entry)
            findings.append(
                error(
                    "invalid-node-name",
                    f"{node.name!r} is not a valid host name",
                    _node_loc(node.entry, "name"),
                    hint="use lower case letters, digits and '-' (at most 63), not starting or ending "
                    "with '-'; Slurm and /etc/hosts need plain host names",
                )
            )
    for first, second, names in _collisions(view.topology, lambda node: node.name):
        findings.append(
            error(
                "duplicate-node-name",
                f"node name(s) {hostlist.compress(names)} given in nodes[{first}] are used again here",
                _node_loc(second, "name"),
                hint="every node needs its own name; check overlapping hostlist ranges",
            )
        )
    return findings


def _collisions(topology: Topology, key: Callable[[Node], str]) -> list[tuple[int, int, list[str]]]:
    """Values shared by nodes, grouped per pair of spec entries (first user, later user).

    One finding per pair of entries, not per host: two overlapping 1000-host
    ranges are one mistake. Linear in the number of nodes.
    """
    owner: dict[str, int] = {}
    pairs: dict[tuple[int, int], list[str]] = {}
    for node in topology.nodes:
        value = key(node)
        if value in owner:
            pairs.setdefault((owner[value], node.entry), []).append(value)
        else:
            owner[value] = node.entry
    return [(first, second, values) for (first, second), values in pairs.items()]


@_check()
def node_addresses(view: SpecView) -> list[Finding]:
    findings: list[Finding] = []
    reported_entries: set[int] = set()
    for node in view.topology.nodes:
        problem = address_problem(node.address)
        if problem and node.entry not in reported_entries:
            reported_entries.add(node.entry)
            findings.append(
                error(
                    "invalid-address",
                    f"address {node.address!r} {problem}",
                    _node_loc(node.entry, "address"),
                    hint="use an IPv4 address (10.0.0.11) or a DNS name (gpu01.lab.example)",
                )
            )
    for first, second, addresses in _collisions(view.topology, lambda node: node.address.lower()):
        shown = addresses[0] if len(addresses) == 1 else f"{addresses[0]} and {len(addresses) - 1} more"
        findings.append(
            error(
                "duplicate-address",
                f"address {shown} given in nodes[{first}] is used again here",
                _node_loc(second, "address"),
                hint="each node needs its own address; give one node several roles instead",
            )
        )
    return findings


@_check()
def repeated_roles(view: SpecView) -> list[Finding]:
    findings = []
    for index, entry in view.entries:
        repeated = sorted({role.value for role in entry.roles if entry.roles.count(role) > 1})
        if repeated:
            findings.append(
                warning(
                    "duplicate-role",
                    f"role(s) {', '.join(repeated)} listed more than once",
                    _node_loc(index, "roles"),
                    hint="list each role once",
                )
            )
    return findings


@_check()
def gpus_on_non_compute(view: SpecView) -> list[Finding]:
    return [
        warning(
            "gpus-on-non-compute",
            f"node {entry.name!r} has gpus but not the compute role; Slurm will not schedule them",
            _node_loc(index, "gpus"),
            hint="add 'compute' to its roles, or drop gpus",
        )
        for index, entry in view.entries
        if entry.gpus is not None and Role.COMPUTE not in entry.roles
    ]


@_check(NODES)
def controller_gpu_compute(view: SpecView) -> list[Finding]:
    controller = view.topology.controller
    if controller is None or not controller.has(Role.COMPUTE) or controller.gpus is None:
        return []
    return [
        warning(
            "controller-gpu-compute",
            f"the controller {controller.name!r} is also a GPU compute node",
            _node_loc(controller.entry, "roles"),
            hint="fine for a workstation; on a shared cluster, jobs that exhaust memory on it can take "
            "slurmctld and slurmdbd down with them",
        )
    ]


@_check()
def backup_controller_entries(view: SpecView) -> list[Finding]:
    """One backup controller: a single host, in one entry, not the controller itself."""
    findings: list[Finding] = []
    backups = view.topology.with_role(Role.BACKUP_CONTROLLER)
    entries = sorted({node.entry for node in backups})
    for index in entries:
        names = [node.name for node in backups if node.entry == index]
        if len(names) > 1:
            findings.append(
                error(
                    "backup-controller-range",
                    f"the backup_controller role is on a range of {len(names)} nodes ({hostlist.compress(names)})",
                    _node_loc(index, "roles"),
                    hint="Slurm takes one backup controller here: give that node an entry of its own with "
                    "the role, and keep the range for the other nodes",
                )
            )
    if len(entries) > 1:
        findings.append(
            error(
                "backup-controller-count",
                f"{len(entries)} node entries have the backup_controller role; one may",
                _node_loc(entries[1], "roles"),
                hint="keep 'backup_controller' on one node",
            )
        )
    findings.extend(
        error(
            "backup-controller-on-controller",
            f"node {node.name!r} is both the controller and the backup controller",
            _node_loc(node.entry, "roles"),
            hint="a backup slurmctld must run on another node, or it fails together with the controller",
        )
        for node in backups
        if node.has(Role.CONTROLLER)
    )
    return findings


@_check(NODES, EXPORTS, ("slurm", "state_save_location"))
def backup_controller_state(view: SpecView) -> list[Finding]:
    """With a backup controller, both slurmctlds need the same state directory at the same path."""
    spec, topology = view.spec, view.topology
    backup = backup_controller(topology)
    if backup is None or topology.controller is None or spec.slurm.state_save_location is not None:
        return []
    if default_state_dir(spec, topology) is not None:
        return []
    why = (
        "nfs.exports is empty"
        if not spec.nfs.exports
        else f"the first export is at different paths on {topology.controller.name!r} and {backup.name!r} "
        "(the NFS server sees its own directory, the others the mount point)"
    )
    return [
        error(
            "state-save-location-required",
            f"a backup controller needs slurm.state_save_location on storage both controllers share, and {why}",
            ("slurm",),
            hint=f"set slurm.state_save_location to a directory both see at the same path (e.g. <share>/"
            f"{STATE_SUBDIR}), or give the export a mount equal to its path",
        )
    ]


@_check(PARTITIONS)
def partition_definitions(view: SpecView) -> list[Finding]:
    """What is wrong with the partitions on their own, whatever the nodes."""
    findings: list[Finding] = []
    seen: set[str] = set()
    defaults = []
    for index, partition in enumerate(view.spec.slurm.partitions):
        loc = ("slurm", "partitions", index)
        if partition.name in seen:
            findings.append(
                error(
                    "duplicate-partition",
                    f"partition {partition.name!r} is defined twice",
                    (*loc, "name"),
                    hint="rename or merge the two entries",
                )
            )
        seen.add(partition.name)
        if partition.default:
            defaults.append(index)
        if partition.nodes is not None:
            try:
                hostlist.expand_list(partition.nodes)
            except hostlist.HostlistError as exc:
                findings.append(
                    error("hostlist-syntax", str(exc), (*loc, "nodes"), hint="write ranges like gpu[01-04]")
                )
    if len(defaults) > 1:
        findings.append(
            error(
                "multiple-default-partitions",
                f"{len(defaults)} partitions are marked default; Slurm takes one",
                ("slurm", "partitions", defaults[1], "default"),
                hint="set default: true on one partition only",
            )
        )
    return findings


@_check(PARTITIONS, NODES)
def partition_nodes(view: SpecView) -> list[Finding]:
    """Partitions against the nodes: every name known and a compute node, every compute node placed."""
    findings: list[Finding] = []
    compute_names = {node.name for node in view.topology.compute}
    all_names = {node.name for node in view.topology.nodes}
    covered: set[str] = set()
    unreadable = False
    for index, partition in enumerate(view.spec.slurm.partitions):
        loc = ("slurm", "partitions", index, "nodes")
        if partition.nodes is None:
            covered |= compute_names
            continue
        try:
            names = hostlist.expand_list(partition.nodes)
        except hostlist.HostlistError:
            # partition_definitions reports the hostlist; what it would have
            # covered is unknown, so no node can be called idle.
            unreadable = True
            continue
        covered |= set(names)
        unknown = [name for name in names if name not in all_names]
        not_compute = [name for name in names if name in all_names and name not in compute_names]
        if unknown:
            findings.append(
                error(
                    "partition-unknown-node",
                    f"partition {partition.name!r} names node(s) not in the spec: {hostlist.compress(unknown)}",
                    loc,
                    hint="use names from `nodes:` (check the range bounds and zero padding)",
                )
            )
        if not_compute:
            findings.append(
                error(
                    "partition-non-compute-node",
                    f"partition {partition.name!r} names node(s) without the compute role: "
                    f"{hostlist.compress(not_compute)}",
                    loc,
                    hint="add 'compute' to those nodes' roles or remove them from the partition",
                )
            )
    idle = sorted(compute_names - covered)
    if view.spec.slurm.partitions and idle and not unreadable:
        findings.append(
            warning(
                "compute-without-partition",
                f"compute node(s) {hostlist.compress(idle)} are in no partition and will never run jobs",
                ("slurm", "partitions"),
                hint="add them to a partition, or leave `nodes:` out of one to mean every compute node",
            )
        )
    return findings


@_check(EXPORTS, NODES)
def nfs_server_missing(view: SpecView) -> list[Finding]:
    if not view.spec.nfs.exports or view.topology.with_role(Role.NFS_SERVER):
        return []
    return [
        error(
            "nfs-server-missing",
            "nfs.exports is set but no node has the nfs_server role",
            ("nfs", "exports"),
            hint="add 'nfs_server' to the roles of the node that holds the data (often the controller)",
        )
    ]


@_check()
def nfs_servers_multiple(view: SpecView) -> list[Finding]:
    servers = view.topology.with_role(Role.NFS_SERVER)
    if len(servers) < 2:
        return []
    return [
        error(
            "nfs-server-multiple",
            f"{len(servers)} nodes have the nfs_server role ({', '.join(n.name for n in servers)}); "
            "gpuclus v1 supports one",
            _node_loc(servers[1].entry, "roles"),
            hint="keep 'nfs_server' on one node",
        )
    ]


@_check(EXPORTS)
def nfs_server_without_exports(view: SpecView) -> list[Finding]:
    servers = view.topology.with_role(Role.NFS_SERVER)
    if not servers or view.spec.nfs.exports:
        return []
    return [
        warning(
            "nfs-server-without-exports",
            f"node {servers[0].name!r} has the nfs_server role but nfs.exports is empty",
            _node_loc(servers[0].entry, "roles"),
            hint="list the shared directories under nfs.exports (e.g. [/shared]) or drop the role",
        )
    ]


@_check(EXPORTS)
def duplicate_exports(view: SpecView) -> list[Finding]:
    findings: list[Finding] = []
    exports = view.spec.nfs.exports
    for attribute, label in (("path", "exported"), ("mount_point", "mounted")):
        counts = Counter(getattr(export, attribute) for export in exports)
        for value, count in sorted(counts.items()):
            if count > 1:
                index = [i for i, e in enumerate(exports) if getattr(e, attribute) == value][1]
                findings.append(
                    error(
                        "duplicate-export",
                        f"{value} is {label} more than once",
                        ("nfs", "exports", index),
                        hint="each export needs its own path and mount point",
                    )
                )
    return findings


@_check(MONITORING, NODES)
def monitoring_on_controller(view: SpecView) -> list[Finding]:
    monitoring = view.spec.monitoring
    wanted = [name for name in ("prometheus", "grafana") if getattr(monitoring, name)]
    controller = view.topology.controller
    if not wanted or view.topology.with_role(Role.MONITORING) or controller is None:
        return []
    return [
        info(
            "monitoring-on-controller",
            f"no node has the monitoring role; {' and '.join(wanted)} will run on the controller {controller.name!r}",
            ("nodes",),
            hint="add 'monitoring' to another node's roles to move it there",
        )
    ]


@_check()
def monitoring_nodes_multiple(view: SpecView) -> list[Finding]:
    nodes = view.topology.with_role(Role.MONITORING)
    if len(nodes) < 2:
        return []
    return [
        error(
            "monitoring-node-multiple",
            f"{len(nodes)} nodes have the monitoring role; gpuclus v1 runs one Prometheus and Grafana",
            _node_loc(nodes[1].entry, "roles"),
            hint="keep 'monitoring' on one node",
        )
    ]


@_check(("monitoring", "grafana_package"))
def grafana_package_missing(view: SpecView) -> list[Finding]:
    return _package_file_missing(
        view, "grafana_package", "grafana-package-missing", "Grafana's .deb or .rpm from grafana.com/grafana/download"
    )


@_check(("monitoring", "dcgm_exporter_package"))
def dcgm_exporter_package_missing(view: SpecView) -> list[Finding]:
    return _package_file_missing(
        view,
        "dcgm_exporter_package",
        "dcgm-exporter-package-missing",
        "NVIDIA's datacenter-gpu-manager-exporter package",
    )


def _package_file_missing(view: SpecView, field: str, code: str, what: str) -> list[Finding]:
    value = getattr(view.spec.monitoring, field)
    if value is None:
        return []
    path = view.control_path(value)
    if path.is_file():
        return []
    state = "does not exist" if not path.exists() else "is not a file"
    return [
        error(
            code,
            f"monitoring.{field} {value!r} {state}",
            ("monitoring", field),
            hint=f"it resolves to {_shown(path)} (a relative path is relative to the spec's directory); "
            f"put {what} there, or fix the path",
        )
    ]


@_check(("monitoring",), ("nvidia", "dcgm"))
def monitoring_parts_unused(view: SpecView) -> list[Finding]:
    """Settings that do nothing with the rest of the section as it is."""
    monitoring = view.spec.monitoring
    findings = []
    if monitoring.grafana_package is not None and not monitoring.grafana:
        findings.append(
            warning(
                "monitoring-setting-unused",
                "monitoring.grafana_package is set but grafana is false",
                ("monitoring", "grafana_package"),
                hint="set grafana: true to install it, or remove grafana_package",
            )
        )
    if monitoring.dcgm_exporter_package is not None and not view.spec.nvidia.dcgm:
        findings.append(
            warning(
                "monitoring-setting-unused",
                "monitoring.dcgm_exporter_package is set but nvidia.dcgm is false: the GPU nodes use nvidia-smi",
                ("monitoring", "dcgm_exporter_package"),
                hint="set nvidia.dcgm: true to run dcgm-exporter, or remove dcgm_exporter_package",
            )
        )
    if monitoring.alert_receiver is not None and not monitoring.alertmanager:
        findings.append(
            warning(
                "monitoring-setting-unused",
                "monitoring.alert_receiver is set but alertmanager is false: no alert is sent",
                ("monitoring", "alert_receiver"),
                hint="set alertmanager: true",
            )
        )
    for name in ("grafana", "alertmanager"):
        if getattr(monitoring, name) and not monitoring.prometheus:
            findings.append(
                error(
                    "monitoring-needs-prometheus",
                    f"monitoring.{name} needs monitoring.prometheus (it reads Prometheus on the monitoring node)",
                    ("monitoring", name),
                    hint=f"set prometheus: true, or {name}: false",
                )
            )
    return findings


PYTORCH: Loc = ("pytorch",)


@_check(PYTORCH, ("modules",), EXPORTS, ("nfs", "server_impl"))
def pytorch_location(view: SpecView) -> list[Finding]:
    """A shared environment needs an export that every node mounts."""
    pytorch = view.spec.pytorch
    if not pytorch.install or pytorch.location != "shared":
        return []
    if not view.spec.nfs.exports:
        return [
            error(
                "pytorch-shared-without-nfs",
                "pytorch.location is shared but nfs.exports is empty: there is no shared tree to build it in",
                ("pytorch", "location"),
                hint="add an export under nfs.exports, or set location: node-local (one copy per node)",
            )
        ]
    if view.spec.nfs.server_impl != "kernel":
        return [
            error(
                "pytorch-shared-not-mounted",
                "pytorch.location is shared but nfs.server_impl is ganesha, with which gpuclus mounts nothing on "
                "the nodes (their kernels have no NFS client, as in the sandbox)",
                ("pytorch", "location"),
                hint="set location: node-local, or server_impl: kernel on nodes that can mount NFS",
            )
        ]
    mount = view.spec.nfs.exports[0].mount_point
    return [
        error(
            "pytorch-path-outside-share",
            f"{field} {path!r} is outside the shared tree {mount} (the first NFS export's mount point), but "
            "pytorch.location is shared",
            tuple(field.split(".")),
            hint=f"put it under {mount}/, leave it out for the default, or set location: node-local",
        )
        for field, path in outside_share(view.spec)
    ]


@_check(PYTORCH)
def pytorch_wheelhouse(view: SpecView) -> list[Finding]:
    """The wheelhouse is a directory here holding the torch wheel the spec asks for."""
    pytorch = view.spec.pytorch
    if pytorch.wheelhouse is None or not pytorch.install:
        return []
    path = view.control_path(pytorch.wheelhouse)
    loc = ("pytorch", "wheelhouse")
    if not path.is_dir():
        state = "does not exist" if not path.exists() else "is not a directory"
        return [
            error(
                "pytorch-wheelhouse-missing",
                f"pytorch.wheelhouse {pytorch.wheelhouse!r} {state}",
                loc,
                hint=f"it resolves to {_shown(path)} (a relative path is relative to the spec's directory); fill "
                f"it with `pip download torch=={pytorch.version} numpy -d DIR` on a machine with the nodes' Python",
            )
        ]
    wheels = [entry.name for entry in path.iterdir() if entry.name.endswith(".whl")]
    torch_wheels = [
        name
        for name in wheels
        if name.startswith(f"torch-{pytorch.version}-") or name.startswith(f"torch-{pytorch.version}+")
    ]
    if not torch_wheels:
        return [
            error(
                "pytorch-wheelhouse-incomplete",
                f"pytorch.wheelhouse {_shown(path)} holds no torch {pytorch.version} wheel "
                f"({len(wheels)} wheel(s) there)",
                loc,
                hint=f"add torch-{pytorch.version}-*.whl and its dependencies (`pip download "
                f"torch=={pytorch.version} numpy -d DIR`), or change pytorch.version",
            )
        ]
    return []


@_check(PYTORCH, ("modules",))
def pytorch_settings_unused(view: SpecView) -> list[Finding]:
    """Settings that do nothing as the rest of the spec is."""
    pytorch = view.spec.pytorch
    findings = []
    if not pytorch.install:
        chosen = [name for name in sorted(pytorch.model_fields_set) if name != "install"]
        for name in chosen:
            findings.append(
                warning(
                    "pytorch-setting-unused",
                    f"pytorch.{name} is set but pytorch.install is false",
                    ("pytorch", name),
                    hint="set install: true to build the environment, or remove the setting",
                )
            )
    if pytorch.install and pytorch.wheelhouse is not None and pytorch.index_url is not None:
        findings.append(
            warning(
                "pytorch-setting-unused",
                "pytorch.index_url is set but a wheelhouse is too: the nodes install from the wheelhouse only",
                ("pytorch", "index_url"),
                hint="remove one of them",
            )
        )
    real_gpus = any(node.has_real_gpus for node in view.topology.nodes)
    if pytorch.install and pytorch.flavour.startswith("cu") and not real_gpus:
        findings.append(
            warning(
                "pytorch-cuda-without-gpus",
                f"pytorch.flavour is {pytorch.flavour} but no node has real GPUs: the CUDA build is larger and "
                "runs on the CPU all the same",
                ("pytorch", "flavour"),
                hint="set flavour: cpu (or auto)",
            )
        )
    if view.spec.modules.path is not None and not view.spec.modules.lmod:
        findings.append(
            warning(
                "modules-setting-unused",
                "modules.path is set but modules.lmod is false: no modulefiles are written",
                ("modules", "path"),
                hint="set lmod: true, or remove path",
            )
        )
    return findings


@_check(("containers",))
def containers(view: SpecView) -> list[Finding]:
    if view.spec.containers.pyxis and not view.spec.containers.enroot:
        return [
            error(
                "pyxis-without-enroot",
                "containers.pyxis needs containers.enroot",
                ("containers", "pyxis"),
                hint="set enroot: true, or pyxis: false",
            )
        ]
    return []


def _containers(*keys: str) -> tuple[Loc, ...]:
    return tuple(("containers", key) for key in keys)


def _shown(path: Path) -> str:
    # The hint names the directory a relative path ended up at, which is what the admin has to check.
    return str(path.absolute())


@_check(*_containers("artifacts_dir"))
def artifacts_dir_missing(view: SpecView) -> list[Finding]:
    value = view.spec.containers.artifacts_dir
    if value is None:
        return []
    path = view.control_path(value)
    if path.is_dir():
        return []
    what = "does not exist" if not path.exists() else "is not a directory"
    return [
        error(
            "artifacts-dir-missing",
            f"containers.artifacts_dir {value!r} {what}",
            ("containers", "artifacts_dir"),
            hint=f"it resolves to {_shown(path)} (a relative path is relative to the spec's directory); "
            "create it with Enroot's and Pyxis' release files, or fix the path",
        )
    ]


def expected_artifacts(enroot_version: str, pyxis_version: str) -> dict[str, tuple[str, ...]]:
    """The file name patterns (fnmatch) artifacts_dir must hold one of, per component (release_files names them)."""
    from gpuclus.release_files import enroot_artifact_patterns, pyxis_source_file

    return {"enroot": enroot_artifact_patterns(enroot_version), "pyxis": (pyxis_source_file(pyxis_version),)}


@_check(*_containers("artifacts_dir", "enroot", "pyxis", "enroot_version", "pyxis_version"))
def artifacts_incomplete(view: SpecView) -> list[Finding]:
    containers = view.spec.containers
    if containers.artifacts_dir is None:
        return []
    path = view.control_path(containers.artifacts_dir)
    if not path.is_dir():
        return []  # artifacts-dir-missing
    try:
        names = sorted(entry.name for entry in path.iterdir())
    except OSError as exc:
        return [
            error(
                "artifacts-incomplete",
                f"containers.artifacts_dir {containers.artifacts_dir!r} cannot be read ({exc.strerror})",
                ("containers", "artifacts_dir"),
                hint=f"let the user running gpuclus read {_shown(path)}",
            )
        ]
    wanted = {"enroot": containers.enroot, "pyxis": containers.pyxis}
    missing: list[str] = []
    for component, patterns in expected_artifacts(containers.enroot_version, containers.pyxis_version).items():
        if wanted[component] and not any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns):
            missing.append(" or ".join(patterns))
    if not missing:
        return []
    return [
        error(
            "artifacts-incomplete",
            f"containers.artifacts_dir holds no {'; and no '.join(missing)}",
            ("containers", "artifacts_dir"),
            hint=f"put the release files in {_shown(path)} (enroot_<v>-1_<arch>.deb from "
            "github.com/NVIDIA/enroot/releases, pyxis-<v>-src.tar.gz as github.com/NVIDIA/pyxis tags it), "
            "or change enroot_version / pyxis_version to the ones it holds",
        )
    ]


def _read_secret_file(
    view: SpecView,
    value: str,
    loc: Loc,
    *,
    code: str,
    max_bytes: int,
    too_large: str,
    what: str,
    wanted: str,
    holds: str,
) -> tuple[bytes | None, list[Finding]]:
    """A file of secrets the spec names: its bytes (None when it cannot be read) and the findings about it.

    ``code`` prefixes the codes (-missing, -grammar for a file over ``max_bytes``, -open for a mode that lets
    others in); the messages name the field, never the content.
    """
    label = ".".join(str(part) for part in loc)
    path = view.control_path(value)
    try:
        mode = path.stat().st_mode
        data = read_regular_file(path, max_bytes)
    except FileNotFoundError:
        hint = f"it resolves to {_shown(path)} (a relative path is relative to the spec's directory)"
        return None, [error(f"{code}-missing", f"{label} {value!r} does not exist", loc, hint=hint)]
    except NotRegularFileError as exc:
        message = f"{label} {value!r} is {exc.kind}, not a file"
        return None, [error(f"{code}-missing", message, loc, hint=f"it resolves to {_shown(path)}; name {what}")]
    except FileTooLargeError:
        return None, [error(f"{code}-grammar", f"{label} {too_large}", loc, hint=f"name {wanted}")]
    except OSError as exc:
        hint = f"let the user running gpuclus read {_shown(path)}, and no one else"
        return None, [error(f"{code}-missing", f"{label} {value!r} cannot be read ({exc.strerror})", loc, hint=hint)]
    if not stat.S_IMODE(mode) & 0o077:
        return data, []
    message = f"{label} can be read or written by other users (mode {stat.S_IMODE(mode):04o}); it holds {holds}"
    return data, [error(f"{code}-open", message, loc, hint=f"chmod 600 {shlex.quote(_shown(path))}")]


@_check(*_containers("credentials_file"))
def credentials_file(view: SpecView) -> list[Finding]:
    value = view.spec.containers.credentials_file
    if value is None:
        return []
    loc: Loc = ("containers", "credentials_file")
    data, findings = _read_secret_file(
        view,
        value,
        loc,
        code="credentials-file",
        max_bytes=CREDENTIALS_MAX_BYTES,
        too_large=f"holds more than {CREDENTIALS_MAX_BYTES // 1024} KiB, far more than a list of registries",
        what="the credentials file itself",
        wanted="Enroot's credentials file, one `machine HOST login USER password PASSWORD` line each",
        holds="registry passwords",
    )
    if data is None:
        return findings
    # Only line numbers and word counts: every token of the file is a secret or names one.
    problems = credentials_problems(data)
    shown = problems[:MAX_CREDENTIAL_PROBLEMS]
    for number, problem in shown:
        where = f"line {number}: " if number else ""
        findings.append(
            error(
                "credentials-file-grammar",
                f"containers.credentials_file {where}{problem}",
                loc,
                hint="each line is `machine HOST login USER password PASSWORD` (Enroot's format), "
                "a '#' comment, or blank",
            )
        )
    if len(problems) > len(shown):
        findings.append(
            error(
                "credentials-file-grammar",
                f"containers.credentials_file has {len(problems) - len(shown)} more line(s) Enroot cannot read",
                loc,
                hint="fix the lines above first",
            )
        )
    return findings


# A credentials file of nothing but bad lines gives this many findings, then one that counts the rest.
MAX_CREDENTIAL_PROBLEMS = 10


@_check(
    *_containers(
        "enroot", "pyxis", "enroot_version", "pyxis_version", "artifacts_dir", "checksums", "allow_unverified_downloads"
    )
)
def downloads_unverified(view: SpecView) -> list[Finding]:
    """A download without a checksum: neither the spec's checksums nor gpuclus' own table has one for it.

    Enroot counts as checked with a checksum for any of its release packages of the version (which one a
    node downloads depends on its architecture, unknown here; the role refuses the others at deploy time).
    """
    from gpuclus.release_checksums import enroot_downloads, known_checksums
    from gpuclus.release_files import enroot_package_file, pyxis_source_file

    containers = view.spec.containers
    if not (containers.enroot or containers.pyxis):
        return []
    if containers.artifacts_dir is not None or containers.allow_unverified_downloads:
        return []
    have = set(containers.checksums) | set(known_checksums(containers.enroot_version, containers.pyxis_version))
    # Each missing download, with the file name the hint asks a checksum for.
    missing: dict[str, str] = {}
    if containers.enroot and not have & set(enroot_downloads(containers.enroot_version)):
        missing[f"Enroot {containers.enroot_version}"] = enroot_package_file(
            containers.enroot_version, family="apt", machine="x86_64"
        )
    if containers.pyxis and pyxis_source_file(containers.pyxis_version) not in have:
        missing[f"Pyxis {containers.pyxis_version}"] = pyxis_source_file(containers.pyxis_version)
    if not missing:
        return []
    files = list(missing.values())
    return [
        error(
            "downloads-unverified",
            f"containers: without artifacts_dir, each node downloads {' and '.join(missing)} from GitHub, "
            "and gpuclus knows no checksum for that version",
            ("containers",),
            hint=f"add containers.checksums ({', '.join(f'{name}: <sha256>' for name in files)}), "
            "set containers.artifacts_dir (offline), or containers.allow_unverified_downloads: true",
        )
    ]


@_check(NODES)
def no_gpu_nodes(view: SpecView) -> list[Finding]:
    if view.topology.gpu_nodes:
        return []
    return [
        info(
            "no-gpu-nodes",
            "no node declares gpus; the NVIDIA phase and validate's GPU checks will be skipped",
            ("nodes",),
            hint="add `gpus: {count: N}` to the GPU nodes",
        )
    ]


@_check(("nvidia", "driver", "install"))
def fake_gpus_with_driver(view: SpecView) -> list[Finding]:
    fake = [node for node in view.topology.gpu_nodes if node.gpus is not None and node.gpus.fake]
    if not fake or not view.spec.nvidia.driver.install:
        return []
    return [
        warning(
            "fake-gpus-with-driver",
            f"node(s) {hostlist.compress(n.name for n in fake)} have fake GPUs but nvidia.driver.install "
            "is on; no driver can load there",
            ("nvidia", "driver", "install"),
            hint="set nvidia.driver.install: false (and cuda.install: false) for the sandbox",
        )
    ]


@_check(("nvidia",))
def cuda_without_driver(view: SpecView) -> list[Finding]:
    # Without GPU nodes the NVIDIA phase does not run, so neither is installed.
    nvidia = view.spec.nvidia
    if not view.topology.gpu_nodes or not nvidia.cuda.install or nvidia.driver.install:
        return []
    return [
        info(
            "cuda-without-driver",
            "CUDA will be installed but the driver will not; gpuclus assumes it is already there",
            ("nvidia", "driver", "install"),
            hint="set nvidia.driver.install: true unless the nodes ship with a driver",
        )
    ]


@_check(NODES, ("nvidia",))
def nvidia_versions_for_gpus(view: SpecView) -> list[Finding]:
    """The driver branch and CUDA version are no older than the nodes' GPUs need (the GPU catalogue's minimums).

    Only for the nodes the NVIDIA phase installs (real GPUs whose gpus.model the catalogue knows), and only
    for what it installs: a driver that install: false leaves alone is the admin's.
    """
    from gpuclus.gpu_catalog import (
        GpuKind,
        cuda_key,
        kind_for_model,
    )  # its table is read only when a node names a model

    kinds: dict[str, tuple[GpuKind, list[str]]] = {}
    for node in view.topology.real_gpu_nodes:
        kind = kind_for_model(node.gpus.model) if node.gpus is not None and node.gpus.model else None
        if kind is not None and kind.model is not None:
            kinds.setdefault(kind.model, (kind, []))[1].append(node.name)
    if not kinds:
        return []
    nvidia = view.spec.nvidia
    findings: list[Finding] = []
    if nvidia.driver.install:
        branch = int(nvidia.driver.branch)
        kind, names = max(kinds.values(), key=lambda item: item[0].min_driver_branch)
        if branch < kind.min_driver_branch:
            findings.append(
                error(
                    "nvidia-driver-too-old",
                    f"driver branch {nvidia.driver.branch} does not drive {kind.model} GPUs "
                    f"({kind.generation}, on {hostlist.compress(names)}): they need branch "
                    f"{kind.min_driver_branch} or newer",
                    ("nvidia", "driver", "branch"),
                    hint=f'set nvidia.driver.branch: "{kind.min_driver_branch}" or newer',
                )
            )
    if nvidia.cuda.install:
        kind, names = max(kinds.values(), key=lambda item: cuda_key(item[0].min_cuda))
        if cuda_key(nvidia.cuda.version) < cuda_key(kind.min_cuda):
            findings.append(
                error(
                    "cuda-too-old",
                    f"CUDA {nvidia.cuda.version} cannot build for {kind.model} GPUs "
                    f"({kind.generation}, on {hostlist.compress(names)}): they need CUDA {kind.min_cuda} or newer",
                    ("nvidia", "cuda", "version"),
                    hint=f'set nvidia.cuda.version: "{kind.min_cuda}" or newer',
                )
            )
    return findings


@_check(NODES)
def login_node(view: SpecView) -> list[Finding]:
    controller = view.topology.controller
    if view.topology.with_role(Role.LOGIN) or controller is None:
        return []
    return [
        info(
            "no-login-node",
            f"no node has the login role; users will submit jobs from the controller {controller.name!r}",
            ("nodes",),
            hint="add 'login' to the node users should SSH into",
        )
    ]


# A bind password is one line of sssd.conf: no line break, no blank at either end (sssd strips them), and
# short; far more than any password, less than any wrong file.
BIND_PASSWORD_MAX_BYTES = 1024
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
CA_CERT_MAX_BYTES = 1024 * 1024


def _directory(*keys: str) -> tuple[Loc, ...]:
    return tuple(("users", "directory", key) for key in keys) or (("users", "directory"),)


@_check(("users", "file"), *_directory())
def directory_settings(view: SpecView) -> list[Finding]:
    """users.directory's settings that only make sense together."""
    directory = view.spec.users.directory
    if directory is None:
        return []
    findings: list[Finding] = []
    if view.spec.users.file is None:
        findings.append(
            error(
                "directory-needs-users-file",
                "users.directory needs users.file: the users file names who may use the cluster and their Slurm "
                "accounts and limits; the directory gives their accounts",
                ("users", "directory"),
                hint="add users.file naming a users file (docs/users.md shows one); each user's uid there is the "
                "directory's, as `id NAME` on a node shows it",
            )
        )
    if (directory.bind_dn is None) != (directory.bind_password_file is None):
        given, missing = ("bind_dn", "bind_password_file") if directory.bind_dn else ("bind_password_file", "bind_dn")
        findings.append(
            error(
                "directory-bind-incomplete",
                f"users.directory.{given} without {missing}",
                ("users", "directory", given),
                hint="give both (a read-only account and the file with its password), or neither for anonymous binds",
            )
        )
    encrypted = [uri for uri in directory.uri if uri.startswith("ldaps://")]
    if directory.start_tls and encrypted:
        findings.append(
            error(
                "directory-start-tls-ldaps",
                f"users.directory.start_tls with {encrypted[0]}: ldaps:// is encrypted already and sssd cannot "
                "start TLS inside it",
                ("users", "directory", "start_tls"),
                hint="use ldap:// URIs with start_tls: true, or ldaps:// URIs and leave start_tls out",
            )
        )
    if directory.bind_password_file is not None and not directory.start_tls and len(encrypted) < len(directory.uri):
        findings.append(
            warning(
                "directory-cleartext-bind",
                "users.directory binds with a password over ldap:// without start_tls: the password crosses the "
                "network unencrypted",
                ("users", "directory", "uri"),
                hint="use ldaps:// URIs, or set start_tls: true (with ca_cert_file when the servers' CA is not "
                "trusted by the nodes)",
            )
        )
    if directory.id_mapping and directory.schema_name != "ad":
        findings.append(
            error(
                "directory-id-mapping-needs-ad",
                f"users.directory.id_mapping makes ids from Active Directory SIDs, which a {directory.schema_name} "
                "directory does not have",
                ("users", "directory", "id_mapping"),
                hint="set schema: ad for an Active Directory, or leave id_mapping out to read uidNumber/gidNumber",
            )
        )
    return findings


@_check(*_directory("bind_password_file"))
def directory_bind_password_file(view: SpecView) -> list[Finding]:
    """The bind password's file: there, 0600, one line. Its content is never shown."""
    directory = view.spec.users.directory
    if directory is None or directory.bind_password_file is None:
        return []
    loc: Loc = ("users", "directory", "bind_password_file")
    data, findings = _read_secret_file(
        view,
        directory.bind_password_file,
        loc,
        code="directory-password-file",
        max_bytes=BIND_PASSWORD_MAX_BYTES,
        too_large=f"holds more than {BIND_PASSWORD_MAX_BYTES} bytes, far more than a password",
        what="the file holding the password",
        wanted="a file holding only the bind DN's password, on one line",
        holds="the directory's bind password",
    )
    if data is None:
        return findings
    problem = _bind_password_problem(data)
    if problem:
        findings.append(
            error(
                "directory-password-file-grammar",
                f"users.directory.bind_password_file {problem}",
                loc,
                hint="write the password alone on the file's first line (a final line break is fine); sssd.conf "
                "takes it as one line",
            )
        )
    return findings


def _bind_password_problem(data: bytes) -> str | None:
    """What keeps ``data`` from being one line of sssd.conf, named without showing any of it."""
    text = data[:-1] if data.endswith(b"\n") else data
    if not text:
        return "is empty"
    if b"\n" in text or b"\r" in text:
        return "holds more than one line"
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    if decoded != decoded.strip():
        return "starts or ends with a blank, which sssd would drop"
    if any(not character.isprintable() for character in decoded):
        return "holds a control character"
    return None


@_check(*_directory("ca_cert_file"))
def directory_ca_cert_file(view: SpecView) -> list[Finding]:
    """The directory's CA certificate: a PEM file there."""
    directory = view.spec.users.directory
    if directory is None or directory.ca_cert_file is None:
        return []
    value = directory.ca_cert_file
    loc: Loc = ("users", "directory", "ca_cert_file")
    path = view.control_path(value)
    try:
        data = read_regular_file(path, CA_CERT_MAX_BYTES)
    except (OSError, NotRegularFileError, FileTooLargeError) as exc:
        reason = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc})"
        return [
            error(
                "directory-ca-cert-invalid",
                f"users.directory.ca_cert_file {value!r} {reason}",
                loc,
                hint=f"it resolves to {_shown(path)}; name the PEM file with the CA that signed the servers' "
                "certificates",
            )
        ]
    if PEM_CERTIFICATE not in data:
        return [
            error(
                "directory-ca-cert-invalid",
                f"users.directory.ca_cert_file {value!r} holds no PEM certificate ({PEM_CERTIFICATE.decode()})",
                loc,
                hint="convert a DER certificate with `openssl x509 -inform der -in CA.cer -out ca.pem`",
            )
        ]
    return []


@_check(("users", "file"), ("cluster", "admin_user"), ("slurm", "accounting"))
def users_file(view: SpecView) -> list[Finding]:
    """The users file the spec names: readable, free of errors, and not listing the admin user."""
    value = view.spec.users.file
    if value is None:
        return []
    loc: Loc = ("users", "file")
    path = view.control_path(value)
    try:
        loaded = load_users(path)
    except SpecFileError as problem:
        return [error("users-file-missing", f"users.file: {problem}", loc, hint=problem.hint)]
    view.users_read[path] = loaded
    errors = [finding for finding in loaded.findings if finding.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        return [
            error(
                "users-file-invalid",
                f"{value} has {len(errors)} error(s); the first, line {first.line}: {first.path}: {first.message}",
                loc,
                hint=f"`gpuclus users check {shlex.quote(_shown(path))}` lists them all with their lines",
            )
        ]
    if not view.spec.slurm.accounting:
        return [
            error(
                "users-need-accounting",
                f"{value} gives Slurm accounts and limits, which need Slurm's accounting database",
                loc,
                hint="set slurm.accounting: true (the default), or leave users.file out",
            )
        ]
    admin = view.spec.cluster.admin_user
    assert loaded.users is not None
    if any(user.name == admin for user in loaded.users.users):
        return [
            error(
                "users-admin-user",
                f"{value} lists {admin!r}, the admin user gpuclus logs in as",
                loc,
                hint="leave the admin user out of the users file: gpuclus' own access is not the users file's",
            )
        ]
    return []


# Every finding code gpuclus can report, with its level and a one-line summary.
# docs/spec.md lists them and tests/unit/test_checks.py keeps a fixture for each.
CODES: dict[str, tuple[Severity, str]] = {
    # Reading the file
    "empty-file": (Severity.ERROR, "the file is empty or holds only comments"),
    "yaml-syntax": (Severity.ERROR, "the file is not valid YAML"),
    "duplicate-key": (Severity.ERROR, "a mapping repeats a key"),
    "not-a-mapping": (Severity.ERROR, "the top level is not a mapping"),
    "api-version": (Severity.ERROR, "apiVersion is missing or not gpuclus/v1"),
    # Structure (schema)
    "missing-field": (Severity.ERROR, "a required key is missing"),
    "unknown-key": (Severity.ERROR, "a key the spec does not define (often a typo)"),
    "wrong-type": (Severity.ERROR, "a value of the wrong type"),
    "out-of-range": (Severity.ERROR, "a number or list length outside its bounds"),
    "invalid-choice": (Severity.ERROR, "a value not among the allowed choices"),
    "invalid-format": (Severity.ERROR, "a text value in the wrong format"),
    "invalid-value": (Severity.ERROR, "a value the spec cannot use"),
    # Meaning
    "hostlist-syntax": (Severity.ERROR, "a hostlist range that does not expand"),
    "hostlist-length-mismatch": (Severity.ERROR, "name and address ranges of different lengths"),
    "controller-count": (Severity.ERROR, "not exactly one controller"),
    "no-compute": (Severity.ERROR, "no compute node"),
    "invalid-node-name": (Severity.ERROR, "a node name that is not a valid host name"),
    "duplicate-node-name": (Severity.ERROR, "two nodes share a name"),
    "invalid-address": (Severity.ERROR, "an address that is neither IP nor DNS name"),
    "duplicate-address": (Severity.ERROR, "two nodes share an address"),
    "duplicate-role": (Severity.WARNING, "a role listed twice on one node"),
    "gpus-on-non-compute": (Severity.WARNING, "GPUs on a node Slurm does not schedule"),
    "controller-gpu-compute": (Severity.WARNING, "the controller is also a GPU compute node"),
    "duplicate-partition": (Severity.ERROR, "two partitions share a name"),
    "partition-unknown-node": (Severity.ERROR, "a partition names a node not in the spec"),
    "partition-non-compute-node": (Severity.ERROR, "a partition names a node without the compute role"),
    "multiple-default-partitions": (Severity.ERROR, "more than one default partition"),
    "compute-without-partition": (Severity.WARNING, "a compute node in no partition"),
    "nfs-server-missing": (Severity.ERROR, "exports without an nfs_server node"),
    "nfs-server-multiple": (Severity.ERROR, "more than one nfs_server node"),
    "nfs-server-without-exports": (Severity.WARNING, "an nfs_server node with nothing to export"),
    "duplicate-export": (Severity.ERROR, "an export path or mount point used twice"),
    "monitoring-on-controller": (
        Severity.INFO,
        "no monitoring node; Prometheus and Grafana run on the controller",
    ),
    "monitoring-node-multiple": (Severity.ERROR, "more than one monitoring node"),
    "pyxis-without-enroot": (Severity.ERROR, "Pyxis without Enroot"),
    "artifacts-dir-missing": (Severity.ERROR, "containers.artifacts_dir is not a directory"),
    "artifacts-incomplete": (Severity.ERROR, "containers.artifacts_dir lacks Enroot's or Pyxis' release files"),
    "credentials-file-missing": (Severity.ERROR, "containers.credentials_file cannot be read"),
    "credentials-file-open": (Severity.ERROR, "containers.credentials_file is readable by other users"),
    "credentials-file-grammar": (Severity.ERROR, "a line of containers.credentials_file Enroot cannot read"),
    "downloads-unverified": (Severity.ERROR, "Enroot or Pyxis downloaded without a checksum gpuclus knows"),
    "grafana-package-missing": (Severity.ERROR, "monitoring.grafana_package is not a file"),
    "dcgm-exporter-package-missing": (Severity.ERROR, "monitoring.dcgm_exporter_package is not a file"),
    "monitoring-setting-unused": (Severity.WARNING, "a monitoring setting that has no effect"),
    "monitoring-needs-prometheus": (Severity.ERROR, "Grafana or Alertmanager without Prometheus"),
    "pytorch-shared-without-nfs": (Severity.ERROR, "a shared PyTorch environment without an NFS export"),
    "pytorch-shared-not-mounted": (Severity.ERROR, "a shared PyTorch environment where nodes mount no NFS"),
    "pytorch-path-outside-share": (Severity.ERROR, "a shared PyTorch path outside the NFS export's mount"),
    "pytorch-wheelhouse-missing": (Severity.ERROR, "pytorch.wheelhouse is not a directory"),
    "pytorch-wheelhouse-incomplete": (Severity.ERROR, "pytorch.wheelhouse lacks the torch wheel"),
    "pytorch-setting-unused": (Severity.WARNING, "a pytorch setting that has no effect"),
    "pytorch-cuda-without-gpus": (Severity.WARNING, "a CUDA PyTorch build on a cluster without real GPUs"),
    "modules-setting-unused": (Severity.WARNING, "a modules setting that has no effect"),
    "no-gpu-nodes": (Severity.INFO, "no node declares GPUs"),
    "fake-gpus-with-driver": (Severity.WARNING, "driver install on nodes with fake GPUs"),
    "cuda-without-driver": (Severity.INFO, "CUDA installed without the driver"),
    "nvidia-driver-too-old": (Severity.ERROR, "a driver branch older than the nodes' GPUs need"),
    "cuda-too-old": (Severity.ERROR, "a CUDA version older than the nodes' GPUs need"),
    "no-login-node": (Severity.INFO, "no login node; the controller serves as one"),
    "users-file-missing": (Severity.ERROR, "users.file cannot be read"),
    "users-file-invalid": (Severity.ERROR, "users.file has errors"),
    "users-admin-user": (Severity.ERROR, "the users file lists the admin user"),
    "users-need-accounting": (Severity.ERROR, "a users file with Slurm accounting off"),
    "directory-needs-users-file": (Severity.ERROR, "users.directory without users.file"),
    "directory-bind-incomplete": (Severity.ERROR, "bind_dn without bind_password_file, or the reverse"),
    "directory-start-tls-ldaps": (Severity.ERROR, "start_tls with an ldaps:// URI"),
    "directory-cleartext-bind": (Severity.WARNING, "a bind password sent over ldap:// without start_tls"),
    "directory-id-mapping-needs-ad": (Severity.ERROR, "id_mapping on a directory that is not Active Directory"),
    "directory-password-file-missing": (Severity.ERROR, "users.directory.bind_password_file cannot be read"),
    "directory-password-file-open": (Severity.ERROR, "users.directory.bind_password_file is readable by others"),
    "directory-password-file-grammar": (Severity.ERROR, "users.directory.bind_password_file is not one line"),
    "directory-ca-cert-invalid": (Severity.ERROR, "users.directory.ca_cert_file is missing or not PEM"),
}
