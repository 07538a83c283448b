"""`gpuclus nodes remove`: take compute nodes out of a deployed cluster, spec included."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, load_checked_spec
from gpuclus.output import Output

app = typer.Typer(help="Change which nodes the cluster has (day two).", no_args_is_help=True)

# How long to wait for the jobs on the nodes by default: a training job may run for hours,
# but a command that sits silent for a day helps nobody; --timeout sets it.
DEFAULT_TIMEOUT_S = 3600


@app.command("remove")
def remove(
    names: Annotated[list[str], typer.Argument(help="Nodes to remove: names or hostlists (e.g. gpu03 'gpu[05-06]').")],
    spec: Annotated[Path, typer.Option("--spec", help="Cluster spec (YAML).")] = DEFAULT_SPEC,
    force: Annotated[
        bool, typer.Option("--force", help="Cancel the jobs running on the nodes instead of waiting for them.")
    ] = False,
    timeout: Annotated[
        int, typer.Option("--timeout", help="Seconds to wait for the nodes' jobs before giving up.", min=0)
    ] = DEFAULT_TIMEOUT_S,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the spec change and the steps; touch nothing.")
    ] = False,
    json_mode: JsonOption = False,
) -> None:
    """Take compute nodes out of the cluster, and out of the spec.

    In order: the nodes are drained in Slurm and gpuclus waits until no job
    runs on them (--force cancels those jobs); the spec loses them (an entry
    of their own is cut out with its comments, a range such as gpu[01-04]
    shrinks, partitions that list them drop them); then a deploy takes them
    out of slurm.conf, /etc/hosts, the SSH known_hosts and Prometheus' targets
    on every other node, restarting Slurm's daemons as the node set change
    needs (running jobs on other nodes survive it); last, slurmd is stopped
    and disabled on the removed nodes when they can still be reached, and
    gpuclus forgets their host keys. The nodes themselves are not wiped.

    Only plain compute nodes can be removed. Exit 0 when all went through,
    1 when the wait timed out or the deploy failed (the spec is already
    updated then: run `gpuclus deploy` again), 2 for bad names, 3 for an
    invalid spec, 4 when the controller is unreachable, 130 when interrupted.
    """
    from gpuclus.nodes.plan import plan_removal

    out = Output(json_mode=json_mode)
    payload: dict[str, Any] = {}
    with handled(out, payload):
        loaded = load_checked_spec(spec, out)
        plan = plan_removal(loaded, spec.name, names)
        payload.update({"nodes": plan.names, "spec_diff": plan.diff})
        if dry_run:
            _show_plan(out, plan, spec)
            out.emit({"ok": True, "dry_run": True, **payload})
            return
        _remove(out, loaded, plan, spec, force=force, timeout=timeout, payload=payload)


def _show_plan(out: Output, plan: Any, spec: Path) -> None:
    out.note(f"would remove {plan.hostlist}: drain and wait for their jobs, write {spec}, deploy, stop their slurmd")
    if not out.json_mode:
        out.raw(plan.diff)


def _remove(
    out: Output, loaded: Any, plan: Any, spec: Path, *, force: bool, timeout: int, payload: dict[str, Any]
) -> None:
    from gpuclus.nodes.workflow import remove_nodes

    done = remove_nodes(
        loaded,
        plan,
        spec,
        _RemovalView(out, payload),
        force=force,
        timeout_s=timeout,
        load=lambda path: load_checked_spec(path, out),
    )
    if done.exit_code != 0:
        out.warn(f"the deploy did not finish: {spec} already leaves {plan.hostlist} out; run `gpuclus deploy {spec}`")
        out.emit({"ok": False, "exit_code": int(done.exit_code), **payload})
        raise typer.Exit(int(done.exit_code))
    payload["retired"] = [outcome.as_dict() for outcome in done.retired]
    for outcome in done.retired:
        if outcome.error:
            out.warn(f"{outcome.node}: slurmd not stopped ({outcome.error}); stop it there by hand")
    out.result(f"removed {plan.hostlist} from the cluster and from {spec}")
    out.emit({"ok": True, "exit_code": 0, **payload})


class _RemovalView:
    """The removal's observer: each step as a note, the deploy with its phase lines and summary.

    It fills ``payload`` as the steps are done, so an error part way reports what was already done.
    """

    def __init__(self, out: Output, payload: dict[str, Any]) -> None:
        self.out = out
        self.payload = payload

    def progress(self, text: str) -> None:
        self.out.note(f"[dim]{escape(text)}[/]")

    def drained(self, plan: Any, drained: Any) -> None:
        self.payload.update({"cancelled_jobs": drained.cancelled, "not_in_slurm": drained.unknown})
        self.out.note(
            f"drained {plan.hostlist}"
            + (f" (waited {drained.waited_s:.0f} s for their jobs)" if drained.waited_s >= 1 else "")
            + (f"; not in Slurm: {', '.join(drained.unknown)}" if drained.unknown else "")
        )

    def spec_written(self, plan: Any, spec: Path) -> None:
        self.payload["spec_written"] = True
        self.out.note(f"{spec}: {plan.hostlist} taken out")

    def watch_deploy(self, request: Any, loaded: Any, deploy: Any) -> Any:
        from gpuclus.cli.deploy_view import run_with_progress

        return run_with_progress(self.out, request, loaded, run=deploy)

    def deployed(self, result: Any) -> None:
        from gpuclus.cli.deploy_view import record_deploy

        record_deploy(self.out, self.payload, result)
