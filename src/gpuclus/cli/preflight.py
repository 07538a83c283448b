"""`gpuclus preflight`: SSH, sudo, OS, Python, hostname, names, clock, disk and GPUs on every node."""

from __future__ import annotations

import getpass
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.errors import UsageError
from gpuclus.output import Output, plural

_STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def preflight(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    password: Annotated[
        bool,
        typer.Option(
            "--password",
            help="Ask for the admin user's SSH password once and install gpuclus' key on every node (ssh-copy-id). "
            "New host keys are shown first and must be confirmed (or come from --known-hosts).",
        ),
    ] = False,
    known_hosts_file: Annotated[
        Path | None,
        typer.Option(
            "--known-hosts",
            metavar="FILE",
            help="With --password: trust the host keys in this OpenSSH known_hosts file (e.g. ssh-keyscan output "
            "whose fingerprints you checked); a node offering another key is refused.",
        ),
    ] = None,
    accept_new_host_keys: Annotated[
        bool,
        typer.Option(
            "--accept-new-host-keys",
            help="With --password: trust host keys seen for the first time without asking "
            "(ssh's StrictHostKeyChecking=accept-new); changed keys are still refused.",
        ),
    ] = False,
    min_disk_gb: Annotated[float, typer.Option("--min-disk-gb", help="Free GB needed on / of each node.")] = 10.0,
    json_mode: JsonOption = False,
) -> None:
    """Check every node before a deploy, in parallel over SSH.

    SSH with gpuclus' key (host keys learned on first contact into
    .gpuclus/ssh/known_hosts, and refused if they ever change), passwordless
    sudo, a supported OS, python3, the hostname, name resolution, clock skew
    against the controller (< 5 s, munge needs it), free disk, and NVIDIA GPUs
    on the PCI bus against the spec (fake GPUs are reported as such). Every
    failure comes with a hint. `gpuclus deploy` runs this first.

    --password reads every node's host key first, without logging in. A key
    not trusted yet (never seen, or only learned on first contact) is shown
    as `node (address): ED25519 key SHA256:...` and, in a terminal, the
    password is sent only once you confirm them all; without a terminal, pass
    --known-hosts FILE or --accept-new-host-keys. A node whose key differs
    from .gpuclus/ssh/known_hosts or from FILE gets nothing.

    Exit 0 when nothing failed (warnings allowed), 1 when a check failed,
    2 when new host keys were not confirmed (nothing was sent), 4 when a node
    could not be reached or its host key was refused.
    """
    from gpuclus.preflight.bootstrap import bootstrap_keys
    from gpuclus.preflight.runner import preflight_exit_code

    out = Output(json_mode=json_mode)
    extra: dict[str, Any] = {}
    with handled(out, extra):
        if not password and (known_hosts_file is not None or accept_new_host_keys):
            raise UsageError(
                "--known-hosts and --accept-new-host-keys go with --password",
                "without --password no password is sent; host keys are learned on first contact",
            )
        loaded = load_checked_spec(spec, out)
        if password:
            bootstrap_keys(
                loaded,
                spec,
                _KeyView(out, extra),
                known_hosts_file=known_hosts_file,
                accept_new=accept_new_host_keys,
            )
        started = time.monotonic()
        reports = _probe(out, loaded, spec, min_disk_gb)
        seconds = time.monotonic() - started
        code = preflight_exit_code(reports)
        if json_mode:
            payload = {
                "ok": code == 0,
                "exit_code": int(code),
                "seconds": round(seconds, 1),
                "nodes": [report.as_dict() for report in reports],
            }
            out.emit({**payload, **extra})
        else:
            print_reports(out, reports)
            out.note(f"preflight: {plural(len(reports), 'node')} in {seconds:.1f} s")
        if code != 0:
            raise typer.Exit(int(code))


def _probe(out: Output, loaded: Any, spec: Path, min_disk_gb: float) -> list[Any]:
    """preflight_spec, with a spinner on stderr counting the nodes that answered.

    A node that does not answer takes up to its SSH timeout: without a count the
    command would look hung until the slowest node gave up.
    """
    from gpuclus.preflight.runner import preflight_spec

    if out.json_mode:
        return preflight_spec(loaded, spec, min_disk_gb)
    total = len(loaded.topology.nodes)
    # rich draws the spinner only on a terminal; in a log it prints nothing.
    with out.err.status(_progress(0, total)) as status:

        def answered(report: Any, count: int, total: int) -> None:
            status.update(_progress(count, total))

        return preflight_spec(loaded, spec, min_disk_gb, on_answer=answered)


def _progress(count: int, total: int) -> str:
    return f"preflight: {count}/{total} {'node' if total == 1 else 'nodes'} answered"


def print_reports(out: Output, reports: list[Any]) -> None:
    names = [check.name for check in reports[0].checks] if reports else []
    for report in reports:
        names += [check.name for check in report.checks if check.name not in names]
    # A check every node skipped (the GPU-node checks on a CPU or sandbox
    # cluster) gets one line below instead of a column of "skip".
    skipped_everywhere = [
        name
        for name in names
        if all(check.status == "skip" for report in reports for check in report.checks if check.name == name)
    ]
    names = [name for name in names if name not in skipped_everywhere]
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
    if skipped_everywhere:
        names_skipped = ", ".join(skipped_everywhere)
        out.out.print(f"  [dim]skipped on every node (--json gives each reason): {escape(names_skipped)}[/]")
    for report in reports:
        for check in report.checks:
            if check.status in {"fail", "warn"}:
                colour = _STYLE[check.status]
                out.out.print(f"  [{colour}]{escape(report.node)} {check.name}:[/] {escape(check.message)}")
                if check.hint:
                    out.out.print(f"    [dim]hint:[/] {escape(check.hint)}")


def _stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


class _KeyView:
    """The bootstrap's observer at the terminal: refused keys as warnings, new keys shown, the confirmation and
    the password asked for (getpass, never echoed), each installed key as a note.

    It fills ``extra`` with the host keys first, so an error after the scan still reports them.
    """

    def __init__(self, out: Output, extra: dict[str, Any]) -> None:
        self.out = out
        self.extra = extra

    def scanned(self, checks: list[Any]) -> None:
        self.extra["host_keys"] = [check.as_dict() for check in checks]
        for check in checks:
            if check.refused:
                self.out.warn(f"{check.node}: {check.message}; nothing will be sent to it")

    def can_ask(self) -> bool:
        return _stdin_is_terminal()

    def new_keys(self, new: list[Any], how: Any) -> None:
        from gpuclus.preflight.bootstrap import NewKeys

        # The keys must be seen to be confirmed: on stderr even with --json when asking.
        show = self.out.err.print if how is NewKeys.ASKING else self.out.note
        show(f"{plural(len(new), 'host key')} not trusted yet:")
        for check in new:
            seen = f" [dim]({escape(check.message)})[/]" if check.message != "not seen before" else ""
            show(f"  {escape(check.describe())}{seen}")
        if how is NewKeys.ACCEPTED:
            self.out.note("trusting them: --accept-new-host-keys")

    def trust(self, new: list[Any]) -> bool:
        return _confirm(self.out, _question(len(new)))

    def password(self, user: str) -> str | None:
        try:
            return getpass.getpass(f"SSH password for {user} on the nodes: ")
        except (EOFError, OSError):
            return None

    def installed(self, node: str) -> None:
        self.out.note(f"installed gpuclus' key on {escape(node)}")


def _question(count: int) -> str:
    keys = "this host key" if count == 1 else f"these {count} host keys"
    return f"Trust {keys} and send the password? [y/N] "


def _confirm(out: Output, question: str) -> bool:
    out.err.print(escape(question), end="")
    return sys.stdin.readline().strip().lower() in {"y", "yes"}
