"""workloads.scaling: the DDP template on one node, then on all of them; how close to linear it gets.

Both runs train the same steps with the same per-rank batch, so N nodes do
N times the work per step: the efficiency is samples/s on N nodes over N x
samples/s on one. It is graded against thresholds.workload_scaling_bar
(lower for CPU training with gloo) and never fails for slowness alone:
only a run that fails is a FAIL. The hint names the likely cause from the
spec's network and the NCCL settings the templates export.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclus.spec.models import ClusterSpec, Fabric
from gpuclus.spec.software import nccl_environment
from gpuclus.validate import thresholds
from gpuclus.validate.checks.workloads.placement import workload_plan
from gpuclus.validate.checks.workloads.training import run_ddp, train_hint, where
from gpuclus.validate.context import Context
from gpuclus.validate.results import Outcome, Status

ONE_NODE = "one compute node: nothing to scale"
CPU_CAUSE = (
    "CPU gloo training shares the nodes' cores; on the sandbox every node shares one host's CPUs, "
    "so no speed-up is possible there"
)


@dataclass(frozen=True)
class ScalingVerdict:
    status: Status
    message: str
    efficiency_pct: float
    slower: bool  # N nodes did fewer samples/s than one


def _nodes(count: int) -> str:
    return "1 node" if count == 1 else f"{count} nodes"


def judge_scaling(one_sps: float, all_sps: float, nodes: int, on_gpu: bool) -> ScalingVerdict:
    """The efficiency sps_N / (N x sps_1) against the bar; WARN below it and when N nodes are slower than one."""
    efficiency = thresholds.scaling_efficiency(all_sps, one_sps, nodes)
    bar = thresholds.workload_scaling_bar(on_gpu)
    percent = round(efficiency * 100, 1)
    message = f"1 node {one_sps:.0f} samples/s; {_nodes(nodes)} {all_sps:.0f} samples/s ({percent:g}% efficiency)"
    slower = all_sps < one_sps
    if slower:
        message += f"; {_nodes(nodes)} are slower than one"
    elif not on_gpu:
        gpu_bar = thresholds.WORKLOAD_SCALING_MIN_GPU
        message += f"; CPU training with gloo: the bar is {bar:.0%}, not the GPUs' {gpu_bar:.0%}"
    status = thresholds.grade_workload_scaling(efficiency, on_gpu)
    return ScalingVerdict(Status.WARN if slower else status, message, percent, slower)


def scaling_hint(spec: ClusterSpec, on_gpu: bool, gpus_per_node: int, nodes: int) -> str:
    """The likely cause of poor scaling, from what the spec says about the network and NCCL."""
    if not on_gpu:
        return f"{CPU_CAUSE}; on real nodes, gloo's TCP all-reduce over the network limits it"
    network = spec.network
    nccl = nccl_environment(spec)
    per_node = f"{network.link_gbps} Gbit/s" + (f" x {network.nics_per_node}" if network.nics_per_node > 1 else "")
    gpus = f"{nodes * gpus_per_node} GPUs"
    if network.fabric is Fabric.ETHERNET:
        cause = (
            f"{per_node} ethernet (network.link_gbps) cannot feed {gpus}: every step's gradient all-reduce "
            "waits on the network; multi-node training wants InfiniBand or RoCE at 100+ Gbit/s per node"
        )
    elif nccl.get("NCCL_IB_DISABLE") == "1":
        cause = (
            f"the spec says {network.fabric.value}, but pytorch.nccl_env sets NCCL_IB_DISABLE=1: NCCL falls "
            "back to TCP sockets"
        )
    else:
        cause = (
            f"on {network.fabric.value} ({per_node} per node) NCCL may have fallen back to TCP sockets (no IB "
            "device in the job, the wrong NCCL_IB_HCA or, on RoCE, NCCL_IB_GID_INDEX): with NCCL_DEBUG=INFO "
            "the job must say NET/IB, not NET/Socket"
        )
    return f"{cause}; gpu.nccl measures the bus bandwidth between node pairs"


def scaling(ctx: Context) -> Outcome:
    plan = workload_plan(ctx)
    if isinstance(plan, Outcome):
        return plan
    count = len(plan.nodes)
    if count < 2:
        return Outcome(plan.skipped, message=ONE_NODE, status=Status.SKIP)
    bar = thresholds.workload_scaling_bar(plan.on_gpu)
    expected = f">= {bar * 100:g}"
    figures = []
    for size in (1, count):
        verdict, _expect = run_ddp(ctx, plan, size)
        problem = verdict.message if verdict.status is not Status.PASS else None
        if problem is None and not verdict.value:
            problem = "it reported no samples_per_s"
        if problem is not None:
            return Outcome(
                plan.skipped,
                status=Status.FAIL,
                message=f"the run on {_nodes(size)} failed: {problem}",
                expected=expected,
                unit="%",
                hint=train_hint(plan),
            )
        figures.append(verdict.value or 0.0)
    one, every = figures
    judged = judge_scaling(one, every, count, plan.on_gpu)
    return Outcome(
        plan.skipped,
        status=judged.status,
        message=judged.message + where(plan),
        value=judged.efficiency_pct,
        expected=expected,
        unit="%",
        hint=scaling_hint(ctx.spec, plan.on_gpu, plan.gpus_per_node, count),
    )
