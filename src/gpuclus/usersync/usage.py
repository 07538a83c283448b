"""Who holds how many GPUs right now, for `gpuclus users list`: squeue on the controller, over gpuclus' key."""

from __future__ import annotations

from pathlib import Path

from gpuclus.errors import UsageError
from gpuclus.slurm import commands as slurm
from gpuclus.slurm.session import Connect, connect_controller
from gpuclus.spec.load import LoadedSpec
from gpuclus.ssh.client import SshFailure
from gpuclus.state import StateDir

SQUEUE_TIMEOUT_S = 30


def gpus_in_use(
    loaded: LoadedSpec, spec_path: Path, connect: Connect = connect_controller
) -> tuple[dict[str, int], str | None]:
    """GPUs each user's running jobs hold; ({}, why) when the controller cannot be asked.

    The list is worth showing without them, so an unreachable controller or a failed squeue is an answer
    here, not an error.
    """
    assert loaded.spec is not None and loaded.topology is not None  # a checked spec
    state = StateDir.beside(spec_path)
    try:
        remote = connect(loaded.spec, loaded.topology, state.private_key, state.known_hosts)
    except (SshFailure, UsageError) as problem:
        return {}, str(problem)
    try:
        result = remote.run(slurm.SQUEUE_GPUS, timeout=SQUEUE_TIMEOUT_S)
    finally:
        remote.close()
    if result.exit_status != 0:
        return {}, f"squeue failed: {(result.stderr or result.stdout).strip()[:200]}"
    return slurm.parse_gpus_in_use(result.stdout), None
