"""Render the roles' config templates from rendered group_vars, with Ansible's own templating.

What ``ansible.builtin.template`` would write on a node, without a node: the
variables are the rendered group_vars, the role's defaults and vars (Debian),
a few facts, and stand-ins for what the role registers on the node (probes).
Ansible's Templar renders the template, so filters, tests and undefined
handling are the ones the roles really get.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import add_all_plugin_dirs
from ansible.template import Templar, trust_as_template

from gpuclus.render.files import GROUP_VARS_DIR, render_files
from gpuclus.spec.load import load_spec_text

ROLES = Path(__file__).resolve().parents[2] / "roles"
PLAYBOOKS = ROLES.parent / "playbooks"

# The plugins beside the playbooks (gpuclus_control_path), found as ansible-playbook finds them for a play there.
add_all_plugin_dirs(str(PLAYBOOKS))

FACTS: dict[str, Any] = {
    "os_family": "Debian",
    "distribution": "Debian",
    "distribution_major_version": "12",
    "architecture": "x86_64",
    "virtualization_type": "none",
    "virtualization_role": "host",
    "mounts": [],
}


def group_vars(rendered: dict[str, str]) -> dict[str, Any]:
    """Every variable of the rendered group_vars files, loaded as Ansible loads them."""
    loader = DataLoader()
    merged: dict[str, Any] = {}
    for path, text in rendered.items():
        if path.startswith(GROUP_VARS_DIR + "/"):
            merged.update(loader.load(text) or {})
    return merged


# A spec that leaves every setting at the model's default: one controller, one compute node with a real GPU.
DEFAULT_SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 1}}
"""


@functools.cache
def _default_group_vars() -> tuple[tuple[str, Any], ...]:
    loaded = load_spec_text(DEFAULT_SPEC, "/lab/cluster.yaml")
    assert loaded.ok and loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    return tuple(group_vars(files).items())


def default_group_vars() -> dict[str, Any]:
    """What render writes into group_vars for DEFAULT_SPEC: the inputs a role's defaults read when the spec
    says nothing (a fresh copy each call)."""
    return dict(_default_group_vars())


def _role_files(role: str) -> list[Path]:
    base = ROLES / role
    return [base / "defaults" / "main.yml", base / "vars" / "main.yml", base / "vars" / "Debian.yml"]


def role_variables(role: str, inventory: dict[str, Any], host: str, extra: dict[str, Any]) -> dict[str, Any]:
    loader = DataLoader()
    variables: dict[str, Any] = dict(inventory)
    for path in _role_files(role):
        if path.exists():
            # Role defaults and vars are templates Ansible renders lazily, when read.
            variables.update(_trusted(loader.load_from_file(str(path)) or {}))
    names = [node["name"] for node in inventory["gpuclus_nodes"]]
    variables.update(
        inventory_hostname=host,
        ansible_facts={**FACTS, "hostname": host},
        ansible_play_hosts=names,
        ansible_play_hosts_all=names,
        groups={"all": names},
    )
    variables.update(extra)
    return variables


def _trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def render(role: str, template: str, inventory: dict[str, Any], host: str, **extra: Any) -> str:
    """The text ``ansible.builtin.template`` would write from roles/<role>/templates/<template>."""
    source = (ROLES / role / "templates" / template).read_text()
    templar = Templar(loader=DataLoader(), variables=role_variables(role, inventory, host, extra))
    return str(templar.template(trust_as_template(source)))


def role_os_variables(role: str, os_vars: str, facts: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """A role's defaults, vars/main.yml and one per-OS vars file (``vars/<os_vars>``), with the given facts.

    For roles whose per-OS data is the thing under test (nvidia_driver): no
    inventory, just what the role reads itself, as Ansible would load it.
    """
    loader = DataLoader()
    variables: dict[str, Any] = {}
    base = ROLES / role
    for path in (base / "defaults" / "main.yml", base / "vars" / "main.yml", base / "vars" / os_vars):
        variables.update(_trusted(loader.load_from_file(str(path)) or {}))
    variables.update(
        inventory_hostname="gpu01",
        role_path=str(base),
        ansible_check_mode=False,
        ansible_facts={**FACTS, **facts, "hostname": "gpu01"},
    )
    variables.update(extra)
    return variables


def role_templar(role: str, os_vars: str, facts: dict[str, Any], **extra: Any) -> Templar:
    """A Templar over role_os_variables: ``templar.template(trust_as_template('{{ name }}'))`` renders a var."""
    return Templar(loader=DataLoader(), variables=role_os_variables(role, os_vars, facts, extra))


def first_found_vars_file(role: str, t: Templar) -> str:
    """The vars file a role's tasks/main.yml picks with first_found, for the facts in ``t``.

    Reads the candidates from the role's own include_vars task (the one whose
    vars hold ``__<role>_vars_files``), so a test compares with what the role
    really asks for, not with a copy of its list.
    """
    tasks = DataLoader().load_from_file(str(ROLES / role / "tasks" / "main.yml"))
    include = next(task for task in tasks if "ansible.builtin.include_vars" in task)
    candidates = include["vars"][f"__{role}_vars_files"]["files"]
    rendered = [str(t.template(trust_as_template(name))) for name in candidates]
    return next(name for name in rendered if (ROLES / role / "vars" / name).exists())


def first_refusal(t: Templar, asserts: list[dict[str, Any]]) -> list[str]:
    """The fail_msg of the first of these preflight assert tasks that fails for ``t`` (Ansible stops
    there), whitespace folded; [] when all pass. A task whose ``when`` is false is skipped."""
    for task in asserts:
        check = task["ansible.builtin.assert"]
        if "when" in task and not t.evaluate_conditional(trust_as_template(str(task["when"]))):
            continue
        if not all(t.evaluate_conditional(trust_as_template(str(condition))) for condition in check["that"]):
            return [" ".join(str(t.template(trust_as_template(check["fail_msg"]))).split())]
    return []
