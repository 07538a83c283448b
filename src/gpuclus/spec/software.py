"""Where the deep-learning layer lives on the nodes: one answer for render, deploy and validate.

The spec leaves most paths out; this module fills them in (the shared tree
inside the first NFS export, or /opt/gpuclus on each node) and resolves
``pytorch.flavour: auto``, so that the roles, the job templates and
``gpuclus validate`` never disagree about where the environment is.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpuclus.spec.models import ClusterSpec, Fabric

NODE_LOCAL_ROOT = "/opt/gpuclus"
# Written by the pytorch_env role on every compute and login node; every job
# template sources it (the env's PATH, GPUCLUS_EXAMPLES_DIR, NCCL settings).
JOB_ENV_FILE = "/etc/gpuclus/pytorch-env.sh"
# PyTorch's own wheel index; /<flavour> holds the builds for one CUDA (or cpu).
PYTORCH_INDEX = "https://download.pytorch.org/whl"


@dataclass(frozen=True)
class SoftwareLayout:
    """Paths and names of the deep-learning layer, as they are on the nodes."""

    shared: bool  # True: one tree inside the first NFS export; False: a copy per node
    modules_dir: str  # the modulefiles tree gpuclus writes (on MODULEPATH)
    env_dir: str  # the Python environment: <prefix>/pytorch-<version>-<flavour>
    flavour: str  # cpu or cuNNN, never auto
    module: str  # the env's module name: pytorch/<version>-<flavour>
    examples_dir: str  # the job templates
    prefix: str  # the directory holding the environments
    # Shared layout only: the export as the server holds it and as clients mount it, so the NFS
    # server writes the shared tree at its own paths (root on a client is squashed to nobody).
    export_path: str | None = None
    mount_point: str | None = None

    def on_server(self, path: str) -> str:
        """``path`` (as the nodes see it, inside the export's mount) as the NFS server holds it."""
        if self.export_path is None or self.mount_point is None:
            return path
        return posixpath.normpath(self.export_path + "/" + posixpath.relpath(path, self.mount_point))

    @property
    def python(self) -> str:
        """The environment's interpreter: what validate and the job templates run."""
        return f"{self.env_dir}/bin/python"


def software_layout(spec: ClusterSpec) -> SoftwareLayout:
    pytorch = spec.pytorch
    shared = pytorch.location == "shared" and bool(spec.nfs.exports)
    root = spec.nfs.exports[0].mount_point if shared else NODE_LOCAL_ROOT
    flavour = resolved_flavour(spec)
    prefix = pytorch.prefix or posixpath.join(root, "software")
    export = spec.nfs.exports[0] if shared else None
    return SoftwareLayout(
        shared=shared,
        prefix=prefix,
        export_path=export.path if export else None,
        mount_point=export.mount_point if export else None,
        modules_dir=spec.modules.path or posixpath.join(root, "modules"),
        env_dir=posixpath.join(prefix, f"pytorch-{pytorch.version}-{flavour}"),
        flavour=flavour,
        module=f"pytorch/{pytorch.version}-{flavour}",
        examples_dir=pytorch.examples_dir or posixpath.join(root, "examples"),
    )


def outside_share(spec: ClusterSpec) -> list[tuple[str, str]]:
    """(field, path) of the shared layout's paths that lie outside the first export's mount point."""
    layout = software_layout(spec)
    if not layout.shared or layout.mount_point is None:
        return []
    chosen = {
        "pytorch.prefix": spec.pytorch.prefix,
        "pytorch.examples_dir": spec.pytorch.examples_dir,
        "modules.path": spec.modules.path,
    }
    return [
        (field, path)
        for field, path in chosen.items()
        if path is not None and not strictly_inside(path, layout.mount_point)
    ]


def strictly_inside(path: str, directory: str) -> bool:
    """True when ``path`` lies below ``directory`` (not the directory itself), compared part by part.

    Both are normalised first, so /shared/../etc is not inside /shared, and compared as parts, never as text,
    so /sharedX is not inside /shared either.
    """
    inner, outer = PurePosixPath(posixpath.normpath(path)), PurePosixPath(posixpath.normpath(directory))
    return inner != outer and inner.is_relative_to(outer)


def resolved_flavour(spec: ClusterSpec) -> str:
    """cpu or cuNNN: ``auto`` follows nvidia.cuda.version where any node has real GPUs."""
    if spec.pytorch.flavour != "auto":
        return spec.pytorch.flavour
    real_gpus = any(entry.gpus is not None and not entry.gpus.fake for entry in spec.nodes)
    if not real_gpus:
        return "cpu"
    major, minor = spec.nvidia.cuda.version.split(".")
    return f"cu{major}{minor}"


def requirements(spec: ClusterSpec) -> list[str]:
    """The pip requirements of the environment, torch first."""
    pytorch = spec.pytorch
    numpy = f"numpy=={pytorch.numpy_version}" if pytorch.numpy_version else "numpy"
    return [f"torch=={pytorch.version}", numpy, *pytorch.extra_packages]


def index_url(spec: ClusterSpec) -> str | None:
    """Where the nodes' pip finds torch, or None with a wheelhouse (--no-index)."""
    if spec.pytorch.wheelhouse is not None:
        return None
    return spec.pytorch.index_url or f"{PYTORCH_INDEX}/{resolved_flavour(spec)}"


def nccl_environment(spec: ClusterSpec) -> dict[str, str]:
    """NCCL settings for the job templates: what the fabric implies, then the spec's own (which win)."""
    implied = {"NCCL_IB_DISABLE": "1"} if spec.network.fabric is Fabric.ETHERNET else {"NCCL_IB_DISABLE": "0"}
    return dict(sorted({**implied, **spec.pytorch.nccl_env}.items()))
