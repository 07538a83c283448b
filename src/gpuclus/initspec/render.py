"""Turn a SpecDraft into the commented cluster.yaml text (pure, deterministic)."""

from __future__ import annotations

from gpuclus.gpu_catalog import cuda_key, kind_for_model
from gpuclus.initspec.draft import SpecDraft
from gpuclus.release_checksums import unknown_downloads
from gpuclus.spec.models import Containers, Monitoring, Network, Nvidia, PyTorch, Slurm
from gpuclus.spec.topology import DEFAULT_PARTITION
from gpuclus.templating import render_template

TEMPLATE = "init/cluster.yaml.j2"


def render_spec(draft: SpecDraft) -> str:
    """The spec text; the same draft always gives the same bytes.

    Containers (Enroot and Pyxis) are on when gpuclus knows the checksums of what the nodes download for the
    pinned versions, so the spec passes `spec check` without more input; off, with a comment naming what
    turns them on, otherwise. Grafana is on.
    """
    # Defaults come from the models so that init and the loader never disagree.
    nvidia = Nvidia()
    network = Network()
    containers = Containers()
    monitoring = Monitoring()
    enroot, pyxis = f"Enroot {containers.enroot_version}", f"Pyxis {containers.pyxis_version}"
    # What gpuclus' checksum table lacks of the default downloads; containers are on when it lacks nothing.
    unknown = unknown_downloads(containers.enroot_version, containers.pyxis_version)
    driver_branch, cuda_version = nvidia_versions(draft.gpu_model, nvidia.driver.branch, nvidia.cuda.version)
    nodes = [
        {
            "name": node.name,
            "address": node.address,
            "roles": [role.value for role in node.roles],
            "gpus": node.gpus,
        }
        for node in draft.nodes()
    ]
    return render_template(
        TEMPLATE,
        cluster_name=draft.name,
        admin_user=draft.admin_user,
        workstation=draft.workstation,
        controller=draft.controller.name,
        nodes=nodes,
        gpu_model=draft.gpu_model,
        exports=list(draft.exports),
        home_exported="/home" in draft.exports,
        partition=DEFAULT_PARTITION,
        accounting=Slurm().accounting,
        driver_branch=driver_branch,
        cuda_version=cuda_version,
        containers_on=not unknown,
        containers_known=[name for name in (enroot, pyxis) if name not in unknown],
        containers_unknown=unknown,
        enroot_version=containers.enroot_version,
        pyxis_version=containers.pyxis_version,
        validate_image=containers.validate_image,
        prometheus=monitoring.prometheus,
        # On: the dashboards are what users look at; nodes that cannot reach Grafana's repository take
        # grafana_package instead (the spec's comments say so, and how to turn it off).
        grafana=True,
        pytorch_version=PyTorch().version,
        fabric=network.fabric.value,
        link_gbps=network.link_gbps,
        nics_per_node=network.nics_per_node,
    )


def nvidia_versions(gpu_model: str | None, branch: str, cuda: str) -> tuple[str, str]:
    """The driver branch and CUDA version to write: the defaults, raised to what the GPU model needs.

    The minimums are the GPU catalogue's, the same ones `spec check` holds a spec to (a b200 needs 570 and
    12.8, newer than the defaults), so the spec init writes passes its own check.
    """
    kind = kind_for_model(gpu_model) if gpu_model else None
    if kind is None:
        return branch, cuda
    if int(branch) < kind.min_driver_branch:
        branch = str(kind.min_driver_branch)
    if cuda_key(cuda) < cuda_key(kind.min_cuda):
        cuda = kind.min_cuda
    return branch, cuda
