"""Every play runs on exactly the nodes the spec's roles say (issue 40, class 2), as Ansible itself selects them.

For a handful of specs, render's inventory is loaded by Ansible's own InventoryManager and every ``hosts:``
pattern of playbooks/*.yml is resolved against it; the hosts it selects must be the nodes the spec gives that
role (``gpu``: the nodes with real GPUs; ``cluster`` and ``all``: every node; ``localhost``: the control machine
alone). Specs with a node named like a group or like ``localhost`` must be refused before any of this: in an
inventory holding one, ``hosts: gpu`` ran on a CPU node named gpu and on no GPU node, and ``hosts: all`` on the
node named all alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_samples import BASE

from gpuclus.render import render_files
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.spec.models import Role
from gpuclus.spec.topology import Topology

PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"
CONTROL_MACHINE = "localhost"


def play_patterns() -> list[tuple[str, str]]:
    """(playbook, hosts pattern) for every play of every playbook."""
    found = []
    for playbook in sorted(PLAYBOOKS.glob("*.yml")):
        for play in yaml.safe_load(playbook.read_text(encoding="utf-8")) or []:
            if "hosts" in play:
                found.append((playbook.name, str(play["hosts"])))
    return found


def _node(name: str, address: str, roles: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "address": address, "roles": roles, "cpus": 8, "memory_mb": 16000, **extra}


def _spread_roles() -> dict[str, Any]:
    """One node per role, a backup controller, fake-GPU and CPU-only compute nodes, and monitoring on the controller."""
    document = copy.deepcopy(BASE)
    document["nodes"] = [
        _node("head", "10.0.0.10", ["controller"]),
        _node("head2", "10.0.0.9", ["backup_controller"]),
        _node("login1", "10.0.0.20", ["login"]),
        _node("storage", "10.0.0.21", ["nfs_server"]),
        _node("gpu[01-02]", "10.0.0.[11-12]", ["compute"], gpus={"count": 1, "model": "h100"}),
        _node("sim[1-2]", "10.0.0.[31-32]", ["compute"], gpus={"count": 2, "fake": True}),
        _node("cpu1", "10.0.0.40", ["compute"]),
    ]
    document["slurm"]["partitions"] = [{"name": "batch", "default": True}]
    document["monitoring"] = {"prometheus": True}
    return document


def _names_near_groups() -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["nodes"].append(_node("gpu1", "10.0.0.30", ["compute"]))
    document["nodes"].append(_node("logins", "10.0.0.31", ["login"]))
    document["nodes"].append(_node("localhost1", "10.0.0.32", ["compute"]))
    del document["slurm"]["partitions"][0]["nodes"]
    return document


ACCEPTED: dict[str, Callable[[], dict[str, Any]]] = {
    "all roles on one head": lambda: copy.deepcopy(BASE),
    "one node per role": _spread_roles,
    "names near the groups": _names_near_groups,
}


def _with_node(name: str, roles: list[str]) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["nodes"][0]["roles"] = ["controller", "nfs_server", "monitoring"]
    document["nodes"].append(_node(name, "10.0.0.30", roles))
    del document["slurm"]["partitions"][0]["nodes"]
    return document


# A CPU node named gpu, a compute node named login in a spec without login nodes, the control machine's name,
# and the group every play of pytorch.yml's second half targets.
REFUSED = {
    "a CPU node named gpu": _with_node("gpu", ["compute"]),
    "a compute node named login": _with_node("login", ["compute"]),
    "a node named localhost": _with_node("localhost", ["compute"]),
    "a node named all": _with_node("all", ["compute"]),
    "a node named cluster": _with_node("cluster", ["login"]),
}


def load(document: dict[str, Any]) -> LoadedSpec:
    return load_spec_text(yaml.safe_dump(document, sort_keys=False))


def expected_hosts(word: str, loaded: LoadedSpec) -> set[str]:
    """The hosts a pattern word should select: the spec's answer, not render's."""
    spec, topology = loaded.spec, loaded.topology
    assert spec is not None and topology is not None
    if word == CONTROL_MACHINE:
        return {CONTROL_MACHINE}
    if word in ("all", "cluster"):
        return {node.name for node in topology.nodes}
    if word == "gpu":
        return {node.name for node in topology.real_gpu_nodes}
    if word == Role.MONITORING.value:
        return _monitoring_hosts(spec.monitoring.prometheus or spec.monitoring.grafana, topology)
    roles = {role.value: role for role in Role}
    assert word in roles, f"a play targets {word!r}: say here which nodes it means"
    return {node.name for node in topology.with_role(roles[word])}


def _monitoring_hosts(monitoring_on: bool, topology: Topology) -> set[str]:
    server = topology.monitoring_server if monitoring_on else None
    return {node.name for node in topology.with_role(Role.MONITORING)} or ({server.name} if server else set())


def expected_for_pattern(pattern: str, loaded: LoadedSpec) -> set[str]:
    """Ansible's pattern algebra for what the playbooks write: union (':' ','), '&' intersection, '!' exclusion."""
    selected: set[str] = set()
    for word in pattern.replace(",", ":").split(":"):
        if word.startswith("&"):
            selected &= expected_hosts(word[1:], loaded)
        elif word.startswith("!"):
            selected -= expected_hosts(word[1:], loaded)
        else:
            selected |= expected_hosts(word, loaded)
    return selected


def ansible_selection(loaded: LoadedSpec, tmp_path: Path) -> Callable[[str], set[str]]:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    assert loaded.spec is not None and loaded.topology is not None
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(files["inventory/hosts.yml"], encoding="utf-8")
    manager = InventoryManager(loader=DataLoader(), sources=[str(inventory)])
    return lambda pattern: {_shown(host) for host in manager.get_hosts(pattern)}


def _shown(host: Any) -> str:
    # The control machine is Ansible's implicit localhost; an inventory host of that name is a node.
    if host.name == CONTROL_MACHINE and not host.implicit:
        return f"{host.name} (a node at {host.vars.get('ansible_host')})"
    return str(host.name)


def test_the_playbooks_have_plays_to_check() -> None:
    patterns = dict(play_patterns())
    assert patterns["nvidia.yml"] == "gpu" and patterns["preflight.yml"] == CONTROL_MACHINE


@pytest.mark.parametrize("spec", list(ACCEPTED), ids=list(ACCEPTED))
def test_every_play_selects_the_nodes_the_roles_say(spec: str, tmp_path: Path) -> None:
    loaded = load(ACCEPTED[spec]())
    assert loaded.ok, loaded.findings
    selects = ansible_selection(loaded, tmp_path)
    wrong = {
        f"{playbook}: hosts: {pattern}": (selects(pattern), expected_for_pattern(pattern, loaded))
        for playbook, pattern in play_patterns()
        if selects(pattern) != expected_for_pattern(pattern, loaded)
    }
    assert not wrong, wrong


@pytest.mark.parametrize("spec", list(REFUSED), ids=list(REFUSED))
def test_a_node_named_like_a_target_is_refused_with_its_line(spec: str) -> None:
    loaded = load(REFUSED[spec])
    refusals = [finding for finding in loaded.findings if finding.code == "reserved-node-name"]
    assert not loaded.ok and refusals and refusals[0].line is not None, loaded.findings


@pytest.mark.parametrize("spec", ["a CPU node named gpu", "a node named localhost", "a node named all"])
def test_why_they_are_refused_plays_would_run_elsewhere(spec: str, tmp_path: Path) -> None:
    # Rendered regardless of the refusal: Ansible then picks other hosts than the roles say for some play.
    loaded = load(REFUSED[spec])
    selects = ansible_selection(loaded, tmp_path)
    assert any(selects(pattern) != expected_for_pattern(pattern, loaded) for _playbook, pattern in play_patterns())
