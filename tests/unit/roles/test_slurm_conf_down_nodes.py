"""slurm.conf when compute nodes are left out of a run because they are down.

A down node keeps the line the current slurm.conf gives it (so the daemons
need no restart); one that was never sized (a new spec entry not up yet) is
defined FUTURE, so Slurm keeps it in its partitions without contacting it.
Rendered with Ansible's own templating from the role's defaults and vars
(tests/unit/role_templates.py); the test stands in for what the role reads
on the nodes.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import group_vars, render, role_variables

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller]}
  - {name: "gpu[01-03]", address: "10.0.0.[11-13]", roles: [compute], gpus: {count: 2}}
"""

HARDWARE = {"CPUs": 8, "Boards": 1, "SocketsPerBoard": 1, "CoresPerSocket": 8, "ThreadsPerCore": 1, "RealMemory": 10000}
WRITTEN = {"CPUs": 4, "Boards": 1, "SocketsPerBoard": 2, "CoresPerSocket": 2, "ThreadsPerCore": 1, "RealMemory": 7000}


@pytest.fixture(scope="module")
def inventory() -> dict[str, Any]:
    loaded = load_spec_text(SPEC)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


def slurm_conf(inventory: dict[str, Any], in_run: list[str], written: dict[str, dict[str, int]]) -> dict[str, str]:
    """NodeName -> its line, for a run over ``in_run`` whose compute nodes were probed."""
    text = render(
        "slurm_common",
        "etc/slurm/slurm.conf.j2",
        inventory,
        "head",
        ansible_play_hosts=in_run,
        ansible_play_hosts_all=in_run,
        gpuclus_excluded_nodes=[name for name in ("head", "gpu01", "gpu02", "gpu03") if name not in in_run],
        __slurm_common_pmix=False,
        __slurm_common_probes={name: {"hardware": HARDWARE} for name in in_run if name != "head"},
        __slurm_common_written_sizes=written,
    )
    lines = [line for line in text.splitlines() if line.startswith("NodeName=")]
    return {line.split()[0].removeprefix("NodeName="): line for line in lines}


def test_every_node_in_the_run_is_sized_by_its_probe(inventory: dict[str, Any]) -> None:
    lines = slurm_conf(inventory, ["head", "gpu01", "gpu02", "gpu03"], {})
    assert set(lines) == {"gpu01", "gpu02", "gpu03"}
    assert all("CPUs=8" in line and "RealMemory=9800" in line and "State=UNKNOWN" in line for line in lines.values())


def test_a_down_node_keeps_the_size_the_current_slurm_conf_gives_it(inventory: dict[str, Any]) -> None:
    lines = slurm_conf(inventory, ["head", "gpu01", "gpu02"], {"gpu03": WRITTEN})
    assert lines["gpu03"] == (
        "NodeName=gpu03 NodeAddr=10.0.0.13 CPUs=4 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=1 "
        "RealMemory=7000 Gres=gpu:2 State=UNKNOWN"
    )
    assert "RealMemory=9800" in lines["gpu01"]


def test_a_down_node_never_sized_is_defined_future(inventory: dict[str, Any]) -> None:
    lines = slurm_conf(inventory, ["head", "gpu01"], {"gpu02": WRITTEN})
    assert lines["gpu03"] == "NodeName=gpu03 NodeAddr=10.0.0.13 CPUs=1 RealMemory=1 State=FUTURE"
    assert "State=UNKNOWN" in lines["gpu02"]


def test_a_future_node_does_not_set_the_default_memory_per_cpu(inventory: dict[str, Any]) -> None:
    text = render(
        "slurm_common",
        "etc/slurm/slurm.conf.j2",
        inventory,
        "head",
        ansible_play_hosts=["head", "gpu01"],
        ansible_play_hosts_all=["head", "gpu01"],
        gpuclus_excluded_nodes=["gpu02", "gpu03"],
        __slurm_common_pmix=False,
        __slurm_common_probes={"gpu01": {"hardware": HARDWARE}},
        __slurm_common_written_sizes={},
    )
    assert "DefMemPerCPU=1225" in text.splitlines()


def test_a_node_lost_in_the_run_keeps_its_line_and_is_never_probed_through_delegation(
    inventory: dict[str, Any],
) -> None:
    # gpu02 was in the play and went unreachable before slurm_common's probe (stopped mid-deploy):
    # Ansible keeps it in ansible_play_hosts_all but drops it from ansible_play_hosts.
    lost = {
        "ansible_play_hosts": ["head", "gpu01", "gpu03"],
        "ansible_play_hosts_all": ["head", "gpu01", "gpu02", "gpu03"],
        "gpuclus_excluded_nodes": [],
        "__slurm_common_pmix": False,
        "__slurm_common_probes": {name: {"hardware": HARDWARE} for name in ("gpu01", "gpu03")},
        "__slurm_common_written_sizes": {"gpu02": WRITTEN},
    }
    text = render("slurm_common", "etc/slurm/slurm.conf.j2", inventory, "head", **lost)
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("NodeName=")}
    assert "CPUs=4" in lines["NodeName=gpu02"] and "RealMemory=7000" in lines["NodeName=gpu02"]
    variables = role_variables("slurm_common", inventory, "head", lost)
    templar = Templar(loader=DataLoader(), variables=variables)
    # Nothing the assert before slurm.conf would stop the live nodes for, and no delegated probe of gpu02.
    assert (
        templar.template(trust_as_template("{{ __slurm_common_unsized | select('in', ansible_play_hosts) | list }}"))
        == []
    )
    assert templar.template(trust_as_template("{{ __slurm_common_lost }}")) == ["gpu02"]
    assert "gpu02" not in templar.template(trust_as_template("{{ __slurm_common_outside_to_probe }}"))
