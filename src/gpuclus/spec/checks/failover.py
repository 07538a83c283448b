"""Failover: one backup controller, on a node of its own, sharing the controller's state directory."""

from __future__ import annotations

from gpuclus.spec import hostlist
from gpuclus.spec.checks.view import EXPORTS, NODES, RegisteredCheck, SpecView, node_loc, registrar
from gpuclus.spec.failover import STATE_SUBDIR, backup_controller, default_state_dir
from gpuclus.spec.models import Role
from gpuclus.yamldoc.findings import Finding, error

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


@_check()
def backup_controller_entries(view: SpecView) -> list[Finding]:
    """One backup controller: a single host, in one entry, not the controller itself."""
    findings: list[Finding] = []
    backups = view.topology.with_role(Role.BACKUP_CONTROLLER)
    entries = sorted({node.entry for node in backups})
    for index in entries:
        names = [node.name for node in backups if node.entry == index]
        if len(names) > 1:
            findings.append(
                error(
                    "backup-controller-range",
                    f"the backup_controller role is on a range of {len(names)} nodes ({hostlist.compress(names)})",
                    node_loc(index, "roles"),
                    hint="Slurm takes one backup controller here: give that node an entry of its own with "
                    "the role, and keep the range for the other nodes",
                )
            )
    if len(entries) > 1:
        findings.append(
            error(
                "backup-controller-count",
                f"{len(entries)} node entries have the backup_controller role; one may",
                node_loc(entries[1], "roles"),
                hint="keep 'backup_controller' on one node",
            )
        )
    findings.extend(
        error(
            "backup-controller-on-controller",
            f"node {node.name!r} is both the controller and the backup controller",
            node_loc(node.entry, "roles"),
            hint="a backup slurmctld must run on another node, or it fails together with the controller",
        )
        for node in backups
        if node.has(Role.CONTROLLER)
    )
    return findings


@_check(NODES, EXPORTS, ("slurm", "state_save_location"))
def backup_controller_state(view: SpecView) -> list[Finding]:
    """With a backup controller, both slurmctlds need the same state directory at the same path."""
    spec, topology = view.spec, view.topology
    backup = backup_controller(topology)
    if backup is None or topology.controller is None or spec.slurm.state_save_location is not None:
        return []
    if default_state_dir(spec, topology) is not None:
        return []
    why = (
        "nfs.exports is empty"
        if not spec.nfs.exports
        else f"the first export is at different paths on {topology.controller.name!r} and {backup.name!r} "
        "(the NFS server sees its own directory, the others the mount point)"
    )
    return [
        error(
            "state-save-location-required",
            f"a backup controller needs slurm.state_save_location on storage both controllers share, and {why}",
            ("slurm",),
            hint=f"set slurm.state_save_location to a directory both see at the same path (e.g. <share>/"
            f"{STATE_SUBDIR}), or give the export a mount equal to its path",
        )
    ]
