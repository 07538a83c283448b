"""What preflight found on one node: its checks, and what the checks across nodes need (clock, OS)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class PreflightCheck:
    name: str
    status: str  # ok, warn, fail, skip
    message: str
    hint: str = ""


@dataclass
class NodeReport:
    node: str
    address: str
    reachable: bool
    checks: list[PreflightCheck] = field(default_factory=list)
    clock: float | None = None
    probed_at: float | None = None  # local time the answer arrived (for skew)
    os_release: str = ""  # "<ID> <VERSION_ID>" from /etc/os-release (for the Slurm release check)

    @property
    def failed(self) -> bool:
        return not self.reachable or any(check.status == "fail" for check in self.checks)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("clock")
        data.pop("probed_at")
        data.pop("os_release")
        return data


# (the node's report, nodes answered so far, nodes asked): progress while preflight runs.
AnswerCallback = Callable[[NodeReport, int, int], None]
