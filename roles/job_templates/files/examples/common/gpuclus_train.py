"""What the training templates share: setup, synthetic data, the timed loop, the checks and the result line.

train_ddp.py and ../fsdp/train_fsdp.py differ only in how they wrap the model
and read its parameters back; the rest is here, so that both measure and report
the same way. To train your own model, keep setup() and report() and replace
make_model() and SyntheticRegression with your model and data loader.

Every process is started by torchrun, which sets RANK, LOCAL_RANK and
WORLD_SIZE. With GPUs visible (torch.cuda.is_available()) each process takes
the GPU of its LOCAL_RANK and the backend is NCCL; otherwise the processes
train on CPU and talk through gloo.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

IN_FEATURES = 32
TEACHER_HIDDEN = 64
MODEL_SEED = 0  # every rank builds the same initial model
DATA_SEED = 1234  # the target function (the same on every rank); rank r draws inputs from DATA_SEED + 1 + r
RESULT_MARKER = "GPUCLUS_RESULT"
BASE_LR, BASE_WIDTH = 3e-3, 256
WARMUP_STEPS = 10  # the learning rate rises linearly to --lr over these steps
# Two parameter checksums agree when they differ by at most this, relatively.
AGREE_RTOL = 1e-6


def parse_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps, the first one a warm-up (>= 2)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per step per rank")
    parser.add_argument("--hidden", type=int, default=256, help="width of the model's hidden layers")
    parser.add_argument(
        "--lr", type=float, default=None, help="Adam's peak learning rate (default: 3e-3 x 256/hidden, at most 3e-3)"
    )
    parser.add_argument(
        "--template",
        default=os.environ.get("GPUCLUS_TEMPLATE", ""),
        help="the name reported as 'template' (default: $GPUCLUS_TEMPLATE, else chosen by the script)",
    )
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2: the first step is a warm-up and is not timed")
    if args.batch_size < 1 or args.hidden < 1:
        parser.error("--batch-size and --hidden must be positive")
    if args.lr is None:
        # Adam moves every weight by about lr per step, so a wider layer moves its
        # output further: the rate shrinks with the width to keep the first steps stable.
        args.lr = BASE_LR * min(1.0, BASE_WIDTH / args.hidden)
    return args


@dataclass(frozen=True)
class Run:
    """This process's place in the job."""

    rank: int
    local_rank: int
    world_size: int
    nodes: int  # torchrun's agents, i.e. nodes (GROUP_WORLD_SIZE)
    device: torch.device
    backend: str

    @property
    def main(self) -> bool:
        return self.rank == 0


def say(run: Run, text: str) -> None:
    """A progress line from rank 0."""
    if run.main:
        print(text, flush=True)


def setup() -> Run:
    """Join the process group: NCCL on this process's GPU when there are GPUs, else gloo on CPU."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit(
            "error: start this script with torchrun: python gpuclus_launch.py SCRIPT (in a Slurm job) or "
            "python -m torch.distributed.run --standalone --nproc-per-node=2 SCRIPT"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_rank >= count:
            sys.exit(
                f"error: process {local_rank} on this node has no GPU: {count} visible; "
                "start at most one process per GPU (GPUCLUS_NPROC_PER_NODE)"
            )
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend)
    return Run(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")),
        device=device,
        backend=backend,
    )


def make_model(hidden: int, depth: int = 3) -> nn.Sequential:
    """A small MLP for regression: blocks of Linear + ReLU, then one output. The same on every rank."""
    torch.manual_seed(MODEL_SEED)
    blocks: list[nn.Module] = [nn.Sequential(nn.Linear(IN_FEATURES, hidden), nn.ReLU())]
    blocks += [nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()) for _ in range(depth - 1)]
    blocks.append(nn.Linear(hidden, 1))
    return nn.Sequential(*blocks)


class SyntheticRegression:
    """Endless batches of (x, y) with y = a fixed random smooth function of x, plus a little noise.

    Nothing is downloaded. The function is the same on every rank; each rank
    draws its own inputs (like a DistributedSampler giving each rank its part
    of the data), on its own device.
    """

    def __init__(self, device: torch.device, rank: int) -> None:
        generator = torch.Generator().manual_seed(DATA_SEED)
        self.w1 = (torch.randn(IN_FEATURES, TEACHER_HIDDEN, generator=generator) / IN_FEATURES**0.5).to(device)
        self.w2 = (torch.randn(TEACHER_HIDDEN, 1, generator=generator) / TEACHER_HIDDEN**0.5).to(device)
        self.device = device
        self.generator = torch.Generator(device=device).manual_seed(DATA_SEED + 1 + rank)

    def batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(size, IN_FEATURES, generator=self.generator, device=self.device)
        noise = torch.randn(size, 1, generator=self.generator, device=self.device)
        return x, torch.tanh(x @ self.w1) @ self.w2 + 0.01 * noise


def synchronize(run: Run) -> None:
    """Wait until every rank has finished its queued work: a tiny all-reduce, read back on the host."""
    flag = torch.ones(1, device=run.device)
    dist.all_reduce(flag)
    flag.item()


def train(
    model: nn.Module, optimizer: torch.optim.Optimizer, run: Run, args: argparse.Namespace, label: str
) -> tuple[list[float], float]:
    """args.steps optimizer steps; rank 0's loss per step, and the job's samples/s after the warm-up step.

    The clock starts once every rank has finished step 1 (CUDA kernels
    compiled, NCCL connected, memory allocated) and stops once every rank has
    finished the last step; the slowest rank's time counts.
    """
    data = SyntheticRegression(run.device, run.rank)
    loss_fn = nn.MSELoss()
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))
    losses: list[torch.Tensor] = []
    started = time.perf_counter()
    for step in range(args.steps):
        x, y = data.batch(args.batch_size)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.detach())
        if step == 0:
            synchronize(run)
            started = time.perf_counter()
        if run.main and (step == 0 or (step + 1) % 10 == 0 or step + 1 == args.steps):
            print(f"{label}: step {step + 1}/{args.steps}  loss {loss.item():.4f}", flush=True)
    synchronize(run)
    elapsed = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=run.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    samples = (args.steps - 1) * args.batch_size * run.world_size
    return [float(value) for value in torch.stack(losses).cpu().tolist()], samples / float(elapsed.item())


def checksum(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[sum, sum of squares] of all the values, in float64: equal models give equal checksums."""
    total = torch.zeros(2, dtype=torch.float64, device=tensors[0].device)
    for tensor in tensors:
        values = tensor.detach().to(torch.float64)
        total[0] += values.sum()
        total[1] += (values * values).sum()
    return total


def agrees_with_rank0(local: torch.Tensor, run: Run) -> bool:
    """Whether every rank's checksum equals rank 0's within AGREE_RTOL (the answer is the same on every rank)."""
    gathered = [torch.zeros_like(local) for _ in range(run.world_size)]
    dist.all_gather(gathered, local)
    return all(torch.allclose(other, gathered[0], rtol=AGREE_RTOL, atol=1e-12) for other in gathered[1:])


def count_hosts(run: Run) -> int:
    """Distinct host names across all ranks."""
    names: list[object] = [None] * run.world_size
    dist.all_gather_object(names, socket.gethostname())
    return len(set(names))


def _finite(value: float) -> float | None:
    """The value for JSON (which has no NaN or infinity): None when not finite."""
    return float(f"{value:.8g}") if math.isfinite(value) else None


def report(
    run: Run,
    args: argparse.Namespace,
    template: str,
    losses: list[float],
    samples_per_s: float,
    replicas_agree: bool,
) -> int:
    """Rank 0 prints the GPUCLUS_RESULT line; the exit status: 0 when the training did what it should."""
    nodes = count_hosts(run)
    first, last = losses[0], losses[-1]
    finite = all(math.isfinite(value) for value in losses)
    decreased = finite and last < first
    result = {
        "template": template,
        "backend": run.backend,
        "device": run.device.type,
        "world_size": run.world_size,
        "nodes": nodes,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "losses": [_finite(value) for value in losses],
        "loss_first": _finite(first),
        "loss_last": _finite(last),
        "decreased": decreased,
        "replicas_agree": replicas_agree,
        "samples_per_s": _finite(samples_per_s),
        "torch": torch.__version__,
    }
    problems = []
    if not finite:
        problems.append("the loss is not finite")
    elif not decreased:
        problems.append(f"the loss did not decrease ({first:.4g} -> {last:.4g})")
    if not replicas_agree:
        problems.append("the ranks hold different weights")
    if run.main:
        print(
            f"{template}: {run.world_size} ranks on {nodes} node(s), {run.backend} on {run.device.type}: "
            f"loss {first:.4f} -> {last:.4f}, {samples_per_s:.0f} samples/s",
            flush=True,
        )
        print(f"{RESULT_MARKER} {json.dumps(result)}", flush=True)
        if problems:
            print(f"{template}: FAILED: {'; '.join(problems)}", file=sys.stderr, flush=True)
    synchronize(run)  # every rank has finished with the others before any leaves
    return 1 if problems and run.main else 0


def finish(code: int) -> None:
    """Leave the process group and exit with code: call it after main() has returned.

    Once main()'s model, optimizer and mesh are gone, nothing holds the
    process group any more and it shuts down here, with Python still whole;
    torn down at interpreter exit instead, gloo's threads can abort the process.
    """
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(code)
