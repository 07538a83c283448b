"""Render every Ansible input file for a spec, as text, without writing anything.

Group variables live in ``inventory/group_vars/all/``: Ansible reads a file
``group_vars/X.yml`` as the variables of group X, and a directory
``group_vars/X/`` as the same thing split across files. The directory form
lets us keep one file per concern (slurm, nfs, ...) that all apply to every host.
"""

from __future__ import annotations

from gpuclus.render.context import build_context
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.topology import Topology
from gpuclus.templating import render_template

GROUP_VARS_DIR = "inventory/group_vars/all"

# Output paths, relative to the render directory. Each one's template is
# templates/render/<path>.j2, so the template tree mirrors the output tree.
RENDERED_FILES: tuple[str, ...] = (
    "ansible.cfg",
    "inventory/hosts.yml",
    f"{GROUP_VARS_DIR}/cluster.yml",
    f"{GROUP_VARS_DIR}/slurm.yml",
    f"{GROUP_VARS_DIR}/nfs.yml",
    f"{GROUP_VARS_DIR}/nvidia.yml",
    f"{GROUP_VARS_DIR}/containers.yml",
    f"{GROUP_VARS_DIR}/monitoring.yml",
)


def template_name(path: str) -> str:
    return f"render/{path}.j2"


def render_files(spec: ClusterSpec, topology: Topology, *, source_name: str, state_dir: str) -> dict[str, str]:
    """Relative path -> file text for every file in RENDERED_FILES.

    Pure: the same spec, ``source_name`` (the spec's file name) and
    ``state_dir`` (the spec's .gpuclus/ relative to the output directory) give
    byte-identical text on any machine. Expects a spec that passed the checks.
    """
    context = build_context(spec, topology, source_name=source_name, state_dir=state_dir)
    return {path: render_template(template_name(path), **context) for path in RENDERED_FILES}
