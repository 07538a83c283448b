"""Whose a sandbox's containers, network and volume are: which directory's `up` made them.

A sandbox's name is host-wide (its containers, network and volume are named
after it), but its state — .gpuclus/ with gpuclus' SSH key, known_hosts and
sandbox.json — lives beside one spec. So everything `up` creates carries a
second label, gpuclus.sandbox.owner=<that .gpuclus directory>, and every
command run from another directory treats it as someone else's: `up` refuses
the name, `status` and `ssh` neither show nor reach it, `down` leaves it alone.

Resources made by a gpuclus from before that label carry only
gpuclus.sandbox=NAME. They are this directory's when its sandbox.json names the
sandbox and the sandbox's network (when there is one) has the recorded subnet;
from any other directory they are someone else's, and are never removed or
reached from there. A record that an older gpuclus left in a second directory
(`up` there used to write it before failing) names another subnet, as that
`up` picked its own: it does not claim them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpuclus.errors import ExitCode
from gpuclus.sandbox.engine import LABEL, OS_LABEL, OWNER_LABEL, Engine, SandboxError, parse_json_lines
from gpuclus.sandbox.layout import network_name
from gpuclus.sandbox.network import subnets_of
from gpuclus.sandbox.record import SandboxRecord
from gpuclus.state import StateDir

Kind = Literal["node", "network", "volume"]


def owner_of(state: StateDir) -> str:
    """The owner label's value for resources made from this state directory (an absolute path)."""
    return str(state.root)


@dataclass(frozen=True)
class Resource:
    kind: Kind
    name: str
    owner: str | None  # the owner label; None: made by a gpuclus that did not set one
    state: str = ""  # a node's container state
    subnets: tuple[str, ...] = ()  # the network's
    cluster: str = ""  # the sandbox name it is labelled with
    os: str = ""  # a node's OS label ("" on nodes made before there was a choice: Debian 12)

    @property
    def directory(self) -> str | None:
        """The spec directory whose `up` made it; None when unknown."""
        return str(Path(self.owner).parent) if self.owner else None


@dataclass(frozen=True)
class Ownership:
    """A sandbox name's resources on one engine, split into this directory's and the rest."""

    cluster: str
    mine: tuple[Resource, ...]
    others: tuple[Resource, ...]

    def my(self, kind: Kind) -> list[Resource]:
        return [resource for resource in self.mine if resource.kind == kind]

    @property
    def elsewhere(self) -> list[str | None]:
        """The directories the other resources belong to (None: made by an older gpuclus, unrecorded)."""
        found = {resource.directory for resource in self.others}
        return sorted(found, key=lambda directory: (directory is None, directory or ""))

    def refusal(self) -> SandboxError:
        """Why this directory may not use the name (call only when ``others`` is not empty)."""
        where = self.elsewhere[0]
        if where is not None and not Path(where).is_dir():
            # Moved or deleted: its owner label still names it, and `down`
            # with a spec path there removes it from anywhere.
            return SandboxError(
                f"a sandbox named {self.cluster!r} runs from {where}, which no longer exists",
                f"use --name OTHER, or remove it: `gpuclus sandbox down --name {self.cluster}`",
                exit_code=ExitCode.USAGE,
            )
        if where is not None:
            return SandboxError(
                f"a sandbox named {self.cluster!r} runs from {where}",
                f"use --name OTHER, or remove it (from any directory): `gpuclus sandbox down --name {self.cluster}`",
                exit_code=ExitCode.USAGE,
            )
        return SandboxError(
            f"a sandbox named {self.cluster!r} made by an older gpuclus is on this host, "
            "and this directory's .gpuclus/sandbox.json does not name it",
            f"use --name OTHER, or remove it: `gpuclus sandbox down --name {self.cluster}`",
            exit_code=ExitCode.USAGE,
        )


def _labels(item: dict[str, Any], *path: str) -> dict[str, Any]:
    for key in path:
        item = item.get(key) or item.get(key.lower()) or {}
    labels = item.get("Labels") or item.get("labels") or {}
    return labels if isinstance(labels, dict) else {}


def census(engine: Engine, cluster: str | None) -> list[Resource]:
    """Every node container and volume labelled with the cluster, and its network, with their owner labels.

    ``cluster`` None: those of every sandbox on this engine.
    """
    found: list[Resource] = []
    names = engine.run(engine.list_containers(cluster), what="listing nodes").stdout.split()
    if names:
        for item in engine.json_lines(engine.inspect(names), what="inspecting nodes"):
            labels = _labels(item, "Config")
            status = str((item.get("State") or {}).get("Status", "unknown"))
            name = str(item.get("Name", "")).lstrip("/")
            owner, node_os = labels.get(OWNER_LABEL), labels.get(OS_LABEL, "")
            found.append(Resource("node", name, owner, status, cluster=labels.get(LABEL, ""), os=node_os))
    if cluster is None:
        networks = engine.run(engine.network_list(labelled=True), what="listing networks").stdout.split()
    else:
        networks = [network_name(cluster)]
    inspected = (
        engine.run(engine.network_inspect(networks), what="inspecting networks", check=False) if networks else None
    )
    if inspected is not None and inspected.returncode == 0:
        for item in parse_json_lines(inspected.stdout):
            labels = _labels(item)
            named = str(item.get("Name") or item.get("name") or "")
            found.append(
                Resource(
                    "network",
                    network_name(cluster) if cluster is not None else named,
                    labels.get(OWNER_LABEL),
                    subnets=tuple(subnets_of(item)),
                    cluster=labels.get(LABEL, cluster or ""),
                )
            )
    volumes = engine.run(engine.volume_list(cluster), what="listing volumes").stdout.split()
    if volumes:
        for item in engine.json_lines(engine.volume_inspect(volumes), what="inspecting volumes"):
            labels = _labels(item)
            name = str(item.get("Name", ""))
            found.append(Resource("volume", name, labels.get(OWNER_LABEL), cluster=labels.get(LABEL, cluster or "")))
    return found


def sort_out(resources: list[Resource], cluster: str, owner: str, record: SandboxRecord | None) -> Ownership:
    """Split ``resources`` of ``cluster`` into those made from the state directory ``owner`` and the rest."""
    networks = [resource for resource in resources if resource.kind == "network"]
    unlabelled_are_mine = (
        record is not None
        and record.cluster == cluster
        and all(network.owner in (None, owner) for network in networks)
        and all(record.subnet in network.subnets for network in networks if network.owner is None)
    )
    mine: list[Resource] = []
    others: list[Resource] = []
    for resource in resources:
        ours = resource.owner == owner if resource.owner is not None else unlabelled_are_mine
        (mine if ours else others).append(resource)
    return Ownership(cluster, tuple(mine), tuple(others))


def ownership(engine: Engine, cluster: str, state: StateDir, record: SandboxRecord | None) -> Ownership:
    return sort_out(census(engine, cluster), cluster, owner_of(state), record)
