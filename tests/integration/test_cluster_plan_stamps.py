"""`gpuclus plan` asks the nodes, not only the local copy of the last deploy (issue 12 item 7).

On the session's deployed sandbox: after the deploy every node holds its
deploy stamp and plan says so; a node whose stamp is gone (what a recreated,
empty node looks like to gpuclus) is named "not deployed" and plan no longer
says the cluster matches the last deploy, although .gpuclus/last-applied/
still does; a deploy limited to some phases leaves it without a stamp, and a
full deploy (limited to that node) puts it back. The cluster is left as it was
found (the stamp is restored in a finally).

Integration only (`.ci/run`, as root): it uses the session's deployed sandbox.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from cluster_helpers import GPU1, GPU2, HEAD, Cluster, gpuclus, plan_json, plan_states

from gpuclus.deploy.node_stamps import STAMP_PATH

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

NODES = {HEAD, GPU1, GPU2}


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def deploy(cluster: Cluster, *options: str) -> dict[str, Any]:
    result = gpuclus("deploy", str(cluster.spec), "--json", *options)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_plan_reads_each_nodes_stamp_and_names_a_node_without_one(cluster: Cluster) -> None:
    report = plan_json(cluster.spec)
    assert report["files"] == [], report["files"]
    assert plan_states(report) == dict.fromkeys(NODES, "in_sync"), report["nodes"]
    assert report["in_sync"] is True
    # The stamp: what the role wrote, world-readable, root's, no secret, no run id.
    stamp = json.loads(cluster.on(GPU1, f"cat {STAMP_PATH}").stdout)
    assert stamp["render_sha256"] == report["render_sha256"]
    assert set(stamp) == {"managed_by", "gpuclus_version", "render_sha256"}
    assert cluster.on(GPU1, f"stat -c '%U %G %a' {STAMP_PATH}").stdout.split() == ["root", "root", "644"]

    try:
        # A recreated node: empty, no stamp, while the local last-applied copy still matches.
        cluster.on(GPU1, f"sudo rm {STAMP_PATH}")
        report = plan_json(cluster.spec)
        assert report["files"] == []
        assert plan_states(report) == {HEAD: "in_sync", GPU1: "not_deployed", GPU2: "in_sync"}
        assert report["in_sync"] is False
        human = gpuclus("plan", str(cluster.spec), timeout=120)
        assert human.returncode == 0, human.stderr
        assert "every node holds it" not in human.stdout
        assert any(
            GPU1 in line and "not deployed by gpuclus (new or recreated node)" in line
            for line in human.stdout.splitlines()
        ), human.stdout

        # Some phases only: the node did not get everything, so no stamp.
        partial = deploy(cluster, "--only", "base", "--limit", GPU1)
        assert [phase["name"] for phase in partial["phases"]] == ["base"]
        assert plan_states(plan_json(cluster.spec))[GPU1] == "not_deployed"

        # Every phase, limited to that node: it gets its stamp back, and only it changes.
        full = deploy(cluster, "--limit", GPU1)
        assert full["hosts"][GPU1]["changed"] >= 1, full["hosts"]
        report = plan_json(cluster.spec)
        assert plan_states(report) == dict.fromkeys(NODES, "in_sync"), report["nodes"]
        assert report["in_sync"] is True
    finally:
        if cluster.on(GPU1, f"test -e {STAMP_PATH}", check=False).exit_status != 0:
            gpuclus("deploy", str(cluster.spec), "--limit", GPU1)


def test_a_no_change_deploy_rewrites_no_stamp(cluster: Cluster) -> None:
    report = deploy(cluster, "--full")  # every task runs, the stamp's too
    assert report["changed"] == 0, report["hosts"]
    assert plan_states(plan_json(cluster.spec)) == dict.fromkeys(NODES, "in_sync")


def test_plan_check_shows_its_phases_and_how_long_it_took(cluster: Cluster) -> None:
    result = gpuclus("plan", str(cluster.spec), "--check", timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    lines = result.stderr.splitlines()
    for phase in ("base", "nfs", "slurm", "monitoring"):
        assert any(f"{phase} (" in line and "would change)" in line for line in lines), result.stderr
    assert result.stdout.rstrip().splitlines()[-1].startswith("check run took ")
    # A check run writes no stamp and does not count one.
    assert plan_states(plan_json(cluster.spec)) == dict.fromkeys(NODES, "in_sync")
