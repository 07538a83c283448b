"""The sandbox for real: podman containers with systemd and sshd, reached over SSH.

Needs root (privileged containers). `gpuclus sandbox up` installs podman,
runc and debootstrap itself when they are missing, as it does for users.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import default_signals

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.spec.load import load_spec
from gpuclus.ssh.client import SshTarget, connect, run
from gpuclus.state import StateDir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CLUSTER = "itest"
GPUCLUS = [sys.executable, "-m", "gpuclus"]


def gpuclus(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUCLUS, *args], capture_output=True, text=True, timeout=timeout, check=False)


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=True, timeout=120).stdout


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    spec = tmp_path_factory.mktemp("sandbox") / "sandbox.yaml"
    started = time.monotonic()
    result = gpuclus(
        "sandbox",
        "up",
        "--name",
        CLUSTER,
        "--nodes",
        "3",
        "--gpus-per-node",
        "2",
        "--spec",
        str(spec),
        "--json",
    )
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        print(f"sandbox up: {time.monotonic() - started:.1f} s (image built: {report['image_built']})")
        yield spec, report
    finally:
        gpuclus("sandbox", "down", "--spec", str(spec))


def ssh_target(spec: Path, address: str) -> SshTarget:
    state = StateDir.beside(spec)
    return SshTarget(address, ADMIN_USER, state.private_key, state.known_hosts)


def on_node(spec: Path, address: str, command: str) -> str:
    client = connect(ssh_target(spec, address))
    try:
        result = run(client, command)
    finally:
        client.close()
    assert result.exit_status == 0, f"{command!r} on {address}: {result.stderr}"
    return result.stdout


def test_up_reports_three_reachable_nodes(sandbox: tuple[Path, dict[str, Any]]) -> None:
    _, report = sandbox
    assert report["ok"] is True
    names = [node["name"] for node in report["nodes"]]
    assert names == [f"{CLUSTER}-head", f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02"]
    assert all(node["ssh"] is True and node["state"] == "running" for node in report["nodes"])


def test_written_spec_is_valid_and_marks_gpus_fake(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    loaded = load_spec(spec)
    assert loaded.ok, loaded.findings
    assert loaded.topology is not None
    nodes = {node.name: node for node in loaded.topology.nodes}
    assert [(n["name"], n["address"]) for n in report["nodes"]] == [(n.name, n.address) for n in nodes.values()]
    gpu_nodes = loaded.topology.gpu_nodes
    assert [node.name for node in gpu_nodes] == [f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02"]
    assert all(node.gpus is not None and node.gpus.fake and node.gpus.count == 2 for node in gpu_nodes)


def test_paramiko_logs_in_with_gpuclus_key_and_sudo_works(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    for node in report["nodes"]:
        assert on_node(spec, node["address"], "hostname").strip() == node["name"]
        assert on_node(spec, node["address"], "sudo -n id -u").strip() == "0"


def test_a_wrong_host_key_is_refused(sandbox: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    spec, _ = sandbox
    state = StateDir.beside(spec)
    forged = tmp_path / "known_hosts"
    # Another node's key for this address: what a man in the middle would present.
    lines = state.known_hosts.read_text().splitlines()
    first, second = lines[0].split(), lines[1].split()
    forged.write_text(f"{first[0]} {second[1]} {second[2]}\n")
    target = SshTarget(first[0], ADMIN_USER, state.private_key, forged)
    from gpuclus.ssh.client import SshFailure

    with pytest.raises(SshFailure, match="host key"):
        connect(target).close()


def test_nodes_resolve_each_other_by_name(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    for node in report["nodes"]:
        for other in report["nodes"]:
            line = on_node(spec, node["address"], f"getent hosts {other['name']}").split()
            assert line[0] == other["address"], f"{node['name']} resolves {other['name']} to {line}"


def test_fake_gpus_are_character_devices_on_compute_nodes_only(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    listing = 'for d in /dev/nvidia*; do [ -e "$d" ] && stat -c \'%n %F %t:%T\' "$d"; done; true'
    for node in report["nodes"]:
        devices = sorted(on_node(spec, node["address"], listing).splitlines())
        if node["role"] == "compute":
            assert devices == [
                "/dev/nvidia0 character special file c3:0",
                "/dev/nvidia1 character special file c3:1",
            ]
        else:
            assert devices == []


def test_second_up_is_a_no_op(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, first = sandbox
    result = gpuclus(
        "sandbox",
        "up",
        "--name",
        CLUSTER,
        "--nodes",
        "3",
        "--gpus-per-node",
        "2",
        "--spec",
        str(spec),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["changed"] is False
    assert report["image_built"] is False
    assert report["image"] == first["image"]
    print(f"second sandbox up: {report['seconds']} s")


def test_a_different_shape_is_refused_while_up(sandbox: tuple[Path, dict[str, Any]]) -> None:
    # Only the number of compute nodes may change while up (tests/integration/test_cluster_nodes.py
    # grows and shrinks one); other GPUs per node, or going to a single node, need `down` first.
    spec, _ = sandbox
    before = spec.read_text()
    for shape in (("--nodes", "3", "--gpus-per-node", "4"), ("--nodes", "1", "--gpus-per-node", "2")):
        result = gpuclus("sandbox", "up", "--name", CLUSTER, *shape, "--spec", str(spec))
        assert result.returncode == 1, shape
        assert "already up with 3 nodes, 2 GPUs each" in result.stderr, result.stderr
        assert "gpuclus sandbox down" in result.stderr
    assert spec.read_text() == before
    names = podman("ps", "-a", "--filter", f"name=^{CLUSTER}-", "--format", "{{.Names}}").split()
    assert sorted(names) == [f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02", f"{CLUSTER}-head"]


def test_up_restarts_a_stopped_node_with_its_gpus(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    podman("stop", "--time", "5", f"{CLUSTER}-gpu02")
    status = gpuclus("sandbox", "status", "--spec", str(spec), "--json")
    assert status.returncode == 1
    states = {node["name"]: node["state"] for node in json.loads(status.stdout)["nodes"]}
    assert states[f"{CLUSTER}-gpu02"] == "exited"
    again = gpuclus("sandbox", "up", "--name", CLUSTER, "--nodes", "3", "--gpus-per-node", "2", "--spec", str(spec))
    assert again.returncode == 0, again.stderr
    assert gpuclus("sandbox", "status", "--spec", str(spec)).returncode == 0
    address = report["nodes"][2]["address"]
    assert on_node(spec, address, "ls /dev/nvidia0 /dev/nvidia1").split() == ["/dev/nvidia0", "/dev/nvidia1"]


def test_down_removes_nodes_network_volume_and_host_keys(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    result = gpuclus("sandbox", "down", "--spec", str(spec), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["removed_nodes"] == sorted(node["name"] for node in report["nodes"])
    assert summary["removed_network"] is True
    assert podman("ps", "--all", "--filter", f"label=gpuclus.sandbox={CLUSTER}", "--format", "{{.Names}}") == ""
    assert f"gpuclus-{CLUSTER}" not in podman("network", "ls", "--format", "{{.Name}}").split()
    assert podman("volume", "ls", "--filter", f"label=gpuclus.sandbox={CLUSTER}", "--format", "{{.Name}}") == ""
    known = StateDir.beside(spec).known_hosts.read_text()
    assert all(node["address"] not in known for node in report["nodes"])
    # The image stays cached for the next up.
    assert report["image"] in podman("images", "--format", "{{.Repository}}:{{.Tag}}").split()
    again = gpuclus("sandbox", "down", "--spec", str(spec))
    assert again.returncode == 0
    assert "nothing to remove" in again.stdout


def test_interrupted_up_is_completed_or_removed_cleanly(tmp_path: Path) -> None:
    spec = tmp_path / "sandbox.yaml"
    cluster = "itint"
    # A directory that held a sandbox before keeps its known_hosts file (down
    # only drops the nodes' lines): a node the interrupted up started but never
    # set up must still be set up by the next up.
    state = StateDir.beside(spec)
    state.private_dir(state.ssh_dir)
    state.known_hosts.write_text("192.0.2.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHN0YWxlIGtleSBvZiBhbm90aGVyIGhvc3Q=\n")
    process = subprocess.Popen(
        [*GPUCLUS, "sandbox", "up", "--name", cluster, "--nodes", "2", "--spec", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:
            seen.append(line)
            if "starting node" in line:
                break
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
        # 130 from gpuclus' own handler; now and then CPython ends on the signal
        # itself (-2), which a shell reports as 130 too. Either way: stopped by Ctrl-C.
        assert process.returncode in (130, -signal.SIGINT), "".join(seen) + process.stderr.read()
        # The next up finishes what was started...
        finished = gpuclus("sandbox", "up", "--name", cluster, "--nodes", "2", "--spec", str(spec))
        assert finished.returncode == 0, finished.stderr
        assert gpuclus("sandbox", "status", "--spec", str(spec)).returncode == 0
    finally:
        process.kill()
        down = gpuclus("sandbox", "down", "--spec", str(spec), "--name", cluster)
    assert down.returncode == 0, down.stderr
    assert podman("ps", "--all", "--filter", f"label=gpuclus.sandbox={cluster}", "--format", "{{.Names}}") == ""
