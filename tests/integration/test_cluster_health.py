"""The node health check on the deployed sandbox: Slurm runs it, a fault drains the node, a repair resumes it.

Each test breaks one thing the health check looks at, the way it breaks on a
real node, and waits for slurmctld's next health check round (the sandbox's
spec sets HealthCheckInterval to 20 s) to show the node drained with
gpuclus' reason; then it repairs the fault and waits for the node to come back.
Nothing is mocked: real slurmd runs the program, real scontrol drains.
Checks that need a real GPU (nvidia-smi, Xid, ECC, DCGM) or a kernel NFS
mount cannot run here; tests/unit/test_healthcheck_program.py covers them.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml
from cluster_helpers import GPU1, GPU2, HEAD, Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

PREFIX = "gpuclus-health:"
PROGRAM = "/usr/local/sbin/gpuclus-healthcheck"
# slurmctld starts a round every interval; slurmd then runs the program (~0.1 s) and scontrol.
SLACK_S = 10


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def interval(cluster: Cluster) -> int:
    spec = yaml.safe_load(cluster.spec.read_text())
    return int(spec["slurm"]["health_check"]["interval"])


def node_view(cluster: Cluster, node: str) -> tuple[str, str]:
    """sinfo's state (e.g. ``drained``, ``draining``, ``idle``) and reason for ``node``."""
    shown = cluster.on(HEAD, f"sinfo --noheader --Node --nodes={node} --format='%T|%E'").stdout
    state, _, reason = shown.splitlines()[0].partition("|")
    return state.strip(), reason.strip()


def wait_for(cluster: Cluster, node: str, wanted: str, within_s: float) -> tuple[float, tuple[str, str]]:
    """Seconds until sinfo shows ``node``'s state starting with ``wanted``, and that view."""
    started = time.monotonic()
    while True:
        view = node_view(cluster, node)
        if view[0].startswith(wanted):
            return time.monotonic() - started, view
        assert time.monotonic() - started < within_s, f"{node} not {wanted} after {within_s:.0f} s: {view}"
        time.sleep(1)


def test_slurm_runs_the_check_on_every_compute_node(cluster: Cluster) -> None:
    conf = cluster.on(HEAD, "grep ^HealthCheck /etc/slurm/slurm.conf").stdout.split()
    assert conf == [
        f"HealthCheckInterval={interval(cluster)}",
        "HealthCheckNodeState=ANY",
        f"HealthCheckProgram={PROGRAM}",
    ]
    for node in (GPU1, GPU2):
        report = json.loads(cluster.on(node, f"sudo {PROGRAM} --json").stdout)
        assert report["healthy"], report
        assert {check["name"] for check in report["checks"]} == {"gpus", "disk /", "disk /tmp", "munge", "slurmd"}
        # Fast: Slurm runs it on every node every interval.
        assert report["seconds"] < 5, report
    # Not on the head node, which runs no slurmd.
    assert cluster.on(HEAD, f"test -e {PROGRAM}", check=False).exit_status == 1


def test_a_missing_gpu_drains_the_node_and_its_repair_resumes_it(cluster: Cluster) -> None:
    # A job runs on the node the whole time: a drain lets it finish.
    job = cluster.on(HEAD, f"sbatch --parsable --nodelist={GPU1} --time=5 --wrap='sleep 300'").stdout.strip()
    try:
        wait_for(cluster, GPU1, "mixed", 30)
        cluster.on(GPU1, "sudo mv /dev/nvidia1 /var/tmp/nvidia1.away")
        try:
            took, (_state, reason) = wait_for(cluster, GPU1, "draining", interval(cluster) + SLACK_S)
            print(f"\ndrained {took:.0f} s after the fault (interval {interval(cluster)} s)")
            assert reason == f"{PREFIX} 1 of 2 GPU device nodes present"
            job_state = cluster.on(HEAD, f"squeue --noheader --jobs={job} --format=%T").stdout.strip()
            assert job_state == "RUNNING"
        finally:
            cluster.on(GPU1, "sudo mv /var/tmp/nvidia1.away /dev/nvidia1")
        took, (_state, reason) = wait_for(cluster, GPU1, "mixed", interval(cluster) + SLACK_S)
        print(f"resumed {took:.0f} s after the repair")
        assert reason == "none"
        assert cluster.on(HEAD, f"squeue --noheader --jobs={job} --format=%T").stdout.strip() == "RUNNING"
    finally:
        cluster.on(HEAD, f"scancel {job}")
    wait_for(cluster, GPU1, "idle", 60)


def test_low_disk_space_drains_and_an_admins_drain_is_left_alone(cluster: Cluster) -> None:
    size = cluster.on(GPU2, "findmnt --noheadings --output SIZE --bytes /tmp").stdout.strip()
    cluster.on(HEAD, f"sudo scontrol update NodeName={GPU2} State=DRAIN Reason='disk swap on Friday'")
    try:
        # /tmp is a tmpfs on the sandbox's nodes: shrinking it leaves less than the 1024 MB floor.
        cluster.on(GPU2, "sudo mount -o remount,size=900M /tmp")
        time.sleep(interval(cluster) + SLACK_S)
        assert node_view(cluster, GPU2) == ("drained", "disk swap on Friday")
        # The admin resumes it while the fault is still there: the health check drains it for the fault.
        cluster.on(HEAD, f"sudo scontrol update NodeName={GPU2} State=RESUME")
        took, (_state, reason) = wait_for(cluster, GPU2, "drained", interval(cluster) + SLACK_S)
        assert reason.startswith(f"{PREFIX} /tmp ") and reason.endswith("MB free, needs 1024 MB"), reason
        print(f"\ndrained {took:.0f} s after the admin's resume")
    finally:
        cluster.on(GPU2, f"sudo mount -o remount,size={size} /tmp")
        cluster.on(HEAD, f"sudo scontrol update NodeName={GPU2} State=RESUME", check=False)
    wait_for(cluster, GPU2, "idle", interval(cluster) + SLACK_S)


def test_a_stopped_munge_is_reported(cluster: Cluster) -> None:
    # Without munged, scontrol cannot reach slurmctld: no drain is possible
    # from the node (Slurm marks it not responding itself), but the report names it.
    cluster.on(GPU2, "sudo systemctl stop munge")
    try:
        done = cluster.on(GPU2, f"sudo {PROGRAM} --report", check=False)
        assert done.exit_status == 1
        assert "FAIL munge" in done.stdout and "munge -n failed" in done.stdout, done.stdout
    finally:
        cluster.on(GPU2, "sudo systemctl start munge")
    assert cluster.on(GPU2, f"sudo {PROGRAM} --report").exit_status == 0
