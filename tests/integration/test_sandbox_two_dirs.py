"""Two directories, one sandbox name, on the real engine (issue 12, item 4; issue 18, item 4).

`sandbox up` from a second directory with the same --name is refused, and
nothing run from there without --name — status, ssh, down — shows, reaches or
removes the first directory's nodes, network or volume. `sandbox list` shows
the sandbox from anywhere, and `sandbox down --name` removes it from anywhere.
One node, and the cached node image: cheap after any other sandbox test has
built the image.

Needs root (privileged containers), like tests/integration/test_sandbox.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CLUSTER = "itown"
HEAD = f"{CLUSTER}-head"
NETWORK = f"gpuclus-{CLUSTER}"
VOLUME = f"gpuclus-{CLUSTER}-nfs"
MARKER = "/srv/nfs/two-dirs-marker"
GPUCLUS = [sys.executable, "-m", "gpuclus"]


def gpuclus(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUCLUS, *args], capture_output=True, text=True, timeout=timeout, check=False)


def podman(*args: str, check: bool = True) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=120).stdout


def labels(kind: str, name: str) -> dict[str, str]:
    """A container's, network's or volume's labels, as the engine reports them."""
    argv = {"container": ["container", "inspect"], "network": ["network", "inspect"], "volume": ["volume", "inspect"]}
    (item,) = json.loads(podman(*argv[kind], name))
    found: Any = (item.get("Config") or {}).get("Labels") if kind == "container" else None
    found = found or item.get("Labels") or item.get("labels") or {}
    assert isinstance(found, dict)
    return found


def first_sandbox() -> dict[str, Any]:
    """What must not change while the second directory tries: container id and start time, network, volume."""
    container = json.loads(podman("container", "inspect", HEAD))[0]
    return {
        "id": container["Id"],
        "started": container["State"]["StartedAt"],
        "running": container["State"]["Running"],
        "network": json.loads(podman("network", "inspect", NETWORK))[0].get("id"),
        "volume": json.loads(podman("volume", "inspect", VOLUME))[0]["Name"],
        "marker": podman("exec", HEAD, "cat", MARKER),
    }


def test_a_second_directory_neither_adopts_nor_removes_the_first_sandbox(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    spec_a, spec_b = tmp_path / "a" / "sandbox.yaml", tmp_path / "b" / "sandbox.yaml"
    dir_a = str(spec_a.resolve().parent)
    up_a = gpuclus("sandbox", "up", "--name", CLUSTER, "--nodes", "1", "--spec", str(spec_a), "--json")
    try:
        assert up_a.returncode == 0, up_a.stdout + up_a.stderr
        # Everything up made names A's state directory, on all three kinds of resource.
        for kind, name in (("container", HEAD), ("network", NETWORK), ("volume", VOLUME)):
            assert labels(kind, name).get("gpuclus.sandbox") == CLUSTER, (kind, labels(kind, name))
            assert labels(kind, name).get("gpuclus.sandbox.owner") == f"{dir_a}/.gpuclus", (kind, labels(kind, name))
        podman("exec", HEAD, "sh", "-c", f"echo kept > {MARKER}")
        before = first_sandbox()

        # up from B: refused with A's directory, and B keeps no record of the name.
        refused = gpuclus("sandbox", "up", "--name", CLUSTER, "--nodes", "1", "--spec", str(spec_b))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"a sandbox named '{CLUSTER}' runs from {dir_a}" in refused.stderr
        assert "use --name" in refused.stderr
        assert not (spec_b.parent / ".gpuclus" / "sandbox.json").exists()

        # status from B: nothing of A's.
        status_b = gpuclus("sandbox", "status", "--spec", str(spec_b), "--json")
        assert status_b.returncode == 1
        assert json.loads(status_b.stdout)["nodes"] == []

        # list from B shows A's sandbox, its OS and directory.
        listed = gpuclus("sandbox", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (entry,) = [s for s in json.loads(listed.stdout)["sandboxes"] if s["name"] == CLUSTER]
        assert (entry["directory"], entry["oses"], entry["nodes"], entry["state"]) == (
            dir_a,
            ["debian12"],
            [HEAD],
            "running",
        )

        # A copy of A's directory (spec, .gpuclus/ and all) is still not A.
        shutil.copytree(spec_a.parent / ".gpuclus", spec_b.parent / ".gpuclus")
        shutil.copy(spec_a, spec_b)
        copied_status = gpuclus("sandbox", "status", "--spec", str(spec_b), "--json")
        assert copied_status.returncode == 1
        assert {node["state"] for node in json.loads(copied_status.stdout)["nodes"]} == {"missing"}
        copied_ssh = gpuclus("sandbox", "ssh", HEAD, "--spec", str(spec_b), "--", "true", timeout=120)
        assert copied_ssh.returncode == 2, copied_ssh.stdout + copied_ssh.stderr
        assert dir_a in copied_ssh.stderr
        copied_down = gpuclus("sandbox", "down", "--spec", str(spec_b), "--json")
        assert copied_down.returncode == 0, copied_down.stderr
        assert json.loads(copied_down.stdout)["removed_nodes"] == []

        # A's node was neither recreated nor restarted; its network, volume and the volume's data are there.
        assert first_sandbox() == before
        assert before["running"] is True
        status_a = gpuclus("sandbox", "status", "--spec", str(spec_a), "--json")
        assert status_a.returncode == 0, status_a.stdout + status_a.stderr
        assert [(n["name"], n["ssh"]) for n in json.loads(status_a.stdout)["nodes"]] == [(HEAD, True)]

        # down --name from B (the hint the refusal gives): A's sandbox and A's record of it go.
        down_b = gpuclus("sandbox", "down", "--name", CLUSTER, "--spec", str(spec_b), "--json")
        assert down_b.returncode == 0, down_b.stderr
        summary = json.loads(down_b.stdout)
        assert (summary["removed_nodes"], summary["removed_network"], summary["removed_volumes"]) == (
            [HEAD],
            True,
            [VOLUME],
        )
        assert summary["removed_from"] == [dir_a]
        assert not (spec_a.parent / ".gpuclus" / "sandbox.json").exists()
    finally:
        down_a = gpuclus("sandbox", "down", "--name", CLUSTER, "--spec", str(spec_a), "--json")
    assert down_a.returncode == 0, down_a.stderr
    assert json.loads(down_a.stdout)["removed_nodes"] == []
    assert podman("ps", "--all", "--filter", f"label=gpuclus.sandbox={CLUSTER}", "--format", "{{.Names}}") == ""
    assert NETWORK not in podman("network", "ls", "--format", "{{.Name}}").split()
    assert podman("volume", "ls", "--filter", f"label=gpuclus.sandbox={CLUSTER}", "--format", "{{.Name}}") == ""
