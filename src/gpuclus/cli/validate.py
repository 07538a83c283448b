"""`gpuclus validate`: Slurm jobs on the deployed cluster, a verdict per check and per node."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.cli.completion import complete_items
from gpuclus.errors import UsageError
from gpuclus.output import Output

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
_MARK = {"pass": "✓", "warn": "!", "fail": "✗", "skip": "-"}


# --- shell completion: offline and silent (a traceback would land in the user's shell) ---------


def _complete_checks(incomplete: str) -> list[str]:
    """--only: the stages and check ids of the registry, for the item after the last comma."""
    from gpuclus.validate.registry import STAGES, all_checks

    return complete_items(incomplete, [*STAGES, *(check.id for check in all_checks())])


def _complete_nodes(ctx: typer.Context, incomplete: str) -> list[str]:
    """--nodes: the node names of the spec on the command line (else ./cluster.yaml); none when unreadable."""
    # Completing `--nodes VALUE`, the parse stops at the option still waiting for its value and leaves
    # the positional SPEC unparsed in ctx.args; with `--nodes=VALUE` it is parsed into ctx.params.
    words = [arg for arg in ctx.args if not arg.startswith("-")]
    spec = words[0] if words else ctx.params.get("spec") or DEFAULT_SPEC
    try:
        from gpuclus.spec.load import load_spec

        topology = load_spec(Path(spec)).topology
    except Exception:  # no file, bad YAML, anything: completing nothing is the only right answer
        return []
    if topology is None:
        return []
    return complete_items(incomplete, [node.name for node in topology.nodes])


def validate(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    level: Annotated[
        str,
        typer.Option(
            "--level",
            help="quick (Slurm state, the nodes' config against the spec and each other, munge, launch, GRES, "
            "nvidia-smi, Prometheus), standard (+ NFS mounts, MPI, storage, "
            "GPU isolation and driver, containers, accounting) or full (+ GPU performance, NCCL, DDP, and the "
            "workloads stage: the job templates as Slurm jobs, the scaling from one node to all).",
        ),
    ] = "standard",
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            help="Comma-separated check ids or stages (see --list); overrides --level.",
            autocompletion=_complete_checks,
        ),
    ] = None,
    nodes: Annotated[
        str | None,
        typer.Option(
            "--nodes",
            help="Check only these nodes, as a hostlist (e.g. 'gpu[01-04]').",
            autocompletion=_complete_nodes,
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the results as JUnit XML to this file.")
    ] = None,
    container_image: Annotated[
        str | None,
        typer.Option(
            "--container-image",
            help="Image the Pyxis check runs (a local .sqsh works offline); default: the spec's "
            "containers.validate_image.",
        ),
    ] = None,
    list_checks: Annotated[bool, typer.Option("--list", help="List the checks and exit.")] = False,
    json_mode: JsonOption = False,
) -> None:
    """Prove the deployed cluster works: run checks as Slurm jobs and report pass/fail per node, with numbers.

    Connects to the controller over SSH (gpuclus' key and known_hosts) and runs
    each check there: Slurm's state against the spec, munge and job launch on
    every node, GRES devices, MPI, shared storage, GPUs (real ones only; fake GPUs
    are SKIP), containers, accounting and Prometheus targets. Every job is
    named gpuclus-validate-<id>, time-limited, and cancelled at the end, also
    on Ctrl-C. docs/validate.md describes each check and how to repeat it by hand.

    Exit 0 when no check failed (warnings and skips allowed), 1 when one
    failed or Slurm is not deployed on the controller, 2 for bad options, 3
    for an invalid spec, 4 when the controller cannot be reached or refuses
    the login, 130 when interrupted.
    """
    from gpuclus.validate.registry import all_checks, select
    from gpuclus.validate.results import Level

    out = Output(json_mode=json_mode)
    with handled(out):
        try:
            depth = Level.parse(level)
        except KeyError:
            raise UsageError(f"unknown level {level!r}", "use quick, standard or full") from None
        checks = all_checks()
        if list_checks:
            _list(out, checks)
            return
        chosen = select(checks, depth, _split(only))
        if junit is not None and not junit.parent.is_dir():
            raise UsageError(f"--junit {junit}: no directory {junit.parent}", "create it, or write the file elsewhere")
        if junit is not None:
            from gpuclus.fileio import check_output_path

            # Before the run, not after it: a FIFO, a device or a link (/dev/stdout) is never replaced.
            check_output_path(junit)
        image = _container_image(container_image)
        loaded = load_checked_spec(spec, out)
        selected = _selected_nodes(loaded.topology, nodes)
        report = _run(
            out,
            spec,
            loaded,
            chosen,
            depth,
            selected,
            loaded.spec.containers.validate_image if image is None else image,
        )
        if junit is not None:
            from gpuclus.validate.junit import write_junit

            write_junit(report, junit)
        if json_mode:
            out.emit(report.as_dict())
        else:
            _print_report(out, report)
            if junit is not None:
                out.note(f"JUnit XML: {escape(str(junit))}")
        if not report.ok:
            raise typer.Exit(int(report.exit_code))


def _container_image(image: str | None) -> str | None:
    """--container-image as given, refused where the spec's containers.validate_image would be."""
    if image is None:
        return None
    from gpuclus.spec.models import container_image_problem

    problem = container_image_problem(image)
    if problem:
        raise UsageError(
            f"--container-image {image!r} {problem}",
            "a registry image (ubuntu:22.04, nvcr.io#nvidia/pytorch:24.01-py3) or a squashfs file's absolute path",
        )
    return image


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def _selected_nodes(topology: Any, nodes: str | None) -> list[Any]:
    if nodes is None:
        return list(topology.nodes)
    from gpuclus.spec import hostlist

    try:
        names = hostlist.expand_list(nodes)
    except hostlist.HostlistError as problem:
        raise UsageError(f"--nodes: {problem}", "write a hostlist like gpu[01-04],head") from None
    known = topology.by_name()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(f"--nodes: not in the spec: {', '.join(unknown)}", "names as the spec expands them")
    return [node for node in topology.nodes if node.name in names]


def _run(out: Output, spec: Path, loaded: Any, checks: list[Any], depth: Any, selected: list[Any], image: str) -> Any:
    from gpuclus.validate.context import Options
    from gpuclus.validate.runner import validate_cluster

    return validate_cluster(
        spec,
        loaded,
        checks,
        level=depth,
        selected=selected,
        options=Options(container_image=image, spec_path=spec),
        progress=None if out.json_mode else _progress_printer(out),
    )


def _progress_printer(out: Output) -> Any:
    def show(check: Any, result: Any) -> None:
        if result is None:
            return
        status = result.status.value
        failed = f"  {', '.join(result.failed_nodes)}" if result.failed_nodes else ""
        out.err.print(
            f"  [{_STYLE[status]}]{_MARK[status]}[/] {escape(check.id):<22} {result.duration_s:5.1f} s"
            f"[{_STYLE[status]}]{escape(failed)}[/]"
        )

    return show


def _print_report(out: Output, report: Any) -> None:
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("stage", "check", "status", "nodes", "value", "expected", "time"):
        table.add_column(column, justify="right" if column == "time" else "left")
    stage_seen = set()
    for result in report.results:
        status = result.status.value
        node_results = result.outcome.nodes
        passed = sum(node.status.value in ("pass", "warn") for node in node_results)
        value, expected = _figures(result)
        table.add_row(
            "" if result.stage in stage_seen else result.stage,
            escape(result.id.split(".", 1)[1]),
            f"[{_STYLE[status]}]{status.upper()}[/]",
            f"{passed}/{len(node_results)}" if node_results else "",
            escape(value),
            escape(expected),
            f"{result.duration_s:.1f} s",
        )
        stage_seen.add(result.stage)
    out.out.print(table)
    for result in report.results:
        if result.status.value not in ("fail", "warn"):
            continue
        style = _STYLE[result.status.value]
        out.out.print(f"[{style}]{result.status.value.upper()} {escape(result.id)}[/]: {escape(result.title)}")
        if result.outcome.message:
            out.out.print(f"  {escape(result.outcome.message)}")
        own_hints = True
        for node in result.outcome.nodes:
            if node.status.value in ("fail", "warn"):
                out.out.print(f"  [{_STYLE[node.status.value]}]{escape(node.node)}[/]: {escape(node.message)}")
                if node.hint:
                    out.out.print(f"    [dim]hint:[/] {escape(node.hint)}")
                own_hints = own_hints and bool(node.hint)
        if result.outcome.hint and not (own_hints and result.failed_nodes):
            out.out.print(f"  [dim]hint:[/] {escape(result.outcome.hint)}")
    for result in report.results:
        if result.status.value == "skip" and result.outcome.message:
            out.out.print(f"[dim]SKIP {escape(result.id)}: {escape(result.outcome.message)}[/]")
    counts = report.counts()
    verdict = "[green]cluster OK[/]" if report.ok else "[bold red]cluster NOT OK[/]"
    summary = ", ".join(f"{counts[name]} {name}" for name in ("pass", "warn", "fail", "skip") if counts[name])
    out.out.print(f"{verdict}: {summary} ({report.level.label}, {report.duration_s:.1f} s, jobs {report.job_name})")


def _figures(result: Any) -> tuple[str, str]:
    """The value and expectation column: the check's own, or the spread over its nodes."""
    outcome = result.outcome
    unit = f" {outcome.unit}" if outcome.unit else ""
    if outcome.value is not None:
        return f"{outcome.value}{unit}", f"{outcome.expected or ''}{unit if outcome.expected else ''}"
    numbers = [node.value for node in outcome.nodes if isinstance(node.value, int | float)]
    if not numbers:
        return "", ""
    units = {node.unit for node in outcome.nodes if node.unit}
    unit = f" {units.pop()}" if len(units) == 1 else ""
    low, high = min(numbers), max(numbers)
    spread = f"{_number(low)}" if low == high else f"{_number(low)}..{_number(high)}"
    expectations = {node.expected for node in outcome.nodes if node.expected}
    return spread + unit, (expectations.pop() + unit) if len(expectations) == 1 else ""


def _number(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _list(out: Output, checks: list[Any]) -> None:
    if out.json_mode:
        out.emit({"checks": [{"id": c.id, "stage": c.stage, "level": c.level.label, "title": c.title} for c in checks]})
        return
    table = Table(box=None, pad_edge=False)
    for column in ("id", "level", "what it proves"):
        table.add_column(column)
    for check in checks:
        table.add_row(escape(check.id), check.level.label, escape(check.title))
    out.out.print(table)
