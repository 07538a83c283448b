"""`gpuclus preflight`: SSH, sudo, OS, Python, hostname, names, clock, disk and GPUs on every node."""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.errors import UsageError
from gpuclus.output import Output

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def preflight(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    password: Annotated[
        bool,
        typer.Option(
            "--password",
            help="Ask for the admin user's SSH password once and install gpuclus' key on every node (ssh-copy-id).",
        ),
    ] = False,
    min_disk_gb: Annotated[float, typer.Option("--min-disk-gb", help="Free space needed on / of each node.")] = 10.0,
    json_mode: JsonOption = False,
) -> None:
    """Check every node before a deploy, in parallel over SSH.

    SSH with gpuclus' key (host keys learned on first contact into
    .gpuclus/ssh/known_hosts, and refused if they ever change), passwordless
    sudo, a supported OS, python3, the hostname, name resolution, clock skew
    against the controller (< 5 s, munge needs it), free disk, and NVIDIA GPUs
    on the PCI bus against the spec (fake GPUs are reported as such). Every
    failure comes with a hint. `gpuclus deploy` runs this first.

    Exit 0 when nothing failed (warnings allowed), 1 when a check failed,
    4 when a node could not be reached.
    """
    from gpuclus.ssh.preflight import preflight_exit_code, preflight_spec

    out = Output(json_mode=json_mode)
    with handled(out):
        loaded = load_checked_spec(spec, out)
        if password:
            _bootstrap_keys(loaded, spec, out)
        reports = preflight_spec(loaded, spec, min_disk_gb)
        code = preflight_exit_code(reports)
        if json_mode:
            out.emit({"ok": code == 0, "exit_code": int(code), "nodes": [report.as_dict() for report in reports]})
        else:
            print_reports(out, reports)
        if code != 0:
            raise typer.Exit(int(code))


def print_reports(out: Output, reports: list[Any]) -> None:
    names = [check.name for check in reports[0].checks] if reports else []
    for report in reports:
        names += [check.name for check in report.checks if check.name not in names]
    table = Table(box=None, pad_edge=False)
    table.add_column("node")
    for name in names:
        table.add_column(name)
    for report in reports:
        cells = {check.name: check for check in report.checks}
        row = [escape(report.node)]
        for name in names:
            check = cells.get(name)
            row.append(f"[{_STYLE[check.status]}]{check.status}[/]" if check else "-")
        table.add_row(*row)
    out.out.print(table)
    for report in reports:
        for check in report.checks:
            if check.status in {"fail", "warn"}:
                colour = _STYLE[check.status]
                out.out.print(f"  [{colour}]{escape(report.node)} {check.name}:[/] {escape(check.message)}")
                if check.hint:
                    out.out.print(f"    [dim]hint:[/] {escape(check.hint)}")


def _bootstrap_keys(loaded: Any, spec: Path, out: Output) -> None:
    from gpuclus.ssh.preflight import install_keys

    user = loaded.spec.cluster.admin_user
    try:
        secret = getpass.getpass(f"SSH password for {user} on the nodes: ")
    except (EOFError, OSError):
        raise UsageError("--password needs a terminal to ask for the password") from None
    install_keys(loaded, spec, secret, lambda node: out.note(f"installed gpuclus' key on {escape(node)}"))
