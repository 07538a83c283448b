"""gpuclus NCCL probe: all-reduce bus bandwidth with torch.distributed, and whether the sums are right.

Run one process per GPU under srun (the rendezvous comes from Slurm's
variables: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID and the
job's node list; MASTER_ADDR/MASTER_PORT override them).

Rank 0 prints one line ``GPUCLUS_PROBE {json}``: {"probe": "nccl", "ranks": n,
"busbw_gbs": ..., "algbw_gbs": ..., "wrong": 0, ...}; busbw = algbw x 2(n-1)/n
as nccl-tests computes it. A rank that fails prints {"error": ..., "rank": r}.
Exit 0 whatever the bandwidth; 1 only when the probe itself broke.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import socket
import sys
import time
from typing import Any

# Imported from the package; shipped inline, common.py's text has already run.
with contextlib.suppress(ImportError):
    from gpuclus.validate.probes.common import run_distributed

# Values each element of the check tensor cycles through (see expected_sum).
PATTERN_PERIOD = 7


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw x 2(n-1)/n."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def expected_sum(world: int, position: int) -> float:
    """What element ``position`` holds after the all-reduce of rank r's (r + 1 + position % 7)."""
    return world * (world + 1) / 2 + world * (position % PATTERN_PERIOD)


def measure(torch: Any, where: dict[str, Any], mib: int, warmup: int, iterations: int) -> dict[str, Any]:
    dist = importlib.import_module("torch.distributed")
    rank, world = where["rank"], where["world"]
    device = torch.device("cuda", where["local"] % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://{where['address']}:{where['port']}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    count = mib * 2**20 // 4
    data = torch.zeros(count, device=device, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(data)
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(data)
    torch.cuda.synchronize()
    elapsed = torch.tensor([time.perf_counter() - start], device=device, dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    seconds = float(elapsed.item()) / iterations
    # Correctness: a pattern with a known sum, on the full-size buffer (every channel carries part of it).
    positions = torch.arange(count, device=device, dtype=torch.int64) % PATTERN_PERIOD
    check = positions.to(torch.float32) + (rank + 1)
    dist.all_reduce(check)
    expected = positions.to(torch.float32) * world + world * (world + 1) / 2
    wrong = (check != expected).sum().to(torch.int64).reshape(1)
    dist.all_reduce(wrong)
    algbw = count * 4 / seconds / 1e9
    result = {
        "probe": "nccl",
        "tool": "torch",
        "ranks": world,
        "nodes": int(os.environ.get("SLURM_NNODES", "1")),
        "bytes": count * 4,
        "time_us": round(seconds * 1e6, 1),
        "algbw_gbs": round(algbw, 3),
        "busbw_gbs": round(bus_bandwidth(algbw, world), 3),
        "wrong": int(wrong.item()),
        "torch": str(torch.__version__),
        "nccl": ".".join(str(part) for part in _nccl_version(torch)),
        "host": socket.gethostname(),
    }
    dist.destroy_process_group()
    return result


def _nccl_version(torch: Any) -> tuple[int, ...]:
    try:
        version = torch.cuda.nccl.version()
    except Exception:
        return ()
    return tuple(int(part) for part in version) if isinstance(version, tuple) else (int(version),)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nccl_probe")
    parser.add_argument("--mib", type=int, default=256, help="all-reduce size in MiB")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    return run_distributed("nccl", lambda torch, where: measure(torch, where, args.mib, args.warmup, args.iterations))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
