"""workloads.ddp, workloads.fsdp, workloads.container: the training templates as srun jobs.

Each task of the job runs ``gpuclus_launch.py``, which turns the SLURM_*
variables into torchrun's rendezvous and execs torchrun on the training
script; rank 0's GPUCLUS_RESULT line is judged by results.judge_job.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from gpuclus.validate.checks.containers import PULL_TIME_LIMIT_S
from gpuclus.validate.checks.workloads.job_output import Expect, Verdict, container_lacks_torch, judge_job
from gpuclus.validate.checks.workloads.placement import (
    LAUNCHER,
    TRAIN_DDP,
    TRAIN_FSDP,
    TRAIN_TIME_S,
    Plan,
    train_command,
    workload_plan,
)
from gpuclus.validate.context import Context
from gpuclus.validate.results import Outcome, Status, skipped

FSDP_CPU_RANKS = 2

_TRAIN_HINT = (
    "the job's last error names the cause; rerun it by hand (docs/validate.md, stage workloads) with "
    "NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL; workloads.env must pass first"
)
_GPU_HINT = "; on GPUs, gpu.nccl shows whether NCCL works between the nodes"


def train_hint(plan: Plan) -> str:
    return _TRAIN_HINT + (_GPU_HINT if plan.on_gpu else "")


def where(plan: Plan) -> str:
    """How the message says where the job trained: "" on GPUs, the CPU reason otherwise."""
    return "" if plan.on_gpu else f" (on CPU: {plan.why_cpu})"


def outcome(plan: Plan, verdict: Verdict, expect: Expect) -> Outcome:
    return Outcome(
        plan.skipped,
        status=verdict.status,
        message=verdict.message + (where(plan) if verdict.status is Status.PASS else ""),
        value=round(verdict.value, 1) if verdict.value is not None else None,
        expected=f"world size {expect.world_size}" if expect.world_size else None,
        unit="samples/s" if verdict.value is not None else None,
        hint=train_hint(plan),
    )


def run_ddp(ctx: Context, plan: Plan, nodes_count: int) -> tuple[Verdict, Expect]:
    """The DDP template over the first ``nodes_count`` plan nodes, one Slurm task per node."""
    nodes = plan.nodes[:nodes_count]
    expect = Expect(len(nodes), len(nodes) * plan.ranks_per_node, plan.device)
    answer = ctx.srun(
        train_command(plan, TRAIN_DDP, plan.ranks_per_node),
        nodes,
        time_limit_s=TRAIN_TIME_S,
        ntasks_per_node=1,
        **plan.gpu_options(),
    )
    return judge_job(answer, expect), expect


def ddp(ctx: Context) -> Outcome:
    plan = workload_plan(ctx)
    if isinstance(plan, Outcome):
        return plan
    verdict, expect = run_ddp(ctx, plan, len(plan.nodes))
    return outcome(plan, verdict, expect)


def fsdp(ctx: Context) -> Outcome:
    plan = workload_plan(ctx)
    if isinstance(plan, Outcome):
        return plan
    node = plan.nodes[0]
    ranks = node.gpu_count if plan.on_gpu else FSDP_CPU_RANKS
    expect = Expect(1, ranks, plan.device)
    answer = ctx.srun(
        train_command(plan, TRAIN_FSDP, ranks),
        [node],
        time_limit_s=TRAIN_TIME_S,
        ntasks_per_node=1,
        **plan.gpu_options(node.gpu_count),
    )
    return outcome(plan, judge_job(answer, expect), expect)


def no_torch_in(image: str) -> str:
    return (
        f"the image {image} has no PyTorch; pass --container-image with an image that has it "
        "(NGC PyTorch on GPU clusters)"
    )


def container_command(plan: Plan) -> str:
    """The DDP template with the image's own python: the examples are mounted, the host's env is not."""
    words = ["python", plan.template(LAUNCHER), plan.template(TRAIN_DDP), *plan.size.args()]
    return f"export GPUCLUS_NPROC_PER_NODE={plan.ranks_per_node} && exec {shlex.join(words)}"


def container(ctx: Context) -> Outcome:
    plan = workload_plan(ctx)
    if isinstance(plan, Outcome):
        return plan
    if not ctx.spec.containers.pyxis:
        return skipped("Pyxis is off in the spec (containers.pyxis: false)")
    image = ctx.options.container_image
    examples = plan.layout.examples_dir.rstrip("/")
    expect = Expect(len(plan.nodes), len(plan.nodes) * plan.ranks_per_node, plan.device)
    answer = ctx.srun(
        container_command(plan),
        plan.nodes,
        time_limit_s=PULL_TIME_LIMIT_S,
        ntasks_per_node=1,
        extra=(f"--container-image={image}", f"--container-mounts={examples}:{examples}:ro"),
        **plan.gpu_options(),
    )
    if container_lacks_torch(answer):
        return Outcome(plan.skipped, status=Status.SKIP, message=no_torch_in(image))
    result = outcome(plan, judge_job(answer, expect), expect)
    return replace(
        result,
        message=f"{image}: {result.message}",
        hint=f"{result.hint}; containers.pyxis shows whether the image starts at all",
    )
