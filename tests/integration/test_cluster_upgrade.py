"""A rolling upgrade for real: Pyxis' pinned version changes in the spec and `gpuclus deploy` rolls it out.

The sandbox has one Slurm and one Pyxis release, so the "new" Pyxis is the
0.24.0 source repacked as 0.24.1 (another version in the spec, another
tarball, another sha256): the pyxis role rebuilds the plugin for it like for
a real release. The spec copy sits beside the cluster's spec and shares its
.gpuclus/, so the last deploy's render is what the change is measured
against. While it rolls, a thread samples `sinfo` on the head: never more
than --max-unavailable compute nodes may be out of service, and a job that
runs on gpu02 must end normally before gpu02 is upgraded (it ends once gpu02
is seen draining).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import threading
import time
from pathlib import Path

import pytest
from cluster_helpers import ARTIFACTS_DIR, GPU1, GPU2, HEAD, NEEDS_ARTIFACTS, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
    NEEDS_ARTIFACTS,
]

IMAGE = "/var/lib/gpuclus-sandbox/images/test.sqsh"
COMPUTE = (GPU1, GPU2)
# The file that lets the job on gpu02 end.
GO = "/var/tmp/gpuclus-upgrade-test-go"
# Slurm's short states of a node that takes no user job.
OUT_OF_SERVICE = re.compile(r"drain|drng|drained|draining|maint|resv|reserved|down|fail")


def _newer_pyxis(tmp_path: Path) -> Path:
    """An artifacts directory with Enroot's source and Pyxis 0.24.0's repacked as 0.24.1."""
    assert ARTIFACTS_DIR is not None
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    shutil.copy2(ARTIFACTS_DIR / "enroot-4.1.2-src.tar.gz", artifacts)
    with (
        tarfile.open(ARTIFACTS_DIR / "pyxis-0.24.0-src.tar.gz") as source,
        tarfile.open(artifacts / "pyxis-0.24.1-src.tar.gz", "w:gz") as target,
    ):
        for member in source.getmembers():
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
        note = tmp_path / "REPACKED"
        note.write_text("repacked as 0.24.1 by gpuclus' integration test\n")
        target.add(note, arcname=f"{source.getmembers()[0].name.split('/')[0]}/REPACKED")
    return artifacts


class Sampler(threading.Thread):
    """`sinfo` on the head once a second: which compute nodes are out of service at each moment.

    Once gpu02 is out of service (draining: its job still runs) it lets that job end.
    """

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop = threading.Event()
        self.samples: list[set[str]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            shown = self.cluster.on(HEAD, "sinfo --noheader --Node --format='%N %t'", check=False).stdout
            out = {line.split()[0] for line in shown.splitlines() if OUT_OF_SERVICE.search(line.split()[-1])}
            self.samples.append(out & set(COMPUTE))
            if GPU2 in out:
                self.cluster.on(GPU2, f"touch {GO}", check=False)
            time.sleep(1)


def _batches(spec_text: str, *, one_at_a_time: bool) -> list[list[str]]:
    """The rollout's batches: slurmctld's nodes first (the sandbox's backup controller is gpu01), then the rest."""
    if "backup_controller" in spec_text:
        return [[HEAD, GPU1], [GPU2]]
    return [[HEAD], [GPU1], [GPU2]] if one_at_a_time else [[HEAD], [GPU1, GPU2]]


def _pyxis_versions(cluster: Cluster) -> dict[str, str]:
    return {
        node: json.loads(cluster.on(node, "cat /var/lib/gpuclus/pyxis.json").stdout)["pyxis_version"]
        for node in (HEAD, *COMPUTE)
    }


def test_a_new_pyxis_rolls_out_node_by_node_and_a_running_job_survives(deployed: Cluster, tmp_path: Path) -> None:
    cluster = deployed
    assert _pyxis_versions(cluster) == dict.fromkeys((HEAD, *COMPUTE), "0.24.0")
    text = cluster.spec.read_text()
    spec = cluster.spec.with_name("sandbox-pyxis-0.24.1.yaml")
    newer = re.sub(r"artifacts_dir: .*", f"artifacts_dir: {_newer_pyxis(tmp_path)}", text)
    spec.write_text(newer.replace("containers:\n", 'containers:\n  pyxis_version: "0.24.1"\n', 1))
    # The job on gpu02 runs until gpu02 is being drained (the sampler then lets it end), so the
    # upgrade must wait for it whatever the speed of the machine.
    cluster.on(GPU2, f"rm -f {GO}")
    job = cluster.on(
        HEAD, f"sbatch --parsable --nodelist={GPU2} --time=5 --wrap='until test -e {GO}; do sleep 1; done'"
    ).stdout.strip()
    sampler = Sampler(cluster)
    sampler.start()
    try:
        started = time.monotonic()
        rolled = gpuclus("deploy", str(spec), "--only", "containers", "--json")
        seconds = time.monotonic() - started
        sampler.stop.set()
        sampler.join()
        assert rolled.returncode == 0, rolled.stdout[-3000:] + rolled.stderr[-3000:]
        upgrade = json.loads(rolled.stdout)["upgrade"]
        print(f"rolling upgrade of Pyxis on 3 nodes, one compute node at a time: {seconds:.0f} s")
        assert [change["what"] for change in upgrade["changes"]] == ["Pyxis"]
        assert [(c["before"], c["after"]) for c in upgrade["changes"]] == [("0.24.0", "0.24.1")]
        # The head first (no slurmd there) with the backup controller when gpu01 is one, then one
        # compute node at a time.
        assert [batch["nodes"] for batch in upgrade["batches"]] == _batches(text, one_at_a_time=True)
        assert all(batch["problems"] == {} for batch in upgrade["batches"])
        # gpu02 waited for its job, which ended normally; never both compute nodes out at once.
        assert upgrade["batches"][-1]["nodes"] == [GPU2] and upgrade["batches"][-1]["waited_s"] > 0
        state = cluster.on(HEAD, f"sacct --noheader --parsable2 --jobs={job} --format=State -X").stdout.strip()
        assert state == "COMPLETED", state
        assert sampler.samples and max(len(sample) for sample in sampler.samples) <= 1, sampler.samples
        assert any(sample == {GPU1} for sample in sampler.samples) and any(s == {GPU2} for s in sampler.samples)
        assert _pyxis_versions(cluster) == dict.fromkeys((HEAD, *COMPUTE), "0.24.1")
        # Back in service, no reservation left, and the plugin works.
        assert cluster.on(HEAD, "scontrol show reservation").stdout.strip().startswith("No reservations")
        cluster.on(HEAD, f"srun --nodes=2 --container-image={IMAGE} grep -q ^ID=gpuclus-test /etc/os-release")

        # Upgraded now: the same spec again would be an ordinary deploy (the plan names no upgrade).
        planned = gpuclus("plan", str(spec), "--local", "--json")
        assert planned.returncode == 0 and "upgrade" not in json.loads(planned.stdout), planned.stdout[-2000:]
    finally:
        sampler.stop.set()
        # Back to the cluster's own Pyxis, both compute nodes at once, so later tests see it as deployed.
        back = gpuclus("deploy", str(cluster.spec), "--only", "containers", "--max-unavailable", "2", "--json")
        spec.unlink(missing_ok=True)
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert [batch["nodes"] for batch in json.loads(back.stdout)["upgrade"]["batches"]] == _batches(
        text, one_at_a_time=False
    )
    assert _pyxis_versions(cluster) == dict.fromkeys((HEAD, *COMPUTE), "0.24.0")
