"""End to end: sandbox up → gpuclus deploy → deploy again (changed=0) → the cluster works.

The real roles against real systemd nodes: Slurm with accounting, munge,
GRES on fake GPUs with cgroup device isolation, SSH trust, NFS (ganesha in
the sandbox, checked with libnfs since this kernel has no NFS client) and
Prometheus. Every assertion reads real output from the nodes.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from cluster_helpers import CLUSTER, GPU1, GPU2, HEAD, PHASES, Cluster

from gpuclus.ssh.client import CommandResult

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def on(cluster: Cluster, node: str, command: str, *, check: bool = True) -> CommandResult:
    return cluster.on(node, command, check=check)


def test_first_deploy_ran_every_phase(cluster: Cluster) -> None:
    first = cluster.first
    assert [phase["name"] for phase in first["phases"]] == PHASES
    assert first["status"] == "successful"
    assert first["changed"] > 0


def test_second_deploy_changes_nothing(cluster: Cluster) -> None:
    second = cluster.second
    assert second["status"] == "successful"
    changed = {host: stats["changed"] for host, stats in second["hosts"].items() if stats["changed"]}
    assert changed == {}, f"not idempotent: {changed}"


def test_sinfo_shows_the_partition_with_both_gpu_nodes_idle(cluster: Cluster) -> None:
    out = on(cluster, HEAD, "sinfo --noheader --format='%P %a %D %t %N'").stdout.strip()
    assert out == f"gpu* up 2 idle {CLUSTER}-gpu[01-02]"


def test_srun_reaches_both_compute_nodes(cluster: Cluster) -> None:
    out = on(cluster, HEAD, "srun --nodes=2 --ntasks-per-node=1 hostname").stdout.split()
    assert sorted(out) == [GPU1, GPU2]


def test_gres_sets_cuda_visible_devices_and_cgroups_isolate_devices(cluster: Cluster) -> None:
    assert on(cluster, HEAD, "srun --gres=gpu:1 printenv CUDA_VISIBLE_DEVICES").stdout.strip() == "0"
    both = on(cluster, HEAD, "srun --gres=gpu:2 printenv CUDA_VISIBLE_DEVICES").stdout.strip()
    assert both == "0,1"
    # A job without GRES may not open a GPU; with one GPU it may not open the other.
    # (Opening the allowed one fails too, with ENXIO: there is no driver behind a fake GPU.)
    probe = "head -c0 /dev/nvidia{n} 2>&1; true"
    denied = on(cluster, HEAD, f"srun sh -c '{probe.format(n=0)}'").stdout
    assert "Operation not permitted" in denied
    other = on(cluster, HEAD, f"srun --gres=gpu:1 sh -c '{probe.format(n=1)}'").stdout
    assert "Operation not permitted" in other
    own = on(cluster, HEAD, f"srun --gres=gpu:1 sh -c '{probe.format(n=0)}'").stdout
    assert "Operation not permitted" not in own


def test_more_gpus_than_a_node_has_is_refused(cluster: Cluster) -> None:
    result = on(cluster, HEAD, "srun --gres=gpu:3 true", check=False)
    assert result.exit_status != 0
    assert "Requested node configuration is not available" in result.stderr


def test_sacct_lists_the_jobs(cluster: Cluster) -> None:
    on(cluster, HEAD, "srun --job-name=gpuclus-acct-probe true")
    deadline = time.monotonic() + 60
    while True:
        out = on(cluster, HEAD, "sacct --noheader --allusers --format=JobName%30,State --starttime=now-1hour").stdout
        if "gpuclus-acct-probe" in out and "COMPLETED" in out:
            break
        assert time.monotonic() < deadline, f"sacct never showed the job:\n{out}"
        time.sleep(2)


def test_admin_user_ssh_between_nodes_without_a_password(cluster: Cluster) -> None:
    for source in (GPU1, HEAD):
        for target in (HEAD, GPU1, GPU2):
            command = f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {target} hostname"
            assert on(cluster, source, command).stdout.strip() == target


def test_prometheus_sees_every_target_up(cluster: Cluster) -> None:
    deadline = time.monotonic() + 60
    while True:
        raw = on(cluster, HEAD, "curl -s http://127.0.0.1:9090/api/v1/targets").stdout
        targets = json.loads(raw)["data"]["activeTargets"]
        health = {(target["labels"]["job"], target["labels"]["instance"]): target["health"] for target in targets}
        # Alertmanager too: the sandbox's spec turns it on, and Prometheus scrapes it.
        expected = {("node", HEAD), ("node", GPU1), ("node", GPU2), ("prometheus", HEAD), ("alertmanager", HEAD)}
        if set(health) == expected and all(state == "up" for state in health.values()):
            break
        assert time.monotonic() < deadline, f"targets not all up: {health}"
        time.sleep(3)


def test_a_file_written_on_the_export_is_read_over_nfs_from_every_compute_node(cluster: Cluster) -> None:
    # The sandbox kernel has no NFS client, so the export is read with libnfs
    # (NFSv3, which ganesha serves even in its grace period); kernel mounts are
    # exercised on real nodes only. The clients' fstab entries are checked below.
    token = f"gpuclus-{time.time_ns()}"
    on(cluster, HEAD, f"echo {token} | sudo tee /srv/nfs/shared/probe.txt >/dev/null")
    head = cluster.addresses[HEAD]
    for node in (GPU1, GPU2):
        deadline = time.monotonic() + 90
        while True:
            result = on(cluster, node, f"nfs-cat nfs://{head}/srv/nfs/shared/probe.txt", check=False)
            if result.exit_status == 0:
                break
            assert time.monotonic() < deadline, f"{node} cannot read the export: {result.stderr}"
            time.sleep(3)
        assert result.stdout.strip() == token
    on(cluster, HEAD, "sudo rm -f /srv/nfs/shared/probe.txt")


def test_clients_have_the_nfs_mount_configured(cluster: Cluster) -> None:
    head = cluster.addresses[HEAD]
    for node in (GPU1, GPU2):
        fstab = [line.split() for line in on(cluster, node, "cat /etc/fstab").stdout.splitlines() if "nfs" in line]
        assert [fields[:3] for fields in fstab] == [[f"{head}:/srv/nfs/shared", "/shared", "nfs"]]
        assert "_netdev" in fstab[0][3]
        assert on(cluster, node, "test -d /shared && echo yes").stdout.strip() == "yes"
