"""gpu.isolation: a job given one GPU (gpu:1) sees exactly one, by CUDA_VISIBLE_DEVICES and by nvidia-smi -L."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuclus.slurm import commands as slurm
from gpuclus.validate.checks.gpu.hints import DRIVER_HINT, LAUNCH_HINT, join_hints
from gpuclus.validate.checks.gpu.nvidia_smi import NO_SMI
from gpuclus.validate.checks.gpu.scope import SHORT_JOB_S, Scope, on_gpu_nodes
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status

_ISOLATION_COMMAND = (
    'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"; '
    f"if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L; else echo {NO_SMI}; fi"
)


@dataclass(frozen=True)
class IsolationView:
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES, None when unset
    smi_gpus: int | None  # `nvidia-smi -L` GPU lines; None without nvidia-smi


def parse_isolation(text: str) -> IsolationView:
    visible: str | None = None
    for line in text.splitlines():
        if line.startswith("CUDA_VISIBLE_DEVICES="):
            value = line.split("=", 1)[1].strip()
            visible = None if value in ("", "<unset>") else value
    if NO_SMI in text:
        return IsolationView(visible, None)
    gpus = sum(1 for line in text.splitlines() if re.match(r"GPU \d+:", line.strip()))
    return IsolationView(visible, gpus)


@on_gpu_nodes
def isolation(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    answers = ctx.srun_each(
        _ISOLATION_COMMAND, scope.nodes, time_limit_s=SHORT_JOB_S, options=lambda node: {"gres": "gpu:1"}
    )
    no_driver = launch = unset = unconstrained = False
    for node in scope.nodes:
        answer = answers[node.name]
        view = parse_isolation(answer.stdout)
        devices = [item for item in (view.visible_devices or "").split(",") if item.strip()]
        if view.smi_gpus is None:
            no_driver = True
            results.append(NodeResult(node.name, Status.FAIL, "nvidia-smi not found on the node", None, "1", "GPUs"))
        elif answer.exit_status != 0:
            launch = True
            message = "a job given gpu:1 failed: " + slurm.job_failure(answer)
            results.append(NodeResult(node.name, Status.FAIL, message, None, "1", "GPUs"))
        elif len(devices) != 1:
            unset = True
            shown = view.visible_devices or "unset"
            message = f"CUDA_VISIBLE_DEVICES={shown} in a job given gpu:1: the job is not limited to its GPU"
            results.append(NodeResult(node.name, Status.FAIL, message, len(devices), "1", "GPUs"))
        elif view.smi_gpus != 1:
            unconstrained = True
            message = f"a job given gpu:1 sees {view.smi_gpus} GPUs with nvidia-smi -L: devices are not constrained"
            results.append(NodeResult(node.name, Status.FAIL, message, view.smi_gpus, "1", "GPUs"))
        else:
            message = f"one GPU visible (CUDA_VISIBLE_DEVICES={devices[0]})"
            results.append(NodeResult(node.name, Status.PASS, message, 1, "1", "GPUs"))
    return Outcome(
        results,
        hint=join_hints(
            (no_driver, DRIVER_HINT),
            (launch, LAUNCH_HINT),
            (
                unset,
                "Slurm sets CUDA_VISIBLE_DEVICES only for GPUs it hands out through GRES: slurm.conf needs "
                "GresTypes=gpu and gres.conf must list the devices; `gpuclus deploy --only slurm`",
            ),
            (
                unconstrained,
                "cgroup.conf needs ConstrainDevices=yes (and TaskPlugin=task/cgroup) so a job cannot open other "
                "jobs' GPUs; `gpuclus deploy --only slurm`, then restart slurmd",
            ),
        ),
    )
