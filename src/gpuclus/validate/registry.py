"""Every check validate knows, in the order they run, and how a run picks among them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuclus.errors import UsageError
from gpuclus.validate.context import Context
from gpuclus.validate.model import Level, Outcome

# Stages in run order; a table groups results by them.
STAGES = ("cluster", "launch", "storage", "gpu", "containers", "accounting", "monitoring")


@dataclass(frozen=True)
class Check:
    id: str  # stable: "<stage>.<name>", used by --only, JSON, JUnit and docs/validate.md
    level: Level
    title: str
    run: Callable[[Context], Outcome]
    # Needs slurmctld: skipped (not failed again) when cluster.slurmctld failed.
    needs_slurm: bool = True

    @property
    def stage(self) -> str:
        return self.id.split(".", 1)[0]


def all_checks() -> list[Check]:
    from gpuclus.validate.checks import accounting, cluster, containers, gpu, launch, monitoring, storage

    checks = [
        *cluster.CHECKS,
        *launch.CHECKS,
        *storage.CHECKS,
        *gpu.CHECKS,
        *containers.CHECKS,
        *accounting.CHECKS,
        *monitoring.CHECKS,
    ]
    return sorted(checks, key=lambda check: STAGES.index(check.stage))


def select(checks: list[Check], level: Level, only: list[str] | None) -> list[Check]:
    """The checks of ``level`` and below, or exactly those named by --only (ids or whole stages)."""
    if not only:
        return [check for check in checks if check.level <= level]
    known = {check.id for check in checks}
    unknown = [name for name in only if name not in known and name not in STAGES]
    if unknown:
        raise UsageError(
            f"unknown check {', '.join(unknown)}",
            "`gpuclus validate --list` shows every check id; a stage name (e.g. cluster) selects its checks",
        )
    return [check for check in checks if check.id in only or check.stage in only]
