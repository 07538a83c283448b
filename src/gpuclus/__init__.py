"""gpuclus: turn a few Linux machines with NVIDIA GPUs into a Slurm deep-learning cluster."""

from importlib.metadata import PackageNotFoundError, version

# One source: the installed distribution's metadata, which hatch-vcs took from
# git when the wheel (or the editable install) was built. `--version`, run
# records and the deploy stamp all read this.
try:
    __version__ = version("gpuclus")
except PackageNotFoundError:  # sources on PYTHONPATH without an install
    __version__ = "0+unknown"
