"""Every check validate knows, in the order they run, and how a run picks among them.

Each stage module under ``validate.checks`` lists its checks in ``CHECKS``;
this module only reads those lists (the checks never import it back).
"""

from __future__ import annotations

from gpuclus.errors import UsageError
from gpuclus.validate.check import Check
from gpuclus.validate.checks import (
    accounting,
    cluster,
    config,
    containers,
    doors,
    failover,
    gpu,
    launch,
    monitoring,
    storage,
    workloads,
)
from gpuclus.validate.results import Level

# Each stage's checks, stages in run order.
_STAGE_CHECKS: dict[str, list[Check]] = {
    "cluster": cluster.CHECKS,
    # Right after Slurm's own view, before anything starts a job: a node whose files, names, clock or
    # services drifted since the deploy is named for that cause first (SSH only, no Slurm needed).
    "config": config.CHECKS,
    "launch": launch.CHECKS,
    "storage": storage.CHECKS,
    "gpu": gpu.CHECKS,
    "containers": containers.CHECKS,
    # After containers (a broken Pyxis shows there first), before accounting (which then expects these jobs).
    "workloads": workloads.CHECKS,
    "accounting": accounting.CHECKS,
    # After accounting (whose count of this run's jobs these would change), before monitoring.
    "doors": doors.CHECKS,
    "monitoring": monitoring.CHECKS,
    # Last: it stops the primary slurmctld on purpose (and starts it again), which no other check should see.
    "failover": failover.CHECKS,
}
# Stages in run order; a table groups results by them.
STAGES = tuple(_STAGE_CHECKS)


def all_checks() -> list[Check]:
    return [check for stage in STAGES for check in _STAGE_CHECKS[stage]]


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
