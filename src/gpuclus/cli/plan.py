"""`gpuclus plan`: what a deploy would change, before it changes anything."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.output import Output

if TYPE_CHECKING:
    from gpuclus.deploy.records import RunRecord
    from gpuclus.spec.load import LoadedSpec


def plan(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Also run the deploy in Ansible check mode and count what each phase would change."
        ),
    ] = False,
    json_mode: JsonOption = False,
) -> None:
    """Show what `gpuclus deploy` would change.

    First a unified diff of the rendered inventory and variables against the
    last successful full deploy (.gpuclus/last-applied/); with --check, then a
    check-mode run over SSH (nothing is changed on the nodes) that reports,
    per phase, how many tasks would change something. Exit 0 unless the spec
    or the check run fails.
    """
    from gpuclus.deploy import pipeline

    out = Output(json_mode=json_mode)
    with handled(out):
        loaded = load_checked_spec(spec, out)
        applied_before, changes = pipeline.changes_since_last_deploy(spec, loaded)
        payload: dict[str, object] = {
            "ok": True,
            "applied_before": applied_before,
            "files": [{"path": c.path, "status": c.status, "diff": c.diff} for c in changes],
        }
        if not json_mode:
            if not applied_before:
                out.result("[yellow]nothing applied yet[/]: the first deploy creates everything below")
            for change in changes:
                out.result(f"[bold]{change.status}[/] {escape(change.path)}")
                for line in change.diff.splitlines():
                    colour = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
                    out.result(f"  [{colour}]{escape(line)}[/]")
            if not changes:
                out.result("[green]✓[/] the rendered inventory and variables match the last deploy")
        if check:
            record = _check_run(out, loaded, spec)
            payload["check"] = {
                "status": record.status,
                "phases": [{"name": p.name, "would_change": p.changed, "tasks": p.tasks} for p in record.phases],
                "changed": record.changed_total(),
                "failures": [vars(failure) for failure in record.failures],
                "run": record.id,
            }
            payload["ok"] = record.status == "successful"
        out.emit(payload)
        if not payload["ok"]:
            raise typer.Exit(1)


def _check_run(out: Output, loaded: LoadedSpec, spec: Path) -> RunRecord:
    from gpuclus.deploy import pipeline

    # Check mode changes nothing; no preflight (the run reports unreachable
    # nodes itself) and no pruning of the deploy records.
    request = pipeline.DeployRequest(spec_path=spec, check=True, preflight=False, keep=None)
    record = pipeline.deploy(request, loaded, pipeline.QuietObserver()).record
    if not out.json_mode:
        out.result(f"check-mode run {record.id}: {record.status}")
        for phase in record.phases:
            out.result(f"  {phase.name:<11} {phase.changed} task result(s) would change")
        for failure in record.failures:
            out.result(f"  [red]✗ {escape(failure.host)}[/] {escape(failure.task)}: {escape(failure.message)}")
    return record
