"""`gpuclus runs list|show`: the deploy records, with the failed hosts read as `deploy --retry-failed` reads them.

Which hosts a run failed on comes from one place, ``RunRecord.failed_hosts()``
(every recorded failure: a task failed or the host was unreachable, or
preflight left it out), which is also what `gpuclus deploy --retry-failed`
re-runs, so the list and the retry never disagree about a host.
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
    """List deploy runs, newest first: id, status, changed, duration, phases; the hosts --retry-failed re-runs."""
    from gpuclus.deploy.records import list_records

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
        table = Table(box=None, pad_edge=False)
        for column in ("run", "status", "changed", "seconds", "phases", "limit"):
            table.add_column(column)
        for record in found:
            colour = "green" if record.status == "successful" else "red"
            table.add_row(
                record.id,
                f"[{colour}]{record.status}[/]",
                str(record.changed_total()),
                f"{record.seconds:.0f}",
                ",".join(phase.name for phase in record.phases),
                escape(record.limit or ""),
            )
        out.out.print(table)
        # What --retry-failed reads: the newest record's failures, whatever its status says.
        retry = failed_hosts(found[0])
        if retry:
            command = gpuclus_command("deploy", spec, "--retry-failed")
            out.note(
                f"[dim]hint:[/] `{escape(command)}` re-runs {escape(hostlist.compress(retry))}, "
                f"the hosts that failed or were unreachable in {found[0].id}"
            )


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id (a unique prefix is enough).")],
    spec: Annotated[Path, typer.Option("--spec", help="Cluster spec the run belongs to.")] = DEFAULT_SPEC,
    json_mode: JsonOption = False,
) -> None:
    """Show one run: spec hash, phases with durations, per-host results, failures."""
    from gpuclus.cli.deploy import _print_summary
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
        out.result(
            f"[bold]run {record.id}[/]  {record.status}  {record.seconds:.0f} s  spec sha256 {record.spec_sha256[:12]}"
        )
        for phase in record.phases:
            out.result(
                f"  {phase.name:<11} {phase.seconds:6.1f} s  {phase.tasks} tasks, "
                f"{phase.changed} changed, {phase.failed} failed"
            )
        _print_summary(out, record, record.seconds)
        for failure in record.failures:
            kind = "unreachable" if failure.unreachable else "failed"
            out.result(f"  [red]✗ {escape(failure.host)}[/] {kind}: {escape(failure.task)}: {escape(failure.message)}")
