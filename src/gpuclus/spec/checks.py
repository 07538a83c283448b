"""Semantic checks: rules across fields that the schema cannot express.

Each check is a small function returning findings; every one runs, so a spec
with five problems shows five findings at once. Codes are stable: scripts and
docs/spec.md refer to them, so never rename one, only add new ones.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable

from gpuclus.spec import hostlist
from gpuclus.spec.findings import Finding, Severity, error, info, warning
from gpuclus.spec.models import ClusterSpec, Role
from gpuclus.spec.topology import Node, Topology

Check = Callable[[ClusterSpec, Topology], list[Finding]]
CHECKS: list[Check] = []


def _check(function: Check) -> Check:
    CHECKS.append(function)
    return function


def run_checks(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(spec, topology))
    return findings


def _node_loc(index: int, field: str | None = None) -> tuple[str | int, ...]:
    return ("nodes", index) if field is None else ("nodes", index, field)


@_check
def controller_count(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    controllers = topology.with_role(Role.CONTROLLER)
    if len(controllers) == 1:
        return []
    if not controllers:
        return [
            error(
                "controller-count",
                "no node has the controller role",
                ("nodes",),
                hint="add 'controller' to the roles of exactly one node (it runs slurmctld)",
            )
        ]
    names = ", ".join(node.name for node in controllers)
    return [
        error(
            "controller-count",
            f"{len(controllers)} nodes have the controller role ({names}); exactly one may",
            _node_loc(controllers[1].entry, "roles"),
            hint="keep 'controller' on one node; gpuclus v1 does not set up a backup slurmctld",
        )
    ]


@_check
def compute_present(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    if topology.compute:
        return []
    return [
        error(
            "no-compute",
            "no node has the compute role, so Slurm has nowhere to run jobs",
            ("nodes",),
            hint="add 'compute' to the roles of the GPU nodes",
        )
    ]


_NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@_check
def node_names(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings: list[Finding] = []
    reported_entries: set[int] = set()
    for node in topology.nodes:
        if not _NODE_NAME.match(node.name) and node.entry not in reported_entries:
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
    for first, second, names in _collisions(topology, lambda node: node.name):
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


def address_problem(address: str) -> str | None:
    """Why ``address`` is neither an IP address nor a DNS name, or None if fine."""
    try:
        ipaddress.ip_address(address)
        return None
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", address):
        return "looks like an IPv4 address but is not a valid one"
    if ":" in address:
        return "is not a valid IPv6 address"
    if len(address) > 253:
        return "is longer than a DNS name may be (253)"
    labels = address.rstrip(".").split(".")
    for label in labels:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", label):
            return f"has an invalid DNS label {label!r}"
    return None


@_check
def node_addresses(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings: list[Finding] = []
    reported_entries: set[int] = set()
    for node in topology.nodes:
        problem = address_problem(node.address)
        if problem and node.entry not in reported_entries:
            reported_entries.add(node.entry)
            findings.append(
                error(
                    "invalid-address",
                    f"address {node.address!r} {problem}",
                    _node_loc(node.entry, "address"),
                    hint="use an IPv4 address (10.0.0.11), an IPv6 address or a DNS name",
                )
            )
    for first, second, addresses in _collisions(topology, lambda node: node.address.lower()):
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


@_check
def repeated_roles(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings = []
    for index, entry in enumerate(spec.nodes):
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


@_check
def gpus_on_non_compute(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    return [
        warning(
            "gpus-on-non-compute",
            f"node {entry.name!r} has gpus but not the compute role; Slurm will not schedule them",
            _node_loc(index, "gpus"),
            hint="add 'compute' to its roles, or drop gpus",
        )
        for index, entry in enumerate(spec.nodes)
        if entry.gpus is not None and Role.COMPUTE not in entry.roles
    ]


@_check
def controller_gpu_compute(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    controller = topology.controller
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


@_check
def partitions(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings: list[Finding] = []
    compute_names = {node.name for node in topology.compute}
    all_names = {node.name for node in topology.nodes}
    seen: set[str] = set()
    covered: set[str] = set()
    defaults = []
    for index, partition in enumerate(spec.slurm.partitions):
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
        if partition.nodes is None:
            covered |= compute_names
            continue
        try:
            names = hostlist.expand_list(partition.nodes)
        except hostlist.HostlistError as exc:
            findings.append(error("hostlist-syntax", str(exc), (*loc, "nodes"), hint="write ranges like gpu[01-04]"))
            continue
        covered |= set(names)
        unknown = [name for name in names if name not in all_names]
        not_compute = [name for name in names if name in all_names and name not in compute_names]
        if unknown:
            findings.append(
                error(
                    "partition-unknown-node",
                    f"partition {partition.name!r} names node(s) not in the spec: {hostlist.compress(unknown)}",
                    (*loc, "nodes"),
                    hint="use names from `nodes:` (check the range bounds and zero padding)",
                )
            )
        if not_compute:
            findings.append(
                error(
                    "partition-non-compute-node",
                    f"partition {partition.name!r} names node(s) without the compute role: "
                    f"{hostlist.compress(not_compute)}",
                    (*loc, "nodes"),
                    hint="add 'compute' to those nodes' roles or remove them from the partition",
                )
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
    if spec.slurm.partitions:
        idle = sorted(compute_names - covered)
        if idle:
            findings.append(
                warning(
                    "compute-without-partition",
                    f"compute node(s) {hostlist.compress(idle)} are in no partition and will never run jobs",
                    ("slurm", "partitions"),
                    hint="add them to a partition, or leave `nodes:` out of one to mean every compute node",
                )
            )
    return findings


@_check
def nfs(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings: list[Finding] = []
    servers = topology.with_role(Role.NFS_SERVER)
    if spec.nfs.exports and not servers:
        findings.append(
            error(
                "nfs-server-missing",
                "nfs.exports is set but no node has the nfs_server role",
                ("nfs", "exports"),
                hint="add 'nfs_server' to the roles of the node that holds the data (often the controller)",
            )
        )
    if len(servers) > 1:
        findings.append(
            error(
                "nfs-server-multiple",
                f"{len(servers)} nodes have the nfs_server role ({', '.join(n.name for n in servers)}); "
                "gpuclus v1 supports one",
                _node_loc(servers[1].entry, "roles"),
                hint="keep 'nfs_server' on one node",
            )
        )
    if servers and not spec.nfs.exports:
        findings.append(
            warning(
                "nfs-server-without-exports",
                f"node {servers[0].name!r} has the nfs_server role but nfs.exports is empty",
                _node_loc(servers[0].entry, "roles"),
                hint="list the shared directories under nfs.exports (e.g. [/shared]) or drop the role",
            )
        )
    for attribute, label in (("path", "exported"), ("mount_point", "mounted")):
        counts = Counter(getattr(export, attribute) for export in spec.nfs.exports)
        for value, count in sorted(counts.items()):
            if count > 1:
                index = [i for i, e in enumerate(spec.nfs.exports) if getattr(e, attribute) == value][1]
                findings.append(
                    error(
                        "duplicate-export",
                        f"{value} is {label} more than once",
                        ("nfs", "exports", index),
                        hint="each export needs its own path and mount point",
                    )
                )
    return findings


@_check
def monitoring_node(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    wanted = [name for name in ("prometheus", "grafana") if getattr(spec.monitoring, name)]
    nodes = topology.with_role(Role.MONITORING)
    if wanted and not nodes and topology.controller is not None:
        return [
            info(
                "monitoring-on-controller",
                f"no node has the monitoring role; {' and '.join(wanted)} will run on the controller "
                f"{topology.controller.name!r}",
                ("nodes",),
                hint="add 'monitoring' to another node's roles to move it there",
            )
        ]
    if len(nodes) > 1:
        return [
            error(
                "monitoring-node-multiple",
                f"{len(nodes)} nodes have the monitoring role; gpuclus v1 runs one Prometheus and Grafana",
                _node_loc(nodes[1].entry, "roles"),
                hint="keep 'monitoring' on one node",
            )
        ]
    return []


@_check
def grafana(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    if not spec.monitoring.grafana:
        return []
    return [
        warning(
            "grafana-not-shipped",
            "monitoring.grafana is true, but this version of gpuclus does not install Grafana yet",
            ("monitoring", "grafana"),
            hint="set grafana: false (Prometheus still runs) and install Grafana from its apt repository by hand",
        )
    ]


@_check
def containers(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    if spec.containers.pyxis and not spec.containers.enroot:
        return [
            error(
                "pyxis-without-enroot",
                "containers.pyxis needs containers.enroot",
                ("containers", "pyxis"),
                hint="set enroot: true, or pyxis: false",
            )
        ]
    return []


@_check
def nvidia(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    findings: list[Finding] = []
    gpu_nodes = topology.gpu_nodes
    if not gpu_nodes:
        findings.append(
            info(
                "no-gpu-nodes",
                "no node declares gpus; the NVIDIA phase and validate's GPU checks will be skipped",
                ("nodes",),
                hint="add `gpus: {count: N}` to the GPU nodes",
            )
        )
        return findings
    fake = [node for node in gpu_nodes if node.gpus is not None and node.gpus.fake]
    if fake and spec.nvidia.driver.install:
        findings.append(
            warning(
                "fake-gpus-with-driver",
                f"node(s) {hostlist.compress(n.name for n in fake)} have fake GPUs but nvidia.driver.install "
                "is on; no driver can load there",
                ("nvidia", "driver", "install"),
                hint="set nvidia.driver.install: false (and cuda.install: false) for the sandbox",
            )
        )
    if spec.nvidia.cuda.install and not spec.nvidia.driver.install:
        findings.append(
            info(
                "cuda-without-driver",
                "CUDA will be installed but the driver will not; gpuclus assumes it is already there",
                ("nvidia", "driver", "install"),
                hint="set nvidia.driver.install: true unless the nodes ship with a driver",
            )
        )
    return findings


@_check
def login_node(spec: ClusterSpec, topology: Topology) -> list[Finding]:
    if topology.with_role(Role.LOGIN) or topology.controller is None:
        return []
    return [
        info(
            "no-login-node",
            f"no node has the login role; users will submit jobs from the controller {topology.controller.name!r}",
            ("nodes",),
            hint="add 'login' to the node users should SSH into",
        )
    ]


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
    "grafana-not-shipped": (Severity.WARNING, "Grafana asked for; this version does not install it"),
    "no-gpu-nodes": (Severity.INFO, "no node declares GPUs"),
    "fake-gpus-with-driver": (Severity.WARNING, "driver install on nodes with fake GPUs"),
    "cuda-without-driver": (Severity.INFO, "CUDA installed without the driver"),
    "no-login-node": (Severity.INFO, "no login node; the controller serves as one"),
}
