"""gpuclus DDP smoke test: a few training steps of a small MLP with DistributedDataParallel.

Run one process per GPU under srun (rendezvous from Slurm's variables, as in
nccl_probe). Every rank first times the model alone on its GPU; then all
ranks train it together. Rank 0 prints one line ``GPUCLUS_PROBE {json}``:
{"probe": "ddp", "ranks": n, "single_sps": ..., "ddp_sps": ..., "efficiency":
..., "losses": [...], "finite": true, "decreasing": true, "replicas_agree":
true}. Exit 0 whatever the figures; 1 only when the probe itself broke.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import math
import os
import sys
import time
from typing import Any

# Imported from the package; shipped inline, common.py's text has already run.
with contextlib.suppress(ImportError):
    from gpuclus.validate.probes.common import run_distributed

# After identical all-reduced gradient steps every replica holds the same
# weights; allow for nothing but summation-order noise in the checksum.
REPLICA_MAX_SPREAD = 1e-6


def losses_decreasing(losses: list[float]) -> bool:
    """The last loss below the first (single steps may go up)."""
    return len(losses) >= 2 and losses[-1] < losses[0]


def all_finite(values: list[float]) -> bool:
    return all(math.isfinite(value) for value in values)


def spread(low: float, high: float) -> float:
    """Relative distance of the replicas' weight checksums."""
    scale = max(abs(low), abs(high), 1e-30)
    return (high - low) / scale


def efficiency(ddp_sps: float, single_sps: float, ranks: int) -> float:
    """throughput with N GPUs / (N x single-GPU throughput)."""
    return ddp_sps / (ranks * single_sps) if single_sps > 0 and ranks > 0 else 0.0


def _model(torch: Any, hidden: int, layers: int, device: Any) -> Any:
    nn = torch.nn
    torch.manual_seed(0)  # the same start everywhere (DDP also broadcasts rank 0's weights)
    parts: list[Any] = []
    for _ in range(layers):
        parts += [nn.Linear(hidden, hidden), nn.ReLU()]
    parts.append(nn.Linear(hidden, 16))
    return nn.Sequential(*parts).to(device)


def _steps(torch: Any, model: Any, data: Any, target: Any, count: int, dtype: Any) -> tuple[list[float], float]:
    """Train ``count`` steps; (losses, seconds) with the GPU synchronised around the timing."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    losses = []
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = torch.nn.functional.mse_loss(model(data).float(), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return [float(value.item()) for value in losses], elapsed


def run(torch: Any, where: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    dist = importlib.import_module("torch.distributed")
    parallel = importlib.import_module("torch.nn.parallel")
    rank, world = where["rank"], where["world"]
    device = torch.device("cuda", where["local"] % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    generator = torch.Generator(device=device).manual_seed(100 + rank)
    data = torch.randn(args.batch, args.hidden, device=device, generator=generator)
    target = torch.tanh(data[:, :16] * 0.5)  # learnable: a function of the input

    # One GPU alone: the baseline for the scaling efficiency.
    alone = _model(torch, args.hidden, args.layers, device)
    _steps(torch, alone, data, target, args.warmup, dtype)
    _, seconds = _steps(torch, alone, data, target, args.steps, dtype)
    single_sps = args.batch * args.steps / seconds
    del alone

    dist.init_process_group(
        "nccl",
        init_method=f"tcp://{where['address']}:{where['port']}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    model = parallel.DistributedDataParallel(_model(torch, args.hidden, args.layers, device), device_ids=[device])
    warm_losses, _ = _steps(torch, model, data, target, args.warmup, dtype)
    dist.barrier()
    losses, seconds = _steps(torch, model, data, target, args.steps, dtype)
    losses = warm_losses + losses

    figures = torch.tensor(
        [single_sps, seconds, 1.0 if all_finite(losses) else 0.0], device=device, dtype=torch.float64
    )
    total = figures.clone()
    dist.all_reduce(total)  # sum of single-GPU rates, of times, of finite flags
    slowest = torch.tensor([seconds], device=device, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    checksum = sum(float(p.detach().double().sum().item()) for p in model.parameters())
    low = torch.tensor([checksum], device=device, dtype=torch.float64)
    high = low.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)

    single_mean = float(total[0].item()) / world
    ddp_sps = world * args.batch * args.steps / float(slowest.item())
    distance = spread(float(low.item()), float(high.item()))
    result = {
        "probe": "ddp",
        "ranks": world,
        "nodes": int(os.environ.get("SLURM_NNODES", "1")),
        "batch_per_gpu": args.batch,
        "dtype": str(dtype).replace("torch.", ""),
        "single_sps": round(single_mean, 1),
        "ddp_sps": round(ddp_sps, 1),
        "efficiency": round(efficiency(ddp_sps, single_mean, world), 4),
        "losses": [round(value, 6) if math.isfinite(value) else str(value) for value in losses],
        "finite": int(total[2].item()) == world,
        "decreasing": losses_decreasing(losses),
        "replica_spread": distance,
        "replicas_agree": distance <= REPLICA_MAX_SPREAD,
        "torch": str(torch.__version__),
    }
    dist.destroy_process_group()
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ddp_probe")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    # Large enough that the gradient all-reduce (~67 MB) can hide behind compute on a fast fabric.
    parser.add_argument("--batch", type=int, default=65536, help="samples per GPU and step")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args(argv)
    return run_distributed("ddp", lambda torch, where: run(torch, where, args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
