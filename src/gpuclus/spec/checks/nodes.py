"""Nodes: one controller, some compute, valid and distinct names and addresses, roles that make sense together."""

from __future__ import annotations

from collections.abc import Callable

from gpuclus.spec import hostlist
from gpuclus.spec.checks.view import NODES, RegisteredCheck, SpecView, node_loc, registrar
from gpuclus.spec.models import Role
from gpuclus.spec.reserved import reserved_node_name_problem
from gpuclus.spec.topology import Node, Topology
from gpuclus.yamldoc.findings import Finding, error, warning
from gpuclus.yamldoc.grammar import address_problem, full_match, numeric_name_problem
from gpuclus.yamldoc.patterns import NODE_NAME_PATTERN

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


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
            node_loc(controllers[1].entry, "roles"),
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


@_check()
def node_names(view: SpecView) -> list[Finding]:
    findings: list[Finding] = []
    reported_entries: set[int] = set()
    for node in view.topology.nodes:
        if node.entry in reported_entries:
            continue
        finding = _node_name_finding(node)
        if finding is not None:
            reported_entries.add(node.entry)
            findings.append(finding)
    for first, second, names in _collisions(view.topology, lambda node: node.name):
        findings.append(
            error(
                "duplicate-node-name",
                f"node name(s) {hostlist.compress(names)} given in nodes[{first}] are used again here",
                node_loc(second, "name"),
                hint="every node needs its own name; check overlapping hostlist ranges",
            )
        )
    return findings


def _node_name_finding(node: Node) -> Finding | None:
    problem = _node_name_problem(node.name)
    if problem:
        return error(
            "invalid-node-name",
            f"{node.name!r} {problem}",
            node_loc(node.entry, "name"),
            hint="use lower case letters, digits and '-' (at most 63), not starting or ending "
            "with '-' and not a number alone; Slurm and /etc/hosts need plain host names",
        )
    reserved = reserved_node_name_problem(node.name)
    if reserved:
        return error(
            "reserved-node-name",
            f"{node.name!r} {reserved}",
            node_loc(node.entry, "name"),
            hint="give the node a name of its own, e.g. 'head' or 'gpu01'; group, Ansible and Slurm words "
            "(cluster, compute, controller, gpu, login, monitoring, all, ungrouped, localhost, default) are taken",
        )
    return None


def _node_name_problem(name: str) -> str | None:
    if not full_match(NODE_NAME_PATTERN, name):
        return "is not a valid host name"
    # 0x7f000001 is a fine DNS label, yet every node would reach 127.0.0.1 by that name.
    return numeric_name_problem(name)


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
                    node_loc(node.entry, "address"),
                    hint="use an IPv4 address (10.0.0.11) or a DNS name (gpu01.lab.example)",
                )
            )
    for first, second, addresses in _collisions(view.topology, lambda node: node.address.lower()):
        shown = addresses[0] if len(addresses) == 1 else f"{addresses[0]} and {len(addresses) - 1} more"
        findings.append(
            error(
                "duplicate-address",
                f"address {shown} given in nodes[{first}] is used again here",
                node_loc(second, "address"),
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
                    node_loc(index, "roles"),
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
            node_loc(index, "gpus"),
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
            node_loc(controller.entry, "roles"),
            hint="fine for a workstation; on a shared cluster, jobs that exhaust memory on it can take "
            "slurmctld and slurmdbd down with them",
        )
    ]
