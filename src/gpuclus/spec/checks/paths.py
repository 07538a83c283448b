"""Directories on the nodes that the spec names and gpuclus' roles create, chown, chmod, export or mount over.

Such a field must never name a directory of the operating system: `pytorch.prefix: /etc` with a shared
layout would make /etc the admin user's on the NFS server, `nfs.exports: [/etc]` would hand it to every
client. Paths are compared normalised and part by part (the grammar already refuses '.' and '..' parts), so
/etcetera is no system directory and /etc/ssh is one (it lies in /etc).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from gpuclus.spec.checks.view import RegisteredCheck, SpecView, registrar
from gpuclus.spec.models import ClusterSpec
from gpuclus.yamldoc.findings import Finding, Loc, error, format_loc

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)

# The operating system's directories, with everything below them: a role that made one of these someone
# else's, gave it another mode, exported it or mounted a share over it would break the node or hand it over.
# /tmp, /var/tmp and /dev/shm (in /dev) are here for another reason too: anyone may create a name in them, so
# a user could plant /tmp/state as a link to /etc before the role's chown follows it.
SYSTEM_TREES = frozenset(
    {
        "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found", "/proc",
        "/root", "/run", "/sbin", "/snap", "/sys", "/tmp",
        "/usr/bin", "/usr/games", "/usr/include", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libexec",
        "/usr/libx32", "/usr/sbin", "/usr/share", "/usr/src",
        "/var/lock", "/var/log", "/var/mail", "/var/run", "/var/tmp",
    }
)  # fmt: skip
# The operating system's directories that hold directories of their own choosing: the directory itself is
# refused, a directory below it is the admin's (/var/lib/slurm/slurmctld as Slurm's state, /opt/site as a
# prefix, /home/shared as an export).
SYSTEM_DIRECTORIES = frozenset(
    {
        "/", "/home", "/media", "/mnt", "/opt", "/srv", "/usr",
        "/usr/local", "/usr/local/bin", "/usr/local/etc", "/usr/local/include", "/usr/local/lib",
        "/usr/local/man", "/usr/local/sbin", "/usr/local/share", "/usr/local/src",
        "/var", "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/opt", "/var/spool",
    }
)  # fmt: skip


@dataclass(frozen=True)
class NodeDirectoryField:
    """A spec field naming a directory on the nodes, and what gpuclus does to that directory."""

    loc: Loc  # where the field is; "*" stands for every entry of a list
    done: str  # what the roles do to it, for the message
    example: str  # a directory of its own, for the hint
    # System directories this field may still name: exporting /home (and mounting it at /home) is common and
    # leaves its owner and mode as they are (the nfs_server role sets root:root and no mode by default).
    allowed: frozenset[str] = frozenset()


# Every spec field naming a directory that a role creates and gives an owner or a mode (or exports, or mounts
# over). roles/nfs_server/tasks/configure.yml, roles/nfs_client/tasks/configure.yml,
# roles/slurm_common/tasks/state.yml, playbooks/pytorch.yml (the shared tree, owned by the admin user),
# roles/pytorch_env/tasks/install.yml, roles/job_templates/tasks/configure.yml, roles/lmod/tasks/configure.yml.
NODE_DIRECTORY_FIELDS = (
    NodeDirectoryField(
        ("nfs", "exports", "*", "path"),
        "the NFS server creates it owned by root and exports it to every node",
        "/srv/shared",
        frozenset({"/home"}),
    ),
    NodeDirectoryField(
        ("nfs", "exports", "*", "mount"),
        "every NFS client mounts the share over it (and the server links it to the export)",
        "/shared",
        frozenset({"/home"}),
    ),
    NodeDirectoryField(
        ("slurm", "state_save_location"),
        "slurmctld's state directory is made the Slurm user's, mode 0750",
        "/shared/slurm/state",
    ),
    NodeDirectoryField(
        ("pytorch", "prefix"),
        "the pytorch phase makes it the admin user's on the NFS server (shared) or sets its mode on every node",
        "/shared/software",
    ),
    NodeDirectoryField(
        ("pytorch", "examples_dir"),
        "the pytorch phase makes it the admin user's on the NFS server (shared) or sets its mode on every node",
        "/shared/examples",
    ),
    NodeDirectoryField(
        ("modules", "path"),
        "the pytorch phase makes it the admin user's on the NFS server (shared) or sets its mode on every node",
        "/shared/modules",
    ),
)


def system_directory_problem(path: str) -> str | None:
    """Why ``path`` (absolute) is a directory of the operating system, or None when it is not one."""
    normal = PurePosixPath(posixpath.normpath(path))
    if str(normal) in SYSTEM_DIRECTORIES:
        return "is a directory of the operating system"
    tree = next((tree for tree in sorted(SYSTEM_TREES) if normal.is_relative_to(tree)), None)
    if tree is None:
        return None
    if str(normal) == tree:
        return "is a directory of the operating system"
    return f"lies in {tree}, a directory of the operating system"


def named_directories(spec: ClusterSpec, field: NodeDirectoryField) -> Iterator[tuple[Loc, str]]:
    """(loc, path) of every directory the spec names in ``field``; an entry that leaves it out names none."""
    values: list[tuple[Loc, Any]] = [((), spec)]
    for part in field.loc:
        expanded: list[tuple[Loc, Any]] = []
        for loc, value in values:
            if part == "*":
                expanded.extend(((*loc, index), item) for index, item in enumerate(value))
            else:
                expanded.append(((*loc, part), getattr(value, str(part))))
        values = expanded
    for loc, value in values:
        if isinstance(value, str):
            yield loc, value


@_check()
def system_directories(view: SpecView) -> list[Finding]:
    """No field names a system directory that gpuclus would chown, chmod, export or mount over."""
    findings = []
    for field in NODE_DIRECTORY_FIELDS:
        for loc, path in named_directories(view.spec, field):
            problem = None if path in field.allowed else system_directory_problem(path)
            if problem is None or not view.is_whole(loc):
                continue
            label = format_loc(loc)
            findings.append(
                error(
                    "system-directory",
                    f"{label} {path!r} {problem}, and {field.done}",
                    loc,
                    hint=f"name a directory of its own, such as {field.example} (one below /opt, /srv or "
                    "/var/lib is fine)",
                )
            )
    return findings
