"""`gpuclus sandbox list`: every sandbox on this host, found by the labels on what `up` made.

A sandbox's state (.gpuclus/sandbox.json, its SSH key) lives beside the spec it
was started with, but its containers, network and volume carry the sandbox's
name, the directory that made them and each node's OS as labels (engine.py):
that is enough to show all of them from any directory, and for
`sandbox down --name NAME` to remove one from anywhere.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from gpuclus.sandbox.engine import Engine
from gpuclus.sandbox.oses import DEFAULT_OS
from gpuclus.sandbox.owner import Resource, census


@dataclass(frozen=True)
class SandboxSummary:
    name: str
    engine: str
    directory: str | None  # the spec's directory whose `up` made it; None: made by an older gpuclus
    oses: tuple[str, ...]  # the nodes' OSes, sorted
    nodes: tuple[str, ...]  # node container names, sorted
    running: int  # how many of them run
    subnet: str | None  # None: its network is gone

    @property
    def state(self) -> str:
        """running (every node), stopped (none), partial (some), or leftovers (no node: a network or volume)."""
        if not self.nodes:
            return "leftovers"
        if self.running == len(self.nodes):
            return "running"
        return "stopped" if self.running == 0 else "partial"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state}


def summarize(resources: Iterable[Resource], engine: str) -> list[SandboxSummary]:
    """One summary per sandbox name and owner directory, sorted by name then directory."""
    groups: dict[tuple[str, str | None], list[Resource]] = {}
    for resource in resources:
        if resource.cluster:
            groups.setdefault((resource.cluster, resource.directory), []).append(resource)
    summaries = []
    for (name, directory), members in groups.items():
        nodes = [member for member in members if member.kind == "node"]
        subnets = [subnet for member in members if member.kind == "network" for subnet in member.subnets]
        summaries.append(
            SandboxSummary(
                name=name,
                engine=engine,
                directory=directory,
                oses=tuple(sorted({node.os or DEFAULT_OS for node in nodes})),
                nodes=tuple(sorted(node.name for node in nodes)),
                running=sum(node.state == "running" for node in nodes),
                subnet=subnets[0] if subnets else None,
            )
        )
    return sorted(summaries, key=lambda s: (s.name, s.directory is None, s.directory or ""))


def installed_engines() -> list[Engine]:
    """The engines on this host that answer (podman; docker when its daemon runs)."""
    from gpuclus.sandbox.engine import docker_engine, podman_engine

    engines = []
    for binary, make in (("podman", podman_engine), ("docker", docker_engine)):
        if shutil.which(binary) is None:
            continue
        engine = make()
        if engine.ok(engine.list_containers(), timeout=20):
            engines.append(engine)
    return engines


def list_sandboxes(engines: Iterable[Engine]) -> list[SandboxSummary]:
    return [summary for engine in engines for summary in summarize(census(engine, None), engine.kind)]
