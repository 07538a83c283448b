"""Expanded view of a spec: one Node per host, with roles as sets.

Everything downstream (checks, render, deploy, validate) works on this view
rather than on hostlist entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gpuclus.spec import hostlist
from gpuclus.spec.models import ClusterSpec, Gpus, NodeEntry, Role
from gpuclus.yamldoc.findings import Finding, error


@dataclass(frozen=True, slots=True)  # slots: a 65,000-node spec holds 65,000 of them
class Node:
    name: str
    address: str
    roles: frozenset[Role]
    gpus: Gpus | None
    cpus: int | None
    memory_mb: int | None
    entry: int  # index in spec.nodes, for pointing findings at the right line

    def has(self, role: Role) -> bool:
        return role in self.roles

    @property
    def gpu_count(self) -> int:
        return self.gpus.count if self.gpus else 0

    @property
    def has_real_gpus(self) -> bool:
        """GPUs with a driver to install and figures to measure; fake ones (the sandbox's) have neither."""
        return self.gpus is not None and not self.gpus.fake


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...]

    def with_role(self, role: Role) -> list[Node]:
        return list(self._by_role.get(role, ()))

    @cached_property
    def _by_role(self) -> dict[Role, tuple[Node, ...]]:
        # Render asks for each role several times; one pass over the nodes answers all.
        members: dict[Role, list[Node]] = {}
        for node in self.nodes:
            for role in node.roles:
                members.setdefault(role, []).append(node)
        return {role: tuple(nodes) for role, nodes in members.items()}

    @property
    def controller(self) -> Node | None:
        controllers = self.with_role(Role.CONTROLLER)
        return controllers[0] if len(controllers) == 1 else None

    @property
    def monitoring_server(self) -> Node | None:
        """The node that runs Prometheus and Grafana: the monitoring node, else the controller."""
        monitoring = self.with_role(Role.MONITORING)
        return monitoring[0] if monitoring else self.controller

    @property
    def compute(self) -> list[Node]:
        return self.with_role(Role.COMPUTE)

    @property
    def gpu_nodes(self) -> list[Node]:
        return [node for node in self.nodes if node.gpus is not None]

    @property
    def real_gpu_nodes(self) -> list[Node]:
        """The GPU nodes whose GPUs are real: deploy installs the driver there, validate measures them."""
        return [node for node in self.nodes if node.has_real_gpus]

    def by_name(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}


def _expand_entry(index: int, entry: NodeEntry) -> tuple[list[Node], list[Finding]]:
    names_loc = ("nodes", index, "name")
    try:
        names = hostlist.expand(entry.name)
    except hostlist.HostlistError as exc:
        return [], [error("hostlist-syntax", str(exc), names_loc, hint="write ranges like gpu[01-04] or gpu[1,3]")]
    try:
        addresses = hostlist.expand(entry.address)
    except hostlist.HostlistError as exc:
        return [], [
            error(
                "hostlist-syntax",
                str(exc),
                ("nodes", index, "address"),
                hint="write ranges like 10.0.0.[11-14]",
            )
        ]
    if len(names) != len(addresses):
        return [], [
            error(
                "hostlist-length-mismatch",
                f"name {entry.name!r} expands to {len(names)} host(s) but address {entry.address!r} "
                f"to {len(addresses)}",
                ("nodes", index, "address"),
                hint="give the address range as many entries as the name range, e.g. gpu[01-04] with 10.0.0.[11-14]",
            )
        ]
    roles = frozenset(entry.roles)
    nodes = [
        Node(name, address, roles, entry.gpus, entry.cpus, entry.memory_mb, index)
        for name, address in zip(names, addresses, strict=True)
    ]
    return nodes, []


def expand_nodes(spec: ClusterSpec) -> tuple[Topology, list[Finding]]:
    """Expand every node entry; bad entries become findings and are left out."""
    nodes: list[Node] = []
    findings: list[Finding] = []
    for index, entry in enumerate(spec.nodes):
        expanded, problems = _expand_entry(index, entry)
        nodes.extend(expanded)
        findings.extend(problems)
    return Topology(tuple(nodes)), findings


@dataclass(frozen=True)
class SlurmPartition:
    name: str
    nodes: tuple[str, ...]
    default: bool
    max_time: str


DEFAULT_PARTITION = "gpu"


def slurm_partitions(spec: ClusterSpec, topology: Topology) -> list[SlurmPartition]:
    """The partitions Slurm gets: the spec's, or one default with every compute node.

    Assumes a checked spec (partition hostlists expand). When no partition is
    marked default, the first one is, as Slurm would pick it anyway.
    """
    compute = [node.name for node in topology.compute]
    if not spec.slurm.partitions:
        return [SlurmPartition(DEFAULT_PARTITION, tuple(compute), True, "UNLIMITED")]
    any_default = any(partition.default for partition in spec.slurm.partitions)
    resolved = []
    for index, partition in enumerate(spec.slurm.partitions):
        names = hostlist.expand_list(partition.nodes) if partition.nodes else compute
        is_default = partition.default or (not any_default and index == 0)
        resolved.append(SlurmPartition(partition.name, tuple(names), is_default, partition.max_time))
    return resolved
