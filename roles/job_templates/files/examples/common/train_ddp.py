"""Data-parallel training (DDP) of a small MLP on synthetic data: the ddp-* templates' script.

Every process holds the whole model and trains on its own batches; DDP
averages the gradients across all processes after each backward pass, so every
copy takes the same step and stays identical (the replicas_agree check).

Run it with torchrun, one process per GPU (or one per CPU-only node):

    python gpuclus_launch.py train_ddp.py --steps 40      # inside a Slurm job
    python -m torch.distributed.run --standalone --nproc-per-node=2 train_ddp.py --steps 20   # one machine

Rank 0 prints progress, then one line ``GPUCLUS_RESULT {json}`` (see
gpuclus_train.report). To train your own model: replace make_model() with your
model and gpuclus_train.SyntheticRegression with your data (give each rank its
own part, e.g. with torch.utils.data.DistributedSampler); keep the DDP wrap.
"""

from __future__ import annotations

import torch
from gpuclus_train import agrees_with_rank0, checksum, finish, make_model, parse_args, report, say, setup, train
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    args = parse_args("DDP training of a small MLP on synthetic data (gpuclus job template).")
    run = setup()
    template = args.template or ("ddp-multi-node" if run.nodes > 1 else "ddp-single-node")
    say(run, f"{template}: DDP, {run.world_size} ranks, {run.backend} on {run.device.type}, torch {torch.__version__}")

    model = make_model(args.hidden).to(run.device)
    device_ids = [run.local_rank] if run.device.type == "cuda" else None
    ddp_model = DistributedDataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=args.lr)

    losses, samples_per_s = train(ddp_model, optimizer, run, args, template)

    # Every rank's copy of the weights, summed up, against rank 0's.
    agree = agrees_with_rank0(checksum(list(model.parameters())), run)
    return report(run, args, template, losses, samples_per_s, agree)


if __name__ == "__main__":
    finish(main())
