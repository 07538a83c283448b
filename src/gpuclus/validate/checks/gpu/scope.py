"""Which nodes a GPU check runs on, written once for every check of the stage.

A GPU check judges the selected GPU nodes whose GPUs are real and that can
start a job. The others get a SKIP row each, never a PASS: fake GPUs (the
sandbox's device nodes, ``gpus.fake: true``) have no driver and nothing to
measure, and a node launch.srun found dead is blamed there, once. With no
node left the whole check is SKIP without starting a job.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from gpuclus.spec.topology import Node
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, skipped

FAKE_REASON = "fake GPUs (gpus.fake: true): no driver, nothing to measure"
NO_GPU_NODES = "no GPU nodes selected"
NO_LAUNCHABLE = "no GPU node can start a job (see launch.srun)"

# Slurm's --time for a one-line job (nvidia-smi, a file lookup); srun gets a `timeout` on top.
SHORT_JOB_S = 60


@dataclass(frozen=True)
class Scope:
    nodes: list[Node]  # real GPUs and able to start a job, in spec order
    skipped: list[NodeResult]  # a SKIP row for each other selected GPU node, shown before the judged ones


def gpu_scope(ctx: Context) -> Scope | Outcome:
    """The nodes to judge and the SKIP rows for the rest, or the check's Outcome when no node is left."""
    nodes = ctx.gpu_nodes
    if not nodes:
        return skipped(NO_GPU_NODES)
    real = [node for node in nodes if node.has_real_gpus]
    fake = [NodeResult(node.name, Status.SKIP, FAKE_REASON) for node in nodes if not node.has_real_gpus]
    if not real:
        return Outcome(fake, message=FAKE_REASON, status=Status.SKIP)
    usable, dead = ctx.launchable(real)
    if not usable:
        return Outcome(fake + dead, message=NO_LAUNCHABLE, status=Status.SKIP)
    return Scope(usable, fake + dead)


def on_gpu_nodes(judge: Callable[[Context, Scope], Outcome]) -> Callable[[Context], Outcome]:
    """A check that runs ``judge`` on the scope's nodes, or returns the SKIP outcome when there are none."""

    @functools.wraps(judge)
    def run(ctx: Context) -> Outcome:
        scope = gpu_scope(ctx)
        if isinstance(scope, Outcome):
            return scope
        return judge(ctx, scope)

    return run


def all_gpus(node: Node) -> str:
    """The GRES request for every GPU of ``node``."""
    return f"gpu:{node.gpu_count}"
