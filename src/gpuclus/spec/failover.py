"""The backup controller (Slurm HA): which node it is and where both slurmctlds keep their state.

Slurm's HA needs one state directory that both controllers read and write
(StateSaveLocation), at the same path on both, since slurm.conf is one file.
One answer here for the checks, render and validate.
"""

from __future__ import annotations

import posixpath

from gpuclus.spec.models import ClusterSpec, Role
from gpuclus.spec.topology import Node, Topology

# Under the first NFS export's mount point when the spec names no path.
STATE_SUBDIR = "slurm/state"


def backup_controller(topology: Topology) -> Node | None:
    """The node with the backup_controller role; None without one (or with several, which the checks refuse)."""
    backups = topology.with_role(Role.BACKUP_CONTROLLER)
    return backups[0] if len(backups) == 1 else None


def path_on(spec: ClusterSpec, node: Node, export_index: int) -> str:
    """Where ``node`` sees the export: the NFS server its own directory (it mounts nothing), the others the mount."""
    export = spec.nfs.exports[export_index]
    return export.path if node.has(Role.NFS_SERVER) else export.mount_point


def default_state_dir(spec: ClusterSpec, topology: Topology) -> str | None:
    """<first export's mount>/slurm/state when both controllers see it there, else None (no default fits)."""
    controller, backup = topology.controller, backup_controller(topology)
    if not spec.nfs.exports or controller is None or backup is None:
        return None
    seen = {path_on(spec, controller, 0), path_on(spec, backup, 0)}
    if len(seen) != 1:
        return None
    return posixpath.join(seen.pop(), STATE_SUBDIR)


def state_save_location(spec: ClusterSpec, topology: Topology) -> str | None:
    """The StateSaveLocation slurm.conf gets; None: the distribution's local directory (no backup controller)."""
    if spec.slurm.state_save_location is not None:
        return spec.slurm.state_save_location
    if backup_controller(topology) is None:
        return None
    return default_state_dir(spec, topology)
