"""Render every Ansible input file for a spec, as text, without writing anything.

Group variables live in ``inventory/group_vars/all/``: Ansible reads a file
``group_vars/X.yml`` as the variables of group X, and a directory
``group_vars/X/`` as the same thing split across files. The directory form
lets us keep one file per concern (slurm, nfs, ...) that all apply to every host.
"""

from __future__ import annotations

from gpuclus import ansible_settings
from gpuclus.render.context import build_context
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.topology import Topology
from gpuclus.templating import render_template
from gpuclus.users.models import UsersFile

GROUP_VARS_DIR = "inventory/group_vars/all"
ANSIBLE_CFG = "ansible.cfg"

# Output paths, relative to the render directory. Each one's template is
# templates/render/<path>.j2, so the template tree mirrors the output tree.
RENDERED_FILES: tuple[str, ...] = (
    ANSIBLE_CFG,
    "inventory/hosts.yml",
    f"{GROUP_VARS_DIR}/cluster.yml",
    f"{GROUP_VARS_DIR}/slurm.yml",
    f"{GROUP_VARS_DIR}/nfs.yml",
    f"{GROUP_VARS_DIR}/monitoring.yml",
    f"{GROUP_VARS_DIR}/nvidia.yml",
    f"{GROUP_VARS_DIR}/containers.yml",
    f"{GROUP_VARS_DIR}/pytorch.yml",
    f"{GROUP_VARS_DIR}/users.yml",
)


def template_name(path: str) -> str:
    return f"render/{path}.j2"


def render_files(
    spec: ClusterSpec,
    topology: Topology,
    *,
    source_name: str,
    state_dir: str,
    known_hosts: str,
    users: UsersFile | None = None,
) -> dict[str, str]:
    """Relative path -> file text for every file in RENDERED_FILES.

    Pure: the same spec, ``source_name`` (the spec's file name), ``state_dir``
    (the spec's .gpuclus/ relative to the output directory) and
    ``known_hosts`` (the absolute path of its ssh/known_hosts) give
    byte-identical text on any machine; ``users`` is the users file the spec
    names (LoadedSpec.users). Expects a spec that passed the checks.
    """
    context = build_context(spec, topology, source_name=source_name, state_dir=state_dir, users=users)
    # ansible.cfg comes from the settings table that a run's envvars come from too.
    table = ansible_settings.settings(host_count=len(topology.nodes), state_dir=state_dir, known_hosts=known_hosts)
    cfg_context = {"header": context["header"], "sections": ansible_settings.cfg_sections(table)}
    return {
        path: render_template(template_name(path), **(cfg_context if path == ANSIBLE_CFG else context))
        for path in RENDERED_FILES
    }
