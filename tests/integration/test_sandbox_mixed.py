"""A mixed sandbox on the real engine (issue 18, item 1): a Debian 13 head, Debian 12 compute nodes.

Each node boots its own release's image (both are cached by the cluster tests
that ran before: .ci/run's lanes A and B). The pair cannot form one Slurm
cluster, and gpuclus says so before it touches a node: `sandbox up` notes it,
and preflight fails the compute node with both releases (its Slurm 22.05 is
four major releases behind the head's 24.11, which talks to three). The
OS-level base phase, which needs no common Slurm, deploys on both releases.

Needs root (privileged containers), like tests/integration/test_sandbox.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CLUSTER = "itmix"
HEAD, GPU1 = f"{CLUSTER}-head", f"{CLUSTER}-gpu01"
GPUCLUS = [sys.executable, "-m", "gpuclus"]
# Its own subnet: .ci/run starts other sandboxes beside it, and two `up`s picking the first free /24 at once
# would pick the same one.
SUBNET = "10.213.230.0/24"


def gpuclus(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUCLUS, *args], capture_output=True, text=True, timeout=timeout, check=False)


def test_a_mixed_sandbox_boots_each_release_and_preflight_names_the_slurm_that_cannot_join(tmp_path: Path) -> None:
    spec = tmp_path / "sandbox.yaml"
    up = gpuclus(
        "sandbox", "up", "--name", CLUSTER, "--nodes", "2", "--os", "debian13", "--compute-os", "debian12",
        "--subnet", SUBNET, "--json", "--spec", str(spec),
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
        started = json.loads(up.stdout)
        assert {node["name"]: node["os"] for node in started["nodes"]} == {HEAD: "debian13", GPU1: "debian12"}
        assert [note for note in started["notes"] if "cannot join its Slurm" in note], started["notes"]
        for node, codename in ((HEAD, "trixie"), (GPU1, "bookworm")):
            release = gpuclus("sandbox", "ssh", node, "--spec", str(spec), "--", "cat", "/etc/os-release")
            assert release.returncode == 0, release.stderr
            assert f"VERSION_CODENAME={codename}" in release.stdout.splitlines(), release.stdout

        checked = gpuclus("preflight", str(spec), "--json")
        assert checked.returncode == 1, checked.stdout[-3000:] + checked.stderr[-2000:]
        verdicts = {
            node["node"]: {check["name"]: (check["status"], check["message"]) for check in node["checks"]}
            for node in json.loads(checked.stdout)["nodes"]
        }
        assert verdicts[HEAD]["slurm-release"] == ("ok", "Slurm 24.11 (the controller)")
        status, message = verdicts[GPU1]["slurm-release"]
        assert status == "fail" and message.startswith("debian 12: its Slurm 22.05 is 4 major releases behind"), message
        # Nothing else is wrong with either node: the Slurm releases are the whole refusal.
        failing = {(node, name) for node, checks in verdicts.items() for name, (s, _) in checks.items() if s == "fail"}
        assert failing == {(GPU1, "slurm-release")}, verdicts

        base = gpuclus("deploy", str(spec), "--only", "base", "--no-preflight", "--json", timeout=1200)
        assert base.returncode == 0, base.stdout[-3000:] + base.stderr[-2000:]
        report = json.loads(base.stdout)
        assert [phase["name"] for phase in report["phases"]] == ["base"]
        for node in (HEAD, GPU1):
            assert report["hosts"][node]["failures"] == 0 and report["hosts"][node]["ok"] > 0, report["hosts"]
    finally:
        down = gpuclus("sandbox", "down", "--spec", str(spec))
        assert down.returncode == 0, down.stderr
