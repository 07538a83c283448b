"""`gpuclus status`: nodes, partitions, jobs, services and scrape targets of a deployed cluster, in one view."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.errors import ExitCode, UsageError
from gpuclus.output import Output

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec
    from gpuclus.state import StateDir
    from gpuclus.status.report import ClusterStatus

DEFAULT_INTERVAL = 5.0
MIN_INTERVAL = 1.0


def status(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Ask again every --interval seconds until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option("--interval", "-n", metavar="SECONDS", help="Seconds between two rounds of --watch."),
    ] = DEFAULT_INTERVAL,
    json_mode: JsonOption = False,
) -> None:
    """Show the deployed cluster in one view: nodes, partitions, jobs, services, scrape targets, URLs.

    Asks every node at once over SSH (gpuclus' key and known_hosts, one
    connection and one script per node): on the controller Slurm's view
    (scontrol show nodes/partitions, squeue: each node's state, reason, CPUs
    and GPUs allocated of total; each partition's nodes by state; jobs by
    state), on every node its services (systemctl is-active: slurmctld,
    slurmdbd with accounting, slurmd, munge, the node exporter, Prometheus,
    Alertmanager, Grafana, as the spec places them), and on the monitoring
    node Prometheus' scrape targets. Then the URLs of Prometheus, Grafana
    (with the file that holds its admin password, never the password) and
    Alertmanager. A node gpuclus cannot reach is shown as unreachable, with
    what could still be learned from the others.

    --json prints one JSON object (keys: schema, ok, exit_code, cluster,
    collected_at, duration_s, slurm, nodes, partitions, jobs, services,
    monitoring, urls, problems). --watch redraws every --interval seconds
    (default 5) until Ctrl-C; with --json it prints one JSON object per line
    per round.

    Exit 0 when everything is healthy; 1 when something is not (a node
    unreachable, slurmctld not answering, a Slurm node down, drained, failing
    or not responding, a partition not up, a service not active, a scrape
    target down); 2 for bad options or no .gpuclus/ state beside the spec; 3
    for an invalid spec; 130 when --watch is stopped with Ctrl-C.
    """
    out = Output(json_mode=json_mode)
    with handled(out):
        if interval < MIN_INTERVAL:
            raise UsageError(f"--interval {interval:g}: too short", f"use {MIN_INTERVAL:g} second or more")
        if not watch and interval != DEFAULT_INTERVAL:
            raise UsageError("--interval is for --watch", "add --watch, or leave --interval out")
        from gpuclus.status.snapshot import require_state

        loaded = load_checked_spec(spec, out)
        state = require_state(spec)
        if watch:
            _watch(out, loaded, spec, state, interval)
        report = _take(loaded, spec, state)
        if json_mode:
            out.emit(report.as_dict())
        else:
            _show(out, report)
        if not report.ok:
            raise typer.Exit(report.exit_code)


def _take(loaded: LoadedSpec, spec: Path, state: StateDir) -> ClusterStatus:
    from gpuclus.status.snapshot import take

    return take(loaded, spec, state)


def _show(out: Output, report: ClusterStatus) -> None:
    from gpuclus.cli.status_view import render

    out.out.print(render(report))


def _watch(out: Output, loaded: LoadedSpec, spec: Path, state: StateDir, interval: float) -> None:
    """Rounds until Ctrl-C, which ends the command quietly with exit 130."""
    try:
        while True:
            started = time.monotonic()
            report = _take(loaded, spec, state)
            if out.json_mode:
                sys.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False) + "\n")
                sys.stdout.flush()
            else:
                if out.out.is_terminal:
                    out.out.clear()
                _show(out, report)
                out.out.print(
                    f"[dim]every {interval:g} s ({escape(str(spec))}); Ctrl-C stops[/]",
                    end="\n" if out.out.is_terminal else "\n\n",
                )
            _pause(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


def _pause(seconds: float) -> None:
    """The wait between two rounds (tests replace it)."""
    time.sleep(seconds)
