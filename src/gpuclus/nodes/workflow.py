"""`gpuclus nodes remove` as one call, once plan.py has worked out the change.

In order: drain the nodes and wait for their jobs (through the controller's
session), write the spec without them (atomically, its mode kept), deploy the
smaller spec, and retire the removed nodes. A failed deploy stops there: the
spec is already written, so the next `gpuclus deploy` finishes the job. Nothing
here prints: each step goes to a RemovalObserver as it is done; the connection,
the deploy and the retiring SSH are parameters, so tests run it with fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpuclus.deploy import pipeline
from gpuclus.deploy.pipeline import DeployResult, ShowsDeploys
from gpuclus.errors import ExitCode
from gpuclus.fileio import refuse_link_or_special, write_text_atomic
from gpuclus.nodes.drain import DrainOutcome, drain_and_wait
from gpuclus.nodes.plan import RemovalPlan
from gpuclus.nodes.retire import Retired, Runner, retire_nodes
from gpuclus.slurm.session import Connect, connect_controller
from gpuclus.spec.load import LoadedSpec
from gpuclus.state import StateDir

# Each of the controller's commands (sinfo, scontrol, squeue, scancel) gets this long.
COMMAND_TIMEOUT_S = 60


class RemovalObserver(ShowsDeploys, Protocol):
    """What a removal shows, step by step; the deploy of the smaller spec goes through ``watch_deploy``."""

    def progress(self, text: str) -> None:
        """While the nodes drain: jobs cancelled, jobs still running."""

    def drained(self, plan: RemovalPlan, outcome: DrainOutcome) -> None: ...

    def spec_written(self, plan: RemovalPlan, spec_path: Path) -> None: ...

    def deployed(self, result: DeployResult) -> None: ...


@dataclass
class RemovalResult:
    drained: DrainOutcome
    deploy: DeployResult
    retired: list[Retired] = field(default_factory=list)  # empty when the deploy failed: nothing retired

    @property
    def exit_code(self) -> ExitCode:
        return self.deploy.exit_code


def remove_nodes(
    loaded: LoadedSpec,
    plan: RemovalPlan,
    spec_path: Path,
    observer: RemovalObserver,
    *,
    force: bool,
    timeout_s: float,
    load: Callable[[Path], LoadedSpec],
    connect: Connect = connect_controller,
    deploy: pipeline.Deploy = pipeline.deploy,
    retire_runner: Runner | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> RemovalResult:
    """Drain and wait, write the spec, deploy it, retire the nodes; stops after a deploy that did not succeed.

    ``load`` reads the written spec back for the deploy (the CLI's also shows its warnings).
    """
    assert loaded.spec is not None and loaded.topology is not None  # a checked spec
    # Refused before any node is drained, not when the spec is written after it.
    refuse_link_or_special(spec_path)
    state = StateDir.beside(spec_path)
    remote = connect(loaded.spec, loaded.topology, state.private_key, state.known_hosts)
    try:
        drained = drain_and_wait(
            lambda command: remote.run(command, timeout=COMMAND_TIMEOUT_S),
            plan.names,
            plan.hostlist,
            force=force,
            timeout_s=timeout_s,
            progress=observer.progress,
            sleep=sleep,
        )
    finally:
        remote.close()
    observer.drained(plan, drained)

    write_text_atomic(spec_path, plan.new_text, mode=spec_path.stat().st_mode & 0o777)
    observer.spec_written(plan, spec_path)

    result = observer.watch_deploy(pipeline.DeployRequest(spec_path=spec_path), load(spec_path), deploy)
    observer.deployed(result)
    if result.exit_code != ExitCode.OK:
        return RemovalResult(drained, result)
    # The old spec's admin user: the one the removed nodes were deployed with.
    retired = retire_nodes(loaded.spec.cluster.admin_user, plan.nodes, state, retire_runner)
    return RemovalResult(drained, result, retired)
