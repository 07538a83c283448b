"""NFS: exports need one server node, a server needs exports, and no path or mount point is used twice."""

from __future__ import annotations

from collections import Counter

from gpuclus.spec.checks.view import EXPORTS, NODES, RegisteredCheck, SpecView, node_loc, registrar
from gpuclus.spec.models import Role
from gpuclus.yamldoc.findings import Finding, error, warning

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


@_check(EXPORTS, NODES)
def nfs_server_missing(view: SpecView) -> list[Finding]:
    if not view.spec.nfs.exports or view.topology.with_role(Role.NFS_SERVER):
        return []
    return [
        error(
            "nfs-server-missing",
            "nfs.exports is set but no node has the nfs_server role",
            ("nfs", "exports"),
            hint="add 'nfs_server' to the roles of the node that holds the data (often the controller)",
        )
    ]


@_check()
def nfs_servers_multiple(view: SpecView) -> list[Finding]:
    servers = view.topology.with_role(Role.NFS_SERVER)
    if len(servers) < 2:
        return []
    return [
        error(
            "nfs-server-multiple",
            f"{len(servers)} nodes have the nfs_server role ({', '.join(n.name for n in servers)}); "
            "gpuclus v1 supports one",
            node_loc(servers[1].entry, "roles"),
            hint="keep 'nfs_server' on one node",
        )
    ]


@_check(EXPORTS)
def nfs_server_without_exports(view: SpecView) -> list[Finding]:
    servers = view.topology.with_role(Role.NFS_SERVER)
    if not servers or view.spec.nfs.exports:
        return []
    return [
        warning(
            "nfs-server-without-exports",
            f"node {servers[0].name!r} has the nfs_server role but nfs.exports is empty",
            node_loc(servers[0].entry, "roles"),
            hint="list the shared directories under nfs.exports (e.g. [/shared]) or drop the role",
        )
    ]


@_check(EXPORTS)
def duplicate_exports(view: SpecView) -> list[Finding]:
    findings: list[Finding] = []
    exports = view.spec.nfs.exports
    for attribute, label in (("path", "exported"), ("mount_point", "mounted")):
        counts = Counter(getattr(export, attribute) for export in exports)
        for value, count in sorted(counts.items()):
            if count > 1:
                index = [i for i, e in enumerate(exports) if getattr(e, attribute) == value][1]
                findings.append(
                    error(
                        "duplicate-export",
                        f"{value} is {label} more than once",
                        ("nfs", "exports", index),
                        hint="each export needs its own path and mount point",
                    )
                )
    return findings


# The anonymous ids an export maps squashed users to: what 0 is for each, and whose rights it then hands out.
_ANONYMOUS_IDS = {"anonuid": ("root's uid", "root"), "anongid": ("root's gid", "the root group")}


@_check(EXPORTS)
def exports_squash_to_root(view: SpecView) -> list[Finding]:
    """anonuid=0 or anongid=0 turns squashing around: the squashed users become root on the share."""
    findings: list[Finding] = []
    for index, export in enumerate(view.spec.nfs.exports):
        options = export.options.split(",")
        squashed = _squashed(options)
        if squashed is None:
            continue
        # The last of an option given twice wins, in exports(5) and here.
        values = {name: value for name, _equals, value in (option.partition("=") for option in options)}
        for name, (zero, owner) in _ANONYMOUS_IDS.items():
            if name not in values or int(values[name]) != 0:
                continue
            findings.append(
                warning(
                    "export-squash-to-root",
                    f"export {export.path} maps {squashed} to {zero} ({name}=0): they may change any file on "
                    f"the share that {owner} may",
                    ("nfs", "exports", index, "options"),
                    hint=f"use {name}=65534 (nobody) or leave {name} out; write no_root_squash if root on the "
                    "clients is meant to stay root there",
                )
            )
    return findings


def _squashed(options: list[str]) -> str | None:
    """Who the export squashes to the anonymous ids, in words, or None when no one is.

    As exports(5) reads them: the later of a flag and its no_ form wins, and root_squash is the default.
    """
    if _later(options, "all_squash", "no_all_squash") == "all_squash":
        return "every user on every client"
    if _later(options, "root_squash", "no_root_squash") != "no_root_squash":
        return "root on every client (undoing root_squash)"
    return None


def _later(options: list[str], first: str, second: str) -> str | None:
    """Which of ``first`` and ``second`` comes last in ``options``, or None when neither is there."""
    return next((option for option in reversed(options) if option in (first, second)), None)
