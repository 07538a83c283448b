"""gpuclus: turn a few Linux machines with NVIDIA GPUs into a Slurm deep-learning cluster."""

__version__ = "0.1.0"
