"""Drain nodes in Slurm and wait for their jobs, through the controller's SSH session.

A node leaves Slurm only once nothing runs on it: slurm.conf loses its
NodeName line at the next deploy, and slurmctld restarted with a job on a
node it no longer knows would lose that job. Every command runs on the
controller as the admin user (sudo for scontrol and scancel).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuclus.errors import GpuclusError
from gpuclus.ssh.client import CommandResult

# The drain reason: an admin reading `sinfo -R` sees who drained the node and why.
REASON = "gpuclus: being removed from the cluster"
POLL_S = 5.0

Run = Callable[[str], CommandResult]


@dataclass
class DrainOutcome:
    drained: list[str]  # nodes Slurm drained
    unknown: list[str]  # nodes Slurm does not know (never deployed): nothing to drain
    cancelled: list[str]  # job ids cancelled (--force)
    waited_s: float = 0.0


def drain_and_wait(
    run: Run,
    nodes: list[str],
    hostlist_text: str,
    *,
    force: bool,
    timeout_s: float,
    progress: Callable[[str], None],
    reason: str = REASON,
    already_out: Sequence[str] = (),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DrainOutcome:
    """Drain ``nodes``, cancel their jobs when ``force``, and wait until none runs there.

    Nodes in ``already_out`` (drained or down by someone else) keep their
    state and reason; only their jobs are waited for.
    """
    known = _known_to_slurm(run, nodes)
    outcome = DrainOutcome(drained=known, unknown=[node for node in nodes if node not in known], cancelled=[])
    if not known:
        return outcome
    names = ",".join(known)
    to_drain = ",".join(node for node in known if node not in already_out)
    drained = (
        run(f"sudo -n scontrol update NodeName={shlex.quote(to_drain)} State=DRAIN Reason={shlex.quote(reason)}")
        if to_drain
        else None
    )
    if drained is not None and drained.exit_status != 0:
        raise GpuclusError(
            f"could not drain {hostlist_text}: {(drained.stderr or drained.stdout).strip()}",
            "check that slurmctld runs (`gpuclus validate --only cluster`)",
        )
    started = clock()
    if force:
        outcome.cancelled = jobs_on(run, names)
        if outcome.cancelled:
            cancel = run(f"sudo -n scancel --nodelist={shlex.quote(names)}")
            if cancel.exit_status != 0:
                raise GpuclusError(f"scancel on {hostlist_text} failed: {cancel.stderr.strip()}")
            progress(f"cancelled job(s) {', '.join(outcome.cancelled)} on {hostlist_text}")
            # A cancelled job stays COMPLETING until its node's slurmd confirms the
            # end; a dead node never does, and Slurm would wait SlurmdTimeout.
            # Marking the leaving nodes DOWN lets slurmctld clean them up now.
            down = run(f"sudo -n scontrol update NodeName={shlex.quote(names)} State=DOWN Reason={shlex.quote(reason)}")
            if down.exit_status != 0:
                raise GpuclusError(f"could not mark {hostlist_text} down: {(down.stderr or down.stdout).strip()}")
    last_left: list[str] = []
    while True:
        left = jobs_on(run, names)
        if not left:
            outcome.waited_s = clock() - started
            return outcome
        waited = clock() - started
        if waited > timeout_s:
            raise GpuclusError(
                f"job(s) {', '.join(left)} still run on {hostlist_text} after {waited:.0f} s; the nodes stay drained",
                "wait and run the command again, or add --force to cancel those jobs "
                f"(`sudo scontrol update NodeName={names} State=RESUME` undoes the drain)",
            )
        # Said again only when the jobs left change, not at every poll.
        if left != last_left:
            progress(f"waiting for job(s) {', '.join(left)} on {hostlist_text} to finish ({waited:.0f} s)")
            last_left = left
        sleep(POLL_S)


def jobs_on(run: Run, names: str) -> list[str]:
    """Ids of the jobs pending on or running on any of ``names`` (comma-separated)."""
    listed = run(
        f"squeue --noheader --nodelist={shlex.quote(names)} --states=RUNNING,COMPLETING,CONFIGURING --format=%i"
    )
    if listed.exit_status != 0:
        raise GpuclusError(f"squeue failed on the controller: {(listed.stderr or listed.stdout).strip()}")
    return [line.strip() for line in listed.stdout.splitlines() if line.strip()]


def _known_to_slurm(run: Run, nodes: list[str]) -> list[str]:
    """The nodes slurmctld has a record of (a node added to the spec but never deployed has none)."""
    shown = run("sinfo --noheader --Node --format=%N")
    if shown.exit_status != 0:
        raise GpuclusError(
            f"sinfo failed on the controller: {(shown.stderr or shown.stdout).strip()}",
            "check that slurmctld runs (`gpuclus validate --only cluster`)",
        )
    listed = {line.strip() for line in shown.stdout.splitlines()}
    return [node for node in nodes if node in listed]
