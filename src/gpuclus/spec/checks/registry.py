"""Every spec check, in the order they run: the domain modules' ``CHECKS``, one module after another.

The order is the order of the findings a spec gets (after sorting by line), so a module's place here is part
of what the tests hold; the checks never import this module back.
"""

from __future__ import annotations

from gpuclus.spec.checks import (
    containers,
    control_files,
    failover,
    monitoring,
    nfs,
    nodes,
    nvidia,
    partitions,
    paths,
    pytorch,
    users,
)
from gpuclus.spec.checks.view import RegisteredCheck, SpecView
from gpuclus.yamldoc.findings import Finding

CHECKS: list[RegisteredCheck] = [
    *nodes.CHECKS,
    *failover.CHECKS,
    *partitions.CHECKS,
    *nfs.CHECKS,
    *monitoring.CHECKS,
    *pytorch.CHECKS,
    *containers.CHECKS,
    *nvidia.CHECKS,
    *users.CHECKS,
    *paths.CHECKS,
    *control_files.CHECKS,
]


def run_checks(view: SpecView) -> list[Finding]:
    """Every check that ``view`` has the parts for; see ``skipped_checks``."""
    findings: list[Finding] = []
    for check in CHECKS:
        if check.can_run(view):
            findings.extend(check.function(view))
    return findings


def skipped_checks(view: SpecView) -> list[str]:
    """The checks that wait for the structure errors to be fixed."""
    return [check.name for check in CHECKS if not check.can_run(view)]
