"""The order a rolling upgrade takes the nodes in.

Slurm's upgrade order is slurmdbd, then slurmctld, then slurmd: the first
batch is every node that runs no slurmd (controller, login, NFS, monitoring)
together with the nodes that run a controller of Slurm's, compute or not, so
that every slurmctld is new before the first compute node is. The compute
nodes then follow in spec order, at most ``max_unavailable`` out of service
at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclus.spec.models import Role
from gpuclus.spec.topology import Node, Topology


@dataclass(frozen=True)
class Batch:
    nodes: tuple[str, ...]  # deployed together, in one run limited to them
    out_of_service: tuple[str, ...]  # the compute nodes among them: drained before, checked and resumed after


def _runs_a_controller(node: Node) -> bool:
    # The backup controller's role is named by value: it is the spec's only other slurmctld.
    return node.has(Role.CONTROLLER) or any(role.value == "backup_controller" for role in node.roles)


def plan_batches(topology: Topology, max_unavailable: int) -> list[Batch]:
    if max_unavailable < 1:
        raise ValueError("max_unavailable must be at least 1")
    first = [node for node in topology.nodes if not node.has(Role.COMPUTE) or _runs_a_controller(node)]
    batches = []
    if first:
        batches.append(
            Batch(
                tuple(node.name for node in first),
                tuple(node.name for node in first if node.has(Role.COMPUTE)),
            )
        )
    rest = [node.name for node in topology.nodes if node.has(Role.COMPUTE) and not _runs_a_controller(node)]
    for start in range(0, len(rest), max_unavailable):
        chunk = tuple(rest[start : start + max_unavailable])
        batches.append(Batch(chunk, chunk))
    return batches
