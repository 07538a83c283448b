"""`gpuclus deploy` when the spec changes a pinned version: the rolling upgrade, batch by batch."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from rich.markup import escape

from gpuclus.output import Output
from gpuclus.spec import hostlist

# How long a batch waits for the jobs on its nodes (the same default as `nodes remove`).
DRAIN_TIMEOUT_S = 3600


def rolling_upgrade(out: Output, request: Any, loaded: Any, changes: list[Any], max_unavailable: int) -> Any:
    """Drain, upgrade, check and resume the nodes batch by batch; returns the RollingReport."""
    from gpuclus.cli.deploy_view import run_with_progress
    from gpuclus.deploy.last_applied import save_last_applied
    from gpuclus.deploy.pipeline import render_for_run
    from gpuclus.slurm.session import connect_controller
    from gpuclus.state import StateDir
    from gpuclus.upgrade.batches import plan_batches
    from gpuclus.upgrade.detect import installed_slurm, refuse_unsupported_jump
    from gpuclus.upgrade.rolling import BatchDeploy, Rollout, roll

    spec, topology = loaded.spec, loaded.topology
    state = StateDir.beside(request.spec_path)
    batches = plan_batches(topology, max_unavailable)
    remote = connect_controller(spec, topology, state.private_key, state.known_hosts)
    try:

        def run(command: str) -> Any:
            return remote.run(command, timeout=300)

        refuse_unsupported_jump(changes, installed_slurm(run("sinfo -V")))
        out.note(
            f"rolling upgrade: {escape(', '.join(change.describe() for change in changes))}; "
            f"{len(batches)} batch(es), at most {max_unavailable} compute node(s) out of service at a time"
        )

        def deploy_batch(batch: Any) -> BatchDeploy:
            limited = dataclasses.replace(request, limit=",".join(batch.nodes), retry_failed=False)
            result = run_with_progress(out, limited, loaded, only=bool(request.only))
            return BatchDeploy(result.exit_code, {"run_dir": str(result.run_dir), **result.record.as_dict()})

        report = roll(
            Rollout(
                changes=changes,
                batches=batches,
                admin_user=spec.cluster.admin_user,
                run_id=time.strftime("%Y%m%d-%H%M%S"),
                expected=_expected(spec),
                timeout_s=DRAIN_TIMEOUT_S,
            ),
            run,
            deploy_batch,
            lambda text: out.note(f"[dim]{escape(text)}[/]"),
        )
    finally:
        remote.close()
    if report.ok:
        # The whole spec is deployed now, batch by batch: what `gpuclus plan` diffs against.
        save_last_applied(state, render_for_run(request.spec_path, loaded))
    return report


def _expected(spec: Any) -> Any:
    from gpuclus.upgrade.window import Expected

    containers = spec.containers
    return Expected(
        slurm=spec.slurm.version,
        enroot=containers.enroot_version if containers.enroot else None,
        pyxis=containers.pyxis_version if containers.pyxis else None,
        container_image=containers.validate_image if containers.pyxis else None,
    )


def print_rolling(out: Output, report: Any) -> None:
    for index, batch in enumerate(report.batches, start=1):
        nodes = hostlist.compress(batch.nodes)
        status = batch.deploy.get("status", "?") if batch.deploy else "not deployed"
        waited = f", waited {batch.waited_s:.0f} s for jobs" if batch.waited_s >= 1 else ""
        out.result(f"  batch {index}: {escape(nodes)} — deploy {escape(status)}{waited}, {batch.seconds:.0f} s")
        for node, problem in sorted(batch.problems.items()):
            out.result(f"    [red]✗ {escape(node)}[/]: {escape(problem)}")
    what = ", ".join(change.describe() for change in report.changes)
    if report.ok:
        out.result(f"[green]✓[/] upgraded {escape(what)} on every node, {len(report.batches)} batch(es)")
        return
    out.result(f"[red]✗[/] upgrade stopped: {escape(report.stopped or '')}")
    if report.hint:
        out.result(f"  {escape(report.hint)}")
