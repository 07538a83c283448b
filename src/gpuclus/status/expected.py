"""What the spec says should run where: each node's units and questions, and the cluster's URLs.

Pure: from a checked spec and its topology to one NodePlan per node, which
collect.py turns into that node's one script.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuclus.spec.models import ClusterSpec, Role
from gpuclus.spec.topology import Node, Topology
from gpuclus.status.model import Urls

PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
ALERTMANAGER_PORT = 9093
# Written on the monitoring node by a deploy that skipped Grafana on purpose (grafana_unavailable: skip);
# its first line (or a JSON object's "reason") says why.
GRAFANA_SKIPPED = "/var/lib/gpuclus/grafana.skipped"

# Unit names as the distribution packages them (Debian, Ubuntu).
SLURMCTLD = "slurmctld"
SLURMDBD = "slurmdbd"
SLURMD = "slurmd"
MUNGE = "munge"
NODE_EXPORTER = "prometheus-node-exporter"
PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"
GRAFANA = "grafana-server"

# The Slurm phase runs on these roles (playbooks/slurm.yml: controller:backup_controller:compute:login); munge too.
_SLURM_ROLES = frozenset({Role.CONTROLLER, Role.BACKUP_CONTROLLER, Role.COMPUTE, Role.LOGIN})


@dataclass(frozen=True)
class NodePlan:
    """What to ask one node: its units' states, and on the controller and monitoring node a little more."""

    name: str
    address: str
    roles: tuple[str, ...]
    units: tuple[str, ...]
    controller: bool = False  # asks slurmctld (scontrol, squeue) from here
    targets_url: str | None = None  # Prometheus' targets API, fetched from this node
    grafana_marker: bool = False  # reads GRAFANA_SKIPPED here


def alertmanager_on(spec: ClusterSpec) -> bool:
    # monitoring.alertmanager came with the monitoring issue; a spec model without it means off.
    return bool(getattr(spec.monitoring, "alertmanager", False))


def units_for(node: Node, spec: ClusterSpec, topology: Topology) -> tuple[str, ...]:
    """The systemd units a deployed node runs, in the order status shows them."""
    monitoring = spec.monitoring
    server = topology.monitoring_server
    on_server = server is not None and server.name == node.name
    wanted = [
        (SLURMCTLD, node.has(Role.CONTROLLER) or node.has(Role.BACKUP_CONTROLLER)),
        (SLURMDBD, node.has(Role.CONTROLLER) and spec.slurm.accounting),
        (SLURMD, node.has(Role.COMPUTE)),
        (MUNGE, bool(node.roles & _SLURM_ROLES)),
        (NODE_EXPORTER, monitoring.prometheus),
        (PROMETHEUS, on_server and monitoring.prometheus),
        (ALERTMANAGER, on_server and monitoring.prometheus and alertmanager_on(spec)),
        (GRAFANA, on_server and monitoring.grafana),
    ]
    return tuple(unit for unit, on in wanted if on)


def prometheus_url(address: str) -> str:
    return f"http://{address}:{PROMETHEUS_PORT}/"


def plan(spec: ClusterSpec, topology: Topology) -> list[NodePlan]:
    """One plan per spec node, in the spec's order."""
    controller = topology.controller
    server = topology.monitoring_server
    plans = []
    for node in topology.nodes:
        on_server = server is not None and server.name == node.name
        plans.append(
            NodePlan(
                name=node.name,
                address=node.address,
                roles=tuple(sorted(role.value for role in node.roles)),
                units=units_for(node, spec, topology),
                controller=controller is not None and controller.name == node.name,
                targets_url=(
                    f"{prometheus_url(node.address)}api/v1/targets?state=active"
                    if on_server and spec.monitoring.prometheus
                    else None
                ),
                grafana_marker=on_server and spec.monitoring.grafana,
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
            f"http://{address}:{ALERTMANAGER_PORT}/" if monitoring.prometheus and alertmanager_on(spec) else None
        ),
    )
