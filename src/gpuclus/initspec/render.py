"""Turn a SpecDraft into the commented cluster.yaml text (pure, deterministic)."""

from __future__ import annotations

from gpuclus.initspec.draft import SpecDraft
from gpuclus.spec.models import Containers, Monitoring, Network, Nvidia, PyTorch, Slurm
from gpuclus.spec.topology import DEFAULT_PARTITION
from gpuclus.templating import render_template

TEMPLATE = "init/cluster.yaml.j2"


def render_spec(draft: SpecDraft) -> str:
    """The spec text; the same draft always gives the same bytes."""
    # Defaults come from the models so that init and the loader never disagree.
    nvidia = Nvidia()
    network = Network()
    containers = Containers()
    monitoring = Monitoring()
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
        driver_branch=nvidia.driver.branch,
        cuda_version=nvidia.cuda.version,
        enroot=containers.enroot,
        pyxis=containers.pyxis,
        enroot_version=containers.enroot_version,
        pyxis_version=containers.pyxis_version,
        validate_image=containers.validate_image,
        prometheus=monitoring.prometheus,
        grafana=monitoring.grafana,
        pytorch_version=PyTorch().version,
        fabric=network.fabric.value,
        link_gbps=network.link_gbps,
        nics_per_node=network.nics_per_node,
    )
