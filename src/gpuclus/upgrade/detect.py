"""Does this deploy upgrade something? The pins it changes, and the Slurm jump it would make."""

from __future__ import annotations

import re
from pathlib import Path

from gpuclus.deploy.last_applied import read_last_applied
from gpuclus.deploy.phases import Phase
from gpuclus.errors import UsageError
from gpuclus.slurm.releases import jump_problem
from gpuclus.spec.load import LoadedSpec
from gpuclus.ssh.client import CommandResult
from gpuclus.state import StateDir
from gpuclus.upgrade.pins import SLURM, PinChange, changed_pins


def pin_changes(spec_path: Path, loaded: LoadedSpec, phases: list[Phase]) -> list[PinChange]:
    """The pinned versions this spec changes against the last full deploy; none on a first deploy."""
    from gpuclus.deploy.pipeline import render_for_run

    before = read_last_applied(StateDir.beside(spec_path))
    if before is None:
        return []
    return changed_pins(before, render_for_run(spec_path, loaded), phases)


_SLURM_VERSION = re.compile(r"^slurm(?:-wlm)? (\d+\.\d+\.\d+)", re.MULTILINE)


def installed_slurm(result: CommandResult) -> str | None:
    """The version `sinfo -V` printed on the controller ("slurm-wlm 22.05.8"), or None."""
    found = _SLURM_VERSION.search(result.stdout)
    return found.group(1) if found and result.exit_status == 0 else None


def refuse_unsupported_jump(changes: list[PinChange], installed: str | None) -> None:
    """A UsageError (nothing touched yet) when the Slurm change is one Slurm cannot make in place."""
    change = next((change for change in changes if change.pin == SLURM), None)
    if change is None or change.after is None or installed is None:
        return
    problem = jump_problem(installed, change.after)
    if problem:
        raise UsageError(
            f"slurm.version {change.after}: {problem} (the controller runs {installed})",
            "pin an intermediate release, deploy it, then this one; see https://slurm.schedmd.com/upgrades.html",
        )
