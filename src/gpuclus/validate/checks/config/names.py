"""config.names: every node resolves every cluster name to the spec's address.

Each node runs ``getent ahostsv4 NAME`` for every spec node (the lookup its
programs make: /etc/hosts, then DNS, as nsswitch.conf says). The IPv4
addresses it gets must be exactly the spec's address; for a node whose spec
address is a DNS name, exactly what that name resolves to on the same node.
A wrong line in one node's /etc/hosts shows here as the names it misdirects,
even when the file check names only the file.
"""

from __future__ import annotations

from gpuclus.spec.topology import Node, Topology
from gpuclus.validate.checks.config.expected import is_ipv4
from gpuclus.validate.checks.config.survey import NodeSurvey, deploy_hint, in_spec_order, outcome, survey, unsurveyed
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status

CHECK_ID = "config.names"


def names_resolve(ctx: Context) -> Outcome:
    taken = survey(ctx)
    rows, answered = unsurveyed(ctx, taken, CHECK_ID, list(ctx.selected))
    rows += [judge(node.name, taken.answered[node.name], ctx.topology) for node in answered]
    return outcome(
        ctx,
        taken,
        in_spec_order(rows, list(ctx.selected)),
        message=f"{len(ctx.topology.nodes)} cluster name(s) looked up on each node",
        hint="`getent ahostsv4 NAME` on the node shows its answer: a line in its /etc/hosts, or DNS, gives another "
        "address; " + deploy_hint("writes /etc/hosts from the spec again (base role)"),
    )


def judge(node: str, answer: NodeSurvey, topology: Topology) -> NodeResult:
    spec_nodes = list(topology.nodes)
    problems = [problem for other in spec_nodes if (problem := _problem(other, answer))]
    if problems:
        return NodeResult(node, Status.FAIL, "; ".join(problems), len(problems), "0", "names differing")
    message = f"all {len(spec_nodes)} name(s) resolve to the spec's addresses"
    return NodeResult(node, Status.PASS, message, 0, "0", "names differing")


def _problem(other: Node, answer: NodeSurvey) -> str | None:
    got = answer.names.get(other.name)
    if got is None:
        return answer.missing(f"{other.name}'s address")
    if is_ipv4(other.address):
        wanted: tuple[str, ...] = (other.address,)
    else:
        wanted = answer.names.get(other.address) or ()
        if not wanted:
            return f"{other.name}'s address in the spec, {other.address}, does not resolve"
    if not got:
        return f"{other.name} does not resolve; the spec says {other.address}"
    if set(got) != set(wanted):
        said = other.address if is_ipv4(other.address) else f"{other.address} ({', '.join(wanted)})"
        return f"{other.name} resolves to {', '.join(got)}; the spec says {said}"
    return None
