"""config.files: the files gpuclus renders, compared among the nodes that must hold the same copy, and with the spec.

For each file and each group of nodes that must hold identical copies (see
``expected``), the reference copy is the controller's when it is in the
group, else the one most of the group holds. Two halves that disagree are told
apart by the deploy stamp: a copy changed after its node's last full deploy
is the odd one when the others were not. A node whose copy differs, is
missing or cannot be read fails, naming the file and the copy it differs from.

The reference itself is read against the spec (``expected``'s content checks:
/etc/hosts names every node with its address, slurm.conf's cluster, controller
and node lines, chrony's time server, the exports), so a hand edit made
identically on every node is caught too; each node holding that same copy
fails with the difference. Secrets (the munge key) are compared by a hash
salted for this run and are never shown: the message only says that the
copy differs from the controller's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gpuclus.spec.topology import Node
from gpuclus.validate.checks.config.expected import FileRule
from gpuclus.validate.checks.config.survey import (
    NodeSurvey,
    Survey,
    deploy_hint,
    in_spec_order,
    outcome,
    survey,
    unsurveyed,
)
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status

CHECK_ID = "config.files"
# How many nodes a message names before it only counts the rest.
NAMED_NODES = 3


@dataclass(frozen=True)
class Reference:
    sha256: str
    holders: tuple[str, ...]  # the nodes whose copy it is
    said: str  # how a message names it: "val-head's copy", "the copy on 3 of 4 nodes"


def files_agree(ctx: Context) -> Outcome:
    taken = survey(ctx)
    rows, answered = unsurveyed(ctx, taken, CHECK_ID, list(ctx.selected))
    problems = judge(taken, ctx.controller.name, list(ctx.topology.nodes))
    for node in answered:
        rows.append(node_row(node, taken.rules, problems.get(node.name, []), taken.answered[node.name]))
    return outcome(
        ctx,
        taken,
        in_spec_order(rows, list(ctx.selected)),
        message=f"{len(taken.rules)} rendered files compared among the nodes that hold them and with the spec; "
        f"the reference is {ctx.controller.name}'s copy where it holds one",
        hint=deploy_hint(
            "writes every file from the spec again (only those that differ, restarting the daemons that read them)"
        ),
    )


def node_row(node: Node, rules: list[FileRule], problems: list[str], answer: NodeSurvey) -> NodeResult:
    held = [_where(rule, answer) for rule in rules if node.name in rule.holders]
    if problems:
        return NodeResult(node.name, Status.FAIL, "; ".join(problems), len(problems), "0", "files differing")
    message = f"{len(held)} file(s) agree with their peers and the spec: {', '.join(held)}"
    return NodeResult(node.name, Status.PASS, message, 0, "0", "files differing")


def _where(rule: FileRule, answer: NodeSurvey | None) -> str:
    """The file's path on this node (chrony's differs by OS family), else the rule's."""
    copy = answer.files.get(rule.key) if answer else None
    return copy.path if copy is not None and copy.path else rule.path


def judge(taken: Survey, controller: str, spec_nodes: list[Node]) -> dict[str, list[str]]:
    """Each answered node's problems with the files it must hold, in rule order."""
    problems: dict[str, list[str]] = {}
    for rule in taken.rules:
        for node, found in judge_rule(rule, taken.answered, controller, spec_nodes).items():
            problems.setdefault(node, []).extend(found)
    return problems


def judge_rule(
    rule: FileRule, answered: dict[str, NodeSurvey], controller: str, spec_nodes: list[Node]
) -> dict[str, list[str]]:
    by_name = {node.name: node for node in spec_nodes}
    holders = [by_name[name] for name in rule.holders if name in answered]
    groups: dict[str | None, list[Node]] = {}
    problems: dict[str, list[str]] = {}
    for node in holders:
        group = rule.peers(node, answered[node.name].in_container)
        # A node without peers is a group of its own: compared with the spec only.
        groups.setdefault(group if group is not None else f"\0{node.name}", []).append(node)
    for members in groups.values():
        reference = pick_reference(rule, members, answered, controller)
        for node in members:
            problems[node.name] = _node_problems(rule, node, members, reference, answered, controller)
    return problems


def pick_reference(
    rule: FileRule, members: list[Node], answered: dict[str, NodeSurvey], controller: str
) -> Reference | None:
    """The copy the others must equal: the controller's, else the majority's, else the one untouched since deploy."""
    hashes = {node.name: copy.sha256 for node in members if (copy := answered[node.name].files.get(rule.key))}
    present = {name: sha for name, sha in hashes.items() if sha}
    if controller in present:
        return Reference(present[controller], (controller,), f"{controller}'s copy")
    if not present:
        return None
    counts = Counter(present.values())
    (top, top_count), *_ = counts.most_common()
    holding = tuple(name for name, sha in present.items() if sha == top)
    if top_count * 2 > len(present):
        said = f"{holding[0]}'s copy" if top_count == 1 else f"the copy on {top_count} of {len(present)} nodes"
        return Reference(top, holding, said)
    # No majority (two nodes that disagree): a copy changed after its node's last deploy is the odd one,
    # when exactly one version was left alone since on every node holding it.
    untouched = [
        sha
        for sha in counts
        if all(not changed_since_deploy(answered[name], rule) for name, held in present.items() if held == sha)
    ]
    touched = [
        sha
        for sha in counts
        if all(changed_since_deploy(answered[name], rule) for name, held in present.items() if held == sha)
    ]
    if len(untouched) == 1 and len(untouched) + len(touched) == len(counts):
        holding = tuple(name for name, sha in present.items() if sha == untouched[0])
        return Reference(untouched[0], holding, f"{_names(holding)}'s copy, unchanged since the last deploy")
    return None


def changed_since_deploy(answer: NodeSurvey, rule: FileRule) -> bool:
    """The node's copy is newer than its deploy stamp (False without either)."""
    copy, stamp = answer.files.get(rule.key), answer.files.get("stamp")
    if copy is None or stamp is None or copy.mtime is None or stamp.mtime is None:
        return False
    return copy.mtime > stamp.mtime


def _node_problems(
    rule: FileRule,
    node: Node,
    members: list[Node],
    reference: Reference | None,
    answered: dict[str, NodeSurvey],
    controller: str,
) -> list[str]:
    answer = answered[node.name]
    copy = answer.files.get(rule.key)
    path = _where(rule, answer)
    if copy is None:
        return [answer.missing(path)]
    if copy.unreadable is not None:
        return [f"{path} cannot be read ({copy.unreadable})"]
    if copy.sha256 is None:
        return [f"{path} is missing"]
    if reference is None:
        others = [member.name for member in members if member.name != node.name]
        return [f"{path} differs from the copy on {_names(others)} and no majority says which is right"]
    after = "; it was changed after this node's last deploy" if changed_since_deploy(answer, rule) else ""
    found = []
    if copy.sha256 != reference.sha256:
        if rule.secret and reference.holders == (controller,):
            # Neither the key nor its hash: only that it is not the controller's.
            return [f"{path} differs from the controller's ({controller})" + after]
        found.append(f"{path} differs from {reference.said}" + after)
    if rule.judge is None:
        return found
    # Its own text where it printed one (then also what a differing copy gets wrong), else the
    # reference's, which its copy equals.
    shown = answer.contents.get(rule.key)
    if shown is None and not found:
        shown = next((answered[name].contents.get(rule.key) for name in reference.holders), None)
    if shown is not None:
        found += [f"{path} {problem}" for problem in rule.judge(shown, node)]
    return found


def _names(names: list[str] | tuple[str, ...]) -> str:
    if len(names) <= NAMED_NODES:
        return ", ".join(names)
    return f"{', '.join(names[:NAMED_NODES])} and {len(names) - NAMED_NODES} more"
