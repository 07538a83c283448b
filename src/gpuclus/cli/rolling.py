"""What `gpuclus deploy` shows of a rolling upgrade (upgrade/workflow.py runs it): the progress, then the batches."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from gpuclus.cli.deploy_view import run_with_progress
from gpuclus.output import Output
from gpuclus.spec import hostlist


class RollingView:
    """The rolling upgrade's observer: the plan as a note, steps dimmed, each batch's deploy with its phase lines."""

    def __init__(self, out: Output) -> None:
        self.out = out

    def planned(self, changes: list[Any], batches: list[Any], max_unavailable: int) -> None:
        self.out.note(
            f"rolling upgrade: {escape(', '.join(change.describe() for change in changes))}; "
            f"{len(batches)} batch(es), at most {max_unavailable} compute node(s) out of service at a time"
        )

    def progress(self, text: str) -> None:
        self.out.note(f"[dim]{escape(text)}[/]")

    def watch_deploy(self, request: Any, loaded: Any, deploy: Any) -> Any:
        return run_with_progress(self.out, request, loaded, only=bool(request.only), run=deploy)


def print_rolling(out: Output, report: Any) -> None:
    for index, batch in enumerate(report.batches, start=1):
        nodes = hostlist.compress(batch.nodes)
        status = batch.deploy.get("status", "?") if batch.deploy else "not deployed"
        waited = f", waited {batch.waited_s:.0f} s for jobs" if batch.waited_s >= 1 else ""
        out.result(f"  batch {index}: {escape(nodes)} — deploy {escape(status)}{waited}, {batch.seconds:.0f} s")
        for node, problem in sorted(batch.problems.items()):
            out.result(f"    [red]✗ {escape(node)}[/]: {escape(problem)}")
    what = ", ".join(change.describe() for change in report.changes)
    if report.ok:
        out.result(f"[green]✓[/] upgraded {escape(what)} on every node, {len(report.batches)} batch(es)")
        return
    out.result(f"[red]✗[/] upgrade stopped: {escape(report.stopped or '')}")
    if report.hint:
        out.result(f"  {escape(report.hint)}")
