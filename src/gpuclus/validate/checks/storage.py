"""Stage "storage": a file written into each NFS export on the server is read back on every other node."""

from __future__ import annotations

import secrets
import shlex

from gpuclus.spec.models import NfsExport, Role
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, NodeResult, Outcome, Status, skipped

# Kernels without an NFS client (the sandbox's containers share such a
# kernel) cannot mount the export at all; there the export is read over the
# network with libnfs' nfs-cat instead, and the result says so. A node whose
# kernel could mount it but has not is a failure.
_READ = """
f={file}; want={token}
got=$(cat "$f" 2>/dev/null || true)
fstype=$(findmnt -rn -o FSTYPE -T "$f" 2>/dev/null | tail -n 1)
case "$fstype" in nfs*)
  if [ "$got" = "$want" ]; then echo "via=mount"; exit 0; fi
  echo "via=mount-stale fstype=$fstype"; exit 6 ;;
esac
if grep -qw 'nfs4\\?' /proc/filesystems 2>/dev/null || modinfo nfs >/dev/null 2>&1; then
  echo "via=none fstype=${{fstype:-none}}"; exit 3
fi
command -v nfs-cat >/dev/null 2>&1 || {{ echo "via=none nfs-client=absent libnfs=absent"; exit 4; }}
for attempt in 1 2 3 4 5; do
  got=$(nfs-cat {url} 2>&1) && [ "$got" = "$want" ] && {{ echo "via=libnfs"; exit 0; }}
  sleep 2
done
echo "via=libnfs-failed"; printf '%s\\n' "$got" | tail -n 2; exit 5
"""


def shared_file_visible(ctx: Context) -> Outcome:
    exports = ctx.spec.nfs.exports
    servers = ctx.topology.with_role(Role.NFS_SERVER)
    if not exports or not servers:
        return skipped("no NFS exports in the spec")
    server = servers[0]
    readers = [node for node in ctx.selected if node.name != server.name]
    if not readers:
        return skipped("no node besides the NFS server selected")
    name = f".gpuclus-validate-{secrets.token_hex(6)}"
    token = secrets.token_hex(16)
    results: dict[str, list[NodeResult]] = {node.name: [] for node in readers}
    problems = []
    for export in exports:
        path = f"{export.path.rstrip('/')}/{name}"
        write_script = f"umask 022 && echo {token} > {shlex.quote(path)}"
        write = ctx.ssh_each(f"sudo -n sh -c {shlex.quote(write_script)}", [server], timeout=30)[server.name]
        if write.exit_status != 0:
            problems.append(f"could not write {path} on {server.name}: {write.stderr.strip()[-200:]}")
            continue
        try:
            answers = _read_everywhere(
                ctx,
                readers,
                _READ.format(
                    file=shlex.quote(f"{export.mount_point.rstrip('/')}/{name}"),
                    token=shlex.quote(token),
                    url=shlex.quote(f"nfs://{server.address}{path}"),
                ),
            )
        finally:
            ctx.ssh_each(f"sudo -n rm -f {shlex.quote(path)}", [server], timeout=30)
        for node in readers:
            results[node.name].append(_judge(node, export, answers.get(node.name), ctx))
    if problems:
        return Outcome(status=Status.FAIL, message="; ".join(problems), hint="check the export directory on the server")
    # A node read over SSH that SSH could not reach says so, not that NFS is broken.
    merged, cut_off = ctx.name_unreachable([_merge(node.name, results[node.name]) for node in readers])
    nfs_hint = (
        f"on {server.name}: is the export still in /etc/exports (or ganesha.conf) and the NFS server running "
        "(`systemctl status nfs-server nfs-ganesha`)? on the node: `findmnt -T MOUNT`, `mount -a`; "
        "`gpuclus deploy --only nfs` puts both back"
    )
    others_failed = any(row.status is Status.FAIL and row.node not in cut_off for row in merged)
    return Outcome(
        merged,
        message=f"server {server.name}, {len(exports)} export(s)",
        hint=nfs_hint if others_failed or not cut_off else ctx.unreachable_hint(cut_off),
    )


def _read_everywhere(ctx: Context, readers: list[Node], script: str) -> dict[str, CommandResult | None]:
    """Each reader's answer: compute nodes through a job, the others over SSH; None where no job can start."""
    jobs, unlaunchable = ctx.launchable([node for node in readers if node.has(Role.COMPUTE)])
    others = [node for node in readers if not node.has(Role.COMPUTE)]
    answers: dict[str, CommandResult | None] = dict.fromkeys(result.node for result in unlaunchable)
    answers.update(ctx.srun_each(script, jobs, time_limit_s=60))
    answers.update(ctx.ssh_each(script, others, timeout=60))
    return answers


def _judge(node: Node, export: NfsExport, answer: CommandResult | None, ctx: Context) -> NodeResult:
    mount = export.mount_point
    if answer is None:
        return NodeResult(node.name, Status.SKIP, f"{mount}: no job could start there (see launch.srun)")
    first = (answer.stdout.strip().splitlines() or [""])[0]
    if answer.exit_status == 0 and first == "via=mount":
        return NodeResult(node.name, Status.PASS, f"{mount}: read through the NFS mount", "mount", "readable")
    if answer.exit_status == 0 and first == "via=libnfs":
        return NodeResult(
            node.name,
            Status.PASS,
            f"{mount}: read over NFS with libnfs (this kernel has no NFS client, so nothing is mounted)",
            "libnfs",
            "readable",
        )
    details = {
        3: f"{mount} is not an NFS mount here ({first.removeprefix('via=none ')}); the file cannot be read",
        4: f"{mount} is not mounted, and neither an NFS client nor libnfs tools are on the node",
        6: f"{mount} is NFS-mounted, but the file just written on the server is missing or differs there "
        "(another export mounted, or a stale client cache)",
        5: f"the export cannot be read over NFS: {' '.join(answer.stdout.strip().splitlines()[1:])[-200:]}",
    }
    fallback = f"read failed (exit {answer.exit_status}): {answer.stderr.strip()[-200:]}"
    message = details.get(answer.exit_status, fallback)
    return NodeResult(node.name, Status.FAIL, message, "unreadable", "readable")


def _merge(node: str, results: list[NodeResult]) -> NodeResult:
    if len(results) == 1:
        return results[0]
    failing = [result for result in results if result.status is not Status.PASS]
    pick = failing[0] if failing else results[0]
    return NodeResult(node, pick.status, "; ".join(result.message for result in results), pick.value, pick.expected)


CHECKS = [
    Check(
        "storage.shared-fs",
        Level.STANDARD,
        "a file written on the NFS server is read on every node",
        shared_file_visible,
        needs_slurm=False,
    ),
]
