"""The roles refuse hostile inputs themselves: the second line of defence behind the spec grammar.

Variables set by hand (group_vars edited, a role used outside gpuclus) never
pass through `spec check`. Each role's preflight asserts that what it writes
into its config files is a plain name, address, path or option list. Here the
asserts' conditions are evaluated with Ansible's Templar over the rendered
group_vars plus the role's defaults and vars: all true for the clean inventory,
and one false for each hostile value.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, group_vars, role_variables
from spec_samples import BASE

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text


@pytest.fixture(scope="module")
def inventory() -> dict[str, Any]:
    loaded = load_spec_text(yaml.safe_dump(BASE))
    assert loaded.spec is not None and loaded.topology is not None
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def input_conditions(role: str) -> list[str]:
    """The conditions of the role's preflight asserts that need nothing from the node."""
    tasks = yaml.safe_load((ROLES / role / "tasks" / "preflight.yml").read_text())
    conditions = [condition for task in tasks for condition in task.get("ansible.builtin.assert", {}).get("that", [])]
    return [condition for condition in conditions if "probe" not in condition and "__ssh_trust_node" not in condition]


def failing(role: str, inventory: dict[str, Any]) -> list[str]:
    templar = Templar(loader=DataLoader(), variables=role_variables(role, inventory, "head", {}))
    failed = []
    for condition in input_conditions(role):
        try:
            holds = templar.evaluate_conditional(trust_as_template(condition))
        except Exception:  # an undefined fact the node would give: not an input check
            continue
        if not holds:
            failed.append(condition)
    return failed


def node(index: int, key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(inventory: dict[str, Any]) -> None:
        inventory["gpuclus_nodes"][index][key] = value

    return change


def export(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(inventory: dict[str, Any]) -> None:
        inventory["gpuclus_nfs_exports"][0][key] = value

    return change


def setting(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def change(inventory: dict[str, Any]) -> None:
        inventory[key] = value

    return change


ROLES_OF_NODES = ["base", "slurm_common", "ssh_trust"]
CASES = [
    *[(role, node(1, "name", "gpu01\nNodeName=evil")) for role in ROLES_OF_NODES],
    *[(role, node(1, "address", "fe80::1%x *(rw,no_root_squash) #")) for role in [*ROLES_OF_NODES, "nfs_server"]],
    *[(role, node(2, "address", "10.0.0.12\n10.6.6.6 evil")) for role in [*ROLES_OF_NODES, "nfs_server"]],
    ("nfs_server", export("path", '/x";Clients=*;}#')),
    ("nfs_server", export("options", "rw) *(rw,no_root_squash")),
    ("nfs_client", export("path", "/x\n/y")),
    ("nfs_client", export("mount", "/home #")),
    ("nfs_client", setting("gpuclus_nfs_server_address", "10.0.0.10:/ /mnt nfs rw 0 0\n#")),
    ("nfs_client", setting("gpuclus_nfs_client_options", "rw 0 0\n10.6.6.6:/ /root nfs")),
]


@pytest.mark.parametrize("role", ["base", "slurm_common", "ssh_trust", "nfs_server", "nfs_client"])
def test_clean_inputs_pass_every_input_check(role: str, inventory: dict[str, Any]) -> None:
    assert input_conditions(role)
    assert failing(role, inventory) == []


@pytest.mark.parametrize(("role", "change"), CASES)
def test_a_hostile_input_fails_the_role_preflight(
    role: str, change: Callable[[dict[str, Any]], None], inventory: dict[str, Any]
) -> None:
    hostile = copy.deepcopy(inventory)
    change(hostile)
    assert failing(role, hostile), f"{role} accepted a hostile input"
