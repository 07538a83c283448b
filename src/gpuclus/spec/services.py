"""Which systemd units the roles start on which node: one answer for status and validate's config stage.

Pure: from a checked spec and its topology to the services a deployed node
runs. ``gpuclus status`` shows the Slurm and monitoring ones (their Debian
names); validate's config stage asks systemd for every candidate name and
judges them all. Both read this list, so a role that starts a unit on a new
set of nodes changes one predicate here.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclus.spec.models import ClusterSpec, Role
from gpuclus.spec.topology import Node, Topology

# playbooks/slurm.yml runs on controller:backup_controller:compute:login; munge comes with it.
SLURM_ROLES = frozenset({Role.CONTROLLER, Role.BACKUP_CONTROLLER, Role.COMPUTE, Role.LOGIN})
# roles/grafana: written on the monitoring node when the deploy skipped Grafana on purpose
# (monitoring.grafana_unavailable: skip); Grafana's unit is then absent by design. Its first line
# (or a JSON object's "reason") says why.
GRAFANA_SKIPPED = "/var/lib/gpuclus/grafana.skipped"


@dataclass(frozen=True)
class Service:
    name: str  # as messages name it
    units: tuple[str, ...]  # the unit's name on Debian/Ubuntu, then on the RedHat family (the first that exists)
    # A file on the node that says the deploy left this unit out on purpose (why, in its first line).
    skipped_when: str | None = None

    @property
    def debian_unit(self) -> str:
        return self.units[0]


def nfs_server(spec: ClusterSpec, topology: Topology) -> Node | None:
    """The node that serves the exports, if the spec has any."""
    servers = topology.with_role(Role.NFS_SERVER)
    return servers[0] if servers and spec.nfs.exports else None


def services_for(node: Node, spec: ClusterSpec, topology: Topology) -> list[Service]:
    """The services the roles enable and start on ``node`` (unit names from roles/*/vars)."""
    monitoring = spec.monitoring
    prometheus = monitoring.prometheus  # playbooks/monitoring.yml runs everything under it
    server = topology.monitoring_server
    on_monitoring = prometheus and server is not None and server.name == node.name
    controller = node.has(Role.CONTROLLER)
    server_of_exports = nfs_server(spec, topology)
    real_gpus = node.has_real_gpus
    driver = real_gpus and spec.nvidia.driver.install
    wanted = [
        (Service("chrony", ("chrony", "chronyd")), True),
        (Service("munge", ("munge",)), bool(node.roles & SLURM_ROLES)),
        (Service("slurmctld", ("slurmctld",)), controller or node.has(Role.BACKUP_CONTROLLER)),
        (Service("slurmdbd", ("slurmdbd",)), controller and spec.slurm.accounting),
        (Service("mariadb", ("mariadb",)), controller and spec.slurm.accounting),
        (Service("slurmd", ("slurmd",)), node.has(Role.COMPUTE)),
        (
            Service("NFS server", ("nfs-server",) if spec.nfs.server_impl == "kernel" else ("nfs-ganesha",)),
            server_of_exports is not None and server_of_exports.name == node.name,
        ),
        (Service("node exporter", ("prometheus-node-exporter", "node_exporter")), prometheus),
        (Service("Slurm metrics timer", ("gpuclus-slurm-metrics.timer",)), prometheus and controller),
        (Service("prometheus", ("prometheus",)), on_monitoring),
        (
            Service("alertmanager", ("prometheus-alertmanager", "alertmanager")),
            on_monitoring and monitoring.alertmanager,
        ),
        (Service("grafana", ("grafana-server",), GRAFANA_SKIPPED), on_monitoring and monitoring.grafana),
        # roles/nvidia_driver on real GPUs: persistenced always, DCGM and the fabric manager when asked for
        # (fabric_manager "auto" depends on the node's NVSwitches, which the spec does not know).
        (Service("nvidia-persistenced", ("nvidia-persistenced",)), driver),
        (Service("nvidia-dcgm", ("nvidia-dcgm",)), driver and spec.nvidia.dcgm),
        (Service("nvidia-fabricmanager", ("nvidia-fabricmanager",)), driver and spec.nvidia.fabric_manager is True),
        # roles/gpu_metrics on real GPUs: dcgm-exporter with DCGM, else the nvidia-smi collector's timer.
        (
            Service("GPU metrics", ("nvidia-dcgm-exporter",) if spec.nvidia.dcgm else ("gpuclus-gpu-metrics.timer",)),
            prometheus and real_gpus,
        ),
    ]
    return [service for service, on in wanted if on]
