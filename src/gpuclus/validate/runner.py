"""A validation run: the selected checks in order on the controller's session (slurm/session.py), always clean up.

The run owns one job name; whatever happens (a check crashes, the connection
drops, Ctrl-C) the ``finally`` cancels every job that still carries it, so
nothing validate started is left queued or running.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.hints import with_spec
from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import Remote
from gpuclus.slurm.session import connect_controller, require_slurm
from gpuclus.spec.load import LoadedSpec
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.topology import Node, Topology
from gpuclus.ssh.client import SshFailure
from gpuclus.state import StateDir
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context, Options
from gpuclus.validate.results import CheckResult, Level, Outcome, Status

Progress = Callable[[Check, CheckResult | None], None]  # called before (None) and after each check


@dataclass(frozen=True)
class Report:
    cluster: str
    level: Level
    job_name: str
    started: str
    duration_s: float
    results: list[CheckResult]

    @property
    def ok(self) -> bool:
        return not any(result.status is Status.FAIL for result in self.results)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.ok else ExitCode.FAILED

    def failures(self) -> list[dict[str, Any]]:
        """One entry per failing node of each check (or per check, when it has no node results)."""
        found: list[dict[str, Any]] = []
        for result in self.results:
            if result.status is not Status.FAIL:
                continue
            hint = result.outcome.hint
            failing = [node for node in result.outcome.nodes if node.status is Status.FAIL]
            if not failing:
                found.append({"check": result.id, "node": None, "message": result.outcome.message, "hint": hint})
            for node in failing:
                found.append(
                    {"check": result.id, "node": node.node, "message": node.message, "hint": node.hint or hint}
                )
        return found

    def per_node(self) -> dict[str, dict[str, str]]:
        nodes: dict[str, dict[str, str]] = {}
        for result in self.results:
            for node in result.outcome.nodes:
                nodes.setdefault(node.node, {})[result.id] = node.status.value
        return nodes

    def counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in Status}
        for result in self.results:
            counts[result.status.value] += 1
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": int(self.exit_code),
            "cluster": self.cluster,
            "level": self.level.label,
            "job_name": self.job_name,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "counts": self.counts(),
            "checks": [result.as_dict() for result in self.results],
            "failures": self.failures(),
            "nodes": self.per_node(),
        }


def validate_cluster(
    spec_path: Path,
    loaded: LoadedSpec,
    checks: list[Check],
    *,
    level: Level,
    selected: list[Node],
    options: Options,
    progress: Progress | None = None,
) -> Report:
    """`gpuclus validate`'s one call: gpuclus' key, the controller's session, Slurm there at all, then the checks."""
    assert loaded.spec is not None and loaded.topology is not None and loaded.topology.controller is not None
    state = StateDir.beside(spec_path)
    if not state.private_key.exists():
        raise UsageError(
            f"no gpuclus SSH key in {state.ssh_dir}",
            "run validate from the directory the cluster was deployed from, or copy that directory's .gpuclus/ "
            "here; a cluster not deployed yet: `gpuclus preflight --password`, then `gpuclus deploy`",
        )
    remote = connect_controller(loaded.spec, loaded.topology, state.private_key, state.known_hosts)
    try:
        require_slurm(remote, loaded.topology.controller.name, spec_path)
        return run_checks(
            remote,
            loaded.spec,
            loaded.topology,
            checks,
            level=level,
            selected=selected,
            options=options,
            progress=progress,
        )
    finally:
        remote.close()


def run_checks(
    remote: Remote,
    spec: ClusterSpec,
    topology: Topology,
    checks: list[Check],
    *,
    level: Level,
    selected: list[Node],
    options: Options | None = None,
    progress: Progress | None = None,
) -> Report:
    job_name = f"gpuclus-validate-{secrets.token_hex(4)}"
    ctx = Context(spec, topology, remote, job_name, selected, options or Options())
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    results: list[CheckResult] = []
    try:
        for check in checks:
            if progress:
                progress(check, None)
            result = _run_one(check, ctx, results)
            results.append(result)
            if progress:
                progress(check, result)
    finally:
        _cancel_leftovers(remote, job_name)
    return Report(spec.cluster.name, level, job_name, started_at, time.monotonic() - started, results)


def _run_one(check: Check, ctx: Context, earlier: list[CheckResult]) -> CheckResult:
    started = time.monotonic()
    blocked = _blocked_by(check, earlier)
    if blocked:
        outcome = Outcome(status=Status.SKIP, message=blocked)
    else:
        try:
            outcome = _spec_in_hints(check.run(ctx), ctx.options.spec_path)
        except GpuclusError:  # SshFailure, Slurm not deployed: the run cannot go on
            raise
        except OSError as problem:  # the SSH session broke: nothing after this can run either
            raise SshFailure(f"lost the connection to the controller: {problem}") from None
        except Exception as problem:  # a bug in a check must not hide the others' results
            outcome = Outcome(
                status=Status.FAIL,
                message=f"internal error in the check: {type(problem).__name__}: {problem}",
                hint="this is a gpuclus bug; please report it with `gpuclus validate --json` output",
            )
    return CheckResult(check.id, check.stage, check.level, check.title, outcome, time.monotonic() - started)


def _spec_in_hints(outcome: Outcome, spec: Path | None) -> Outcome:
    """The check's hints with the spec's path in the gpuclus commands they suggest."""
    if spec is None:
        return outcome
    nodes = [replace(node, hint=with_spec(node.hint, spec)) if node.hint else node for node in outcome.nodes]
    return replace(outcome, nodes=nodes, hint=with_spec(outcome.hint, spec))


def _blocked_by(check: Check, earlier: list[CheckResult]) -> str | None:
    if not check.needs_slurm:
        return None
    for result in earlier:
        if result.id == "cluster.slurmctld" and result.status is Status.FAIL:
            return "slurmctld does not answer (cluster.slurmctld failed)"
    return None


def _cancel_leftovers(remote: Remote, job_name: str) -> None:
    # Best effort on a connection that may be gone; the jobs' --time ends them anyway.
    with contextlib.suppress(Exception):
        remote.run(slurm.cancel_command(job_name), timeout=30)
