"""Where and how the workload checks train: the nodes, CPU or GPU, and the job's command line.

Written once for every check of the stage. The checks run on the selected
compute nodes that can start a job (launch.srun) and whose PyTorch env
imports (workloads.env, when it ran before them); the others get a SKIP row
each. Nodes with real GPUs and a CUDA build of PyTorch train on their GPUs
with NCCL; otherwise (fake GPUs, CPU nodes, pytorch.flavour cpu) the
templates train on CPU with gloo, and every message says so.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpuclus.spec.models import ClusterSpec, Role
from gpuclus.spec.software import JOB_ENV_FILE, SoftwareLayout, software_layout
from gpuclus.spec.topology import Node
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, skipped

PYTORCH_OFF = "pytorch.install is off in the spec"
EXAMPLES_OFF = "pytorch.examples is off in the spec: no job templates on the nodes"
NO_COMPUTE = "no compute nodes selected"
NO_NODE_LEFT = "no compute node can start a job with a working PyTorch env (see launch.srun and workloads.env)"
ENV_FAILED = "its PyTorch env does not import (see workloads.env)"
CPU_NODE = "no GPUs here: the training checks run on the GPU nodes"
# Nodes whose env failed workloads.env in this run: later checks leave them out.
ENV_FAILED_MEMO = "workloads_env_failed"

DEPLOY_HINT = "`gpuclus deploy --only pytorch` builds the environment and installs the job templates"

# The templates, relative to the examples directory.
LAUNCHER = "common/gpuclus_launch.py"
TRAIN_DDP = "common/train_ddp.py"
TRAIN_FSDP = "fsdp/train_fsdp.py"
DDP_SBATCH = "ddp-multi-node/job.sbatch"
MPI_SBATCH = "mpi-allreduce/job.sbatch"

# Slurm's --time for one training job; the templates take seconds on CPU.
TRAIN_TIME_S = 300


@dataclass(frozen=True)
class TrainSize:
    """The training scripts' arguments: small enough for seconds on CPU, big enough to load a GPU."""

    steps: int
    batch_size: int  # per rank
    hidden: int

    def args(self) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch_size), "--hidden", str(self.hidden)]


CPU_SIZE = TrainSize(steps=30, batch_size=32, hidden=256)
GPU_SIZE = TrainSize(steps=30, batch_size=256, hidden=2048)


@dataclass(frozen=True)
class Plan:
    layout: SoftwareLayout
    nodes: list[Node]  # in spec order; the first is where single-node jobs run
    skipped: list[NodeResult]  # a SKIP row for each other selected compute node
    gpus_per_node: int  # 0: train on CPU with gloo
    why_cpu: str = ""  # why the training runs on CPU ("fake GPUs (no driver)", ...)

    @property
    def on_gpu(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def size(self) -> TrainSize:
        return GPU_SIZE if self.on_gpu else CPU_SIZE

    @property
    def ranks_per_node(self) -> int:
        """Training processes per node: one per GPU, one on CPU."""
        return self.gpus_per_node or 1

    @property
    def device(self) -> str:
        """What GPUCLUS_RESULT's ``device`` must say."""
        return "cuda" if self.on_gpu else "cpu"

    def gpu_options(self, gpus: int | None = None) -> dict[str, str]:
        """srun's GRES request: GPUs only where they are real (fake ones have nothing to give a job)."""
        return {"gres": f"gpu:{gpus or self.gpus_per_node}"} if self.on_gpu else {}

    def template(self, relative: str) -> str:
        return f"{self.layout.examples_dir.rstrip('/')}/{relative}"


def layout_skip(spec: ClusterSpec, needs_examples: bool = True) -> str | None:
    """Why the whole stage (or, without templates, a template check) has nothing to run, or None."""
    if not spec.pytorch.install:
        return PYTORCH_OFF
    if needs_examples and not spec.pytorch.examples:
        return EXAMPLES_OFF
    return None


def uses_gpus(nodes: list[Node], layout: SoftwareLayout) -> bool:
    return layout.flavour != "cpu" and any(node.has_real_gpus for node in nodes)


def cpu_reason(nodes: list[Node], layout: SoftwareLayout) -> str:
    if layout.flavour == "cpu" and any(node.has_real_gpus for node in nodes):
        return "pytorch.flavour is cpu"
    if any(node.gpus is not None and node.gpus.fake for node in nodes):
        return "fake GPUs, no driver"
    return "no GPUs"


def workload_plan(ctx: Context, needs_examples: bool = True) -> Plan | Outcome:
    """The nodes to train on and the SKIP rows for the rest, or the check's SKIP Outcome."""
    reason = layout_skip(ctx.spec, needs_examples)
    if reason is not None:
        return skipped(reason)
    if not ctx.compute:
        return skipped(NO_COMPUTE)
    layout = software_layout(ctx.spec)
    usable, rows = ctx.launchable(ctx.compute)
    env_failed: set[str] = ctx.memo.get(ENV_FAILED_MEMO, set())
    rows += [NodeResult(node.name, Status.SKIP, ENV_FAILED) for node in usable if node.name in env_failed]
    usable = [node for node in usable if node.name not in env_failed]
    if not usable:
        return Outcome(rows, message=NO_NODE_LEFT, status=Status.SKIP)
    if not uses_gpus(usable, layout):
        return Plan(layout, usable, rows, 0, cpu_reason(usable, layout))
    gpu_nodes = [node for node in usable if node.has_real_gpus]
    rows += [NodeResult(node.name, Status.SKIP, CPU_NODE) for node in usable if not node.has_real_gpus]
    return Plan(layout, gpu_nodes, rows, min(node.gpu_count for node in gpu_nodes))


def train_command(plan: Plan, script: str, ranks_per_node: int, size: TrainSize | None = None) -> str:
    """What each Slurm task runs: the job env, then gpuclus_launch.py, which execs torchrun on the script.

    GPUCLUS_NPROC_PER_NODE fixes torchrun's processes per node, so the
    world size to expect is known here and not left to what the node shows.
    """
    words = [
        plan.layout.python,
        plan.template(LAUNCHER),
        plan.template(script),
        *(size or plan.size).args(),
    ]
    return f". {JOB_ENV_FILE} && export GPUCLUS_NPROC_PER_NODE={ranks_per_node} && exec {shlex.join(words)}"


def holds_templates(ctx: Context, layout: SoftwareLayout) -> bool:
    """Whether the controller (where sbatch reads the script) has the templates itself."""
    return layout.shared or bool(ctx.controller.roles & {Role.LOGIN, Role.COMPUTE})
