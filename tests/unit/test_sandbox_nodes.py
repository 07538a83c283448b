"""What each sandbox node gets: its container, and the script that sets it up after boot."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from gpuclus.sandbox.image import FAKE_GPU_CONFIG
from gpuclus.sandbox.layout import NFS_VOLUME_MOUNT, sandbox_layout
from gpuclus.sandbox.nodes import node_containers, node_setup_script

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm8Yq9tP1n0J2k3L4m5N6o7P8q9R0s1T2u3V4w5X6y7 gpuclus@lab"


def test_containers_nfs_volume_only_on_the_controller() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    containers = node_containers(layout, "localhost/gpuclus-node:0123456789ab")
    assert [c.name for c in containers] == ["lab-head", "lab-gpu01", "lab-gpu02"]
    assert containers[0].volumes == (("gpuclus-lab-nfs", NFS_VOLUME_MOUNT),)
    assert all(c.volumes == () for c in containers[1:])
    assert [dict(c.labels)["gpuclus.role"] for c in containers] == ["controller", "compute", "compute"]
    for container, node in zip(containers, layout.nodes, strict=True):
        assert (container.address, container.network, container.cluster) == (
            node.address,
            "gpuclus-lab",
            "lab",
        )
        assert container.image == "localhost/gpuclus-node:0123456789ab"


def test_containers_single_node_gets_the_volume() -> None:
    (only,) = node_containers(sandbox_layout("solo", 1, 1, "10.213.0.0/24"), "img")
    assert only.volumes == (("gpuclus-solo-nfs", NFS_VOLUME_MOUNT),)


def test_node_setup_script_for_a_gpu_node() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    script = node_setup_script(layout, layout.nodes[1], PUBLIC_KEY)
    for node in layout.nodes:
        assert f"\n{node.address} {node.name}\n" in script
    assert "127.0.0.1 localhost" in script
    assert f"echo 2 > {FAKE_GPU_CONFIG} && /usr/local/sbin/gpuclus-fake-gpus" in script
    assert "/home/gpuclus/.ssh/authorized_keys" in script
    assert "chmod 600 /home/gpuclus/.ssh/authorized_keys" in script
    assert script.rstrip().endswith("cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub")
    assert "set -eu" in script.splitlines()[0]


def test_node_setup_script_for_a_node_without_gpus() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    script = node_setup_script(layout, layout.head, PUBLIC_KEY)
    assert f"rm -f {FAKE_GPU_CONFIG}" in script
    assert f"> {FAKE_GPU_CONFIG}" not in script
    assert "gpuclus-fake-gpus" not in script
    no_gpus = sandbox_layout("lab", 2, 0, "10.213.0.0/24")
    assert f"> {FAKE_GPU_CONFIG}" not in node_setup_script(no_gpus, no_gpus.nodes[1], PUBLIC_KEY)


def test_node_setup_script_single_node_writes_its_gpus() -> None:
    layout = sandbox_layout("solo", 1, 3, "10.213.0.0/24")
    assert f"echo 3 > {FAKE_GPU_CONFIG}" in node_setup_script(layout, layout.head, PUBLIC_KEY)


@pytest.mark.parametrize(
    "key",
    [
        PUBLIC_KEY,
        PUBLIC_KEY.replace("gpuclus@lab", "gpuclus@it's lab"),
        PUBLIC_KEY.replace("gpuclus@lab", 'gpuclus@$(touch pwned) `id` "x" \\n'),
    ],
    ids=["plain", "single-quote", "shell-metacharacters"],
)
def test_node_setup_script_quotes_the_key(tmp_path: Path, key: str) -> None:
    layout = sandbox_layout("lab", 2, 1, "10.213.0.0/24")
    script = node_setup_script(layout, layout.nodes[1], key)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)  # the node runs it with sh -s
    # Run the lines that add the key, into tmp_path, twice, next to a key a
    # deploy put there: the key is added once and nothing else is lost.
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("key="))
    snippet = "\n".join(lines[start : start + 3])
    target = tmp_path / "authorized_keys"
    snippet = snippet.replace("/home/gpuclus/.ssh/authorized_keys", shlex.quote(str(target)))
    target.write_text("ssh-ed25519 AAAACLUSTER cluster-key\n")
    for _ in range(2):
        subprocess.run(["sh", "-c", snippet], check=True, cwd=tmp_path)
    assert target.read_text() == "ssh-ed25519 AAAACLUSTER cluster-key\n" + key + "\n"
    assert not (tmp_path / "pwned").exists()
