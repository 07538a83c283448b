"""`gpuclus plan` as one call.

In order: the render's diff against last-applied and its digest, every node's deploy stamp read back over SSH
(unless the nodes are not to be asked), the rolling upgrade the next deploy would make, and, when asked for, a
check-mode deploy. Nothing here prints: the plan goes to a PlanObserver once it is known (before the check run,
which takes minutes), and the stamps' reading and the check run go through it so it can show them as they happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuclus.deploy import node_stamps, pipeline
from gpuclus.deploy.last_applied import FileChange
from gpuclus.deploy.node_stamps import NodeStamp, StampState
from gpuclus.deploy.pipeline import ShowsDeploys
from gpuclus.deploy.records import RunRecord
from gpuclus.spec.load import LoadedSpec
from gpuclus.upgrade.batches import Batch
from gpuclus.upgrade.pins import PinChange
from gpuclus.upgrade.workflow import upgrade_preview


@dataclass(frozen=True)
class DeployPlan:
    applied_before: bool  # .gpuclus/last-applied/ holds a full deploy's render
    changes: list[FileChange]  # the render against it
    render_sha256: str
    stamps: list[NodeStamp] | None  # None when the nodes were not asked
    pins: list[PinChange]  # the pinned versions the next full deploy changes: a rolling upgrade when any
    batches: list[Batch]  # its batches at one node at a time

    @property
    def in_sync(self) -> bool | None:
        """The cluster holds the last deploy; None when the nodes were not asked, so nothing says it does."""
        if self.stamps is None:
            return None
        return not self.changes and all(stamp.state is StampState.IN_SYNC for stamp in self.stamps)


@dataclass(frozen=True)
class CheckRun:
    record: RunRecord
    seconds: float  # from the request to the record, the render included


@dataclass(frozen=True)
class PlanReport:
    plan: DeployPlan
    check: CheckRun | None  # None without --check


class PlanObserver(ShowsDeploys, Protocol):
    """What a plan shows; the check run goes through ``watch_deploy``."""

    def watch_stamps(self, nodes: int, read: Callable[[], list[NodeStamp]]) -> list[NodeStamp]:
        """Call ``read`` (SSH to ``nodes`` nodes, in parallel) and return what it returns."""

    def planned(self, plan: DeployPlan) -> None:
        """The plan, before a check run starts."""

    def checked(self, check: CheckRun) -> None: ...


def plan_deploy(
    spec_path: Path,
    loaded: LoadedSpec,
    observer: PlanObserver,
    *,
    ask_nodes: bool = True,
    check: bool = False,
    deploy: pipeline.Deploy = pipeline.deploy,
) -> PlanReport:
    """The plan of the next deploy; with ``check``, also a check-mode run of it (nothing changes on the nodes)."""
    assert loaded.topology is not None  # a checked spec
    applied_before, changes = pipeline.changes_since_last_deploy(spec_path, loaded)
    digest = node_stamps.render_digest(pipeline.render_for_run(spec_path, loaded))
    stamps = None
    if ask_nodes:
        stamps = observer.watch_stamps(
            len(loaded.topology.nodes), lambda: node_stamps.check_spec_nodes(loaded, spec_path, digest)
        )
    pins, batches = upgrade_preview(spec_path, loaded)
    plan = DeployPlan(applied_before, changes, digest, stamps, pins, batches)
    observer.planned(plan)
    if not check:
        return PlanReport(plan, None)
    # Check mode changes nothing; no preflight (the run reports unreachable nodes itself) and no pruning of
    # the deploy records.
    request = pipeline.DeployRequest(spec_path=spec_path, check=True, preflight=False, keep=None)
    started = time.monotonic()
    result = observer.watch_deploy(request, loaded, deploy)
    checked = CheckRun(result.record, time.monotonic() - started)
    observer.checked(checked)
    return PlanReport(plan, checked)
