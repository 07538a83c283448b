"""Fully sharded data-parallel training (FSDP) of a small MLP on synthetic data: the fsdp template's script.

Like DDP, every process trains on its own batches; unlike DDP, no process
holds the whole model: each keeps a 1/world_size shard of every parameter,
gradient and optimizer state, and the full weights of a block are gathered
only while that block runs. That is what lets a model larger than one GPU's
memory train.

It uses FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch 2.6 and later;
2.4 and 2.5 have it under torch.distributed._composable.fsdp), which also runs
on CPU with gloo, so the template works on CPU-only nodes; the older
FullyShardedDataParallel class needs GPUs.

The replicas_agree check: after training, each rank all-gathers the full
parameters (DTensor.full_tensor()) and computes their checksum; every rank's
checksum must equal rank 0's. It shows that the shards put back together give
one model on every rank.

Run it with torchrun (see ../README.md); rank 0 prints progress, then one line
``GPUCLUS_RESULT {json}``. To train your own model, shard each of its big
blocks (transformer layers) with fully_shard, then the whole model; on GPUs,
add mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16) to halve memory
and communication.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

# The shared helpers live in ../common, next to the launcher.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "common"))

from gpuclus_train import (
    agrees_with_rank0,
    checksum,
    finish,
    make_model,
    parse_args,
    report,
    say,
    setup,
    train,
)

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # PyTorch 2.4, 2.5
    try:
        from torch.distributed._composable.fsdp import fully_shard
    except ImportError:
        fully_shard = None

TEMPLATE = "fsdp"


def main() -> int:
    args = parse_args("FSDP training of a small MLP on synthetic data (gpuclus job template).")
    if fully_shard is None:
        sys.exit(f"error: PyTorch {torch.__version__} has no fully_shard (FSDP2); this template needs 2.4 or later")
    from torch.distributed.device_mesh import init_device_mesh

    run = setup()
    template = args.template or TEMPLATE
    say(run, f"{template}: FSDP, {run.world_size} ranks, {run.backend} on {run.device.type}, torch {torch.__version__}")

    model = make_model(args.hidden).to(run.device)
    mesh = init_device_mesh(run.device.type, (run.world_size,))
    # Each block is its own shard unit (gathered just before it runs, freed after);
    # the root call takes the parameters left over.
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    losses, samples_per_s = train(model, optimizer, run, args, template)

    full = [parameter.full_tensor() for parameter in model.parameters()]
    agree = agrees_with_rank0(checksum(full), run)
    return report(run, args, template, losses, samples_per_s, agree)


if __name__ == "__main__":
    finish(main())
