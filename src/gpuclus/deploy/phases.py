"""Deploy phases: which ones a spec needs, in which order, and their playbooks.

The one list of phases: the Phase enum's order is the deploy order, and
``WHAT`` says what each sets up. `gpuclus deploy --help`, the phase names'
completion and errors, and each run's entry playbook come from here;
playbooks/site.yml is a plain file a unit test holds to this order.
Light to import (the spec's models only for type checking): the CLI builds
its help text from it at start.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuclus.errors import UsageError

if TYPE_CHECKING:
    from gpuclus.spec.models import ClusterSpec
    from gpuclus.spec.topology import Topology


class Phase(enum.StrEnum):
    BASE = "base"
    NFS = "nfs"
    NVIDIA = "nvidia"
    SLURM = "slurm"
    # After slurm: the users phase also writes the users' Slurm accounts and
    # limits, which need slurmdbd up (and after nfs, for shared homes).
    USERS = "users"
    CONTAINERS = "containers"
    PYTORCH = "pytorch"
    MONITORING = "monitoring"


ORDER = tuple(Phase)

# What each phase sets up, in a few words (`gpuclus deploy --help`).
WHAT = {
    Phase.BASE: "hosts, time, packages, SSH trust",
    Phase.NFS: "the exports and their mounts",
    Phase.NVIDIA: "driver, CUDA, reboots with --reboot",
    Phase.SLURM: "munge, slurmctld, slurmd, accounting",
    Phase.USERS: "the users file's accounts and Slurm limits",
    Phase.CONTAINERS: "Enroot, Pyxis",
    Phase.PYTORCH: "Lmod, the Python environment, job templates",
    Phase.MONITORING: "exporters, Prometheus, Alertmanager, Grafana",
}


def playbook_file(phase: Phase) -> str:
    """The phase's playbook, in playbooks/."""
    return f"{phase.value}.yml"


def names() -> str:
    """The phase names in deploy order, comma-separated."""
    return ", ".join(phase.value for phase in ORDER)


def described() -> str:
    """Every phase in deploy order with what it sets up, for help texts."""
    return "; ".join(f"{phase.value} ({WHAT[phase]})" for phase in ORDER)


@dataclass(frozen=True)
class PhaseChoice:
    phase: Phase
    reason: str  # why it runs, or why it is skipped


def wanted_phases(spec: ClusterSpec, topology: Topology) -> tuple[list[PhaseChoice], list[PhaseChoice]]:
    """(phases the spec needs, phases it does not need), each with the reason."""
    real_gpus = topology.real_gpu_nodes
    needs = {
        Phase.BASE: (True, "always: hosts, time, packages, SSH trust"),
        Phase.NFS: (bool(spec.nfs.exports), "nfs.exports is set" if spec.nfs.exports else "no nfs.exports"),
        Phase.USERS: (
            spec.users.file is not None,
            "users.file is set" if spec.users.file is not None else "no users.file",
        ),
        Phase.NVIDIA: (
            bool(real_gpus) and (spec.nvidia.driver.install or spec.nvidia.cuda.install),
            "no real GPUs (none declared, or all fake)"
            if not real_gpus
            else "real GPUs and nvidia.*.install"
            if spec.nvidia.driver.install or spec.nvidia.cuda.install
            else "nvidia.driver.install and nvidia.cuda.install are off",
        ),
        Phase.SLURM: (
            True,
            "always: munge, slurmctld, slurmd" + (", accounting" if spec.slurm.accounting else ""),
        ),
        Phase.CONTAINERS: (
            spec.containers.enroot or spec.containers.pyxis,
            "containers.enroot/pyxis" if spec.containers.enroot or spec.containers.pyxis else "containers off",
        ),
        Phase.PYTORCH: (
            spec.pytorch.install or spec.modules.lmod,
            "pytorch.install / modules.lmod"
            if spec.pytorch.install or spec.modules.lmod
            else "pytorch and modules off",
        ),
        Phase.MONITORING: (
            spec.monitoring.prometheus or spec.monitoring.grafana,
            "monitoring on" if spec.monitoring.prometheus or spec.monitoring.grafana else "monitoring off",
        ),
    }
    run = [PhaseChoice(phase, needs[phase][1]) for phase in ORDER if needs[phase][0]]
    skip = [PhaseChoice(phase, needs[phase][1]) for phase in ORDER if not needs[phase][0]]
    return run, skip


def parse_phase_list(text: str | None, option: str) -> set[Phase]:
    if not text:
        return set()
    chosen = set()
    for word in text.split(","):
        word = word.strip()
        try:
            chosen.add(Phase(word))
        except ValueError:
            raise UsageError(f"{option} {word!r} is not a phase", f"phases: {names()}") from None
    return chosen


def select_phases(spec_phases: list[PhaseChoice], only: set[Phase], skip: set[Phase]) -> list[Phase]:
    """The spec's phases narrowed by --only / --skip, in deploy order."""
    if only and skip:
        raise UsageError("--only and --skip cannot be used together")
    wanted = [choice.phase for choice in spec_phases]
    if only:
        not_needed = sorted(phase.value for phase in only if phase not in wanted)
        if not_needed:
            raise UsageError(
                f"--only {','.join(not_needed)}: the spec does not use that phase",
                "see `gpuclus deploy --help` for when each phase runs",
            )
        return [phase for phase in wanted if phase in only]
    return [phase for phase in wanted if phase not in skip]
