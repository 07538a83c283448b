"""The rolling upgrade itself: batch by batch, drain → deploy → check in a reservation → resume.

Nothing here prints or opens a connection: the controller's commands, the
deploy of one batch and the progress lines are parameters, so the order of
steps (and what is left behind when one fails) is unit-tested with fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuclus.errors import ExitCode
from gpuclus.nodes.drain import drain_and_wait
from gpuclus.spec import hostlist
from gpuclus.upgrade import window
from gpuclus.upgrade.batches import Batch
from gpuclus.upgrade.pins import PinChange


@dataclass
class BatchReport:
    nodes: list[str]
    out_of_service: list[str]
    held: dict[str, str] = field(default_factory=dict)  # drained by someone else: left so
    waited_s: float = 0.0
    deploy: dict[str, Any] | None = None  # the batch's deploy record
    problems: dict[str, str] = field(default_factory=dict)  # the check's findings, by node
    started_at: float = 0.0
    resumed_at: float | None = None  # when its nodes were back in service
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "out_of_service": self.out_of_service,
            "held": self.held,
            "waited_s": round(self.waited_s, 1),
            "deploy": self.deploy,
            "problems": self.problems,
            "started_at": self.started_at,
            "resumed_at": self.resumed_at,
            "seconds": round(self.seconds, 1),
        }


@dataclass
class RollingReport:
    changes: list[PinChange]
    batches: list[BatchReport] = field(default_factory=list)
    exit_code: ExitCode = ExitCode.OK
    stopped: str | None = None  # why the rollout stopped early
    hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == ExitCode.OK

    def as_dict(self) -> dict[str, Any]:
        return {
            "changes": [change.as_dict() for change in self.changes],
            "batches": [batch.as_dict() for batch in self.batches],
            "stopped": self.stopped,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class BatchDeploy:
    """What deploying one batch gave: its exit code and its run record as a dict."""

    exit_code: ExitCode
    record: dict[str, Any]


@dataclass(frozen=True)
class Rollout:
    changes: list[PinChange]
    batches: list[Batch]
    admin_user: str
    run_id: str  # names the reservation
    expected: window.Expected
    timeout_s: float  # for the jobs on a batch
    force: bool = False


def roll(
    plan: Rollout,
    run: window.Run,
    deploy_batch: Callable[[Batch], BatchDeploy],
    progress: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> RollingReport:
    """Every batch in order; stops at the first that fails, leaving its nodes drained with the reason."""
    report = RollingReport(plan.changes)
    # Plain ASCII: the drain reason goes into Slurm's state and `sinfo -R`.
    what = ", ".join(change.describe("->") for change in plan.changes)
    for index, batch in enumerate(plan.batches, start=1):
        nodes = list(batch.nodes)
        out = list(batch.out_of_service)
        entry = BatchReport(nodes, out, started_at=clock())
        report.batches.append(entry)
        label = f"batch {index}/{len(plan.batches)} ({hostlist.compress(nodes)})"
        if out:
            entry.held = window.held_by_others(run, out)
            for node, why in entry.held.items():
                progress(f"{node} is drained or down by someone else ({why}): upgraded, then left so")
            drained = drain_and_wait(
                run,
                out,
                hostlist.compress(out),
                force=plan.force,
                timeout_s=plan.timeout_s,
                progress=progress,
                reason=window.reason(f"upgrading {what}"),
                already_out=list(entry.held),
                sleep=sleep,
            )
            entry.waited_s = drained.waited_s
            progress(f"{label}: drained {hostlist.compress(out)}")
        progress(f"{label}: deploying")
        deployed = deploy_batch(batch)
        entry.deploy = deployed.record
        if deployed.exit_code != ExitCode.OK:
            _stop_after_deploy(report, entry, deployed.exit_code, label)
            entry.seconds = clock() - entry.started_at
            return report
        checkable = [node for node in out if node not in entry.held]
        if checkable:
            reservation = f"{window.RESERVATION_PREFIX}{plan.run_id}-{index}"
            window.reserve(run, reservation, checkable, plan.admin_user)
            try:
                window.resume(run, checkable)
                entry.problems = window.check(run, reservation, checkable, plan.expected)
            finally:
                window.release(run, reservation)
            if entry.problems:
                bad = sorted(entry.problems)
                window.drain(run, bad, "check after the upgrade failed")
                report.exit_code = ExitCode.FAILED
                report.stopped = f"{label}: the check after the upgrade failed on {hostlist.compress(bad)}"
                report.hint = (
                    "they stay drained (Reason gpuclus-upgrade: ...); fix them, then `gpuclus deploy` again "
                    "finishes the upgrade (`gpuclus validate --nodes` for the whole check)"
                )
                entry.seconds = clock() - entry.started_at
                return report
            entry.resumed_at = clock()
            progress(f"{label}: checked and resumed {hostlist.compress(checkable)}")
        entry.seconds = clock() - entry.started_at
    return report


def _stop_after_deploy(report: RollingReport, entry: BatchReport, code: ExitCode, label: str) -> None:
    report.exit_code = code
    drained = [node for node in entry.out_of_service if node not in entry.held]
    left = f"; {hostlist.compress(drained)} stay drained" if drained else ""
    if code == ExitCode.REBOOT_NEEDED:
        report.stopped = f"{label}: the new NVIDIA driver needs a reboot{left}"
        report.hint = "run `gpuclus deploy --reboot` to reboot them as part of the upgrade"
    else:
        report.stopped = f"{label}: the deploy did not succeed{left}"
        report.hint = "fix what the deploy names, then `gpuclus deploy` again picks the upgrade up where it stopped"
