"""`gpuclus spec check` and `gpuclus spec schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, read_spec
from gpuclus.errors import ExitCode, SpecInvalidError
from gpuclus.output import Output, findings_summary, plural
from gpuclus.yamldoc.findings import Finding, sort_findings, warning

if TYPE_CHECKING:
    from gpuclus.deploy.phases import Phase
    from gpuclus.spec.load import LoadedSpec

app = typer.Typer(
    help="Check a cluster spec, or print its JSON Schema.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("check")
def check(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors.")] = False,
    json_mode: JsonOption = False,
) -> None:
    """Report every problem in a spec at once, as file:line with a hint.

    Exit 0 when the spec is valid (warnings allowed unless --strict), 3 when it
    has errors, 2 when the file cannot be read.
    """
    out = Output(json_mode=json_mode)
    with handled(out, {"file": str(spec)}):
        loaded = read_spec(spec)
        loaded.findings = sort_findings([*loaded.findings, *deploy_refusals(loaded)])
        counts = findings_summary(loaded.findings)
        failed = counts["error"] > 0 or (strict and counts["warning"] > 0)
        topology = loaded.topology
        summary = {
            "nodes": len(topology.nodes) if topology else None,
            "gpus": sum(node.gpu_count for node in topology.nodes) if topology else None,
        }
        out.emit(
            {
                "ok": not failed,
                "file": str(spec),
                "counts": counts,
                "findings": [finding.as_dict() for finding in loaded.findings],
                **summary,
            }
        )
        out.findings(loaded.findings, to_stderr=False)
        if loaded.skipped_checks:
            # Fixing the structure can bring new findings; say so rather than
            # let the next run look like a moving target.
            out.note(
                f"[dim]note:[/] {plural(len(loaded.skipped_checks), 'check')} of meaning need a part refused above; "
                "they run once it is fixed"
            )
        tally = (
            ", ".join(plural(counts[level], level) for level in ("error", "warning") if counts[level]) or "no problems"
        )
        if failed:
            # The findings are this command's result, already printed or in the
            # JSON object: only the exit code is left to give.
            if not json_mode:
                out.fail(SpecInvalidError(f"{spec}: {tally}", "fix the lines above, then check again"))
            raise typer.Exit(int(ExitCode.SPEC_INVALID))
        out.result(
            f"[green]✓[/] {spec}: valid — {plural(summary['nodes'] or 0, 'node')}, "
            f"{plural(summary['gpus'] or 0, 'GPU')} ({tally})"
        )


def deploy_refusals(loaded: LoadedSpec) -> list[Finding]:
    """A warning for each phase the spec needs whose playbook this version does not ship.

    `gpuclus deploy` refuses such a spec (deploy.pipeline.scope); saying so
    here lets the admin learn it from `spec check`, before any SSH. It lives
    in the CLI because the spec package must not know what deploy ships.
    """
    if loaded.spec is None or loaded.topology is None:
        return []
    # Imported here: `gpuclus --help` must not load the deploy engine.
    from gpuclus.deploy.phases import wanted_phases
    from gpuclus.deploy.workspace import missing_playbooks

    needed, _not_needed = wanted_phases(loaded.spec, loaded.topology)
    missing = missing_playbooks([choice.phase for choice in needed])
    return [loaded.document.locate(_refusal(phase)) for phase in missing]


def _refusal(phase: Phase) -> Finding:
    """The finding for one unshipped phase (a playbooks directory without it: GPUCLUS_PLAYBOOKS_DIR)."""
    refused = f"this version of gpuclus does not ship the {phase.value} phase yet: `gpuclus deploy` refuses this spec"
    return warning(
        f"{phase.value}-not-shipped",
        f"the spec needs the {phase.value} phase, but {refused}",
        (phase.value,),
        hint=f"deploy with --skip {phase.value}",
    )


@app.command("schema")
def schema(
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the schema to this file instead of stdout.")
    ] = None,
    json_mode: JsonOption = False,
) -> None:
    """Print the spec's JSON Schema, for editors (yaml-language-server) and CI.

    The schema is JSON already, so --json changes nothing; it is accepted like
    on every other command.
    """
    from gpuclus.spec.schema import spec_json_schema

    out = Output(json_mode=json_mode)
    with handled(out):
        text = json.dumps(spec_json_schema(), indent=2, sort_keys=True) + "\n"
        if output is None:
            out.raw(text)
            return
        from gpuclus.fileio import write_output_file

        write_output_file(output, text)
        if json_mode:
            out.emit({"ok": True, "file": str(output)})
        else:
            out.err.print(f"wrote {output}")
