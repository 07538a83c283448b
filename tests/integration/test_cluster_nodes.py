"""Day two on the deployed sandbox: a node added while a job runs, then removed with `gpuclus nodes remove`.

The spec is the truth both ways: `sandbox up --nodes 4` adds a container and
writes it into the spec, `gpuclus deploy` brings it into Slurm, Prometheus and
every node's /etc/hosts and known_hosts; `gpuclus nodes remove` drains it and
takes it out of all of those and of the spec; `sandbox up --nodes 3` removes
the container. A job that runs on another node the whole time must finish
untouched (Slurm's daemons restart for both node set changes). Nothing is
mocked: real Slurm, real Ansible, real Prometheus.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import CLUSTER, GPU1, GPU2, HEAD, SANDBOX_UP, Cluster, gpuclus, plan_json, plan_states

from gpuclus.spec.load import load_spec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

GPU3 = f"{CLUSTER}-gpu03"
# The shared cluster is head + 2 compute nodes; one more compute node, and back.
GROWN_UP = tuple(
    "4" if arg == "3" and SANDBOX_UP[index - 1] == "--nodes" else arg for index, arg in enumerate(SANDBOX_UP)
)


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def spec_nodes(spec: Path) -> dict[str, str]:
    loaded = load_spec(spec)
    assert loaded.ok and loaded.topology is not None, loaded.findings
    return {node.name: node.address for node in loaded.topology.nodes}


def job_state(cluster: Cluster, job: str) -> str:
    return cluster.on(HEAD, f"squeue --noheader --jobs={job} --format=%T", check=False).stdout.strip()


def sinfo_nodes(cluster: Cluster) -> dict[str, str]:
    shown = cluster.on(HEAD, "sinfo --noheader --Node --format='%N %T'").stdout.split("\n")
    return dict(line.split() for line in shown if line.strip())  # type: ignore[misc]


def prometheus_nodes(cluster: Cluster) -> set[str]:
    answer = cluster.on(HEAD, "curl -sS --max-time 20 http://127.0.0.1:9090/api/v1/targets?state=active").stdout
    targets: list[dict[str, Any]] = json.loads(answer)["data"]["activeTargets"]
    return {target["labels"]["instance"] for target in targets if target["labels"]["job"] == "node"}


def test_a_node_added_while_a_job_runs_then_removed(cluster: Cluster) -> None:
    job = cluster.on(HEAD, f"sbatch --parsable --nodelist={GPU1} --time=30 --wrap='sleep 1200'").stdout.strip()
    try:
        _wait(lambda: job_state(cluster, job) == "RUNNING", 60, f"job {job} did not start")

        grown = gpuclus(*GROWN_UP, "--spec", str(cluster.spec))
        assert grown.returncode == 0, grown.stdout + grown.stderr
        assert GPU3 in spec_nodes(cluster.spec)
        address = spec_nodes(cluster.spec)[GPU3]

        started = time.monotonic()
        added = gpuclus("deploy", str(cluster.spec), "--json")
        add_seconds = time.monotonic() - started
        assert added.returncode == 0, added.stdout[-4000:] + added.stderr[-4000:]
        print(f"\nadd one node: deploy {add_seconds:.0f} s")
        _wait(lambda: sinfo_nodes(cluster).get(GPU3) == "idle", 120, f"{GPU3} not idle: {sinfo_nodes(cluster)}")
        assert cluster.on(HEAD, f"srun --nodelist={GPU3} hostname").stdout.strip() == GPU3
        for node in (HEAD, GPU1, GPU2):
            assert f"{address} {GPU3}" in " ".join(cluster.on(node, "cat /etc/hosts").stdout.split()), node
        _wait(lambda: GPU3 in prometheus_nodes(cluster), 60, "Prometheus does not scrape the new node")
        assert job_state(cluster, job) == "RUNNING", "the job on another node did not survive the node set change"

        started = time.monotonic()
        removed = gpuclus("nodes", "remove", GPU3, "--spec", str(cluster.spec), "--json", timeout=1500)
        remove_seconds = time.monotonic() - started
        assert removed.returncode == 0, removed.stdout[-4000:] + removed.stderr[-4000:]
        report = json.loads(removed.stdout)
        print(f"remove one node: {remove_seconds:.0f} s")
        assert report["nodes"] == [GPU3] and report["cancelled_jobs"] == []
        assert report["retired"] == [{"node": GPU3, "slurmd_stopped": True, "error": None}]
        assert GPU3 not in spec_nodes(cluster.spec)
        assert GPU3 not in sinfo_nodes(cluster)
        for node in (HEAD, GPU1, GPU2):
            assert GPU3 not in cluster.on(node, "cat /etc/hosts /etc/ssh/ssh_known_hosts").stdout, node
        assert GPU3 not in prometheus_nodes(cluster)
        # gpuclus forgot GPU3's host key: look inside the container, as an admin at its console would.
        # nsenter into its namespaces rather than `podman exec`: on a cgroup v1 host the nodes' systemd
        # share the host's name=systemd hierarchy and may prune the container's own cgroup there, which
        # `podman exec` needs (seen once in a long run with several sandboxes up).
        pid = subprocess.run(
            [cluster.engine, "inspect", "--format", "{{.State.Pid}}", GPU3], capture_output=True, text=True, check=True
        ).stdout.strip()
        enabled = subprocess.run(
            [
                "nsenter",
                "--target",
                pid,
                "--mount",
                "--uts",
                "--ipc",
                "--net",
                "--pid",
                "systemctl",
                "is-enabled",
                "slurmd",
            ],
            capture_output=True,
            text=True,
        )
        assert enabled.stdout.strip() == "disabled", enabled
        assert job_state(cluster, job) == "RUNNING", "the job on another node did not survive the removal"
    finally:
        cluster.on(HEAD, f"scancel {shlex.quote(job)}", check=False)
        # Back to the shared shape: the container goes, the spec is the 3-node one again.
        back = gpuclus(*SANDBOX_UP, "--spec", str(cluster.spec))
        assert back.returncode == 0, back.stdout + back.stderr
    assert set(spec_nodes(cluster.spec)) == {HEAD, GPU1, GPU2}
    # The shared cluster is whole again: nothing differs from the last deploy, every node's stamp in sync.
    plan = plan_json(cluster.spec)
    assert plan["files"] == [] and plan["in_sync"] is True, plan
    assert plan_states(plan) == dict.fromkeys((HEAD, GPU1, GPU2), "in_sync"), plan["nodes"]


def _wait(condition: Any, seconds: float, message: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(2)
