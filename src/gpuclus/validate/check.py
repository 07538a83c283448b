"""What one check is: a stable id, the level that selects it, a title, and the function that runs it.

The stage modules under ``validate.checks`` build these and list them; the
registry reads those lists. Keeping the class here, apart from the registry,
lets both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, Outcome


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
