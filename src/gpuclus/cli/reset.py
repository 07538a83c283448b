"""`gpuclus reset`: undo a deploy on some or all nodes (services, packages, files, mounts, targets)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec, require_typed_name
from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.output import Output
from gpuclus.spec import hostlist

# Said in the plan and the docs: what a reset never touches, and what it deletes that is not config.
KEPT = [
    "user data: /home, and the NFS export directories with their content (unless --purge-data)",
    "the admin user, its authorized_keys (gpuclus' login key), openssh-server, sudo, python3",
    "the NVIDIA driver and CUDA toolkit (see docs/reset.md)",
    "on this machine: .gpuclus/secrets (munge key, passwords) and .gpuclus/ssh (key, known_hosts)",
]
DELETED_DATA = [
    "Slurm's accounting database (MariaDB's data directory) and StateSaveLocation (job state)",
    "Prometheus' and Alertmanager's stored data",
]


def reset(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML) the cluster was deployed from.")] = DEFAULT_SPEC,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Only these nodes, as a hostlist (e.g. 'gpu[01-02]'); default: all.")
    ] = None,
    purge_data: Annotated[
        bool,
        typer.Option(
            "--purge-data",
            help="Also delete the content of the NFS export directories (never /home). Asks for the cluster "
            "name to be typed; --yes is not enough.",
        ),
    ] = False,
    confirm_purge: Annotated[
        str | None,
        typer.Option("--confirm-purge", help="The cluster's name, confirming --purge-data without a prompt."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List per node what would be removed; touch nothing.")
    ] = False,
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More Ansible detail in the run log.")
    ] = 0,
    json_mode: JsonOption = False,
) -> None:
    """Remove what gpuclus installed and configured from the nodes; a reset node can be deployed again.

    Services gpuclus started are stopped and disabled, the packages it added
    purged (with the dependencies only they needed), its files removed, the
    cluster's NFS mounts unmounted and taken out of /etc/fstab, and /etc/hosts
    loses the cluster's lines. Resetting some nodes (--nodes) also takes them
    out of Prometheus' targets on the monitoring node; the next deploy puts
    back those still in the spec. Kept: /home, the NFS exports' data, the admin
    user and its SSH access, gpuclus' key and secrets here. Slurm's accounting
    database and job state are removed (they are gpuclus' data). After a reset
    of every node `gpuclus plan` says nothing is deployed. Unreachable nodes
    are named and left out. Asks first (--yes to skip; required without a
    terminal); --purge-data needs the cluster name typed (or --confirm-purge).

    Exit 0 when every node was reset, 1 when a task failed or it was not
    confirmed, 2 for bad options, 3 for an invalid spec, 4 when nodes were
    unreachable (the others are reset), 130 when interrupted.
    """
    from gpuclus.reset import pipeline

    out = Output(json_mode=json_mode)
    payload: dict[str, Any] = {}
    with handled(out, payload):
        loaded = load_checked_spec(spec, out)
        chosen = pipeline.choose_nodes(nodes, loaded)
        everyone = [node.name for node in loaded.topology.nodes]
        payload.update({"nodes": chosen, "full": chosen == everyone, "purge_data": purge_data})
        if confirm_purge is not None and not purge_data:
            raise UsageError("--confirm-purge goes with --purge-data", "add --purge-data, or leave --confirm-purge out")
        if dry_run:
            from gpuclus.reset.catalog import plan_per_node

            plan = plan_per_node(loaded, chosen)
            payload.update({"dry_run": True, "plan": plan, "kept": KEPT, "deleted_data": DELETED_DATA})
            _show_plan(out, plan, chosen, everyone, purge_data)
            out.emit({"ok": True, **payload})
            return
        _confirm(out, loaded.spec.cluster.name, chosen, everyone, yes=yes, purge=purge_data, typed=confirm_purge)
        request = pipeline.ResetRequest(spec_path=spec, nodes=nodes, purge_data=purge_data, verbosity=verbose)
        result = _run(out, request, loaded)
        payload.update(
            {
                "ok": result.exit_code == 0,
                "exit_code": int(result.exit_code),
                "run_dir": str(result.run_dir),
                "unreachable": result.unreachable,
                "forgot_last_applied": result.forgot_last_applied,
                **result.record.as_dict(),
            }
        )
        out.emit(payload)
        if not json_mode:
            _print_summary(out, result, chosen)
        if result.exit_code != 0:
            raise typer.Exit(int(result.exit_code))


def _show_plan(
    out: Output, plan: dict[str, dict[str, list[str]]], chosen: list[str], everyone: list[str], purge: bool
) -> None:
    scope = "every node of the cluster" if chosen == everyone else "some nodes; the others keep running"
    out.result(f"gpuclus reset would reset {escape(hostlist.compress(chosen))} ({scope}), where present:")
    for name, items in plan.items():
        out.result(f"[bold]{escape(name)}[/] [dim]({escape(', '.join(items['roles']))})[/]")
        out.result(f"  stop and disable: {escape(', '.join(items['units']))}")
        out.result(f"  purge packages:   {escape(', '.join(items['packages']))} (and what only they needed)")
        out.result(f"  remove:           {escape(', '.join(items['paths']))}")
    out.result(
        "  everywhere: the cluster's lines in /etc/hosts, NFS mounts in /etc/fstab, /etc/ssh/ssh_known_hosts;"
        " on compute nodes gpuclus' lines in /etc/pam.d/sshd (login containment)"
    )
    if chosen != everyone:
        out.result("  on the monitoring node: these nodes' Prometheus targets (deploy puts back those in the spec)")
    out.result("deleted with it (gpuclus' data): " + escape("; ".join(DELETED_DATA)))
    if purge:
        out.result("[red]--purge-data[/]: the content of the NFS export directories is deleted too (never /home)")
    out.result("kept: " + escape("; ".join(KEPT)))


def _confirm(
    out: Output, cluster: str, chosen: list[str], everyone: list[str], *, yes: bool, purge: bool, typed: str | None
) -> None:
    """Ask before tearing down; --purge-data needs the cluster's name, typed or given with --confirm-purge."""
    interactive = _interactive()
    if purge:
        require_typed_name(
            cluster,
            typed,
            deletes="--purge-data deletes everything in the NFS export directories",
            flag="--confirm-purge",
            interactive=interactive,
        )
    if yes:
        return
    if not interactive:
        raise UsageError("reset asks for confirmation and there is no terminal", "pass --yes to reset without asking")
    what = "every node of" if chosen == everyone else f"{hostlist.compress(chosen)} in"
    if not typer.confirm(f"Reset {what} cluster {cluster}? Services stop and gpuclus' packages go", err=True):
        raise GpuclusError("not confirmed; nothing was changed", exit_code=ExitCode.FAILED)


def _interactive() -> bool:
    return sys.stdin.isatty()


def _run(out: Output, request: Any, loaded: Any) -> Any:
    """The reset with the deploy's progress lines; Ctrl-C stops Ansible (twice: at once)."""
    from gpuclus.cli.deploy_view import run_with_progress
    from gpuclus.reset import pipeline

    return run_with_progress(out, request, loaded, run=pipeline.reset)


def _print_summary(out: Output, result: Any, chosen: list[str]) -> None:
    record = result.record
    changed = record.changed_total()
    reset_nodes = [name for name in chosen if name not in result.unreachable]
    if record.status in {"successful", "unreachable"} and not any(not f.unreachable for f in record.failures):
        out.result(
            f"[green]✓[/] reset {escape(hostlist.compress(reset_nodes))}: {changed} changed in {result.seconds:.0f} s"
            f" (run {record.id})"
        )
        if result.unreachable:
            out.result(f"  [yellow]not reset[/] (unreachable): {escape(hostlist.compress(result.unreachable))}")
        if result.full:
            out.result("  nothing is deployed now: `gpuclus deploy` builds the cluster again from scratch")
        return
    out.result(f"[red]✗[/] reset run {record.id} {record.status} after {result.seconds:.0f} s")
    if record.error:
        out.result(f"  Ansible said: {escape(record.error)}")
    failed = record.failed_hosts()
    if failed:
        out.result(f"  failed or unreachable: {escape(', '.join(failed))} — fix, then run the reset again")
