"""config.mounts: every NFS client has every export mounted from the NFS server.

With nfs.server_impl kernel, roles/nfs_client mounts each export on every
node but the server, at its mount point, with the spec's client options
(x-systemd.automount by default: the point is an autofs entry until first
used). The survey touches a path inside each mount point first, with a time
bound, then reads /proc/mounts: the point must carry an nfs or nfs4 mount of
server:path. With ganesha gpuclus mounts nothing (the sandbox's kernel has
no NFS client; storage.shared-fs reads the exports with libnfs there).
"""

from __future__ import annotations

from gpuclus.validate.checks.config.expected import Mount, mounts_for
from gpuclus.validate.checks.config.survey import (
    MOUNT_TOUCH_S,
    NodeSurvey,
    deploy_hint,
    in_spec_order,
    outcome,
    survey,
    unsurveyed,
)
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, skipped

CHECK_ID = "config.mounts"
NFS_TYPES = frozenset({"nfs", "nfs4"})
# What coreutils' timeout returns when the touch did not finish.
TOUCH_TIMED_OUT = 124


def exports_mounted(ctx: Context) -> Outcome:
    if not ctx.spec.nfs.exports:
        return skipped("no NFS exports in the spec")
    if ctx.spec.nfs.server_impl != "kernel":
        return skipped(
            f"nfs.server_impl is {ctx.spec.nfs.server_impl}: gpuclus mounts nothing then (roles/nfs_client only "
            "writes the fstab lines; the sandbox's kernel has no NFS client), storage.shared-fs reads the exports"
        )
    clients = [node for node in ctx.selected if mounts_for(node, ctx.spec, ctx.topology)]
    if not clients:
        return skipped("no NFS client selected (the NFS server mounts nothing)")
    taken = survey(ctx)
    rows, answered = unsurveyed(ctx, taken, CHECK_ID, clients)
    for node in answered:
        rows.append(judge(node.name, mounts_for(node, ctx.spec, ctx.topology), taken.answered[node.name]))
    return outcome(
        ctx,
        taken,
        in_spec_order(rows, list(clients)),
        message=f"{len(ctx.spec.nfs.exports)} export(s) on {len(clients)} client(s)",
        hint="on the node: `findmnt MOUNT`, `systemctl status MOUNT.automount` (systemd-escape names it), "
        "`mount -a`; on the server: `exportfs -v`; " + deploy_hint("writes the fstab lines and mounts them again"),
    )


def judge(node: str, wanted: list[Mount], answer: NodeSurvey) -> NodeResult:
    problems = [problem for mount in wanted if (problem := _problem(mount, answer))]
    if problems:
        message = "; ".join(problems)
        return NodeResult(node, Status.FAIL, message, len(wanted) - len(problems), str(len(wanted)), "mounts")
    points = ", ".join(mount.point for mount in wanted)
    return NodeResult(node, Status.PASS, f"NFS-mounted: {points}", len(wanted), str(len(wanted)), "mounts")


def _problem(mount: Mount, answer: NodeSurvey) -> str | None:
    if mount.point not in answer.touched:
        return answer.missing(f"{mount.point}'s mount")
    entries = answer.mounts.get(mount.point, [])
    nfs = [source for fstype, source in entries if fstype in NFS_TYPES]
    if any(_same_source(source, mount.source) for source in nfs):
        return None
    if nfs:
        return f"{mount.point} is mounted from {', '.join(nfs)}, the spec says {mount.source}"
    touched = answer.touched[mount.point]
    if any(fstype == "autofs" for fstype, _source in entries):
        why = f"did not mount within {MOUNT_TOUCH_S} s" if touched == TOUCH_TIMED_OUT else "did not mount when used"
        return f"{mount.point} is an automount that {why} (no NFS mount of {mount.source})"
    found = ", ".join(fstype for fstype, _source in entries)
    return f"{mount.point} is not NFS-mounted" + (f" (it is {found})" if found else "") + f"; want {mount.source}"


def _same_source(found: str, wanted: str) -> bool:
    # The kernel shows the source as fstab gave it, with or without a trailing slash.
    return found.rstrip("/") == wanted.rstrip("/")
