"""config.clock: every node's clock against the controller's, the time server gpuclus sets up.

The survey reads each node's clock in a timed exchange from the controller
(see ``survey``): offset = node - the middle of the exchange, and the true
offset lies within half the exchange's duration of it. The judgement takes
that margin into account: FAIL only when the node is certainly too far off,
WARN when it may be more than the warning bound off (or the measurement was
too coarse to tell), PASS otherwise. Where chronyd answers, the message adds
its own view (``chronyc tracking``'s "System time").
"""

from __future__ import annotations

from gpuclus.validate.checks.config.survey import ClockSample, NodeSurvey, outcome, survey, unsurveyed
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, skipped

CHECK_ID = "config.clock"
# munge refuses a credential whose timestamp is off by more than its TTL (300 s by default), so Slurm
# breaks there; long before that, job start and end times, accounting and logs from several nodes stop
# lining up. A node following the controller with chrony is within milliseconds of it, and gpuclus'
# chrony.conf steps a clock only when it is more than 1 s off (makestep 1 3): beyond 1 s the node is not
# synchronised at all.
CLOCK_FAIL_S = 1.0
# Half of that: a node drifting away, or one chrony has only just started to slew back.
CLOCK_WARN_S = 0.5


def clocks_agree(ctx: Context) -> Outcome:
    controller = ctx.controller.name
    nodes = [node for node in ctx.selected if node.name != controller]
    if not nodes:
        return skipped(f"only the controller {controller} is selected: its clock is the reference")
    taken = survey(ctx)
    rows, answered = unsurveyed(ctx, taken, CHECK_ID, nodes)
    reference = taken.answered.get(controller)
    rows += [judge(node.name, taken.answered[node.name], controller) for node in answered]
    order = {node.name: index for index, node in enumerate(nodes)}
    rows.sort(key=lambda row: order[row.node])
    chrony = f"; {controller}'s chrony: {reference.chrony}" if reference is not None and reference.chrony else ""
    return outcome(
        ctx,
        taken,
        rows,
        message=f"offsets from {controller}'s clock, measured over SSH{chrony}",
        hint=f"on the node: `chronyc tracking` and `chronyc sources` (it must follow {controller}); on "
        f"{controller}: `chronyc clients`; `gpuclus deploy` writes chrony's configuration again and restarts it",
    )


def judge(node: str, answer: NodeSurvey, controller: str) -> NodeResult:
    sample = answer.best_clock
    if sample is None:
        why = answer.stopped or "`date +%s.%N` gave no time"
        return NodeResult(node, Status.FAIL, f"its clock could not be read ({why})")
    chrony = f"; chrony: {answer.chrony}" if answer.chrony else ""
    message = f"{describe(sample)} from {controller}{chrony}"
    value = round(sample.offset, 3)
    expected = f"|offset| < {CLOCK_WARN_S}"
    return NodeResult(node, verdict(sample), message, value, expected, "s")


def verdict(sample: ClockSample) -> Status:
    size, margin = abs(sample.offset), sample.uncertainty
    if size - margin > CLOCK_FAIL_S:
        return Status.FAIL
    if size + margin > CLOCK_WARN_S:
        return Status.WARN
    return Status.PASS


def describe(sample: ClockSample) -> str:
    """'+0.012 s ± 0.002 s', with the margin written out when it is what makes the verdict uncertain."""
    text = f"{sample.offset:+.3f} s ± {sample.uncertainty:.3f} s"
    if abs(sample.offset) <= CLOCK_WARN_S < abs(sample.offset) + sample.uncertainty:
        text += " (the measurement is too coarse to tell it is within bounds)"
    return text
