"""`gpuclus runs list|show`: the deploy records, with the failed hosts read as `deploy --retry-failed` reads them.

Which hosts a run failed on comes from one place, ``RunRecord.failed_hosts()``
(every recorded failure: a task failed or the host was unreachable, or
preflight left it out), and which run `gpuclus deploy --retry-failed` retries
from another, ``records.last_deploy()`` (the newest run that was not a check),
so the list and the retry never disagree about a host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled
from gpuclus.errors import UsageError
from gpuclus.hints import gpuclus_command
from gpuclus.output import Output
from gpuclus.spec import hostlist

runs_app = typer.Typer(
    help="Records of past deploys: phases, per-host results, durations, failures.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _state(spec: Path) -> Any:
    from gpuclus.state import StateDir

    return StateDir.beside(spec)


def failed_hosts(record: Any) -> list[str]:
    """The hosts `gpuclus deploy --retry-failed` would re-run if this were the last run."""
    hosts: list[str] = record.failed_hosts()
    return hosts


@runs_app.command("list")
def runs_list(
    spec: Annotated[Path, typer.Option("--spec", help="Cluster spec whose runs to list.")] = DEFAULT_SPEC,
    json_mode: JsonOption = False,
) -> None:
    """List deploy runs, newest first: id, kind (deploy, or check: changed nothing), status, changed, duration,
    phases, limit; the hosts --retry-failed re-runs."""
    from gpuclus.deploy.records import last_deploy, list_records

    out = Output(json_mode=json_mode)
    out.spec = spec
    with handled(out):
        found = list_records(_state(spec))
        if json_mode:
            out.emit({"ok": True, "runs": [record.as_dict() for record in found]})
            return
        if not found:
            out.result("no deploy runs recorded here yet")
            return
        out.out.print(_runs_table(found))
        # What --retry-failed reads: the newest deploy's failures (never a check's), whatever its status says.
        last = last_deploy(_state(spec))
        retry = failed_hosts(last) if last is not None else []
        if last is not None and retry:
            command = gpuclus_command("deploy", spec, "--retry-failed")
            out.note(
                f"[dim]hint:[/] `{escape(command)}` re-runs {escape(hostlist.compress(retry))}, "
                f"the hosts that failed or were unreachable in {last.id}"
            )


# Short names for the two long phases: a run of all six then nearly fits 80 columns.
_SHORT_PHASE = {"containers": "cont", "monitoring": "mon"}


def _runs_table(found: list[Any]) -> Table:
    """One row per run, readable at 80 columns: id (what `runs show` takes), kind and status
    whole; the phases by short name, cut with … when the width runs out; a --limit on a
    second line of the row (most runs have none, so it takes no column)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
    for column in ("run", "kind", "status", "changed", "secs"):
        table.add_column(column, no_wrap=True)
    table.add_column("phases", overflow="ellipsis")
    for record in found:
        colour = "green" if record.status == "successful" else "red"
        phases = ",".join(
            _SHORT_PHASE.get(name, name) for name in [p.name for p in record.phases] or record.phases_requested
        )
        table.add_row(
            record.id,
            "[cyan]check[/]" if record.check else "deploy",
            f"[{colour}]{record.status}[/]",
            str(record.changed_total()),
            f"{record.seconds:.0f}",
            phases + (f"\n[dim]on {escape(record.limit)}[/]" if record.limit else ""),
        )
    return table


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id (a unique prefix is enough).")],
    spec: Annotated[Path, typer.Option("--spec", help="Cluster spec the run belongs to.")] = DEFAULT_SPEC,
    json_mode: JsonOption = False,
) -> None:
    """Show one run: spec hash, phases with durations, per-host results, failures."""
    from gpuclus.cli.deploy_view import changed_word, print_summary
    from gpuclus.deploy.records import load_record

    out = Output(json_mode=json_mode)
    out.spec = spec
    with handled(out):
        record = load_record(_state(spec), run_id)
        if record is None:
            raise UsageError(f"no single run matches {run_id!r}", f"see `{gpuclus_command('runs list', spec)}`")
        if json_mode:
            out.emit({"ok": True, **record.as_dict()})
            return
        # A check changed nothing: say so first, and count what it found as "would change".
        title = "check run" if record.check else "run"
        out.result(
            f"[bold]{title} {record.id}[/]  {record.status}  {record.seconds:.0f} s  "
            f"spec sha256 {record.spec_sha256[:12]}"
        )
        for phase in record.phases:
            out.result(
                f"  {phase.name:<11} {phase.seconds:6.1f} s  {phase.tasks} tasks, "
                f"{phase.changed} {changed_word(record.check)}, {phase.failed} failed"
            )
        print_summary(out, record, record.seconds)
        for failure in record.failures:
            kind = "unreachable" if failure.unreachable else "failed"
            out.result(f"  [red]✗ {escape(failure.host)}[/] {kind}: {escape(failure.task)}: {escape(failure.message)}")
