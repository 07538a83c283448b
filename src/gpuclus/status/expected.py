"""What the spec says should run where: each node's units and questions, and the cluster's URLs.

Pure: from a checked spec and its topology to one NodePlan per node, which
collect.py turns into that node's one script.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.services import services_for
from gpuclus.spec.topology import Node, Topology
from gpuclus.status.report import Urls

PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
ALERTMANAGER_PORT = 9093

# Unit names as the distribution packages them (Debian, Ubuntu).
SLURMCTLD = "slurmctld"
SLURMDBD = "slurmdbd"
SLURMD = "slurmd"
MUNGE = "munge"
NODE_EXPORTER = "prometheus-node-exporter"
PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
GRAFANA = "grafana-server"

# The units status shows, in this order: Slurm's and monitoring's. Which node runs which is spec/services'
# answer (validate's config stage reads the same one and judges every unit there).
SHOWN = (SLURMCTLD, SLURMDBD, SLURMD, MUNGE, NODE_EXPORTER, PROMETHEUS, ALERTMANAGER, GRAFANA)


@dataclass(frozen=True)
class NodePlan:
    """What to ask one node: its units' states, and on the controller and monitoring node a little more."""

    name: str
    address: str
    roles: tuple[str, ...]
    units: tuple[str, ...]
    controller: bool = False  # asks slurmctld (scontrol, squeue) from here
    targets_url: str | None = None  # Prometheus' targets API, fetched from this node
    grafana_marker: bool = False  # reads spec/services.GRAFANA_SKIPPED here


def units_for(node: Node, spec: ClusterSpec, topology: Topology) -> tuple[str, ...]:
    """The systemd units of SHOWN a deployed node runs (their Debian names), in SHOWN's order."""
    running = {service.debian_unit for service in services_for(node, spec, topology)}
    return tuple(unit for unit in SHOWN if unit in running)


def prometheus_url(address: str) -> str:
    return f"http://{address}:{PROMETHEUS_PORT}/"


def plan(spec: ClusterSpec, topology: Topology) -> list[NodePlan]:
    """One plan per spec node, in the spec's order."""
    controller = topology.controller
    plans = []
    for node in topology.nodes:
        units = units_for(node, spec, topology)
        plans.append(
            NodePlan(
                name=node.name,
                address=node.address,
                roles=tuple(sorted(role.value for role in node.roles)),
                units=units,
                controller=controller is not None and controller.name == node.name,
                # Where Prometheus runs, its targets are asked of it; where Grafana should, its skip marker.
                targets_url=(
                    f"{prometheus_url(node.address)}api/v1/targets?state=active" if PROMETHEUS in units else None
                ),
                grafana_marker=GRAFANA in units,
            )
        )
    return plans


def urls(spec: ClusterSpec, topology: Topology, grafana_password_file: Path) -> Urls:
    """Where an admin points a browser, and the file (never the value) that holds Grafana's admin password."""
    server = topology.monitoring_server
    monitoring = spec.monitoring
    if server is None:
        return Urls()
    address = server.address
    return Urls(
        prometheus=prometheus_url(address) if monitoring.prometheus else None,
        grafana=f"http://{address}:{GRAFANA_PORT}/" if monitoring.grafana else None,
        grafana_password_file=str(grafana_password_file) if monitoring.grafana else None,
        alertmanager=(
            f"http://{address}:{ALERTMANAGER_PORT}/" if monitoring.prometheus and monitoring.alertmanager else None
        ),
    )
