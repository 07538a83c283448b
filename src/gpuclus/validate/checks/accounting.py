"""Stage "accounting": the jobs this run started are in slurmdbd (sacct)."""

from __future__ import annotations

import shlex
import time

from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, Outcome, Status, skipped

# slurmctld sends finished jobs to slurmdbd in the background: rows appear
# a few seconds after a job ends.
WAIT_FOR_ROWS_S = 45.0


def jobs_in_sacct(ctx: Context) -> Outcome:
    if not ctx.spec.slurm.accounting:
        return skipped("accounting is off in the spec (slurm.accounting: false)")
    usable, _dead = ctx.launchable(ctx.compute)
    if not usable:
        return skipped("no compute node can start a job (see launch.srun)")
    # A job of its own, so the check means the same with --only accounting.
    own = ctx.srun("true", usable[:1], time_limit_s=60)
    if own.exit_status != 0:
        return Outcome(status=Status.FAIL, message=f"could not run a job: {own.stderr.strip()[-200:]}")
    expected = ctx.jobs_succeeded
    query = (
        "sacct --noheader --parsable2 --allusers --allocations --starttime=now-1day "
        f"--name={shlex.quote(ctx.job_name)} --format=JobID,State"
    )
    deadline = time.monotonic() + WAIT_FOR_ROWS_S
    while True:
        answer = ctx.run(query, timeout=30)
        rows = [line.split("|") for line in answer.stdout.splitlines() if line.strip()]
        completed = sum(1 for row in rows if len(row) == 2 and row[1] == "COMPLETED")
        if answer.exit_status == 0 and completed >= expected:
            break
        if time.monotonic() > deadline:
            detail = answer.stderr.strip()[-200:] if answer.exit_status else f"{completed} of {expected} listed"
            return Outcome(
                status=Status.FAIL,
                message=f"sacct does not list this run's jobs after {WAIT_FOR_ROWS_S:.0f} s: {detail}",
                value=completed,
                expected=f">= {expected}",
                unit="jobs",
                hint=f"on {ctx.controller.name}: `systemctl status slurmdbd mariadb`, `sacctmgr show cluster`; "
                "`gpuclus deploy --only slurm` registers the cluster again",
            )
        time.sleep(2)
    return Outcome(
        status=Status.PASS,
        message=f"{completed} completed job(s) of this run in sacct",
        value=completed,
        expected=f">= {expected}",
        unit="jobs",
    )


CHECKS = [
    Check("accounting.sacct", Level.STANDARD, "this run's finished jobs appear in sacct", jobs_in_sacct),
]
