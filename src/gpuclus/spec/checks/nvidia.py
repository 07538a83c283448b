"""NVIDIA: GPU nodes declared, no driver for fake GPUs, CUDA with its driver, versions the GPUs can use."""

from __future__ import annotations

from gpuclus.spec import hostlist
from gpuclus.spec.checks.view import NODES, RegisteredCheck, SpecView, registrar
from gpuclus.yamldoc.findings import Finding, error, info, warning

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


@_check(NODES)
def no_gpu_nodes(view: SpecView) -> list[Finding]:
    if view.topology.gpu_nodes:
        return []
    return [
        info(
            "no-gpu-nodes",
            "no node declares gpus; the NVIDIA phase and validate's GPU checks will be skipped",
            ("nodes",),
            hint="add `gpus: {count: N}` to the GPU nodes",
        )
    ]


@_check(("nvidia", "driver", "install"))
def fake_gpus_with_driver(view: SpecView) -> list[Finding]:
    fake = [node for node in view.topology.gpu_nodes if node.gpus is not None and node.gpus.fake]
    if not fake or not view.spec.nvidia.driver.install:
        return []
    return [
        warning(
            "fake-gpus-with-driver",
            f"node(s) {hostlist.compress(n.name for n in fake)} have fake GPUs but nvidia.driver.install "
            "is on; no driver can load there",
            ("nvidia", "driver", "install"),
            hint="set nvidia.driver.install: false (and cuda.install: false) for the sandbox",
        )
    ]


@_check(("nvidia",))
def cuda_without_driver(view: SpecView) -> list[Finding]:
    # Without GPU nodes the NVIDIA phase does not run, so neither is installed.
    nvidia = view.spec.nvidia
    if not view.topology.gpu_nodes or not nvidia.cuda.install or nvidia.driver.install:
        return []
    return [
        info(
            "cuda-without-driver",
            "CUDA will be installed but the driver will not; gpuclus assumes it is already there",
            ("nvidia", "driver", "install"),
            hint="set nvidia.driver.install: true unless the nodes ship with a driver",
        )
    ]


@_check(NODES, ("nvidia",))
def nvidia_versions_for_gpus(view: SpecView) -> list[Finding]:
    """The driver branch and CUDA version are no older than the nodes' GPUs need (the GPU catalogue's minimums).

    Only for the nodes the NVIDIA phase installs (real GPUs whose gpus.model the catalogue knows), and only
    for what it installs: a driver that install: false leaves alone is the admin's.
    """
    from gpuclus.gpu_catalog import (
        GpuKind,
        cuda_key,
        kind_for_model,
    )  # its table is read only when a node names a model

    kinds: dict[str, tuple[GpuKind, list[str]]] = {}
    for node in view.topology.real_gpu_nodes:
        kind = kind_for_model(node.gpus.model) if node.gpus is not None and node.gpus.model else None
        if kind is not None and kind.model is not None:
            kinds.setdefault(kind.model, (kind, []))[1].append(node.name)
    if not kinds:
        return []
    nvidia = view.spec.nvidia
    findings: list[Finding] = []
    if nvidia.driver.install:
        branch = int(nvidia.driver.branch)
        kind, names = max(kinds.values(), key=lambda item: item[0].min_driver_branch)
        if branch < kind.min_driver_branch:
            findings.append(
                error(
                    "nvidia-driver-too-old",
                    f"driver branch {nvidia.driver.branch} does not drive {kind.model} GPUs "
                    f"({kind.generation}, on {hostlist.compress(names)}): they need branch "
                    f"{kind.min_driver_branch} or newer",
                    ("nvidia", "driver", "branch"),
                    hint=f'set nvidia.driver.branch: "{kind.min_driver_branch}" or newer',
                )
            )
    if nvidia.cuda.install:
        kind, names = max(kinds.values(), key=lambda item: cuda_key(item[0].min_cuda))
        if cuda_key(nvidia.cuda.version) < cuda_key(kind.min_cuda):
            findings.append(
                error(
                    "cuda-too-old",
                    f"CUDA {nvidia.cuda.version} cannot build for {kind.model} GPUs "
                    f"({kind.generation}, on {hostlist.compress(names)}): they need CUDA {kind.min_cuda} or newer",
                    ("nvidia", "cuda", "version"),
                    hint=f'set nvidia.cuda.version: "{kind.min_cuda}" or newer',
                )
            )
    return findings
