"""gpu.ddp: a few PyTorch DDP training steps across all GPU nodes: replicas agree, the loss falls, it scales.

One job over every node runs gpuclus' ddp_probe, one task per GPU (as many
per node as the smallest node has); the scaling efficiency against one GPU
alone is graded by thresholds.grade_scaling.
"""

from __future__ import annotations

from typing import Any

from gpuclus.validate import probes, thresholds
from gpuclus.validate.checks.gpu.probe_output import CUDA_HINT, CUDA_UNAVAILABLE, parse_probe_output, probe_error
from gpuclus.validate.checks.gpu.scope import Scope, on_gpu_nodes
from gpuclus.validate.context import Context
from gpuclus.validate.results import Outcome, Status

# Slurm's --time for the training job.
_DDP_TIME_S = 300


def judge_ddp(payload: dict[str, Any]) -> tuple[Status, str, float | None]:
    """(status, message, efficiency in %) from the DDP probe's result."""
    ranks = payload.get("ranks")
    losses = [value for value in payload.get("losses", []) if isinstance(value, int | float)]
    trend = f"loss {losses[0]:.4g} -> {losses[-1]:.4g}" if losses else "no loss values"
    if not payload.get("replicas_agree", False):
        spread = payload.get("replica_spread")
        return Status.FAIL, f"the {ranks} replicas hold different weights after training (spread {spread})", None
    if not payload.get("finite", False):
        return Status.FAIL, f"the loss is not finite ({trend})", None
    efficiency = float(payload.get("efficiency", 0.0))
    status = thresholds.grade_scaling(efficiency)
    message = (
        f"{ranks} GPU(s) on {payload.get('nodes')} node(s): {float(payload.get('ddp_sps', 0)):.0f} samples/s, "
        f"one GPU alone {float(payload.get('single_sps', 0)):.0f} samples/s; {trend}"
    )
    if not payload.get("decreasing", False):
        message += " (did not decrease)"
    return status, message, round(efficiency * 100, 1)


_DDP_FAIL_HINT = (
    "the probe's error names the cause; rerun it by hand with NCCL_DEBUG=INFO (docs/validate-gpu.md) and check "
    "gpu.nccl first: DDP needs a working NCCL between every pair of nodes"
)


@on_gpu_nodes
def ddp_smoke(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    per_node = min(node.gpu_count for node in scope.nodes)
    answer = ctx.srun(
        probes.inline_command("ddp_probe.py"),
        scope.nodes,
        time_limit_s=_DDP_TIME_S,
        gres=f"gpu:{per_node}",
        ntasks_per_node=per_node,
    )
    expected = f">= {thresholds.DDP_MIN_SCALING_EFFICIENCY * 100:g}"
    payloads = parse_probe_output(answer.stdout)
    problem = probe_error(payloads, answer)
    if problem is not None:
        return Outcome(
            results,
            status=problem.status,
            message=problem.message,
            expected=expected,
            unit="%",
            hint=CUDA_HINT if problem.message == CUDA_UNAVAILABLE else _DDP_FAIL_HINT,
        )
    status, message, value = judge_ddp(next(payload for payload in payloads if "error" not in payload))
    return Outcome(
        results,
        status=status,
        message=message,
        value=value,
        expected=expected,
        unit="%",
        hint="scaling efficiency below "
        f"{thresholds.DDP_MIN_SCALING_EFFICIENCY:.0%}: the gradient all-reduce does not keep up; see gpu.nccl "
        "(a 10-25 GbE fabric is expected to land here); replicas disagreeing or a non-finite loss point at a "
        "faulty GPU or NCCL: `dmesg | grep -i xid`, NCCL_DEBUG=INFO",
    )
