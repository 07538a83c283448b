"""`gpuclus deploy` and `gpuclus runs list|show`."""

from __future__ import annotations

import shlex
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, Task, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.cli.completion import complete_phases
from gpuclus.deploy import phases
from gpuclus.hints import gpuclus_command
from gpuclus.output import Output
from gpuclus.spec import hostlist

# deploy/phases is the one list; each phase is named once in the help, under --only.
ONLY_HELP = f"Run only these phases (comma-separated), in this order: {phases.described()}."
SKIP_HELP = f"Leave these phases out (comma-separated): {phases.names()}."


def deploy(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    only: Annotated[str | None, typer.Option("--only", help=ONLY_HELP, autocompletion=complete_phases)] = None,
    skip: Annotated[
        str | None,
        typer.Option("--skip", help=SKIP_HELP, autocompletion=complete_phases),
    ] = None,
    limit: Annotated[
        str | None, typer.Option("--limit", help="Only these nodes, as a hostlist (e.g. 'gpu[01-02],head').")
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option("--retry-failed", help="Re-run only the hosts that failed or were unreachable last time."),
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Dry run (Ansible check mode with diffs): change nothing.")
    ] = False,
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More Ansible detail in the run log.")
    ] = 0,
    keep: Annotated[int, typer.Option("--keep", help="Run records to keep under .gpuclus/runs/.", min=1)] = 20,
    no_preflight: Annotated[
        bool, typer.Option("--no-preflight", help="Skip the SSH preflight checks (`gpuclus preflight`) before Ansible.")
    ] = False,
    reboot: Annotated[
        bool,
        typer.Option(
            "--reboot",
            help="Reboot, once, each GPU node whose new NVIDIA driver is not loaded yet: drained in Slurm "
            "first, checked with nvidia-smi after, then resumed.",
        ),
    ] = False,
    max_unavailable: Annotated[
        int,
        typer.Option(
            "--max-unavailable",
            help="In a rolling upgrade (the spec changes a pinned version), how many compute nodes may be out "
            "of service at a time.",
            min=1,
        ),
    ] = 1,
    json_mode: JsonOption = False,
) -> None:
    """Build the cluster the spec describes: render, then run the phases with Ansible over SSH.

    Phases run in the order --only lists them, each only when the spec needs it
    (the deploy names each phase it skips, and why). Nodes run in parallel; a
    failing or unreachable node does not stop the others, and
    the summary names them (`--retry-failed` re-runs just those). Every run is
    recorded under .gpuclus/runs/ (see `gpuclus runs`). Secrets are generated
    once into .gpuclus/secrets/ and never printed. Ctrl-C stops Ansible and
    every process it started (a second Ctrl-C kills them at once); the next
    deploy picks up from there. One deploy at a time per spec directory.

    A new NVIDIA driver loads at the next boot. gpuclus never reboots a node
    unasked: without --reboot the summary names the nodes that need one (exit
    5); with it each such node is drained, rebooted once, checked and resumed.

    When the spec changes a pinned version since the last deploy (slurm.version,
    the driver branch, CUDA, Enroot, Pyxis) the deploy is a rolling upgrade:
    first the nodes without slurmd and those running slurmctld (so slurmdbd,
    then slurmctld, then slurmd are upgraded, as Slurm requires; a jump Slurm
    cannot make is refused before anything changes), then the compute nodes,
    --max-unavailable at a time: each batch is drained (waiting for its jobs),
    deployed, checked with jobs in a maintenance reservation, and resumed.
    The first batch that fails stops the upgrade with its nodes drained.

    Exit 0 when every task succeeded, 1 when a task failed, 2 for bad options
    or another deploy running, 3 for an invalid spec, 4 when hosts were
    unreachable, 5 when all went well but GPU nodes need a reboot (--reboot),
    130 when interrupted.
    """
    from gpuclus.deploy import pipeline

    out = Output(json_mode=json_mode)
    with handled(out):
        loaded = load_checked_spec(spec, out)
        request = pipeline.DeployRequest(
            spec_path=spec,
            only=only,
            skip=skip,
            limit=limit,
            check=check,
            verbosity=verbose,
            retry_failed=retry_failed,
            keep=keep,
            preflight=not no_preflight,
            reboot=reboot,
        )
        if not (limit or retry_failed or check) and _rolled(out, request, loaded, max_unavailable, json_mode):
            return
        result = run_with_progress(out, request, loaded, check=check, only=bool(only))
        payload = {
            "ok": result.exit_code == 0,
            "exit_code": int(result.exit_code),
            "run_dir": str(result.run_dir),
            **result.record.as_dict(),
        }
        if json_mode:
            out.emit(payload)
        else:
            _print_summary(out, result.record, result.seconds)
        if result.exit_code != 0:
            raise typer.Exit(int(result.exit_code))


def _rolled(out: Output, request: Any, loaded: Any, max_unavailable: int, json_mode: bool) -> bool:
    """Run the deploy as a rolling upgrade when the spec changes a pinned version; False when it does not."""
    from gpuclus.cli.rolling import print_rolling, rolling_upgrade
    from gpuclus.deploy.pipeline import scope
    from gpuclus.upgrade.detect import pin_changes

    changes = pin_changes(request.spec_path, loaded, scope(request, loaded).phases)
    if not changes:
        return False
    report = rolling_upgrade(out, request, loaded, changes, max_unavailable)
    if json_mode:
        out.emit({"ok": report.ok, "exit_code": int(report.exit_code), "upgrade": report.as_dict()})
    else:
        print_rolling(out, report)
    if not report.ok:
        raise typer.Exit(int(report.exit_code))
    return True


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


def _print_summary(out: Output, record: Any, seconds: float) -> None:
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
