"""What a deploy shows while it runs and after: the phase lines, the check run's diffs, the summary table.

Shared by `gpuclus deploy` and the commands that deploy or run a playbook as one of their steps (`gpuclus nodes
remove`, `gpuclus users add|remove`, `gpuclus reset`, a rolling upgrade's batches) and by `gpuclus runs show`.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, Task, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from gpuclus.hints import gpuclus_command
from gpuclus.output import Output
from gpuclus.spec import hostlist


def run_with_progress(
    out: Output,
    request: Any,
    loaded: Any,
    *,
    check: bool = False,
    only: bool = False,
    run: Callable[[Any, Any, Any], Any] | None = None,
) -> Any:
    """Run a deploy with the phase lines on stderr (none in JSON mode); Ctrl-C stops Ansible cleanly.

    Shared by `gpuclus deploy` and the commands that deploy as one of their
    steps (`gpuclus nodes remove`, a rolling upgrade's batches) or run a
    playbook the same way (`gpuclus reset` passes its pipeline as ``run``,
    called with the request, the loaded spec and the observer). Returns what
    ``run`` returns, by default the deploy pipeline's DeployResult.
    """
    from gpuclus.deploy import pipeline

    start = run or pipeline.deploy

    view = _ProgressView(out, len(loaded.topology.nodes), check=check, only=only)
    previous = signal.getsignal(signal.SIGINT)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not view.runs:
            raise KeyboardInterrupt  # before Ansible: nothing to stop but gpuclus
        if any(run.cancelled.is_set() for run in view.runs):
            out.note("[yellow]killing Ansible now[/]")
            for run in view.runs:
                run.kill()
            return
        out.note("[yellow]interrupted: stopping Ansible (Ctrl-C again to kill it at once)...[/]")
        for run in view.runs:
            run.cancel()

    signal.signal(signal.SIGINT, interrupt)
    try:
        with view:
            result = start(request, loaded, view)
    finally:
        signal.signal(signal.SIGINT, previous)
    return result


class _PhaseMark(SpinnerColumn):
    """A spinner while the phase runs; then ✓, or the mark the phase ended with (✗ when interrupted)."""

    def render(self, task: Task) -> RenderableType:
        mark = task.fields.get("mark")
        if task.finished and mark:
            return Text.from_markup(mark)
        return super().render(task)


class _ProgressView:
    """The deploy's observer: preflight and skipped phases as notes, then one line per phase
    with its task count and elapsed time; failures printed as they happen. A check run
    (``check``) also prints each task that would change, with its diff per host."""

    def __init__(self, out: Output, host_count: int, *, check: bool = False, only: bool = False) -> None:
        self.out = out
        self.host_count = host_count
        self.check = check
        # With --only the user named the phases: the ones the spec leaves out are no news.
        self.only = only
        self.would_change: dict[str, list[tuple[str, str]]] = {}  # task -> (host, diff), until the task ends
        self.runs: list[Any] = []  # the run to cancel on Ctrl-C, once started
        self.progress = Progress(
            _PhaseMark(finished_text="[green]✓[/]"),
            TextColumn("{task.description}"),
            TextColumn("[dim]{task.completed} tasks[/]"),
            TimeElapsedColumn(),
            console=out.err,
            transient=False,
            disable=out.json_mode,
        )
        self.phase_task: TaskID | None = None
        self.phase = ""
        self.changed = 0
        self.left_out: list[str] = []  # nodes preflight left out: every phase misses them
        self.failed_here: list[str] = []  # nodes that failed or went unreachable in this phase

    def __enter__(self) -> _ProgressView:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self.runs:
            if kind is not None and not issubclass(kind, KeyboardInterrupt):
                self._finish_phase("[red]✗[/]", "[red]stopped[/]")
            elif kind is not None or any(run.cancelled.is_set() for run in self.runs):
                self._finish_phase("[red]✗[/]", "[red]interrupted[/]")
            else:
                self._finish_phase()
            self.progress.__exit__(None, None, None)

    def preflight_done(self, reports: list[Any], seconds: float) -> None:
        from gpuclus.cli.preflight import print_reports

        bad = [report for report in reports if report.failed]
        if not bad:
            self.out.note(f"[dim]preflight: {len(reports)} nodes ok ({seconds:.1f} s)[/]")
            return
        if not self.out.json_mode:
            print_reports(self.out, reports)
            self.out.warn(f"leaving out {', '.join(report.node for report in bad)}: preflight failed (see above)")
        self.left_out = [report.node for report in bad]

    def in_sync_checked(self, verdict: Any, seconds: float) -> None:
        if verdict.in_sync:
            self.out.note(f"[dim]every node still holds deploy {escape(verdict.since or '')} ({seconds:.1f} s)[/]")
        else:
            self.out.note(f"[dim]running every task: {escape(verdict.reason)} ({seconds:.1f} s)[/]")

    def phases_skipped(self, skipped: list[Any]) -> None:
        if self.only:
            return
        for choice in skipped:
            self.out.note(f"[dim]skipping phase {choice.phase.value}: {escape(choice.reason)}[/]")

    def run_started(self, run: Any) -> None:
        # The live display starts with Ansible: notes before it print as plain lines.
        self.runs.append(run)
        self.progress.__enter__()

    def event(self, event: Any) -> None:
        from gpuclus.deploy.events import HostResult, PhaseStarted, TaskStarted

        if isinstance(event, PhaseStarted):
            self._finish_phase()
            self.phase, self.changed, self.failed_here = event.phase, 0, []
            self.phase_task = self.progress.add_task(f"[bold]{escape(event.phase)}[/]", total=None)
        elif isinstance(event, TaskStarted):
            self._show_would_change()
            if self.phase_task is None:
                return
            self.progress.update(
                self.phase_task,
                advance=1,
                description=f"[bold]{escape(self.phase)}[/] [dim]{escape(event.task[:60])}[/]",
            )
        elif isinstance(event, HostResult):
            # As the record and Ansible's recap count: handlers, no_log results and ignored failures that changed.
            if event.counts_changed:
                self.changed += 1
            if self.check and event.counts_changed:
                self.would_change.setdefault(event.task, []).append((event.host, event.diff))
            if event.status in {"failed", "unreachable"} and not event.ignored:
                word = "unreachable" if event.status == "unreachable" else "failed"
                if event.host not in self.failed_here:
                    self.failed_here.append(event.host)
                self.progress.console.print(
                    f"  [red]✗ {escape(event.host)}[/] {word}: [bold]{escape(event.task)}[/]: {escape(event.message)}"
                )

    def _finish_phase(self, mark: str | None = None, word: str | None = None) -> None:
        """Close the phase line: ✓ and its count of changes, or ``mark`` and ``word`` (✗ interrupted).

        A phase some node failed in ends ✗ naming them; one that ran without
        the nodes preflight left out ends "partial" naming those: ✓ would say
        the whole cluster has it.
        """
        self._show_would_change()
        if mark is None and self.failed_here:
            mark, word = "[red]✗[/]", f"[red]failed on {escape(', '.join(self.failed_here))}[/]"
        elif mark is None and self.left_out:
            mark, word = "[yellow]◐[/]", f"[yellow]partial, without {escape(', '.join(self.left_out))}[/]"
        if self.phase_task is not None:
            task = self.progress.tasks[self.phase_task]
            ending = f"{word} " if word else ""
            count = f"{self.changed} {changed_word(self.check)}"
            self.progress.update(
                self.phase_task,
                total=task.completed,
                description=f"[bold]{escape(self.phase)}[/] {ending}[dim]({count})[/]",
                mark=mark,
            )
            self.phase_task = None

    def _show_would_change(self) -> None:
        """A check run's tasks that would change, each with the hosts and their diffs (identical ones once)."""
        pending, self.would_change = self.would_change, {}
        if self.out.json_mode:
            return
        for task, results in pending.items():
            hosts = ", ".join(host for host, _ in results)
            self.progress.console.print(f"  [yellow]~[/] [bold]{escape(task)}[/] would change on {escape(hosts)}")
            by_diff: dict[str, list[str]] = {}
            for host, diff in results:
                if diff:
                    by_diff.setdefault(diff, []).append(host)
            for diff, same in by_diff.items():
                self.progress.console.print(f"    [dim]{escape(', '.join(same))}:[/]")
                for line in diff.splitlines():
                    self.progress.console.print(f"      {_diff_line(line)}")


def changed_word(check: bool) -> str:
    """What a changed result means: in a check run nothing was changed."""
    return "would change" if check else "changed"


def _diff_line(line: str) -> str:
    style = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1])
    if line.startswith(("+++", "---")):
        style = "bold"
    return f"[{style}]{escape(line)}[/]" if style else escape(line)


def record_deploy(out: Output, payload: dict[str, Any], result: Any) -> None:
    """A deploy run as one step of a workflow: its record into the JSON payload, its summary on the terminal."""
    payload["deploy"] = {"exit_code": int(result.exit_code), "run_dir": str(result.run_dir), **result.record.as_dict()}
    if not out.json_mode:
        print_summary(out, result.record, result.seconds)


def print_summary(out: Output, record: Any, seconds: float) -> None:
    table = Table(box=None, pad_edge=False)
    for column in ("host", "ok", changed_word(record.check), "failed", "unreachable", "skipped"):
        table.add_column(column)
    for host, stats in sorted(record.hosts.items()):
        if host == "localhost":
            continue
        failed = stats.get("failures", 0)
        dark = stats.get("dark", 0)
        table.add_row(
            escape(host),
            str(stats.get("ok", 0)),
            str(stats.get("changed", 0)),
            f"[red]{failed}[/]" if failed else "0",
            f"[red]{dark}[/]" if dark else "0",
            str(stats.get("skipped", 0)),
        )
    if table.row_count:
        out.out.print(table)
    phases = ", ".join(f"{phase.name} {phase.seconds:.0f} s" for phase in record.phases)
    changed = record.changed_total()
    if record.check:
        _print_check_summary(out, record, seconds, phases)
        return
    if record.in_sync_with:
        full = gpuclus_command("deploy", record.spec, "--full")
        out.result(
            f"[green]✓[/] deploy {record.id}: nothing to do — the spec, gpuclus and every node are as deploy "
            f"{escape(record.in_sync_with)} left them (`{escape(full)}` runs every task anyway)"
        )
        _print_notices(out, record)
        return
    if record.status == "successful":
        out.result(f"[green]✓[/] deploy {record.id}: {changed} changed in {seconds:.0f} s ({phases})")
        _print_notices(out, record)
        _print_reboots(out, record)
        return
    _print_notices(out, record)
    _print_reboots(out, record)
    failed = record.failed_hosts()
    out.result(f"[red]✗[/] deploy {record.id} {record.status} after {seconds:.0f} s ({phases})")
    if record.interrupted is not None:
        how = record.error or "interrupted"
        out.result(f"  {escape(how)} {escape(record.interrupted.describe())}; deploy again to finish")
    elif record.error:
        out.result(f"  Ansible said: {escape(record.error)}")
    if failed:
        retry = gpuclus_command("deploy", record.spec, "--retry-failed")
        out.result(f"  failed or unreachable: {escape(', '.join(failed))} — fix, then `{escape(retry)}`")


def _print_notices(out: Output, record: Any) -> None:
    """What roles left undone on purpose, one line per text with the hosts it concerns."""
    hosts_by_text: dict[str, list[str]] = {}
    for notice in record.notices:
        hosts_by_text.setdefault(notice.text, []).append(notice.host)
    for text, hosts in hosts_by_text.items():
        out.result(f"  [yellow]note[/] {escape(hostlist.compress(sorted(hosts)))}: {escape(text)}")


def _print_reboots(out: Output, record: Any) -> None:
    if record.rebooted:
        out.result(f"  rebooted to load the new NVIDIA driver: {escape(hostlist.compress(record.rebooted))}")
    if record.reboot_pending:
        command = gpuclus_command("deploy", record.spec, "--reboot")
        nodes = hostlist.compress(record.reboot_pending)
        out.result(
            f"  [yellow]reboot needed[/] to load the new NVIDIA driver: {escape(nodes)}"
            f" — `{escape(command)}` drains, reboots and resumes them (exit 5 until then)"
        )


def _print_check_summary(out: Output, record: Any, seconds: float, phases: str) -> None:
    """A check run's last words: what would change, and that nothing did; never "✓ deploy"."""
    changed = record.changed_total()
    if record.status == "successful":
        what = f"{changed} task results would change" if changed else "nothing would change"
        out.result(f"check run {record.id}: {what}, nothing was changed ({seconds:.0f} s: {phases})")
        return
    out.result(f"[red]✗[/] check run {record.id} {record.status} after {seconds:.0f} s ({phases}); nothing was changed")
    if record.interrupted is not None:
        out.result(f"  {escape(record.error or 'interrupted')} {escape(record.interrupted.describe())}")
    elif record.error:
        out.result(f"  Ansible said: {escape(record.error)}")
    failed = record.failed_hosts()
    if failed:
        # --retry-failed re-runs the last deploy's failures, never a check's: name the hosts instead.
        again = gpuclus_command("deploy", record.spec, "--check", "--limit", shlex.quote(hostlist.compress(failed)))
        out.result(f"  failed or unreachable: {escape(', '.join(failed))} — fix, then `{escape(again)}`")
