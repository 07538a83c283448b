"""config.services: the units gpuclus runs on each node are enabled (start at boot) and active.

Which units a node runs comes from the spec as the roles decide it
(``expected.services_for``). The survey asks systemd for each candidate name
(Debian's first, then the RedHat family's); the first that systemd knows is the
node's. A unit stopped or disabled by hand is named with its state: an
inactive one breaks the cluster now, a disabled one at the next boot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclus.spec.services import Service
from gpuclus.validate.checks.config.expected import ServicePlan, services_for
from gpuclus.validate.checks.config.survey import NodeSurvey, deploy_hint, in_spec_order, outcome, survey, unsurveyed
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status

CHECK_ID = "config.services"
# UnitFileState values under which a unit starts at boot or with what pulls it in
# (`systemctl is-enabled` succeeds for them); disabled, masked and the rest do not.
STARTS_AT_BOOT = frozenset({"enabled", "enabled-runtime", "static", "alias", "generated", "indirect", "transient"})


def services_running(ctx: Context) -> Outcome:
    taken = survey(ctx)
    rows, answered = unsurveyed(ctx, taken, CHECK_ID, list(ctx.selected))
    for node in answered:
        rows.append(judge(node.name, services_for(node, ctx.spec, ctx.topology), taken.answered[node.name]))
    return outcome(
        ctx,
        taken,
        in_spec_order(rows, list(ctx.selected)),
        message="systemd's word on each unit gpuclus runs there",
        hint="on the node: `systemctl status UNIT` and `journalctl -u UNIT` say why it stopped; "
        + deploy_hint("enables and starts every unit it manages again"),
    )


def judge(node: str, plan: ServicePlan, answer: NodeSurvey) -> NodeResult:
    problems, fine, notes = [], [], []
    for service in plan.services:
        found = _state(service, answer)
        if found.problem is not None:
            problems.append(found.problem)
        elif found.note is not None:
            notes.append(found.note)
        else:
            fine.append(found.unit)
    if problems:
        return NodeResult(node, Status.FAIL, "; ".join(problems + notes), len(fine), str(len(plan.services)), "units")
    message = f"enabled and active: {', '.join(fine)}" + "".join(f"; {note}" for note in notes)
    return NodeResult(node, Status.PASS, message, len(fine), str(len(fine)), "units")


@dataclass(frozen=True)
class UnitState:
    unit: str  # the service's unit on this node
    problem: str | None = None  # what is wrong with it
    note: str | None = None  # absent on purpose: why


def _state(service: Service, answer: NodeSurvey) -> UnitState:
    states = [(unit, answer.units[unit]) for unit in service.units if unit in answer.units]
    first = service.units[0]
    if len(states) < len(service.units):
        return UnitState(first, answer.missing(f"{service.name}'s unit"))
    if all(not state for _unit, state in states):
        return UnitState(first, f"{first}: systemd gave no answer (`systemctl show` printed nothing)")
    known = [(unit, state) for unit, state in states if state.get("LoadState") not in (None, "not-found")]
    if not known:
        if service.skipped_when and service.skipped_when in answer.markers:
            return UnitState(first, note=f"no {first}: the deploy skipped it on purpose ({service.skipped_when})")
        return UnitState(first, f"{' / '.join(service.units)} not installed (systemd knows no such unit)")
    unit, state = known[0]
    wrong = []
    enabled = state.get("UnitFileState", "")
    if state.get("LoadState") == "masked" or enabled not in STARTS_AT_BOOT:
        wrong.append(f"{enabled or state.get('LoadState', '?')} (does not start at boot)")
    if state.get("ActiveState") != "active":
        wrong.append(f"{state.get('ActiveState') or 'in an unknown state'} (not running)")
    return UnitState(unit, f"{unit} is {' and '.join(wrong)}" if wrong else None)
