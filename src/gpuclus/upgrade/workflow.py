"""The rolling upgrade as one call: `gpuclus deploy` hands over here when the spec changes a pinned version.

In order: connect to the controller, refuse a Slurm jump that cannot be made
in place (nothing is touched yet), plan the batches, roll them (upgrade/rolling.py)
with each batch an ordinary deploy limited to its nodes, and save last-applied
once every batch is through. Nothing here prints: the plan, the progress lines
and each batch's deploy go to an UpgradeObserver; the controller's connection
and the deploy are parameters, so the whole sequence runs in tests with fakes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpuclus.deploy import pipeline
from gpuclus.deploy.last_applied import save_last_applied
from gpuclus.deploy.phases import wanted_phases
from gpuclus.deploy.pipeline import DeployRequest, ShowsDeploys
from gpuclus.slurm.session import Connect, connect_controller
from gpuclus.spec.load import LoadedSpec
from gpuclus.spec.models import ClusterSpec
from gpuclus.ssh.client import CommandResult
from gpuclus.state import StateDir
from gpuclus.upgrade.batches import Batch, plan_batches
from gpuclus.upgrade.detect import installed_slurm, pin_changes, refuse_unsupported_jump
from gpuclus.upgrade.pins import PinChange
from gpuclus.upgrade.rolling import BatchDeploy, RollingReport, Rollout, roll
from gpuclus.upgrade.window import Expected

# How long a batch waits for the jobs on its nodes (the same default as `nodes remove`).
DRAIN_TIMEOUT_S = 3600
# Each of the controller's commands (sinfo, scontrol, squeue, the check jobs) gets this long.
COMMAND_TIMEOUT_S = 300


class UpgradeObserver(ShowsDeploys, Protocol):
    """What a rolling upgrade shows as it goes; each batch's deploy goes through ``watch_deploy``."""

    def planned(self, changes: list[PinChange], batches: list[Batch], max_unavailable: int) -> None:
        """The upgrade is on: what changes, in how many batches (after the jump check, before any drain)."""

    def progress(self, text: str) -> None:
        """A step of a batch: drained, deploying, waiting for jobs, checked and resumed."""


def upgrade_changes(request: DeployRequest, loaded: LoadedSpec) -> list[PinChange]:
    """The pinned versions this deploy changes since the last full deploy; none means a plain deploy."""
    return pin_changes(request.spec_path, loaded, pipeline.scope(request, loaded).phases)


def upgrade_preview(spec_path: Path, loaded: LoadedSpec) -> tuple[list[PinChange], list[Batch]]:
    """What `gpuclus plan` says of the next deploy: the pins a full deploy changes, its batches at one at a time."""
    assert loaded.spec is not None and loaded.topology is not None  # a checked spec
    phases = [choice.phase for choice in wanted_phases(loaded.spec, loaded.topology)[0]]
    changes = pin_changes(spec_path, loaded, phases)
    return changes, (plan_batches(loaded.topology, 1) if changes else [])


def run_rolling_upgrade(
    request: DeployRequest,
    loaded: LoadedSpec,
    changes: list[PinChange],
    max_unavailable: int,
    observer: UpgradeObserver,
    *,
    connect: Connect = connect_controller,
    deploy: pipeline.Deploy = pipeline.deploy,
    sleep: Callable[[float], None] = time.sleep,
) -> RollingReport:
    """Drain, upgrade, check and resume the nodes batch by batch; last-applied is saved when all went through."""
    assert loaded.spec is not None and loaded.topology is not None  # a checked spec
    spec = loaded.spec
    state = StateDir.beside(request.spec_path)
    batches = plan_batches(loaded.topology, max_unavailable)
    remote = connect(spec, loaded.topology, state.private_key, state.known_hosts)
    try:

        def run(command: str) -> CommandResult:
            return remote.run(command, timeout=COMMAND_TIMEOUT_S)

        refuse_unsupported_jump(changes, installed_slurm(run("sinfo -V")))
        observer.planned(changes, batches, max_unavailable)

        def deploy_batch(batch: Batch) -> BatchDeploy:
            limited = dataclasses.replace(request, limit=",".join(batch.nodes), retry_failed=False)
            result = observer.watch_deploy(limited, loaded, deploy)
            return BatchDeploy(result.exit_code, {"run_dir": str(result.run_dir), **result.record.as_dict()})

        report = roll(
            Rollout(
                changes=changes,
                batches=batches,
                admin_user=spec.cluster.admin_user,
                run_id=time.strftime("%Y%m%d-%H%M%S"),
                expected=expected_versions(spec),
                timeout_s=DRAIN_TIMEOUT_S,
            ),
            run,
            deploy_batch,
            observer.progress,
            sleep=sleep,
        )
    finally:
        remote.close()
    if report.ok:
        # The whole spec is deployed now, batch by batch: what `gpuclus plan` diffs against.
        save_last_applied(state, pipeline.render_for_run(request.spec_path, loaded))
    return report


def expected_versions(spec: ClusterSpec) -> Expected:
    """What the check inside each batch's reservation must find running."""
    containers = spec.containers
    return Expected(
        slurm=spec.slurm.version,
        enroot=containers.enroot_version if containers.enroot else None,
        pyxis=containers.pyxis_version if containers.pyxis else None,
        container_image=containers.validate_image if containers.pyxis else None,
    )
