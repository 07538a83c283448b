"""The containers phase for real: Enroot and Pyxis deployed by gpuclus, container jobs through Slurm.

The shared sandbox cluster (conftest.deployed) is brought up with the release
sources in the artifacts directory (cluster_helpers.ARTIFACTS_DIR), so its
deploy built Enroot once and Pyxis on each node against the node's Slurm.
The jobs run the sandbox's test image, a squashfs on each compute node's
local disk (`gpuclus sandbox up` puts it there; its os-release says
ID=gpuclus-test, which no node's own does), as the admin user, through
srun and sbatch with --container-image and --container-mounts.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from cluster_helpers import GPU1, GPU2, HEAD, NEEDS_ARTIFACTS, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
    NEEDS_ARTIFACTS,
]

IMAGE = "/var/lib/gpuclus-sandbox/images/test.sqsh"
MOUNT_SOURCE = "/srv/gpuclus-container-test"
MOUNT_TARGET = "/mnt/from-the-node"
COMPUTE = (GPU1, GPU2)


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


@pytest.fixture
def mounted_dirs(cluster: Cluster) -> dict[str, str]:
    """A directory on each compute node holding a file that names the node."""
    markers = {}
    for node in COMPUTE:
        marker = f"seen-on-{node}"
        cluster.on(node, f"sudo mkdir -p {MOUNT_SOURCE} && echo {marker} | sudo tee {MOUNT_SOURCE}/marker >/dev/null")
        markers[node] = marker
    return markers


def admin_uid(cluster: Cluster) -> str:
    return cluster.on(HEAD, "id -u").stdout.strip()


def test_the_deploy_ran_the_containers_phase_and_the_second_changed_nothing(cluster: Cluster) -> None:
    assert "containers" in [phase["name"] for phase in cluster.first["phases"]]
    assert "containers" in [phase["name"] for phase in cluster.second["phases"]]
    changed = {host: stats["changed"] for host, stats in cluster.second["hosts"].items() if stats["changed"]}
    assert changed == {}


def test_enroot_was_built_once_and_kept_on_the_control_machine(cluster: Cluster) -> None:
    kept = sorted((cluster.spec.parent / ".gpuclus" / "cache" / "enroot").glob("enroot-*-staged.tar.gz"))
    assert len(kept) == 1, kept
    for node in (HEAD, *COMPUTE):
        assert cluster.on(node, "enroot version").stdout.strip() == "4.1.2"
    # Only one node built it: the source tarball was copied there alone, the build everywhere.
    cache = "/var/cache/gpuclus/enroot"
    built_on = [
        node
        for node in (HEAD, *COMPUTE)
        if cluster.on(node, f"test -e {cache}/enroot-4.1.2-src.tar.gz", check=False).exit_status == 0
    ]
    assert len(built_on) == 1, built_on
    for node in (HEAD, *COMPUTE):
        cluster.on(node, f"test -e {cache}/{kept[0].name}")


def test_pyxis_is_loaded_by_srun_and_slurmd(cluster: Cluster) -> None:
    assert "--container-image" in cluster.on(HEAD, "srun --help").stdout
    for node in COMPUTE:
        record = json.loads(cluster.on(node, "cat /var/lib/gpuclus/pyxis.json").stdout)
        installed = cluster.on(node, f"dpkg-query -W -f '${{Version}}' {record['slurm_package']}").stdout
        assert record["pyxis_version"] == "0.24.0"
        assert record["slurm_version"] == installed, (record, installed)


def test_srun_runs_the_image_on_both_compute_nodes(cluster: Cluster, mounted_dirs: dict[str, str]) -> None:
    out = cluster.on(
        HEAD,
        f"srun --nodes=2 --ntasks-per-node=1 --container-image={IMAGE} "
        f"--container-mounts={MOUNT_SOURCE}:{MOUNT_TARGET}:ro "
        f"sh -c 'echo $SLURMD_NODENAME $(grep ^ID= /etc/os-release) $(cat {MOUNT_TARGET}/marker) $(id -u)'",
        timeout=300,
    ).stdout
    uid = admin_uid(cluster)
    lines = sorted(line.split() for line in out.strip().splitlines())
    assert lines == [[node, "ID=gpuclus-test", mounted_dirs[node], uid] for node in COMPUTE], out


def test_sbatch_runs_its_script_in_the_image(cluster: Cluster, mounted_dirs: dict[str, str]) -> None:
    uid = admin_uid(cluster)
    for node in COMPUTE:
        output = f"/var/tmp/gpuclus-container-test-{node}.out"
        cluster.on(node, f"rm -f {output}")
        submitted = cluster.on(
            HEAD,
            f"sbatch --wait --parsable --nodelist={node} --container-image={IMAGE} "
            f"--container-mounts={MOUNT_SOURCE}:{MOUNT_TARGET} --output={output} "
            f"--wrap='grep ^ID= /etc/os-release; cat {MOUNT_TARGET}/marker; id -u'",
            timeout=300,
        )
        assert re.fullmatch(r"\d+", submitted.stdout.strip()), submitted.stdout
        seen = cluster.on(node, f"cat {output}").stdout.split()
        assert seen == ["ID=gpuclus-test", mounted_dirs[node], uid], (node, seen)


def test_validate_runs_the_containers_check_and_it_passes(cluster: Cluster) -> None:
    result = gpuclus("validate", str(cluster.spec), "--only", "containers.pyxis", "--json", timeout=600)
    report = json.loads(result.stdout)
    [check] = report["checks"]
    assert (result.returncode, check["status"]) == (0, "pass"), report
    assert {node["node"]: node["status"] for node in check["nodes"]} == {GPU1: "pass", GPU2: "pass"}
    # The probe's own proof: its user namespace is not the one of the slurmstepd that started it.
    assert all("/bin/sh ran in the container (user namespace map " in node["message"] for node in check["nodes"])
