"""Stage "doors": who may enter a compute node, and what a job keeps to itself.

- ``doors.compute-ssh``: each compute node that is not a login node asks its
  own sshd account stack (pamtester, which roles/slurm_adopt installs) about
  a user with no job there (``nobody``: on every node, never an admin) and
  about the admin user. sshd asks the same stack at every login, so a PASS
  means a user without a job is refused and the admin let in, with no job
  and no user's key needed.
- ``doors.job-tmp``: with ``slurm.job_tmp: private``, a job writes a file in
  its /tmp on each compute node; the node's own /tmp (seen over SSH, outside
  any job) and the next job there must not have it.
"""

from __future__ import annotations

import re
import shlex

from gpuclus.spec.models import Role
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, NodeResult, Outcome, Status, skipped

# A user every Debian node has, never in the admins' access list, and who never has a job.
NO_JOB_USER = "nobody"
ADOPT_HINT = (
    "`gpuclus deploy --only slurm` writes the access list and sshd's PAM lines again (roles/slurm_adopt); "
    "by hand: `grep -A3 gpuclus /etc/pam.d/sshd`, `cat /etc/security/gpuclus-compute-access.conf`"
)
_CODE = re.compile(r"^(refused|admitted)=(\d+)$", re.MULTILINE)


def _account_stack_script(admin: str) -> str:
    """Ask sshd's PAM account stack about NO_JOB_USER and the admin; say the exit codes."""
    return (
        "command -v pamtester >/dev/null || { echo no-pamtester; exit 0; }; "
        f"sudo -n pamtester sshd {NO_JOB_USER} acct_mgmt >/dev/null 2>&1; echo refused=$?; "
        f"sudo -n pamtester sshd {shlex.quote(admin)} acct_mgmt 2>&1; echo admitted=$?"
    )


def compute_ssh(ctx: Context) -> Outcome:
    if ctx.spec.slurm.compute_ssh == "open":
        return skipped("slurm.compute_ssh: open: every user may log in to the compute nodes")
    nodes = [node for node in ctx.compute if not node.has(Role.LOGIN)]
    if not nodes:
        return skipped("every selected compute node is also a login node, which lets users in")
    admin = ctx.spec.cluster.admin_user
    answers = ctx.ssh_each(_account_stack_script(admin), nodes, timeout=30)
    rows = []
    for node in nodes:
        answer = answers[node.name]
        codes = {name: int(code) for name, code in _CODE.findall(answer.stdout)}
        if "no-pamtester" in answer.stdout:
            rows.append(NodeResult(node.name, Status.FAIL, "pamtester is not installed, so the door cannot be asked"))
        elif set(codes) != {"refused", "admitted"}:
            said = (answer.stderr or answer.stdout).strip().splitlines()[-1:] or ["no answer"]
            rows.append(NodeResult(node.name, Status.FAIL, f"could not ask sshd's account stack: {said[0][:200]}"))
        elif codes["refused"] == 0:
            rows.append(
                NodeResult(
                    node.name,
                    Status.FAIL,
                    f"sshd's account stack lets in {NO_JOB_USER}, who has no job here: any user can log in "
                    "and use every GPU outside Slurm",
                )
            )
        elif codes["admitted"] != 0:
            rows.append(
                NodeResult(
                    node.name,
                    Status.FAIL,
                    f"sshd's account stack refuses the admin user {admin}: a new login of theirs would fail",
                )
            )
        else:
            rows.append(NodeResult(node.name, Status.PASS, f"{NO_JOB_USER} (no job) refused, {admin} let in"))
    return _verdict(
        ctx,
        rows,
        passed=f"{len(rows)} compute node(s) let in only users with a job there and the admins",
        failed="the door is open or shut wrongly on",
        hint=ADOPT_HINT,
    )


JOB_TMP_HINT = (
    "slurm.conf needs JobContainerType=job_container/tmpfs (NamespaceType=namespace/tmpfs from Slurm 25.11) and "
    "PrologFlags=Contain, the compute nodes /etc/slurm/job_container.conf: `gpuclus deploy --only slurm` writes them "
    "and restarts slurmd; `journalctl -u slurmd` says why a job's namespace was not made"
)


def job_tmp(ctx: Context) -> Outcome:
    if ctx.spec.slurm.job_tmp == "shared":
        return skipped("slurm.job_tmp: shared: jobs share each node's /tmp")
    usable, rows = ctx.launchable(ctx.compute)
    if not usable:
        return Outcome(rows, message="no compute node can start a job (see launch.srun)", status=Status.SKIP)
    mark = f"/tmp/{ctx.job_name}-tmp-mark"
    quoted = shlex.quote(mark)
    written = ctx.srun_each(f"echo {shlex.quote(ctx.job_name)} > {quoted} && cat {quoted}", usable)
    outside = ctx.ssh_each(f"if [ -e {quoted} ]; then echo seen; sudo -n rm -f {quoted}; else echo absent; fi", usable)
    later = ctx.srun_each(f"if [ -e {quoted} ]; then echo seen; else echo absent; fi", usable)
    for node in usable:
        if written[node.name].stdout.strip() != ctx.job_name:
            why = (written[node.name].stderr.strip().splitlines() or ["no output"])[-1][:200]
            rows.append(NodeResult(node.name, Status.FAIL, f"a job could not write {mark}: {why}"))
        elif outside[node.name].stdout.strip() != "absent":
            rows.append(NodeResult(node.name, Status.FAIL, f"a job's {mark} is in the node's own /tmp: jobs share it"))
        elif later[node.name].stdout.strip() != "absent":
            rows.append(
                NodeResult(node.name, Status.FAIL, f"the next job still sees the last job's {mark}: /tmp outlives jobs")
            )
        else:
            rows.append(NodeResult(node.name, Status.PASS, "a job's /tmp file is not in the node's or the next job's"))
    return _verdict(
        ctx, rows, passed="each job has a /tmp of its own", failed="jobs' /tmp is not private on", hint=JOB_TMP_HINT
    )


def _verdict(ctx: Context, rows: list[NodeResult], *, passed: str, failed: str, hint: str) -> Outcome:
    """Both checks' outcome: unreachable nodes named as such; the unreachable hint when only they failed."""
    rows, unreachable = ctx.name_unreachable(rows)
    failing = [row.node for row in rows if row.status is Status.FAIL]
    if not failing:
        return Outcome(rows, message=passed)
    return Outcome(
        rows,
        message=f"{failed} {', '.join(failing)}",
        hint=ctx.unreachable_hint(failing) if set(failing) <= set(unreachable) else hint,
    )


CHECKS = [
    Check(
        "doors.compute-ssh",
        Level.QUICK,
        "a user without a job is refused on the compute nodes",
        compute_ssh,
        needs_slurm=False,
    ),
    Check("doors.job-tmp", Level.STANDARD, "each job's /tmp is its own", job_tmp),
]
