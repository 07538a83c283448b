"""A plain deploy of an unchanged cluster runs nothing; a hand change on one node makes it a full one that repairs it.

deploy/in_sync.py on the real sandbox: the fingerprints the nodes compute over their packages, services and
files must be stable while nothing changes (else every deploy would run in full) and must change when a person
changes a node (else a deploy would skip the repair it is documented to make).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from cluster_helpers import GPU1, GPU2, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

# Written by the slurm_health role on compute nodes with mode 0644.
HEALTH_SETTINGS = "/etc/gpuclus/healthcheck.json"


def deploy(cluster: Cluster, *options: str) -> dict[str, Any]:
    result = gpuclus("deploy", str(cluster.spec), "--json", *options)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_a_plain_deploy_after_a_full_one_runs_nothing(deployed: Cluster) -> None:
    third = deployed.third
    assert third["status"] == "successful"
    assert third["in_sync_with"] == deployed.second["id"]
    assert third["phases"] == [] and third["hosts"] == {} and third["changed"] == 0


def test_a_hand_change_makes_the_next_deploy_run_in_full_and_repair_it(deployed: Cluster) -> None:
    cluster = deployed
    mode = cluster.on(GPU2, f"stat -c %a {HEALTH_SETTINGS}").stdout.strip()
    cluster.on(GPU1, "sudo systemctl stop prometheus-node-exporter")
    cluster.on(GPU2, f"sudo chmod 600 {HEALTH_SETTINGS}")
    try:
        repaired = deploy(cluster)
        assert repaired["in_sync_with"] is None
        assert [phase["name"] for phase in repaired["phases"]] == [p["name"] for p in cluster.second["phases"]]
        assert repaired["hosts"][GPU1]["changed"] >= 1 and repaired["hosts"][GPU2]["changed"] >= 1, repaired["hosts"]
        assert cluster.on(GPU1, "systemctl is-active prometheus-node-exporter").stdout.strip() == "active"
        assert cluster.on(GPU2, f"stat -c %a {HEALTH_SETTINGS}").stdout.strip() == mode
        # That run recorded the nodes again: the next plain deploy runs nothing, and says so.
        human = gpuclus("deploy", str(cluster.spec))
        assert human.returncode == 0, human.stdout[-3000:] + human.stderr[-3000:]
        assert f"nothing to do — the spec, gpuclus and every node are as deploy {repaired['id']}" in " ".join(
            human.stdout.split()
        ), human.stdout
    finally:
        cluster.on(GPU1, "sudo systemctl start prometheus-node-exporter", check=False)
        cluster.on(GPU2, f"sudo chmod {mode or '644'} {HEALTH_SETTINGS}", check=False)
