"""gpu.matmul and gpu.membw: each GPU's figure from the gpu_probe, against its chip's peak.

The same probe job measures either figure; the worst GPU decides a node's
status and every slow or wrong GPU is named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuclus.spec.topology import Node
from gpuclus.validate import probes, thresholds
from gpuclus.validate.checks.gpu.hints import join_hints
from gpuclus.validate.checks.gpu.probe_output import CUDA_HINT, CUDA_UNAVAILABLE, parse_probe_output, probe_error
from gpuclus.validate.checks.gpu.scope import Scope, all_gpus, on_gpu_nodes
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, worst

# Slurm's --time: torch import from NFS + 2-4 s per GPU for up to 8 GPUs.
_PROBE_TIME_S = 240


@dataclass(frozen=True)
class _Metric:
    probe: str  # gpu_probe subcommand
    key: str  # figure in each GPU's result
    unit: str
    label: str
    peak: Callable[[str], float | None]


_MATMUL = _Metric("matmul", "tflops", "TFLOP/s", "bf16 matmul", thresholds.matmul_peak_tflops)
_MEMBW = _Metric("membw", "gbs", "GB/s", "device copy", thresholds.memory_peak_gbs)

_PERF_HINT = (
    "a GPU below its figures: check clocks and throttling with `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE` "
    "(power cap, HW slowdown, thermal), that no other process uses it (`nvidia-smi`), and persistence mode "
    "(`nvidia-smi -pm 1`); wrong results: `dmesg | grep -i xid`, drain the node and run the vendor's diagnostics "
    "(`dcgmi diag -r 3`)"
)


def expected_text(peak: float | None) -> str:
    if peak is None:
        return "no ceiling known"
    return f">= {peak * thresholds.PEAK_PASS_RATIO:.0f} ({thresholds.PEAK_PASS_RATIO:.0%} of {peak:g})"


def judge_gpus(node: Node, payload: dict[str, Any], metric: _Metric) -> NodeResult:
    """One node's per-GPU figures → one row: the worst GPU decides, every slow or wrong GPU is named."""
    gpus = [gpu for gpu in payload.get("gpus", []) if isinstance(gpu, dict)]
    if len(gpus) != node.gpu_count:
        message = f"the probe saw {len(gpus)} GPU(s) in a job given gpu:{node.gpu_count}"
        return NodeResult(node.name, Status.FAIL, message, None, str(node.gpu_count), "GPUs")
    statuses, notes, figures = [], [], []
    peak: float | None = None
    for gpu in gpus:
        index = gpu.get("index", "?")
        value = gpu.get(metric.key)
        if gpu.get("error") or not isinstance(value, int | float):
            statuses.append(Status.FAIL)
            notes.append(f"GPU {index}: {gpu.get('error') or 'no figure'}")
            continue
        figures.append(float(value))
        peak = metric.peak(str(gpu.get("name", "")))
        if not gpu.get("ok", False):
            statuses.append(Status.FAIL)
            error = gpu.get("rel_error")
            detail = f"relative error {error}" if error is not None else "not finite or not equal"
            notes.append(f"GPU {index}: wrong result ({detail})")
            continue
        status = thresholds.grade_against_peak(float(value), peak)
        statuses.append(status)
        if status is not Status.PASS and peak:
            notes.append(f"GPU {index}: {value:g} {metric.unit} ({float(value) / peak:.0%} of {peak:g})")
    lowest = min(figures) if figures else None
    name = str(gpus[0].get("name", "")) if gpus else ""
    if lowest is None:
        summary = "no figures"
    else:
        of_peak = f", {lowest / peak:.0%} of the {peak:g} peak" if peak else ", no ceiling known for " + name
        summary = f"{len(figures)} GPU(s), lowest {lowest:g} {metric.unit}{of_peak}"
    message = "; ".join([*notes, summary]) if notes else summary
    shown = round(lowest, 1) if lowest is not None else None
    return NodeResult(node.name, worst(statuses), message, shown, expected_text(peak), metric.unit)


def _per_gpu_probe(ctx: Context, scope: Scope, metric: _Metric, hint: str) -> Outcome:
    results = list(scope.skipped)
    command = probes.inline_command("gpu_probe.py", [metric.probe])
    answers = ctx.srun_each(
        command, scope.nodes, time_limit_s=_PROBE_TIME_S, options=lambda node: {"gres": all_gpus(node)}
    )
    skipped_reason = ""
    for node in scope.nodes:
        answer = answers[node.name]
        payloads = parse_probe_output(answer.stdout)
        problem = probe_error(payloads, answer)
        if problem is not None:
            if problem.status is Status.SKIP:
                skipped_reason = problem.message
            results.append(NodeResult(node.name, problem.status, problem.message, None, None, metric.unit))
            continue
        results.append(judge_gpus(node, payloads[0], metric))
    cuda_broken = any(result.message == CUDA_UNAVAILABLE for result in results)
    all_skipped = all(result.status is Status.SKIP for result in results)
    return Outcome(
        results,
        message=skipped_reason if all_skipped else "",
        hint=join_hints((cuda_broken, CUDA_HINT), (True, hint)),
    )


@on_gpu_nodes
def matmul(ctx: Context, scope: Scope) -> Outcome:
    return _per_gpu_probe(ctx, scope, _MATMUL, _PERF_HINT)


@on_gpu_nodes
def memory_bandwidth(ctx: Context, scope: Scope) -> Outcome:
    memory_hint = _PERF_HINT + "; memory: `nvidia-smi -q -d ECC,ROW_REMAPPER` for ECC errors"
    return _per_gpu_probe(ctx, scope, _MEMBW, memory_hint)
