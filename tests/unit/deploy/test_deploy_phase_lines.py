"""Phase lines say when a phase did not reach the whole cluster (issue 12 item 1).

A phase that ran without the nodes preflight left out ended with ✓, as if the
whole cluster had it; one where a node failed did too. The observer is fed the
events a run gives and the finished lines are read from its Rich progress.
"""

from __future__ import annotations

from types import SimpleNamespace

from gpuclus.cli.deploy_view import _ProgressView
from gpuclus.deploy.events import HostResult, PhaseStarted
from gpuclus.output import Output
from gpuclus.preflight.report import NodeReport, PreflightCheck


def finished_lines(left_out: list[str], results: list[HostResult]) -> list[tuple[str, str]]:
    view = _ProgressView(Output(json_mode=False), host_count=3)
    down = PreflightCheck("ssh", "fail", "timed out", "check that it is up")
    view.preflight_done([NodeReport(name, "10.0.0.9", reachable=False, checks=[down]) for name in left_out], 0.1)
    view.run_started(SimpleNamespace(cancelled=SimpleNamespace(is_set=lambda: False)))
    with view:
        for phase in ("base", "slurm"):
            view.event(PhaseStarted(phase))
            for result in results:
                view.event(HostResult(phase, result.host, result.task, result.status, result.message))
    return [(str(task.fields.get("mark")), task.description) for task in view.progress.tasks]


def test_a_phase_over_the_whole_cluster_ends_with_a_tick() -> None:
    lines = finished_lines([], [HostResult("base", "head", "t", "changed")])
    assert [mark for mark, _ in lines] == ["None", "None"]  # the column's ✓
    assert all("partial" not in text and "failed" not in text for _, text in lines)


def test_a_phase_without_left_out_nodes_is_partial_and_names_them() -> None:
    lines = finished_lines(["gpu02"], [HostResult("base", "head", "t", "ok")])
    assert all("◐" in mark and "partial, without gpu02" in text for mark, text in lines), lines


def test_a_phase_a_node_failed_in_ends_with_a_cross_naming_it() -> None:
    lines = finished_lines([], [HostResult("base", "gpu01", "Install", "failed", "boom")])
    assert all("✗" in mark and "failed on gpu01" in text for mark, text in lines), lines
