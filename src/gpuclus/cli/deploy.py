"""`gpuclus deploy` and `gpuclus runs list|show`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.cli.completion import complete_phases
from gpuclus.cli.deploy_view import print_summary, run_with_progress
from gpuclus.deploy import phases
from gpuclus.output import Output

# deploy/phases is the one list; each phase is named once in the help, under --only.
ONLY_HELP = f"Run only these phases (comma-separated), in this order: {phases.described()}."
SKIP_HELP = f"Leave these phases out (comma-separated): {phases.names()}."


def deploy(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    only: Annotated[str | None, typer.Option("--only", help=ONLY_HELP, autocompletion=complete_phases)] = None,
    skip: Annotated[
        str | None,
        typer.Option("--skip", help=SKIP_HELP, autocompletion=complete_phases),
    ] = None,
    limit: Annotated[
        str | None, typer.Option("--limit", help="Only these nodes, as a hostlist (e.g. 'gpu[01-02],head').")
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option("--retry-failed", help="Re-run only the hosts that failed or were unreachable last time."),
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Dry run (Ansible check mode with diffs): change nothing.")
    ] = False,
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More Ansible detail in the run log.")
    ] = 0,
    keep: Annotated[int, typer.Option("--keep", help="Run records to keep under .gpuclus/runs/.", min=1)] = 20,
    no_preflight: Annotated[
        bool, typer.Option("--no-preflight", help="Skip the SSH preflight checks (`gpuclus preflight`) before Ansible.")
    ] = False,
    reboot: Annotated[
        bool,
        typer.Option(
            "--reboot",
            help="Reboot, once, each GPU node whose new NVIDIA driver is not loaded yet: drained in Slurm "
            "first, checked with nvidia-smi after, then resumed.",
        ),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Run every task even when every node still holds the last full deploy's state "
            "(a plain deploy then runs nothing; see docs/deploy.md#nothing-to-do).",
        ),
    ] = False,
    max_unavailable: Annotated[
        int,
        typer.Option(
            "--max-unavailable",
            help="In a rolling upgrade (the spec changes a pinned version), how many compute nodes may be out "
            "of service at a time.",
            min=1,
        ),
    ] = 1,
    json_mode: JsonOption = False,
) -> None:
    """Build the cluster the spec describes: render, then run the phases with Ansible over SSH.

    Phases run in the order --only lists them, each only when the spec needs it
    (the deploy names each phase it skips, and why). Nodes run in parallel; a
    failing or unreachable node does not stop the others, and
    the summary names them (`--retry-failed` re-runs just those). Every run is
    recorded under .gpuclus/runs/ (see `gpuclus runs`). Secrets are generated
    once into .gpuclus/secrets/ and never printed. Ctrl-C stops Ansible and
    every process it started (a second Ctrl-C kills them at once); the next
    deploy picks up from there. One deploy at a time per spec directory.

    A new NVIDIA driver loads at the next boot. gpuclus never reboots a node
    unasked: without --reboot the summary names the nodes that need one (exit
    5); with it each such node is drained, rebooted once, checked and resumed.

    When the spec changes a pinned version since the last deploy (slurm.version,
    the driver branch, CUDA, Enroot, Pyxis) the deploy is a rolling upgrade:
    first the nodes without slurmd and those running slurmctld (so slurmdbd,
    then slurmctld, then slurmd are upgraded, as Slurm requires; a jump Slurm
    cannot make is refused before anything changes), then the compute nodes,
    --max-unavailable at a time: each batch is drained (waiting for its jobs),
    deployed, checked with jobs in a maintenance reservation, and resumed.
    The first batch that fails stops the upgrade with its nodes drained.

    Exit 0 when every task succeeded, 1 when a task failed, 2 for bad options
    or another deploy running, 3 for an invalid spec, 4 when hosts were
    unreachable, 5 when all went well but GPU nodes need a reboot (--reboot),
    130 when interrupted.
    """
    from gpuclus.deploy import pipeline

    out = Output(json_mode=json_mode)
    with handled(out):
        loaded = load_checked_spec(spec, out)
        request = pipeline.DeployRequest(
            spec_path=spec,
            only=only,
            skip=skip,
            limit=limit,
            check=check,
            verbosity=verbose,
            retry_failed=retry_failed,
            keep=keep,
            preflight=not no_preflight,
            reboot=reboot,
            skip_in_sync=not full,
        )
        if not (limit or retry_failed or check) and _rolled(out, request, loaded, max_unavailable, json_mode):
            return
        result = run_with_progress(out, request, loaded, check=check, only=bool(only))
        payload = {
            "ok": result.exit_code == 0,
            "exit_code": int(result.exit_code),
            "run_dir": str(result.run_dir),
            **result.record.as_dict(),
        }
        if json_mode:
            out.emit(payload)
        else:
            print_summary(out, result.record, result.seconds)
        if result.exit_code != 0:
            raise typer.Exit(int(result.exit_code))


def _rolled(out: Output, request: Any, loaded: Any, max_unavailable: int, json_mode: bool) -> bool:
    """Run the deploy as a rolling upgrade when the spec changes a pinned version; False when it does not."""
    from gpuclus.cli.rolling import RollingView, print_rolling
    from gpuclus.upgrade.workflow import run_rolling_upgrade, upgrade_changes

    changes = upgrade_changes(request, loaded)
    if not changes:
        return False
    report = run_rolling_upgrade(request, loaded, changes, max_unavailable, RollingView(out))
    if json_mode:
        out.emit({"ok": report.ok, "exit_code": int(report.exit_code), "upgrade": report.as_dict()})
    else:
        print_rolling(out, report)
    if not report.ok:
        raise typer.Exit(int(report.exit_code))
    return True
