"""What validate reports: statuses, per-node results, check outcomes.

A check's overall status is derived from its node results (the worst one
wins), so a check can never say PASS while one of its nodes failed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


class Level(enum.IntEnum):
    """How deep a run goes; each level includes the ones below it."""

    QUICK = 1
    STANDARD = 2
    FULL = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Level:
        return cls[text.upper()]


# Worst first: the status a check takes from its nodes.
_SEVERITY = {Status.FAIL: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


def worst(statuses: list[Status]) -> Status:
    """FAIL over WARN over PASS over SKIP; SKIP when there is nothing."""
    return max(statuses, key=_SEVERITY.__getitem__, default=Status.SKIP)


@dataclass(frozen=True)
class NodeResult:
    """One node's answer to one check: what was measured against what was expected."""

    node: str
    status: Status
    message: str = ""
    value: float | int | str | None = None
    expected: str | None = None  # e.g. ">= 20" or "2 x h100"
    unit: str | None = None
    # This node's own hint when its cause is not the check's (a node that cannot be reached
    # fails munge for that reason, not for its key); failures() and the table show it instead.
    hint: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status.value,
            "message": self.message,
            "value": self.value,
            "expected": self.expected,
            "unit": self.unit,
        }


@dataclass(frozen=True)
class Outcome:
    """What a check function returns: node results plus, for cluster-wide checks, a summary."""

    nodes: list[NodeResult] = field(default_factory=list)
    message: str = ""
    hint: str | None = None
    # For checks without per-node results (slurmctld answers, partitions up).
    status: Status | None = None
    value: float | int | str | None = None
    expected: str | None = None
    unit: str | None = None

    @property
    def overall(self) -> Status:
        statuses = [result.status for result in self.nodes]
        if self.status is not None:
            statuses.append(self.status)
        return worst(statuses)


def skipped(reason: str) -> Outcome:
    return Outcome(status=Status.SKIP, message=reason)


@dataclass(frozen=True)
class CheckResult:
    """A check as it ran: its identity, its outcome and how long it took."""

    id: str
    stage: str
    level: Level
    title: str
    outcome: Outcome
    duration_s: float

    @property
    def status(self) -> Status:
        return self.outcome.overall

    @property
    def failed_nodes(self) -> list[str]:
        return [result.node for result in self.outcome.nodes if result.status is Status.FAIL]

    def as_dict(self) -> dict[str, Any]:
        outcome = self.outcome
        return {
            "id": self.id,
            "stage": self.stage,
            "level": self.level.label,
            "title": self.title,
            "status": self.status.value,
            "message": outcome.message,
            "hint": outcome.hint if self.status in (Status.FAIL, Status.WARN) else None,
            "value": outcome.value,
            "expected": outcome.expected,
            "unit": outcome.unit,
            "duration_s": round(self.duration_s, 3),
            "nodes": [result.as_dict() for result in outcome.nodes],
        }
