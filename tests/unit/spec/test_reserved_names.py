"""Reserved names (issue 40, class 2): a node or partition named like something Ansible or Slurm already means.

A node named like an inventory group is run by the plays that target the group, or takes the group's place
(``hosts: gpu`` ran on a CPU node named gpu and on no GPU node); ``localhost`` captures the control machine's
plays and ``delegate_to: localhost``; ``all`` becomes the only host of ``hosts: all``. Slurm reads
``PartitionName=DEFAULT`` as its defaults record, so no such partition exists. The list is
``gpuclus.spec.reserved``; these tests hold it to the groups render writes and the words the playbooks target,
so a new group or play cannot be left out of it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_samples import BASE

from gpuclus.render import render_files
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.spec.reserved import RESERVED_NODE_NAMES
from gpuclus.yamldoc.findings import Severity

PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"
# The separators of an Ansible host pattern: union (':' or ','), intersection ('&'), exclusion ('!').
PATTERN_SEPARATORS = re.compile(r"[:,]")


def load(document: dict[str, Any]) -> LoadedSpec:
    return load_spec_text(yaml.safe_dump(document, sort_keys=False))


def errors_at(loaded: LoadedSpec, code: str, path: str) -> list[int | None]:
    return [
        finding.line
        for finding in loaded.findings
        if finding.code == code and finding.path == path and finding.severity is Severity.ERROR
    ]


def with_node_named(name: str) -> dict[str, Any]:
    """BASE with a third node, a plain compute node, of that name (in the partition through its default)."""
    document = copy.deepcopy(BASE)
    document["nodes"].append(
        {"name": name, "address": "10.0.0.30", "roles": ["compute"], "cpus": 8, "memory_mb": 16000}
    )
    del document["slurm"]["partitions"][0]["nodes"]
    return document


def with_partition_named(name: str) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document["slurm"]["partitions"][0]["name"] = name
    return document


# -- the list covers every name the inventory and the playbooks give a meaning to --------------------------


def playbook_targets() -> dict[str, set[str]]:
    """Every word of every play's ``hosts:`` pattern, per playbook."""
    targets: dict[str, set[str]] = {}
    for playbook in sorted(PLAYBOOKS.glob("*.yml")):
        plays = yaml.safe_load(playbook.read_text(encoding="utf-8")) or []
        for play in plays:
            if "hosts" in play:
                words = {word.lstrip("&!") for word in PATTERN_SEPARATORS.split(str(play["hosts"]))}
                targets.setdefault(playbook.name, set()).update(words)
    return targets


def inventory_groups(tree: dict[str, Any]) -> Iterator[str]:
    for name, group in tree.items():
        yield str(name)
        if isinstance(group, dict):
            yield from inventory_groups(group.get("children") or {})


def test_every_word_a_play_targets_is_reserved() -> None:
    targets = playbook_targets()
    assert "gpu" in targets["nvidia.yml"] and "localhost" in targets["preflight.yml"], targets
    missing = {playbook: words - RESERVED_NODE_NAMES for playbook, words in targets.items()}
    assert not any(missing.values()), f"playbooks target names gpuclus.spec.reserved lacks: {missing}"


def test_every_group_render_writes_is_reserved() -> None:
    loaded = load(BASE)
    assert loaded.spec is not None and loaded.topology is not None
    files = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k"
    )
    groups = set(inventory_groups(yaml.safe_load(files["inventory/hosts.yml"])))
    assert {"all", "cluster", "gpu", "compute"} <= groups
    assert groups <= RESERVED_NODE_NAMES, groups - RESERVED_NODE_NAMES


# -- node names -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(RESERVED_NODE_NAMES))
def test_a_reserved_node_name_is_refused_at_its_line(name: str) -> None:
    loaded = load(with_node_named(name))
    # nfs_server and backup_controller already miss the host name grammar ('_'); the others are fine host names.
    lines = errors_at(loaded, "reserved-node-name", "nodes[2].name") or errors_at(
        loaded, "invalid-node-name", "nodes[2].name"
    )
    assert lines and lines[0] is not None, loaded.findings
    assert not loaded.ok


@pytest.mark.parametrize("name", ["gpu", "login", "localhost", "all", "default", "cluster", "compute"])
def test_the_reserved_node_names_are_fine_host_names_refused_for_their_meaning(name: str) -> None:
    loaded = load(with_node_named(name))
    [finding] = [finding for finding in loaded.findings if finding.code == "reserved-node-name"]
    assert finding.line is not None and finding.source_line is not None and name in finding.source_line
    assert finding.hint and repr(name) in finding.message


def test_a_reserved_name_in_any_case_is_refused_for_its_case_first() -> None:
    # Node names are lower case by grammar; upper case is already refused, and no reserved word slips through it.
    loaded = load(with_node_named("GPU"))
    assert errors_at(loaded, "invalid-node-name", "nodes[2].name")


@pytest.mark.parametrize("name", ["gpu03", "login1", "headnode", "defaults", "all-gpus", "localhost2", "clusters"])
def test_names_near_a_reserved_one_are_accepted(name: str) -> None:
    loaded = load(with_node_named(name))
    assert loaded.ok, loaded.findings


def test_a_range_that_expands_to_a_reserved_name_is_one_finding() -> None:
    loaded = load(with_node_named("compute[1-1]"))
    assert loaded.ok, loaded.findings  # compute1, not compute
    document = with_node_named("gpu99")
    document["nodes"].append({"name": "login", "address": "10.0.0.31", "roles": ["compute"]})
    loaded = load(document)
    assert len([f for f in loaded.findings if f.code == "reserved-node-name"]) == 1


# -- partition names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["DEFAULT", "default", "Default", "dEfAuLt"])
def test_a_partition_named_default_in_any_case_is_refused_at_its_line(name: str) -> None:
    loaded = load(with_partition_named(name))
    lines = errors_at(loaded, "reserved-partition-name", "slurm.partitions[0].name")
    assert lines and lines[0] is not None, loaded.findings
    assert not loaded.ok


@pytest.mark.parametrize("name", ["defaults", "default-gpu", "all", "ALL", "batch"])
def test_other_partition_names_are_accepted(name: str) -> None:
    loaded = load(with_partition_named(name))
    assert loaded.ok, loaded.findings
