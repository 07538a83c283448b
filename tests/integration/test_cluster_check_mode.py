"""Check runs on real roles (issue 12 item 3): on fresh nodes they succeed and change nothing;
on the deployed cluster they find nothing to change; either way they are recorded as checks.

The session fixture (conftest.deployed) ran `deploy --check` on the fresh
sandbox before its first deploy, and again after the second one.
"""

from __future__ import annotations

import json

import pytest
from cluster_helpers import PHASES, Cluster, gpuclus

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def test_a_check_run_on_fresh_nodes_succeeds_and_says_what_would_change(cluster: Cluster) -> None:
    check = cluster.fresh_check
    assert check.get("returncode") == 0, check
    assert check["status"] == "successful" and check["check"] is True and check["kind"] == "check"
    assert [phase["name"] for phase in check["phases"]] == PHASES
    # Every phase has something to do on an empty node (packages, files, services).
    assert all(phase["changed"] > 0 for phase in check["phases"]), check["phases"]
    assert check["failures"] == []


def test_a_check_run_on_fresh_nodes_installs_and_writes_nothing(cluster: Cluster) -> None:
    # Packages, slurm.conf and the deploy stamp are what the first real deploy adds.
    assert cluster.after_fresh_check, "the fixture probed no node"
    for node, installed in cluster.after_fresh_check.items():
        assert not installed.startswith("probe failed"), f"{node}: {installed}"
        assert installed.split() == [], f"{node} changed by a check run: {installed!r}"


def test_a_check_run_on_the_deployed_cluster_would_change_nothing(cluster: Cluster) -> None:
    check = cluster.deployed_check
    assert check.get("returncode") == 0, check
    assert check["status"] == "successful" and check["kind"] == "check"
    assert [phase["name"] for phase in check["phases"]] == PHASES
    assert check["changed"] == 0, check["phases"]


def test_check_runs_are_listed_as_checks_and_never_taken_as_the_last_deploy(cluster: Cluster) -> None:
    runs = json.loads(gpuclus("runs", "list", "--spec", str(cluster.spec), "--json").stdout)["runs"]
    kinds = {run["id"]: run["kind"] for run in runs}
    assert kinds[cluster.fresh_check["id"]] == "check"
    assert kinds[cluster.deployed_check["id"]] == "check"
    assert kinds[cluster.first["id"]] == "deploy"
    shown = gpuclus("runs", "show", cluster.fresh_check["id"], "--spec", str(cluster.spec))
    assert shown.returncode == 0, shown.stderr
    assert "check run" in shown.stdout
    # The newest run is the check on the deployed cluster; --retry-failed reads the last
    # deploy instead (the fixture's third, an in-sync deploy that ran nothing and so failed
    # nowhere) and names it.
    assert runs[0]["id"] == cluster.deployed_check["id"], [run["id"] for run in runs]
    retried = gpuclus("deploy", str(cluster.spec), "--retry-failed", "--json")
    assert retried.returncode == 2, retried.stdout + retried.stderr
    message = json.loads(retried.stdout)["error"]["message"]
    assert f"the last deploy ({cluster.third['id']})" in message, message
