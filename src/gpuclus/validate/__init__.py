"""gpuclus validate: staged Slurm checks of a deployed cluster with numeric thresholds."""
