"""`gpuclus plan` as one call: the plan is told before the check run starts, and --local asks no node.

The deploy and the stamps' reading are stand-ins; the spec, its render and last-applied are real files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy_specs import THREE_NODE_SPEC

from gpuclus import __version__
from gpuclus.deploy import pipeline
from gpuclus.deploy.last_applied import save_last_applied
from gpuclus.deploy.node_stamps import NodeStamp, StampState
from gpuclus.deploy.records import RunRecord
from gpuclus.plan.workflow import CheckRun, DeployPlan, plan_deploy
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.state import StateDir


class Seen:
    """The plan's observer: what it was told, in order; every node's stamp says ``state``."""

    def __init__(self, state: StampState = StampState.IN_SYNC) -> None:
        self.state = state
        self.told: list[str] = []

    def watch_stamps(self, nodes: int, read: Callable[[], list[NodeStamp]]) -> list[NodeStamp]:
        self.told.append(f"stamps of {nodes}")
        return [NodeStamp(name, "", self.state, "") for name in ("head", "gpu01", "gpu02")]

    def planned(self, plan: DeployPlan) -> None:
        self.told.append(f"planned {len(plan.changes)} changes, in sync {plan.in_sync}")

    def watch_deploy(self, request: pipeline.DeployRequest, loaded: LoadedSpec, deploy: Any) -> Any:
        self.told.append(f"check {request.check}, preflight {request.preflight}, keep {request.keep}")
        return deploy(request, loaded, pipeline.QuietObserver())

    def checked(self, check: CheckRun) -> None:
        self.told.append(f"checked {check.record.status}")


def check_deploy(request: pipeline.DeployRequest, loaded: LoadedSpec, observer: Any) -> pipeline.DeployResult:
    record = RunRecord("run1", "cluster.yaml", "", [], None, True, 0.0, __version__, "successful")
    return pipeline.DeployResult(record, pipeline.exit_code(record), Path("/nonexistent"), 1.0)


def deployed(tmp_path: Path) -> Path:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(THREE_NODE_SPEC)
    save_last_applied(StateDir.beside(spec), pipeline.render_for_run(spec, load_spec(spec)))
    return spec


def test_the_plan_is_told_before_the_check_run_which_changes_nothing(tmp_path: Path) -> None:
    spec = deployed(tmp_path)
    seen = Seen()
    report = plan_deploy(spec, load_spec(spec), seen, check=True, deploy=check_deploy)
    assert seen.told == [
        "stamps of 3",
        "planned 0 changes, in sync True",
        "check True, preflight False, keep None",
        "checked successful",
    ]
    assert report.plan.in_sync is True and report.check is not None and report.check.record.id == "run1"


def test_without_the_nodes_nothing_says_the_cluster_matches(tmp_path: Path) -> None:
    spec = deployed(tmp_path)
    seen = Seen()
    report = plan_deploy(spec, load_spec(spec), seen, ask_nodes=False, deploy=check_deploy)
    assert seen.told == ["planned 0 changes, in sync None"]
    assert report.plan.stamps is None and report.check is None


def test_a_node_on_another_render_is_not_in_sync(tmp_path: Path) -> None:
    spec = deployed(tmp_path)
    report = plan_deploy(spec, load_spec(spec), Seen(StampState.OTHER_RENDER))
    assert report.plan.in_sync is False and report.plan.changes == []
