"""workloads.sbatch and workloads.mpi: job templates submitted as users do, with ``sbatch --wait``.

A batch job writes its output where it runs (the templates say
``--output=%x-%j.out``), so the check gives it a working directory of its
own and reads the file afterwards:

- shared layout: ``<mount>/.gpuclus-validate/<job name>`` inside the first
  NFS export, made on the NFS server (the export is root's; the directory is
  the admin user's, who runs the job) and read from the controller through
  its mount;
- node-local layout: ``/var/tmp/<job name>`` on every node of the job (not
  /tmp, which is each job's own with slurm.job_tmp: private), read back
  on the batch host (the first node of the allocation holds the file).

The directory is removed afterwards, whatever happened.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.spec.models import ClusterSpec, Role
from gpuclus.spec.software import SoftwareLayout
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.checks.workloads.job_output import (
    MPI_PACKAGES,
    Expect,
    crash_line,
    judge_job,
    judge_mpi,
    mpi_missing,
)
from gpuclus.validate.checks.workloads.placement import (
    DDP_SBATCH,
    MPI_SBATCH,
    TRAIN_TIME_S,
    Plan,
    holds_templates,
    workload_plan,
)
from gpuclus.validate.checks.workloads.training import outcome, train_hint
from gpuclus.validate.context import Context
from gpuclus.validate.results import Outcome, Status

RUNS_DIR = ".gpuclus-validate"
# The templates' `#SBATCH --output=%x-%j.out`: job name and job id, in the working directory.
OUTPUT_PATTERN = "{name}-{job_id}.out"


@dataclass(frozen=True)
class RunDir:
    """A batch job's working directory as the nodes see it, and where it is made and removed."""

    path: str  # on the nodes (and the controller, when shared)
    server: Node | None  # the NFS server, when shared
    server_path: str | None  # the same directory on the server's disk

    @property
    def shared(self) -> bool:
        return self.server is not None

    def output(self, job_name: str, job_id: str) -> str:
        return posixpath.join(self.path, OUTPUT_PATTERN.format(name=job_name, job_id=job_id))


def run_dir(spec: ClusterSpec, layout: SoftwareLayout, servers: list[Node], job_name: str) -> RunDir:
    if layout.shared and servers and spec.nfs.exports:
        export = spec.nfs.exports[0]
        return RunDir(
            posixpath.join(export.mount_point, RUNS_DIR, job_name),
            servers[0],
            posixpath.join(export.path, RUNS_DIR, job_name),
        )
    return RunDir(f"/var/tmp/{job_name}", None, None)


def make_command(directory: RunDir, owner: str) -> str:
    if directory.server_path is None:
        return f"mkdir -p -m 0700 {shlex.quote(directory.path)}"
    parent = shlex.quote(posixpath.dirname(directory.server_path))
    return (
        f"sudo -n install -d -m 0755 {parent} && "
        f"sudo -n install -d -m 0700 -o {shlex.quote(owner)} {shlex.quote(directory.server_path)}"
    )


def remove_command(directory: RunDir) -> str:
    if directory.server_path is None:
        return f"rm -rf {shlex.quote(directory.path)}"
    parent = shlex.quote(posixpath.dirname(directory.server_path))
    return f"sudo -n rm -rf {shlex.quote(directory.server_path)}; sudo -n rmdir {parent} 2>/dev/null; true"


def read_command(path: str) -> str:
    # NFS: the controller may look the name up a moment before its attributes catch up.
    quoted = shlex.quote(path)
    return f"for try in 1 2 3; do cat {quoted} 2>/dev/null && exit 0; sleep 1; done; exit 1"


@dataclass(frozen=True)
class BatchRun:
    result: CommandResult  # sbatch --wait's own: the job's exit status, the job id on stdout
    job_id: str | None
    output: str | None  # the job's output file, None when it could not be read
    where: str  # "host:path (shared storage)" or "host:path (node-local, not shared)"


@contextmanager
def working_dir(ctx: Context, directory: RunDir, nodes: list[Node]) -> Iterator[str | None]:
    """Make the directory (yielding None, with why, when that failed), remove it on the way out."""
    makers = [directory.server] if directory.server is not None else nodes
    made = ctx.ssh_each(make_command(directory, ctx.spec.cluster.admin_user), makers)
    failed = {name: answer for name, answer in made.items() if answer.exit_status != 0}
    try:
        if failed:
            name, answer = next(iter(failed.items()))
            said = slurm.first_error_line(answer.stderr, f"exit {answer.exit_status}")
            yield f"could not make {directory.path} on {name}: {said}"
        else:
            yield None
    finally:
        ctx.ssh_each(remove_command(directory), makers)


def submit(ctx: Context, plan: Plan, script: str, nodes: list[Node], *, gpus: bool) -> BatchRun | str:
    """Submit a template over ``nodes`` (with their GPUs when ``gpus``), wait, read its output; a str says why not."""
    directory = run_dir(ctx.spec, plan.layout, ctx.topology.with_role(Role.NFS_SERVER), ctx.job_name)
    with working_dir(ctx, directory, nodes) as problem:
        if problem is not None:
            return problem
        result = ctx.sbatch(
            plan.template(script),
            nodes,
            workdir=directory.path,
            time_limit_s=TRAIN_TIME_S,
            script_host=None if holds_templates(ctx, plan.layout) else nodes[0],
            ntasks_per_node=1,
            **({"gpus_per_node": plan.gpus_per_node} if gpus and plan.on_gpu else {}),
        )
        job_id = slurm.parse_job_id(result.stdout)
        if job_id is None:
            return BatchRun(result, None, None, "")
        if result.exit_status == TIMED_OUT:
            ctx.run(f"scancel {shlex.quote(job_id)} 2>/dev/null; true", timeout=30)
        path = directory.output(ctx.job_name, job_id)
        if directory.shared:
            answer = ctx.run(read_command(path), timeout=30)
            text = answer.stdout if answer.exit_status == 0 else None
            return BatchRun(result, job_id, text, f"{ctx.controller.name}:{path} (shared storage)")
        answers = ctx.ssh_each(read_command(path), nodes)
        host = next((node.name for node in nodes if answers[node.name].exit_status == 0), None)
        text = answers[host].stdout if host is not None else None
        return BatchRun(result, job_id, text, f"{host or nodes[0].name}:{path} (node-local, not shared)")


def sbatch_problem(run: BatchRun) -> str | None:
    """Why a batch job left nothing to judge, or None when its output was read."""
    if run.job_id is None:
        return f"sbatch did not submit the job: {crash_line(run.result)}"
    if run.output is None:
        detail = crash_line(run.result) if run.result.exit_status != 0 else "the job ended well"
        return f"job {run.job_id}: no output file at {run.where} ({detail})"
    return None


def job_text(run: BatchRun) -> CommandResult:
    """The job's output file as a command's result, with sbatch's exit status (the job's)."""
    return CommandResult(run.result.exit_status, run.output or "", run.result.stderr)


def sbatch_job(ctx: Context) -> Outcome:
    plan = workload_plan(ctx)
    if isinstance(plan, Outcome):
        return plan
    nodes = plan.nodes
    # The template chooses its ranks per node (one per GPU); the judge only asks that every node has the same.
    expect = Expect(len(nodes), None, plan.device)
    run = submit(ctx, plan, DDP_SBATCH, nodes, gpus=True)
    hint = f"{train_hint(plan)}; the template is {plan.template(DDP_SBATCH)}"
    if isinstance(run, str):
        return Outcome(plan.skipped, status=Status.FAIL, message=run, hint=hint)
    problem = sbatch_problem(run)
    if problem is not None:
        return Outcome(plan.skipped, status=Status.FAIL, message=problem, hint=hint)
    judged = outcome(plan, judge_job(job_text(run), expect), expect)
    return replace(judged, message=f"job {run.job_id}: {judged.message}; output at {run.where}", hint=hint)


def mpi_job(ctx: Context) -> Outcome:
    plan = workload_plan(ctx)
    if isinstance(plan, Outcome):
        return plan
    nodes = plan.nodes
    run = submit(ctx, plan, MPI_SBATCH, nodes, gpus=False)
    hint = (
        f"the template is {plan.template(MPI_SBATCH)}; `srun --mpi=list` shows Slurm's MPI plugins, and the MPI "
        "library must be built with the same PMIx (Debian's openmpi is); launch.mpi checks a plain MPI hello"
    )
    if isinstance(run, str):
        return Outcome(plan.skipped, status=Status.FAIL, message=run, hint=hint)
    missing = mpi_missing(run.result.exit_status, run.output or "")
    if missing is not None:
        return Outcome(
            plan.skipped, status=Status.SKIP, message=f"no MPI on the compute nodes ({missing}); install {MPI_PACKAGES}"
        )
    problem = sbatch_problem(run)
    if problem is not None:
        return Outcome(plan.skipped, status=Status.FAIL, message=problem, hint=hint)
    verdict = judge_mpi(job_text(run), len(nodes))
    return Outcome(
        plan.skipped,
        status=verdict.status,
        message=f"job {run.job_id}: {verdict.message}; output at {run.where}",
        value=verdict.value,
        unit="Gbit/s" if verdict.value is not None else None,
        hint=hint,
    )
