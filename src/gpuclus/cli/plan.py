"""`gpuclus plan`: what a deploy would change, before it changes anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.output import Output, plural
from gpuclus.spec import hostlist

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from gpuclus.deploy.last_applied import FileChange
    from gpuclus.deploy.node_stamps import NodeStamp
    from gpuclus.plan.workflow import CheckRun, DeployPlan


def plan(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Also run the deploy in Ansible check mode and count what each phase would change."
        ),
    ] = False,
    local: Annotated[
        bool,
        typer.Option("--local", help="Do not read the nodes' deploy stamps over SSH; diff the local copy only."),
    ] = False,
    json_mode: JsonOption = False,
) -> None:
    """Show what `gpuclus deploy` would change.

    First a unified diff of the rendered inventory and variables against the
    last successful full deploy (.gpuclus/last-applied/). Then each node's
    own deploy stamp (/var/lib/gpuclus/deployed.json, written at the end of a
    full deploy), read over SSH in parallel with gpuclus' key: in sync (it
    holds this render), deployed from another spec or render, not deployed
    by gpuclus (a new or recreated node: no stamp), or unreachable (with the
    reason). The cluster matches the last deploy only when the diff is empty
    and every node is in sync. --local skips the nodes. With --check, then a
    check-mode run over SSH (nothing is changed on the nodes) that reports,
    per phase, how many tasks would change something.

    Exit 0 when the plan ran, also when nodes differ or are unreachable (they
    are reported, not failures); 1 when the check run fails, 3 for an invalid
    spec, 130 when interrupted.
    """
    from gpuclus.plan.workflow import plan_deploy

    out = Output(json_mode=json_mode)
    with handled(out):
        loaded = load_checked_spec(spec, out)
        report = plan_deploy(spec, loaded, _PlanView(out, spec), ask_nodes=not local, check=check)
        found = report.plan
        payload: dict[str, object] = {
            "ok": True,
            "applied_before": found.applied_before,
            "files": [{"path": c.path, "status": c.status, "diff": c.diff} for c in found.changes],
            "render_sha256": found.render_sha256,
            # null with --local: the nodes were not asked, so nothing says the cluster matches.
            "in_sync": found.in_sync,
        }
        if found.stamps is not None:
            payload["nodes"] = {stamp.node: stamp.as_dict() for stamp in found.stamps}
        upgrade = _upgrade_plan(found)
        if upgrade is not None:
            payload["upgrade"] = upgrade
        if report.check is not None:
            record = report.check.record
            payload["check"] = {
                "status": record.status,
                "phases": [{"name": p.name, "would_change": p.changed, "tasks": p.tasks} for p in record.phases],
                "changed": record.changed_total(),
                "failures": [vars(failure) for failure in record.failures],
                "run": record.id,
                "seconds": round(report.check.seconds, 1),
            }
            payload["ok"] = record.status == "successful"
        out.emit(payload)
        if not payload["ok"]:
            raise typer.Exit(1)


class _PlanView:
    """The plan's observer: a spinner while the stamps are read, the plan once known, the check run's progress
    and summary (all quiet in JSON mode, where stdout carries the one object)."""

    def __init__(self, out: Output, spec: Path) -> None:
        self.out = out
        self.spec = spec

    def watch_stamps(self, nodes: int, read: Callable[[], list[NodeStamp]]) -> list[NodeStamp]:
        if self.out.json_mode:
            return read()
        with self.out.err.status(f"reading the deploy stamps of {plural(nodes, 'node')} over SSH"):
            return read()

    def planned(self, plan: DeployPlan) -> None:
        if self.out.json_mode:
            return
        _print_files(self.out, plan.applied_before, plan.changes, plan.stamps)
        upgrade = _upgrade_plan(plan)
        if upgrade is not None:
            _print_upgrade(self.out, upgrade)
        if plan.stamps is not None:
            _print_nodes(self.out, plan.stamps)
        _print_verdict(self.out, self.spec, plan.changes, plan.stamps)

    def watch_deploy(self, request: Any, loaded: Any, deploy: Any) -> Any:
        with _CheckProgress(self.out) as progress:
            return deploy(request, loaded, progress)

    def checked(self, check: CheckRun) -> None:
        if self.out.json_mode:
            return
        record = check.record
        self.out.result(f"check-mode run {record.id}: {record.status}")
        for phase in record.phases:
            self.out.result(f"  {phase.name:<11} {phase.changed} task result(s) would change")
        for failure in record.failures:
            self.out.result(f"  [red]✗ {escape(failure.host)}[/] {escape(failure.task)}: {escape(failure.message)}")
        self.out.result(f"check run took {check.seconds:.0f} s")


def _upgrade_plan(plan: DeployPlan) -> dict[str, Any] | None:
    """The rolling upgrade the next deploy makes (pins it changes, its batches at --max-unavailable 1), or None."""
    if not plan.pins:
        return None
    return {
        "changes": [change.as_dict() for change in plan.pins],
        "described": [change.describe() for change in plan.pins],
        "batches": [list(batch.nodes) for batch in plan.batches],
    }


def _print_upgrade(out: Output, upgrade: dict[str, Any]) -> None:
    out.result(f"[bold]rolling upgrade[/]: {escape(', '.join(upgrade['described']))}")
    order = " → ".join(hostlist.compress(batch) for batch in upgrade["batches"])
    out.result(
        "  `gpuclus deploy` drains, upgrades, checks and resumes, in this order (--max-unavailable 1): " + escape(order)
    )


def _synced(stamp: NodeStamp) -> bool:
    return stamp.state.value == "in_sync"


def _print_files(out: Output, applied_before: bool, changes: list[FileChange], stamps: list[NodeStamp] | None) -> None:
    if not applied_before:
        if stamps and all(_synced(stamp) for stamp in stamps):
            out.result(
                "[yellow]no local copy of the last deploy[/] (.gpuclus/last-applied/), so the diff below is "
                "against nothing; every node's stamp says it holds this render"
            )
        else:
            out.result("[yellow]nothing applied yet[/]: the first deploy creates everything below")
    for change in changes:
        out.result(f"[bold]{change.status}[/] {escape(change.path)}")
        for line in change.diff.splitlines():
            colour = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            out.result(f"  [{colour}]{escape(line)}[/]")


_MARKS = {
    "in_sync": "[green]✓[/]",
    "other_render": "[yellow]≠[/]",
    "not_deployed": "[red]✗[/]",
    "unreachable": "[red]?[/]",
}


def _print_nodes(out: Output, stamps: list[NodeStamp]) -> None:
    from gpuclus.deploy.node_stamps import STAMP_PATH

    out.result(f"nodes (their deploy stamp, {STAMP_PATH}):")
    width = max((len(stamp.node) for stamp in stamps), default=0)
    for stamp in stamps:
        out.result(
            f"  {_MARKS[stamp.state.value]} {escape(stamp.node):<{width}}  "
            f"[bold]{escape(stamp.words)}[/]: {escape(stamp.message)}"
        )
        if stamp.hint:
            out.result(f"  {' ' * (width + 4)}[dim]hint: {escape(stamp.hint)}[/]")


def _print_verdict(out: Output, spec: Path, changes: list[FileChange], stamps: list[NodeStamp] | None) -> None:
    from gpuclus.hints import gpuclus_command

    if stamps is None:
        if not changes:
            out.result(
                "[green]✓[/] the rendered inventory and variables match the local copy of the last deploy "
                "(.gpuclus/last-applied/); the nodes were not asked (--local)"
            )
        return
    behind = [stamp.node for stamp in stamps if not _synced(stamp) and stamp.state.value != "unreachable"]
    unknown = [stamp.node for stamp in stamps if stamp.state.value == "unreachable"]
    if not changes and not behind and not unknown:
        out.result("[green]✓[/] the rendered inventory and variables match the last deploy, and every node holds it")
        return
    if behind:
        out.result(
            f"[yellow]![/] not every node holds this render: {escape(', '.join(behind))} "
            f"({len(behind)} of {len(stamps)}); `{escape(gpuclus_command('deploy', spec))}` sets them up"
        )
    if unknown:
        out.result(
            f"[yellow]![/] not checked, unreachable: {escape(', '.join(unknown))} "
            f"({len(unknown)} of {len(stamps)}); nothing is known of what they hold"
        )
    if not changes:
        out.result("  (the rendered inventory and variables match the local copy of the last deploy)")


class _CheckProgress:
    """The check run's progress on stderr: a line per phase as it starts, with a spinner and
    the task in progress, closed with what the phase would change; failures as they happen.
    Nothing in JSON mode (stdout carries the one object; stderr stays quiet as for deploy)."""

    def __init__(self, out: Output) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.out = out
        self.progress: Progress = Progress(
            SpinnerColumn(finished_text="[green]✓[/]"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=out.err,
            transient=False,
            disable=out.json_mode,
        )
        self.started = False
        self.phase_task: TaskID | None = None
        self.phase = ""
        self.changed = 0

    def __enter__(self) -> _CheckProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self.started:
            # Ctrl-C (or a failure in gpuclus): the phase line must not end with ✓.
            self._finish_phase(None if kind is None else "interrupted")
            self.progress.__exit__(None, None, None)

    def preflight_done(self, reports: list[Any], seconds: float) -> None:
        pass  # plan's check run has no preflight

    def in_sync_checked(self, verdict: Any, seconds: float) -> None:
        pass  # a check run always runs

    def phases_skipped(self, skipped: list[Any]) -> None:
        pass  # the spec's unneeded phases are deploy's news, not plan's

    def run_started(self, run: Any) -> None:
        self.out.note("[dim]check-mode run (nothing is changed on the nodes)[/]")
        self.started = True
        self.progress.__enter__()

    def event(self, event: Any) -> None:
        from gpuclus.deploy.events import HostResult, PhaseStarted, TaskStarted

        if isinstance(event, PhaseStarted):
            self._finish_phase()
            self.phase, self.changed = event.phase, 0
            self.phase_task = self.progress.add_task(f"[bold]{escape(event.phase)}[/]", total=None)
        elif isinstance(event, TaskStarted) and self.phase_task is not None:
            self.progress.update(
                self.phase_task, description=f"[bold]{escape(self.phase)}[/] [dim]{escape(event.task[:60])}[/]"
            )
        elif isinstance(event, HostResult):
            if event.counts_changed:
                self.changed += 1
            if event.status in {"failed", "unreachable"} and not event.ignored:
                self.progress.console.print(
                    f"  [red]✗ {escape(event.host)}[/] {event.status}: [bold]{escape(event.task)}[/]: "
                    f"{escape(event.message)}"
                )

    def _finish_phase(self, stopped: str | None = None) -> None:
        if self.phase_task is None:
            return
        if stopped:
            self.progress.update(self.phase_task, description=f"[bold]{escape(self.phase)}[/] [red]✗ {stopped}[/]")
            self.progress.stop_task(self.phase_task)
        else:
            self.progress.update(
                self.phase_task,
                total=1,
                completed=1,
                description=f"[bold]{escape(self.phase)}[/] [dim]({self.changed} would change)[/]",
            )
        self.phase_task = None
