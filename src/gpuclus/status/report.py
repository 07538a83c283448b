"""What `gpuclus status` reports: typed values, and the one JSON document they make.

Everything here is plain data; verdict.py decides what is a problem, and
cli/status.py shows it. ``ClusterStatus.as_dict`` is the --json document:
its keys are stable, and a change to them raises SCHEMA_VERSION.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Usage:
    """Allocated of total (CPUs or GPUs)."""

    alloc: int
    total: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.alloc + other.alloc, self.total + other.total)

    def as_dict(self) -> dict[str, int]:
        return {"alloc": self.alloc, "total": self.total}


NO_USAGE = Usage(0, 0)
# Base states of a node that still runs jobs: draining, not yet drained.
_BUSY = frozenset({"allocated", "mixed", "completing"})


@dataclass(frozen=True)
class SlurmNode:
    """One node as slurmctld sees it (`scontrol show nodes -o`)."""

    name: str
    state: str  # base state, lower case: idle, mixed, allocated, completing, down, future, unknown, ...
    flags: tuple[str, ...]  # lower case, sorted: drain, not_responding, reserved, ...
    reason: str | None
    cpus: Usage
    gpus: Usage
    partitions: tuple[str, ...]
    healthy: bool  # can take jobs: a good base state and no drain/fail/not-responding flag

    @property
    def label(self) -> str:
        """idle, down+not_responding, idle+drain: the state as Slurm's own tools join it."""
        return "+".join([self.state, *self.flags])

    @property
    def summary(self) -> str:
        """One word per node, as sinfo and the Slurm metrics count them: drained, draining, fail, maint or the base."""
        if "drain" in self.flags or "drained" in self.flags or "draining" in self.flags:
            return "draining" if self.state in _BUSY else "drained"
        if "fail" in self.flags or "failing" in self.flags:
            return "fail"
        if "maint" in self.flags:
            return "maint"
        return self.state

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "flags": list(self.flags),
            "reason": self.reason,
            "cpus": self.cpus.as_dict(),
            "gpus": self.gpus.as_dict(),
            "partitions": list(self.partitions),
            "summary": self.summary,
            "healthy": self.healthy,
        }


@dataclass(frozen=True)
class PartitionInfo:
    """One partition from `scontrol show partitions -o`."""

    name: str
    state: str  # up, down, drain, inactive (lower case)
    default: bool


@dataclass(frozen=True)
class Job:
    """One queued or running job from squeue: the partitions it names and its state (lower case)."""

    job_id: str
    partitions: tuple[str, ...]
    state: str


@dataclass(frozen=True)
class Partition:
    """A partition with what its nodes and jobs add up to."""

    name: str
    state: str
    default: bool
    nodes: tuple[str, ...]
    node_states: dict[str, int]  # SlurmNode.summary -> nodes
    cpus: Usage
    gpus: Usage
    jobs: dict[str, int]  # job state -> jobs; pending and running always present

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "default": self.default,
            "nodes": list(self.nodes),
            "node_states": dict(sorted(self.node_states.items())),
            "cpus": self.cpus.as_dict(),
            "gpus": self.gpus.as_dict(),
            "jobs": dict(sorted(self.jobs.items())),
        }


class ServiceState(enum.StrEnum):
    """A unit's state: systemctl is-active's word, or one of gpuclus' own."""

    ACTIVE = "active"
    INACTIVE = "inactive"
    FAILED = "failed"
    ACTIVATING = "activating"
    DEACTIVATING = "deactivating"
    RELOADING = "reloading"
    SKIPPED = "skipped"  # the deploy left it out on purpose and said why (Grafana in the sandbox)
    UNKNOWN = "unknown"  # the node did not answer, or systemctl gave no word for the unit

    @property
    def healthy(self) -> bool:
        return self in (ServiceState.ACTIVE, ServiceState.RELOADING, ServiceState.SKIPPED)


@dataclass(frozen=True)
class Service:
    node: str
    unit: str
    state: ServiceState
    detail: str = ""  # the skip reason, or why the state is unknown

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "unit": self.unit, "state": self.state.value, "detail": self.detail}


@dataclass(frozen=True)
class Target:
    """One Prometheus scrape target (/api/v1/targets, active)."""

    job: str
    instance: str
    url: str
    health: str  # up, down, unknown
    last_error: str

    @property
    def healthy(self) -> bool:
        return self.health == "up"

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "instance": self.instance,
            "url": self.url,
            "health": self.health,
            "last_error": self.last_error,
        }


@dataclass(frozen=True)
class Monitoring:
    """Prometheus' view: which node asked, and its targets (or why there are none)."""

    node: str
    targets: tuple[Target, ...]
    error: str | None = None  # the API did not answer: why

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "error": self.error, "targets": [target.as_dict() for target in self.targets]}


@dataclass(frozen=True)
class Urls:
    prometheus: str | None = None
    grafana: str | None = None
    grafana_password_file: str | None = None  # where the admin password is; never the password
    alertmanager: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "prometheus": self.prometheus,
            "grafana": self.grafana,
            "grafana_password_file": self.grafana_password_file,
            "alertmanager": self.alertmanager,
        }


@dataclass(frozen=True)
class NodeStatus:
    """A spec node: how gpuclus reached it, and what Slurm says of it (None: Slurm gave no answer for it)."""

    name: str
    address: str
    roles: tuple[str, ...]
    reachable: bool | None  # None: not asked
    ssh_error: str | None
    slurm: SlurmNode | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "roles": list(self.roles),
            "reachable": self.reachable,
            "ssh_error": self.ssh_error,
            "slurm": self.slurm.as_dict() if self.slurm else None,
        }


@dataclass(frozen=True)
class SlurmAnswer:
    """Did slurmctld answer the controller's scontrol/squeue, and if not, why."""

    controller: str
    answered: bool
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"controller": self.controller, "answered": self.answered, "error": self.error}


class ProblemKind(enum.StrEnum):
    UNREACHABLE = "unreachable"  # gpuclus could not reach the node over SSH
    SLURM = "slurm"  # slurmctld did not answer, or Slurm is not deployed
    NODE_STATE = "node_state"  # a Slurm node down, drained, failing or not responding
    NODE_MISSING = "node_missing"  # a spec compute node Slurm does not know
    PARTITION = "partition"  # a partition not up
    SERVICE = "service"  # a unit not active
    PROMETHEUS = "prometheus"  # Prometheus' API did not answer
    TARGET = "target"  # a scrape target down


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    subject: str  # the node, partition, node/unit or target it is about
    message: str
    hint: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "subject": self.subject, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class ClusterStatus:
    cluster: str
    collected_at: str  # ISO 8601, UTC
    duration_s: float
    slurm: SlurmAnswer
    nodes: tuple[NodeStatus, ...]
    partitions: tuple[Partition, ...]
    jobs: dict[str, int]  # job state -> jobs, whole cluster; pending and running always present
    services: tuple[Service, ...]
    monitoring: Monitoring | None  # None: Prometheus is off in the spec
    urls: Urls
    problems: tuple[Problem, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "cluster": self.cluster,
            "collected_at": self.collected_at,
            "duration_s": round(self.duration_s, 3),
            "slurm": self.slurm.as_dict(),
            "nodes": [node.as_dict() for node in self.nodes],
            "partitions": [partition.as_dict() for partition in self.partitions],
            "jobs": dict(sorted(self.jobs.items())),
            "services": [service.as_dict() for service in self.services],
            "monitoring": self.monitoring.as_dict() if self.monitoring else None,
            "urls": self.urls.as_dict(),
            "problems": [problem.as_dict() for problem in self.problems],
        }
