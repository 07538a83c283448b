"""The sandbox's NFS volume: the controller exports it (a volume, because nfs-ganesha cannot export overlayfs)."""

from __future__ import annotations

from gpuclus.sandbox.engine import Engine
from gpuclus.sandbox.layout import SandboxLayout


def ensure_volume(engine: Engine, layout: SandboxLayout) -> bool:
    """Create the NFS volume unless it is there; True when it was created."""
    existing = engine.run(engine.volume_list(layout.cluster), what="listing volumes").stdout.split()
    if layout.volume in existing:
        return False
    engine.run(engine.volume_create(layout.volume, layout.cluster), what="creating the NFS volume")
    return True


def remove_volumes(engine: Engine, cluster: str) -> list[str]:
    """Remove every volume labelled with the cluster; returns their names, sorted."""
    volumes = engine.run(engine.volume_list(cluster), what="listing volumes").stdout.split()
    if volumes:
        engine.run(engine.volume_remove(volumes), what="removing volumes")
    return sorted(volumes)
