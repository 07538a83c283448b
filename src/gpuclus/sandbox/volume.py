"""The sandbox's NFS volume: the controller exports it (a volume, because nfs-ganesha cannot export overlayfs)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuclus.sandbox.engine import Engine
from gpuclus.sandbox.layout import SandboxLayout


def ensure_volume(engine: Engine, layout: SandboxLayout, owner: str | None = None) -> bool:
    """Create the NFS volume (labelled with ``owner``) unless it is there; True when it was created."""
    existing = engine.run(engine.volume_list(layout.cluster), what="listing volumes").stdout.split()
    if layout.volume in existing:
        return False
    engine.run(engine.volume_create(layout.volume, layout.cluster, owner), what="creating the NFS volume")
    return True


def remove_volumes(engine: Engine, volumes: Sequence[str]) -> list[str]:
    """Remove these volumes; returns their names, sorted."""
    if volumes:
        engine.run(engine.volume_remove(volumes), what="removing volumes")
    return sorted(volumes)
