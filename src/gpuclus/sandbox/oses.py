"""The operating systems a sandbox node can run: one row per OS, the facts `up` needs about it.

Only Debian releases: the node image is made with debootstrap from a Debian
mirror, and the host's mirror serves every current release. What each release
means for the cluster (its Slurm, its package names) is the roles' business, in
their vars files; this table holds only what the sandbox itself uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclus.errors import UsageError


@dataclass(frozen=True)
class NodeOS:
    name: str  # what --os takes
    suite: str  # the Debian codename debootstrap and apt use
    python: str  # the release's python3: the sandbox's PyTorch wheels must be built for it
    slurm: str  # the release's Slurm (major.minor), shown by `sandbox list`


OSES: dict[str, NodeOS] = {
    os.name: os
    for os in (
        NodeOS("debian12", "bookworm", "3.11", "22.05"),
        NodeOS("debian13", "trixie", "3.13", "24.11"),
    )
}
DEFAULT_OS = "debian12"


def node_os(name: str, option: str = "--os") -> NodeOS:
    """The row for ``name``; anything else is refused naming the choices."""
    try:
        return OSES[name]
    except KeyError:
        raise UsageError(f"{option} {name!r} is not an OS the sandbox runs", f"use one of {', '.join(OSES)}") from None
