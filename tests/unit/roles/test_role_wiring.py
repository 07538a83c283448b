"""One way to wire a role: its defaults read the rendered `gpuclus_*` group_vars, and no playbook passes it inputs.

A role's defaults/main.yml reads what render wrote (the per-node answers too,
as expressions over the inventory's groups and render's per-node maps), so the
role run alone by molecule, by a phase playbook or by hand gets the same
inputs, and a caller can still set the role's own variable. The playbooks only
choose which hosts run which role. Here the playbooks are read for `vars:`
handed to a role, and the converted roles' defaults are rendered with
Ansible's templating against what render writes for real specs, per node.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from role_templates import PLAYBOOKS, ROLES, group_vars, role_variables

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

# varnames and vars (base's default) are lookups, which Ansible loads through its plugin loader.
init_plugin_loader()

ROLE_NAMES = sorted(path.name for path in ROLES.iterdir() if (path / "tasks" / "main.yml").is_file())

# A role's behaviour that only the calling play can decide, not a value of the spec: Prometheus' own
# targets check waits until the same play has set up this node's exporter, which runs the check itself.
PLAY_DECIDES = {("monitoring.yml", "prometheus"): {"prometheus_verify_targets"}}


def _tasks(items: Any) -> list[dict[str, Any]]:
    found = []
    for item in items or []:
        if isinstance(item, dict):
            found.append(item)
            for key in ("block", "rescue", "always"):
                found += _tasks(item.get(key))
    return found


def _role_calls(play: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(role, vars it is handed) for every role a play runs: its roles: list and include/import_role tasks."""
    calls = [(entry["role"], entry.get("vars") or {}) for entry in play.get("roles") or []]
    for task in _tasks((play.get("pre_tasks") or []) + (play.get("tasks") or []) + (play.get("post_tasks") or [])):
        for action in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            if action in task:
                calls.append((task[action]["name"], task.get("vars") or {}))
    return calls


def _plays() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.name, play)
        for path in sorted(PLAYBOOKS.glob("*.yml"))
        for play in yaml.safe_load(path.read_text()) or []
        if isinstance(play, dict) and "hosts" in play
    ]


def test_the_playbooks_are_read() -> None:
    names = {name for name, _ in _plays()}
    assert {"nvidia.yml", "pytorch.yml", "users.yml", "base.yml", "containers.yml", "slurm.yml"} <= names
    assert sum(len(_role_calls(play)) for _, play in _plays()) >= 25


def test_no_playbook_hands_a_role_its_inputs() -> None:
    handed = [
        f"{name}: {role} gets {sorted(set(values) - PLAY_DECIDES.get((name, role), set()))}"
        for name, play in _plays()
        for role, values in _role_calls(play)
        if set(values) - PLAY_DECIDES.get((name, role), set())
    ]
    assert handed == []


def test_a_plays_own_variables_are_no_roles_variables() -> None:
    # Play vars reach every role of the play; one named like a role's variable would be wiring by the back door.
    prefixes = tuple(f"{role}_" for role in ROLE_NAMES)
    named = [
        f"{name}: {variable}"
        for name, play in _plays()
        for variable in play.get("vars") or {}
        if variable.startswith(prefixes)
    ]
    assert named == []


HEAD = "  - {name: head, address: 10.0.0.10, roles: [controller, login, nfs_server]}\n"


def rendered(extra: str = "", *, model: str = "") -> dict[str, Any]:
    gpus = "{count: 2" + (f", model: {model}" if model else "") + "}"
    text = (
        "apiVersion: gpuclus/v1\n"
        "cluster: {name: lab, admin_user: ubuntu}\n"
        "nodes:\n" + HEAD + f'  - {{name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {gpus}}}\n'
        "  - {name: cpu01, address: 10.0.0.20, roles: [compute]}\n"
        "nfs:\n  exports: [{path: /srv/nfs/shared, mount: /shared}]\n" + extra
    )
    loaded = load_spec_text(text, "/lab/cluster.yaml")
    assert loaded.ok and loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    return group_vars(files)


GROUPS = {
    "all": ["head", "gpu01", "gpu02", "cpu01"],
    "controller": ["head"],
    "login": ["head"],
    "nfs_server": ["head"],
    "compute": ["gpu01", "gpu02", "cpu01"],
    "gpu": ["gpu01", "gpu02"],
}


def values(role: str, inventory: dict[str, Any], host: str, *names: str, **extra: Any) -> dict[str, Any]:
    variables = role_variables(role, inventory, host, {"groups": GROUPS, "inventory_dir": "/lab/rendered/inventory"})
    variables.update(extra)
    templar = Templar(loader=DataLoader(), variables=variables)
    return {name: templar.template(trust_as_template("{{ " + name + " }}")) for name in names}


def test_nvidia_driver_reads_the_spec_and_its_nodes_entry() -> None:
    inventory = rendered('nvidia: {driver: {branch: "570"}, cuda: {version: "12.8"}, dcgm: true}\n', model="B200")
    names = ("nvidia_driver_branch", "nvidia_driver_gpu_generation", "nvidia_driver_min_branch", "nvidia_driver_dcgm")
    assert values("nvidia_driver", inventory, "gpu01", *names) == {
        "nvidia_driver_branch": "570",
        "nvidia_driver_gpu_generation": "blackwell",
        "nvidia_driver_min_branch": 570,
        "nvidia_driver_dcgm": True,
    }
    # A node render knows no GPUs of: no floor, flavour by the unknown generation.
    assert values("nvidia_driver", inventory, "cpu01", *names[1:3]) == {
        "nvidia_driver_gpu_generation": "unknown",
        "nvidia_driver_min_branch": 0,
    }
    assert values("cuda_toolkit", inventory, "gpu01", "cuda_toolkit_version") == {"cuda_toolkit_version": "12.8"}
    # A caller's own variable still wins over the default.
    assert values("nvidia_driver", inventory, "gpu01", "nvidia_driver_branch", nvidia_driver_branch="580") == {
        "nvidia_driver_branch": "580"
    }


def test_nvidia_reboot_is_allowed_only_by_the_runs_reboot() -> None:
    inventory = rendered()
    assert values("nvidia_reboot", inventory, "gpu01", "nvidia_reboot_allowed") == {"nvidia_reboot_allowed": False}
    assert values("nvidia_reboot", inventory, "gpu01", "nvidia_reboot_allowed", gpuclus_reboot=True) == {
        "nvidia_reboot_allowed": True
    }


PYTORCH_NAMES = {
    "lmod": ("lmod_write_modulefiles", "lmod_write_dir", "lmod_cuda_modules"),
    "pytorch_env": ("pytorch_env_build", "pytorch_env_owner"),
    "job_templates": ("job_templates_write_dir",),
}


def pytorch_values(inventory: dict[str, Any], host: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for role, names in PYTORCH_NAMES.items():
        found |= values(role, inventory, host, *names)
    return found


@pytest.mark.parametrize("host", ["head", "gpu01", "cpu01"])
def test_a_shared_tree_is_written_by_the_nfs_server_and_built_on_the_first_compute_node(host: str) -> None:
    inventory = rendered("pytorch: {install: true}\nmodules: {lmod: true}\n")
    assert inventory["gpuclus_software_writers"] == ["head"]
    cuda = [{"version": "12.4", "root": "/usr/local/cuda-12.4"}]
    assert pytorch_values(inventory, host) == {
        "lmod_write_modulefiles": host == "head",
        "lmod_write_dir": "/srv/nfs/shared/modules",
        "lmod_cuda_modules": cuda,
        "pytorch_env_build": host == "gpu01",
        "pytorch_env_owner": "ubuntu",
        "job_templates_write_dir": "/srv/nfs/shared/examples",
    }


@pytest.mark.parametrize("host", ["head", "gpu01", "cpu01"])
def test_a_node_local_tree_is_written_and_built_on_every_node_that_runs_jobs(host: str) -> None:
    inventory = rendered("pytorch: {install: true, location: node-local}\nmodules: {lmod: true}\n")
    assert inventory["gpuclus_software_writers"] == ["gpu01", "gpu02", "cpu01", "head"]
    assert pytorch_values(inventory, host) == {
        "lmod_write_modulefiles": True,
        "lmod_write_dir": "/opt/gpuclus/modules",
        # The toolkit's modulefile only where the nvidia phase installs it.
        "lmod_cuda_modules": [{"version": "12.4", "root": "/usr/local/cuda-12.4"}] if host == "gpu01" else [],
        "pytorch_env_build": True,
        "pytorch_env_owner": "root",
        "job_templates_write_dir": "/opt/gpuclus/examples",
    }


def test_the_users_roles_follow_the_spec_directory_or_not() -> None:
    inventory = rendered()
    assert values("users", inventory, "head", "users_accounts_from") == {"users_accounts_from": "local"}
    directory = {"uri": ["ldaps://ldap.example.org"], "schema": "ad", "allow_groups": ["hpc"]}
    users = [{"name": "alice", "removed": False}, {"name": "bob", "removed": True}]
    found = values(
        "sssd",
        inventory,
        "head",
        "sssd_uris",
        "sssd_schema",
        "sssd_allow_groups",
        "sssd_deny_users",
        gpuclus_users_directory=directory,
        gpuclus_users=users,
    )
    assert found == {
        "sssd_uris": ["ldaps://ldap.example.org"],
        "sssd_schema": "ad",
        "sssd_allow_groups": ["hpc"],
        "sssd_deny_users": ["bob"],
    }
    accounts_from = values("users", inventory, "head", "users_accounts_from", gpuclus_users_directory=directory)
    assert accounts_from == {"users_accounts_from": "directory"}


def test_base_gathers_every_later_roles_packages_ahead_by_their_name() -> None:
    inventory = rendered()
    assert values("base", inventory, "head", "base_packages_ahead") == {"base_packages_ahead": []}
    # What the later roles' tasks/packages.yml set before base runs.
    ahead = {
        "nfs_server_packages_ahead": ["nfs-kernel-server", "rpcbind"],
        "slurm_common_packages_ahead": ["rpcbind", "munge"],
    }
    assert values("base", inventory, "head", "base_packages_ahead", **ahead) == {
        "base_packages_ahead": ["nfs-kernel-server", "rpcbind", "munge"]
    }


def test_every_role_that_base_collects_from_sets_its_packages_ahead() -> None:
    # base gathers by name: a role whose packages.yml set another name would be left out without a word.
    playbook = yaml.safe_load((PLAYBOOKS / "base.yml").read_text())
    collected = [role for role, _ in _role_calls(playbook[0]) if role not in {"base", "ssh_trust"}]
    assert collected
    for role in collected:
        tasks = yaml.safe_load((ROLES / role / "tasks" / "packages.yml").read_text())
        facts = {name for task in tasks for name in (task.get("ansible.builtin.set_fact") or {})}
        assert f"{role}_packages_ahead" in facts, role
