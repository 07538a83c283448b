"""PyTorch and modules: a shared environment on a share every node mounts, the wheelhouse, settings that do nothing."""

from __future__ import annotations

from gpuclus.spec.checks.control_files import shown
from gpuclus.spec.checks.view import EXPORTS, RegisteredCheck, SpecView, registrar
from gpuclus.spec.software import outside_share
from gpuclus.yamldoc.findings import Finding, Loc, error, warning

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


PYTORCH: Loc = ("pytorch",)


@_check(PYTORCH, ("modules",), EXPORTS, ("nfs", "server_impl"))
def pytorch_location(view: SpecView) -> list[Finding]:
    """A shared environment needs an export that every node mounts."""
    pytorch = view.spec.pytorch
    if not pytorch.install or pytorch.location != "shared":
        return []
    if not view.spec.nfs.exports:
        return [
            error(
                "pytorch-shared-without-nfs",
                "pytorch.location is shared but nfs.exports is empty: there is no shared tree to build it in",
                ("pytorch", "location"),
                hint="add an export under nfs.exports, or set location: node-local (one copy per node)",
            )
        ]
    if view.spec.nfs.server_impl != "kernel":
        return [
            error(
                "pytorch-shared-not-mounted",
                "pytorch.location is shared but nfs.server_impl is ganesha, with which gpuclus mounts nothing on "
                "the nodes (their kernels have no NFS client, as in the sandbox)",
                ("pytorch", "location"),
                hint="set location: node-local, or server_impl: kernel on nodes that can mount NFS",
            )
        ]
    mount = view.spec.nfs.exports[0].mount_point
    return [
        error(
            "pytorch-path-outside-share",
            f"{field} {path!r} is outside the shared tree {mount} (the first NFS export's mount point), but "
            "pytorch.location is shared",
            tuple(field.split(".")),
            hint=f"put it under {mount}/, leave it out for the default, or set location: node-local",
        )
        for field, path in outside_share(view.spec)
    ]


@_check(PYTORCH)
def pytorch_wheelhouse(view: SpecView) -> list[Finding]:
    """The wheelhouse is a directory here holding the torch wheel the spec asks for."""
    pytorch = view.spec.pytorch
    if pytorch.wheelhouse is None or not pytorch.install:
        return []
    path = view.control_path(pytorch.wheelhouse)
    loc = ("pytorch", "wheelhouse")
    if not path.is_dir():
        state = "does not exist" if not path.exists() else "is not a directory"
        return [
            error(
                "pytorch-wheelhouse-missing",
                f"pytorch.wheelhouse {pytorch.wheelhouse!r} {state}",
                loc,
                hint=f"it resolves to {shown(path)} (a relative path is relative to the spec's directory); fill "
                f"it with `pip download torch=={pytorch.version} numpy -d DIR` on a machine with the nodes' Python",
            )
        ]
    wheels = [entry.name for entry in path.iterdir() if entry.name.endswith(".whl")]
    torch_wheels = [
        name
        for name in wheels
        if name.startswith(f"torch-{pytorch.version}-") or name.startswith(f"torch-{pytorch.version}+")
    ]
    if not torch_wheels:
        return [
            error(
                "pytorch-wheelhouse-incomplete",
                f"pytorch.wheelhouse {shown(path)} holds no torch {pytorch.version} wheel "
                f"({len(wheels)} wheel(s) there)",
                loc,
                hint=f"add torch-{pytorch.version}-*.whl and its dependencies (`pip download "
                f"torch=={pytorch.version} numpy -d DIR`), or change pytorch.version",
            )
        ]
    return []


@_check(PYTORCH, ("modules",))
def pytorch_settings_unused(view: SpecView) -> list[Finding]:
    """Settings that do nothing as the rest of the spec is."""
    pytorch = view.spec.pytorch
    findings = []
    if not pytorch.install:
        chosen = [name for name in sorted(pytorch.model_fields_set) if name != "install"]
        for name in chosen:
            findings.append(
                warning(
                    "pytorch-setting-unused",
                    f"pytorch.{name} is set but pytorch.install is false",
                    ("pytorch", name),
                    hint="set install: true to build the environment, or remove the setting",
                )
            )
    if pytorch.install and pytorch.wheelhouse is not None and pytorch.index_url is not None:
        findings.append(
            warning(
                "pytorch-setting-unused",
                "pytorch.index_url is set but a wheelhouse is too: the nodes install from the wheelhouse only",
                ("pytorch", "index_url"),
                hint="remove one of them",
            )
        )
    real_gpus = any(node.has_real_gpus for node in view.topology.nodes)
    if pytorch.install and pytorch.flavour.startswith("cu") and not real_gpus:
        findings.append(
            warning(
                "pytorch-cuda-without-gpus",
                f"pytorch.flavour is {pytorch.flavour} but no node has real GPUs: the CUDA build is larger and "
                "runs on the CPU all the same",
                ("pytorch", "flavour"),
                hint="set flavour: cpu (or auto)",
            )
        )
    if view.spec.modules.path is not None and not view.spec.modules.lmod:
        findings.append(
            warning(
                "modules-setting-unused",
                "modules.path is set but modules.lmod is false: no modulefiles are written",
                ("modules", "path"),
                hint="set lmod: true, or remove path",
            )
        )
    return findings
