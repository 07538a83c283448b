"""The sandbox on docker: the same nodes with the other engine.

When no docker daemon answers, the fixture installs Debian's docker.io and
starts dockerd by hand (the CI host has none running), with iptables left
alone so the host's other networking (and podman's) is not changed; it stops
the daemon it started afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.ssh.client import SshTarget, connect, run
from gpuclus.state import StateDir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CLUSTER = "itdock"
GPUCLUS = [sys.executable, "-m", "gpuclus"]


def gpuclus(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUCLUS, *args], capture_output=True, text=True, timeout=timeout, check=False)


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if docker_answers():
        yield
        return
    if shutil.which("dockerd") is None:
        if shutil.which("apt-get") is None:
            pytest.skip("no docker daemon and no apt-get to install docker.io")
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=environment, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io"],
            check=True,
            env=environment,
            capture_output=True,
        )
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with log.open("w") as stream:
        daemon = subprocess.Popen(
            ["dockerd", "--iptables=false", "--ip-masq=false"], stdout=stream, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not docker_answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not start:\n{log.read_text()[-2000:]}")
            time.sleep(1)
        yield
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


@pytest.fixture(scope="module")
def sandbox(docker_daemon: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    spec = tmp_path_factory.mktemp("docker-sandbox") / "sandbox.yaml"
    up = [
        "sandbox",
        "up",
        "--engine",
        "docker",
        "--name",
        CLUSTER,
        "--nodes",
        "2",
        "--spec",
        str(spec),
        "--json",
    ]
    result = gpuclus(*up)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        yield spec, json.loads(result.stdout)
    finally:
        gpuclus("sandbox", "down", "--spec", str(spec))


def on_node(spec: Path, address: str, command: str) -> str:
    state = StateDir.beside(spec)
    client = connect(SshTarget(address, ADMIN_USER, state.private_key, state.known_hosts))
    try:
        result = run(client, command)
    finally:
        client.close()
    assert result.exit_status == 0, f"{command!r} on {address}: {result.stderr}"
    return result.stdout


def test_docker_nodes_answer_over_ssh_with_sudo(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, report = sandbox
    assert report["engine"] == "docker"
    for node in report["nodes"]:
        assert on_node(spec, node["address"], "hostname").strip() == node["name"]
        assert on_node(spec, node["address"], "sudo -n id -u").strip() == "0"
        assert on_node(spec, node["address"], "systemctl is-system-running").strip() in {
            "running",
            "degraded",
        }


def test_host_cgroup_tree_stays_writable(sandbox: tuple[Path, dict[str, Any]]) -> None:
    # systemd in a node must never remount the host's cgroup hierarchies
    # read-only (DESIGN.md §7): the nodes get their own cgroup namespace.
    cgroup_mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines() if " cgroup" in line]
    assert cgroup_mounts, "no cgroup file systems mounted on the host?"
    read_only = [fields[1] for fields in cgroup_mounts if "ro" in fields[3].split(",")]
    assert read_only == []


def test_docker_compute_node_has_fake_gpus_and_resolves_the_head(
    sandbox: tuple[Path, dict[str, Any]],
) -> None:
    spec, report = sandbox
    head, compute = report["nodes"]
    devices = on_node(spec, compute["address"], "stat -c '%n %t:%T' /dev/nvidia0 /dev/nvidia1").split("\n")
    assert devices[:2] == ["/dev/nvidia0 c3:0", "/dev/nvidia1 c3:1"]
    assert on_node(spec, compute["address"], f"getent hosts {head['name']}").split()[0] == head["address"]


def test_docker_second_up_is_a_no_op_and_down_cleans_up(sandbox: tuple[Path, dict[str, Any]]) -> None:
    spec, _ = sandbox
    again = gpuclus(
        "sandbox",
        "up",
        "--engine",
        "docker",
        "--name",
        CLUSTER,
        "--nodes",
        "2",
        "--spec",
        str(spec),
        "--json",
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changed"] is False
    down = gpuclus("sandbox", "down", "--spec", str(spec), "--json")
    assert down.returncode == 0, down.stderr
    assert len(json.loads(down.stdout)["removed_nodes"]) == 2
    left = subprocess.run(
        ["docker", "ps", "--all", "--filter", f"label=gpuclus.sandbox={CLUSTER}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert left == ""
