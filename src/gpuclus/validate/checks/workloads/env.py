"""workloads.env: on every compute node the PyTorch env's interpreter imports torch and numpy.

One single-node job per node runs the env's python (the path
gpuclus.spec.software gives render, deploy and validate alike) on a few
lines that print the versions, whether CUDA is usable, and whether the job
templates are there, as ``GPUCLUS_ENV {json}``.
"""

from __future__ import annotations

import shlex

from gpuclus.spec.software import SoftwareLayout, software_layout
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.checks.gpu.probe_output import CUDA_HINT
from gpuclus.validate.checks.workloads.job_output import ENV_MARKER, crash_line, parse_marked, same_release
from gpuclus.validate.checks.workloads.placement import (
    DEPLOY_HINT,
    ENV_FAILED_MEMO,
    LAUNCHER,
    NO_COMPUTE,
    layout_skip,
    uses_gpus,
)
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, skipped

# argv[1]: the launcher's path, or "" when the spec installs no templates.
_PROBE = f"""
import json, os, sys
try:
    import numpy, torch
except Exception as error:
    print("{ENV_MARKER} " + json.dumps({{"error": type(error).__name__ + ": " + str(error)}}))
    sys.exit(3)
cuda = torch.cuda.is_available()
print("{ENV_MARKER} " + json.dumps({{
    "python": sys.version.split()[0],
    "torch": torch.__version__,
    "numpy": numpy.__version__,
    "cuda": cuda,
    "cuda_version": torch.version.cuda,
    "gpus": torch.cuda.device_count() if cuda else 0,
    "templates": os.path.isfile(sys.argv[1]) if sys.argv[1] else None,
}}))
"""
NO_PYTHON = "no-python"
_ENV_TIME_S = 120


def env_command(layout: SoftwareLayout, templates: bool) -> str:
    python = shlex.quote(layout.python)
    launcher = f"{layout.examples_dir.rstrip('/')}/{LAUNCHER}" if templates else ""
    missing = shlex.quote(f'{ENV_MARKER} {{"error": "{NO_PYTHON}"}}')
    return (
        f"test -x {python} || {{ echo {missing}; exit 4; }}; "
        f"exec {python} -c {shlex.quote(_PROBE)} {shlex.quote(launcher)}"
    )


def judge_env(node: Node, result: CommandResult, layout: SoftwareLayout, version: str, want_cuda: bool) -> NodeResult:
    payload = parse_marked(result.stdout, ENV_MARKER)
    if payload is None:
        return NodeResult(node.name, Status.FAIL, f"{layout.python}: {crash_line(result)}")
    error = payload.get("error")
    if error == NO_PYTHON:
        return NodeResult(node.name, Status.FAIL, f"no PyTorch env here: {layout.python} does not exist")
    if error is not None:
        return NodeResult(node.name, Status.FAIL, f"{layout.python} cannot import torch and numpy: {error}")
    torch = str(payload.get("torch"))
    cuda = f"CUDA {payload.get('cuda_version')}, {payload.get('gpus')} GPU(s)" if payload.get("cuda") else "no CUDA"
    said = f"torch {torch}, numpy {payload.get('numpy')}, Python {payload.get('python')}, {cuda}"
    if payload.get("templates") is False:
        return NodeResult(node.name, Status.FAIL, f"no job templates in {layout.examples_dir} ({said})", torch)
    if want_cuda and not payload.get("cuda"):
        message = f"PyTorch cannot use the GPUs here (torch.cuda.is_available() is false; {said})"
        return NodeResult(node.name, Status.FAIL, message, torch, hint=CUDA_HINT)
    if not same_release(torch, version):
        return NodeResult(node.name, Status.WARN, f"{said}; the spec asks for torch {version}", torch, version)
    return NodeResult(node.name, Status.PASS, said, torch, version)


def pytorch_env(ctx: Context) -> Outcome:
    reason = layout_skip(ctx.spec, needs_examples=False)
    if reason is not None:
        return skipped(reason)
    if not ctx.compute:
        return skipped(NO_COMPUTE)
    layout = software_layout(ctx.spec)
    nodes, results = ctx.launchable(ctx.compute)
    if not nodes:
        return Outcome(results, message="no compute node can start a job (see launch.srun)", status=Status.SKIP)

    def on_gpus(node: Node) -> bool:
        return uses_gpus([node], layout)

    answers = ctx.srun_each(
        env_command(layout, ctx.spec.pytorch.examples),
        nodes,
        time_limit_s=_ENV_TIME_S,
        # A job sees the GPUs it asks for (ConstrainDevices): ask for all of them where they are real.
        options=lambda node: {"gres": f"gpu:{node.gpu_count}"} if on_gpus(node) else {},
    )
    judged = [judge_env(node, answers[node.name], layout, ctx.spec.pytorch.version, on_gpus(node)) for node in nodes]
    ctx.memo[ENV_FAILED_MEMO] = {row.node for row in judged if row.status is Status.FAIL}
    where = "shared, on NFS" if layout.shared else "node-local"
    return Outcome(
        results + judged,
        message=f"{layout.python} ({where}, {layout.module})",
        hint=f"{DEPLOY_HINT}; by hand: `srun -w NODE {layout.python} -c 'import torch; print(torch.__version__)'`",
    )
