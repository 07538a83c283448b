"""Who holds how many GPUs right now: `squeue` on the controller, read for `gpuclus users list`."""

from __future__ import annotations

# Running jobs' users and allocated TRES, '|'-separated (a field suffix; the
# same in Slurm 22.05 and 24.11). tres-alloc holds the job's whole GPU count
# as gres/gpu=N (typed counts such as gres/gpu:a100=N come beside it).
SQUEUE_GPUS = "squeue --noheader --states=RUNNING --Format='UserName:|,tres-alloc:|'"


def gpus_in_use(output: str) -> dict[str, int]:
    """GPUs held by each user's running jobs, from SQUEUE_GPUS' output (users without GPUs left out)."""
    held: dict[str, int] = {}
    for line in output.splitlines():
        user, _, rest = line.strip().partition("|")
        tres = rest.rstrip("|")
        for item in tres.split(","):
            name, _, value = item.partition("=")
            if name == "gres/gpu" and value.isdigit() and int(value) > 0:
                held[user] = held.get(user, 0) + int(value)
    return held
