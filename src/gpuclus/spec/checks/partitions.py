"""Slurm partitions: each well formed on its own, and against the nodes (known, compute, every compute node placed)."""

from __future__ import annotations

from gpuclus.spec import hostlist
from gpuclus.spec.checks.view import NODES, PARTITIONS, RegisteredCheck, SpecView, registrar
from gpuclus.spec.reserved import reserved_partition_name_problem
from gpuclus.yamldoc.findings import Finding, error, warning

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


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
        reserved = reserved_partition_name_problem(partition.name)
        if reserved:
            findings.append(
                error(
                    "reserved-partition-name",
                    f"partition {partition.name!r} {reserved}",
                    (*loc, "name"),
                    hint="name the partition for what runs there, e.g. 'gpu' or 'batch'; to make it the one jobs "
                    "get when they name none, set default: true",
                )
            )
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
