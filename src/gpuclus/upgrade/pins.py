"""Which pinned versions a deploy would change: the last applied render's group_vars against the new one's.

The render is what the nodes were built from, so comparing two renders says
what an upgrade moves without asking a node; slurm/releases.py asks the
controller what Slurm actually runs where that matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from gpuclus.deploy.phases import Phase

GROUP_VARS = "inventory/group_vars/all/"


@dataclass(frozen=True)
class Pin:
    variable: str
    label: str  # what an admin calls it
    phase: Phase
    # A change of it needs the node out of service while it happens.
    disruptive: bool = True


PINS = (
    Pin("gpuclus_slurm_version", "Slurm", Phase.SLURM),
    Pin("gpuclus_nvidia_driver_branch", "NVIDIA driver branch", Phase.NVIDIA),
    Pin("gpuclus_cuda_version", "CUDA toolkit", Phase.NVIDIA),
    Pin("gpuclus_enroot_version", "Enroot", Phase.CONTAINERS),
    Pin("gpuclus_pyxis_version", "Pyxis", Phase.CONTAINERS),
)
SLURM = PINS[0]


@dataclass(frozen=True)
class PinChange:
    pin: Pin
    before: str | None  # None: the distribution's version (not pinned)
    after: str | None

    def describe(self, arrow: str = "→") -> str:
        return f"{self.pin.label} {_shown(self.before)} {arrow} {_shown(self.after)}"

    def as_dict(self) -> dict[str, Any]:
        return {"what": self.pin.label, "variable": self.pin.variable, "before": self.before, "after": self.after}


def _shown(version: str | None) -> str:
    return version if version is not None else "(distribution's)"


def group_vars(rendered: dict[str, str]) -> dict[str, Any]:
    """Every variable of the render's group_vars/all files, merged."""
    merged: dict[str, Any] = {}
    for path in sorted(rendered):
        if path.startswith(GROUP_VARS) and path.endswith((".yml", ".yaml")):
            loaded = yaml.safe_load(rendered[path])
            if isinstance(loaded, dict):
                merged.update(loaded)
    return merged


def changed_pins(before: dict[str, str], after: dict[str, str], phases: list[Phase]) -> list[PinChange]:
    """The pins whose value differs between the two renders, for the phases this deploy runs.

    A pin of something the old render did not install (containers turned on
    now) is a first install, and one the new render leaves out is nothing to
    roll: neither is an upgrade.
    """
    old, new = group_vars(before), group_vars(after)
    changes = []
    for pin in PINS:
        if pin.phase not in phases or pin.variable not in old or pin.variable not in new:
            continue
        was, now = _text(old[pin.variable]), _text(new[pin.variable])
        if was != now and _installed(pin, old) and _installed(pin, new):
            changes.append(PinChange(pin, was, now))
    return changes


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# The switch that says a render installs what the pin versions.
_PHASE_SWITCHES = {
    "gpuclus_nvidia_driver_branch": "gpuclus_nvidia_driver_install",
    "gpuclus_cuda_version": "gpuclus_cuda_install",
    "gpuclus_enroot_version": "gpuclus_enroot_install",
    "gpuclus_pyxis_version": "gpuclus_pyxis_install",
}


def _installed(pin: Pin, variables: dict[str, Any]) -> bool:
    switch = _PHASE_SWITCHES.get(pin.variable)
    return switch is None or bool(variables.get(switch, True))
