"""`gpuclus status` for people: tables of nodes and partitions, the queue, targets, URLs, problems."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuclus.status.expected import ALERTMANAGER, GRAFANA, NODE_EXPORTER
from gpuclus.status.report import ClusterStatus, NodeStatus, Service, ServiceState

_SERVICE_STYLE = {ServiceState.ACTIVE: "green", ServiceState.SKIPPED: "yellow", ServiceState.UNKNOWN: "dim"}
_JOB_ORDER = ("running", "pending")
# Units as the table names them (problems and --json use the unit's own name).
_SHORT_UNIT = {NODE_EXPORTER: "node-exporter", ALERTMANAGER: "alertmanager", GRAFANA: "grafana"}


def render(report: ClusterStatus) -> RenderableType:
    """Everything status knows, top to bottom, ending with the verdict."""
    parts: list[RenderableType] = [_header(report), _nodes(report)]
    if not report.slurm.answered:
        parts.append(Text(f"Slurm: {report.slurm.error or 'no answer'}", style="red"))
    elif report.partitions:
        parts.append(_partitions(report))
    if report.slurm.answered:
        parts.append(Text.from_markup(f"[bold]jobs[/]: {_jobs(report.jobs)}"))
    if report.monitoring is not None:
        parts.append(_targets(report))
    urls = _urls(report)
    if urls is not None:
        parts.append(urls)
    parts.append(_verdict(report))
    return Group(*parts)


def _header(report: ClusterStatus) -> Text:
    when = report.collected_at.replace("T", " ").replace("+00:00", " UTC")
    return Text.from_markup(
        f"[bold]cluster {escape(report.cluster)}[/]  [dim]{escape(when)}, asked in {report.duration_s:.1f} s[/]"
    )


def _nodes(report: ClusterStatus) -> Table:
    reasons = any(node.slurm is not None and node.slurm.reason for node in report.nodes)
    columns = ["node", "ssh", "slurm", "cpus", "gpus", "services", *(["reason"] if reasons else [])]
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in columns:
        table.add_column(
            column,
            justify="right" if column in ("cpus", "gpus") else "left",
            overflow="fold",
            no_wrap=column in ("node", "ssh", "slurm"),
        )
    for node in report.nodes:
        services = [service for service in report.services if service.node == node.name]
        row = [
            escape(node.name),
            _ssh(node),
            _slurm_state(node, report.slurm.answered),
            f"{node.slurm.cpus.alloc}/{node.slurm.cpus.total}" if node.slurm else "",
            f"{node.slurm.gpus.alloc}/{node.slurm.gpus.total}" if node.slurm and node.slurm.gpus.total else "",
            " ".join(_service(service) for service in services),
        ]
        if reasons:
            row.append(escape(node.slurm.reason or "") if node.slurm else "")
        table.add_row(*row)
    return table


def _ssh(node: NodeStatus) -> str:
    if node.reachable is None:
        return "[dim]-[/]"
    return "[green]ok[/]" if node.reachable else "[bold red]unreachable[/]"


def _slurm_state(node: NodeStatus, answered: bool) -> str:
    if node.slurm is None:
        return "[dim]?[/]" if not answered and "compute" in node.roles else "[dim]-[/]"
    style = "green" if node.slurm.healthy else "bold red"
    return f"[{style}]{escape(node.slurm.label)}[/]"


def _service(service: Service) -> str:
    style = _SERVICE_STYLE.get(service.state, "bold red")
    name = escape(_SHORT_UNIT.get(service.unit, service.unit))
    if service.state is ServiceState.ACTIVE:
        return f"[{style}]{name}[/]"
    if service.state is ServiceState.UNKNOWN:
        return f"[{style}]{name}?[/]"
    return f"[{style}]{name}:{service.state.value}[/]"


def _partitions(report: ClusterStatus) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("partition", "state", "nodes", "cpus", "gpus", "jobs"):
        table.add_column(column, justify="right" if column in ("cpus", "gpus") else "left")
    for partition in report.partitions:
        states = ", ".join(f"{count} {state}" for state, count in sorted(partition.node_states.items()))
        style = "green" if partition.state == "up" else "bold red"
        table.add_row(
            escape(partition.name + ("*" if partition.default else "")),
            f"[{style}]{escape(partition.state)}[/]",
            escape(f"{len(partition.nodes)}" + (f" ({states})" if states else "")),
            f"{partition.cpus.alloc}/{partition.cpus.total}",
            f"{partition.gpus.alloc}/{partition.gpus.total}",
            escape(_jobs(partition.jobs)),
        )
    return table


def _jobs(counts: dict[str, int]) -> str:
    ordered = [*_JOB_ORDER, *sorted(state for state in counts if state not in _JOB_ORDER)]
    return ", ".join(f"{counts.get(state, 0)} {state}" for state in ordered)


def _targets(report: ClusterStatus) -> RenderableType:
    monitoring = report.monitoring
    assert monitoring is not None
    where = f"Prometheus on {escape(monitoring.node)}"
    if monitoring.error is not None:
        return Text.from_markup(f"[bold]targets[/]: [bold red]{where}: {escape(monitoring.error)}[/]")
    down = [target for target in monitoring.targets if not target.healthy]
    up = len(monitoring.targets) - len(down)
    style = "green" if not down else "bold red"
    line = Text.from_markup(
        f"[bold]targets[/] ({where}): [{style}]{up}/{len(monitoring.targets)} up[/]" + (", down:" if down else "")
    )
    if not down:
        return line
    table = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
    for _ in range(3):
        table.add_column()
    for target in down:
        table.add_row(
            f"  {escape(target.instance)}", escape(target.job), f"[red]{escape(target.last_error or target.health)}[/]"
        )
    return Group(line, table)


def _urls(report: ClusterStatus) -> RenderableType | None:
    urls = report.urls
    rows: list[tuple[str, str]] = []
    if urls.prometheus:
        rows.append(("Prometheus", escape(urls.prometheus)))
    if urls.grafana:
        skipped = next((s for s in report.services if s.unit == GRAFANA and s.state is ServiceState.SKIPPED), None)
        if skipped is not None:
            rows.append(("Grafana", f"[yellow]skipped: {escape(skipped.detail)}[/]"))
        else:
            shown = f"{escape(urls.grafana)}"
            if urls.grafana_password_file:
                shown += f"  [dim]admin password in {escape(_shorter(urls.grafana_password_file))}[/]"
            rows.append(("Grafana", shown))
    if urls.alertmanager:
        rows.append(("Alertmanager", escape(urls.alertmanager)))
    if not rows:
        return None
    table = Table(box=None, pad_edge=False, show_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for name, value in rows:
        table.add_row(name, value)
    return table


def _shorter(path: str) -> str:
    """A path relative to the working directory when it lies below it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd().resolve()) else path
    except (OSError, ValueError):
        return path


def _verdict(report: ClusterStatus) -> RenderableType:
    if report.ok:
        skipped = sum(service.state is ServiceState.SKIPPED for service in report.services)
        active = len(report.services) - skipped
        return Text.from_markup(
            f"[green]cluster OK[/]: {len(report.nodes)} nodes reachable, {active} services active"
            + (f" ({skipped} skipped)" if skipped else "")
            + (f", {len(report.monitoring.targets)} targets up" if report.monitoring else "")
        )
    lines: list[RenderableType] = [
        Text.from_markup(
            f"[bold red]cluster NOT OK[/]: {len(report.problems)} problem{'s' if len(report.problems) != 1 else ''}"
        )
    ]
    for problem in report.problems:
        lines.append(Text.from_markup(f"  [bold red]✗[/] {escape(problem.message)}"))
        if problem.hint:
            lines.append(Text.from_markup(f"    [dim]hint:[/] {escape(problem.hint)}"))
    return Group(*lines)
