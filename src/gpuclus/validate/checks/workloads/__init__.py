"""Stage "workloads": gpuclus' job templates run as real Slurm jobs, as a user would run them.

The deploy builds a PyTorch env (pytorch.install) and puts job templates in
its examples directory (gpuclus.spec.software says where). This stage
imports the env on every compute node, trains the DDP and FSDP templates
with srun, submits the multi-node and MPI templates with ``sbatch --wait``,
runs the DDP path in a Pyxis container, and measures how DDP scales from
one node to all. Without usable GPUs (fake ones, CPU nodes) the templates
train on CPU with gloo, and the messages say so. docs/validate.md explains
each rule.

One module per check family: ``placement`` decides the nodes and the command
lines, ``job_output`` judges what the jobs printed (pure functions), ``env``,
``training``, ``batch`` and ``scaling`` are the checks.
"""

from __future__ import annotations

from gpuclus.validate.check import Check
from gpuclus.validate.checks.workloads.batch import mpi_job, sbatch_job
from gpuclus.validate.checks.workloads.env import pytorch_env
from gpuclus.validate.checks.workloads.scaling import scaling
from gpuclus.validate.checks.workloads.training import container, ddp, fsdp
from gpuclus.validate.results import Level

CHECKS = [
    Check("workloads.env", Level.FULL, "the PyTorch env imports torch and numpy on every compute node", pytorch_env),
    Check("workloads.ddp", Level.FULL, "the DDP template trains across all compute nodes (srun)", ddp),
    Check("workloads.sbatch", Level.FULL, "the multi-node DDP template runs with sbatch --wait", sbatch_job),
    Check("workloads.fsdp", Level.FULL, "the FSDP template trains with two or more ranks on one node", fsdp),
    Check("workloads.mpi", Level.FULL, "the MPI all-reduce template runs across the compute nodes", mpi_job),
    Check("workloads.container", Level.FULL, "the DDP template trains in a Pyxis container", container),
    Check("workloads.scaling", Level.FULL, "DDP throughput on all compute nodes against one node", scaling),
]
