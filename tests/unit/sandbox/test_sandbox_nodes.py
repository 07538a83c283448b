"""What each sandbox node gets: its container, and the script that sets it up after boot."""

from __future__ import annotations

import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from gpuclus.sandbox.image import FAKE_GPU_CONFIG
from gpuclus.sandbox.layout import NFS_VOLUME_MOUNT, TEST_IMAGE, sandbox_layout
from gpuclus.sandbox.nodes import TEST_IMAGE_TOOLS, node_containers, node_setup_script, pyxis_image_script

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm8Yq9tP1n0J2k3L4m5N6o7P8q9R0s1T2u3V4w5X6y7 gpuclus@lab"


def test_containers_nfs_volume_on_the_controller_and_the_backup_controller() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    containers = node_containers(layout, {"debian12": "localhost/gpuclus-node:0123456789ab"})
    assert [c.name for c in containers] == ["lab-head", "lab-gpu01", "lab-gpu02"]
    # gpu01 runs the backup slurmctld, whose state directory is on the volume, at the head's path.
    assert containers[0].volumes == containers[1].volumes == (("gpuclus-lab-nfs", NFS_VOLUME_MOUNT),)
    assert containers[2].volumes == ()
    assert [dict(c.labels)["gpuclus.role"] for c in containers] == ["controller", "compute", "compute"]
    for container, node in zip(containers, layout.nodes, strict=True):
        assert (container.address, container.network, container.cluster) == (
            node.address,
            "gpuclus-lab",
            "lab",
        )
        assert container.image == "localhost/gpuclus-node:0123456789ab"


def test_containers_of_a_mixed_sandbox_run_each_node_os_image_and_say_which() -> None:
    layout = sandbox_layout("mix", 3, 1, "10.213.0.0/24", "debian12", "debian13")
    images = {"debian12": "localhost/gpuclus-node:aaaaaaaaaaaa", "debian13": "localhost/gpuclus-node:bbbbbbbbbbbb"}
    containers = node_containers(layout, images)
    assert [(c.name, c.image, dict(c.labels)["gpuclus.sandbox.os"]) for c in containers] == [
        ("mix-head", images["debian12"], "debian12"),
        ("mix-gpu01", images["debian13"], "debian13"),
        ("mix-gpu02", images["debian13"], "debian13"),
    ]


def test_containers_single_node_gets_the_volume() -> None:
    (only,) = node_containers(sandbox_layout("solo", 1, 1, "10.213.0.0/24"), {"debian12": "img"})
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


# The test image ------------------------------------------------------------------------------


def test_setup_script_builds_the_test_image_on_compute_nodes_only() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    head, *compute = (node_setup_script(layout, node, PUBLIC_KEY) for node in layout.nodes)
    assert TEST_IMAGE == "/var/lib/gpuclus-sandbox/images/test.sqsh"
    assert "mksquashfs" not in head and TEST_IMAGE not in head
    for script in compute:
        assert pyxis_image_script() in script
        assert f"if [ ! -e {TEST_IMAGE} ]; then" in script
        assert "-noappend -quiet -all-root -no-xattrs" in script
        # The host key stays the last line of output.
        assert script.rstrip().endswith("cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub")
        subprocess.run(["sh", "-n"], input=script, text=True, check=True)


@pytest.mark.parametrize("gpus", [0, 2])
def test_setup_script_of_a_single_node_builds_the_test_image(gpus: int) -> None:
    """In a 1-node sandbox the head is the compute node too."""
    layout = sandbox_layout("solo", 1, gpus, "10.213.0.0/24")
    assert pyxis_image_script() in node_setup_script(layout, layout.head, PUBLIC_KEY)


def test_setup_script_says_why_the_image_is_on_local_disk() -> None:
    script = pyxis_image_script()
    assert "own disk" in script and "NFS" in script and "no NFS client" in script


def run_image_script(image: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", "-c", "set -eu\n" + pyxis_image_script(str(image))],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )


@pytest.mark.skipif(
    shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None, reason="no squashfs-tools"
)
def test_pyxis_image_script_builds_a_small_image_once(tmp_path: Path) -> None:
    image = tmp_path / "images" / "test.sqsh"
    first = run_image_script(image)
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""  # the setup script's last output line must stay the host key
    assert stat.S_IMODE(image.stat().st_mode) == 0o644
    assert stat.S_IMODE(image.parent.stat().st_mode) == 0o755
    assert [p.name for p in image.parent.iterdir()] == ["test.sqsh"]  # no partial file left
    listed = subprocess.run(["unsquashfs", "-l", str(image)], capture_output=True, text=True, check=True).stdout
    files = {line.removeprefix("squashfs-root") for line in listed.splitlines() if line.startswith("squashfs-root/")}
    assert {"/bin/sh", "/etc/passwd", "/etc/group", "/etc/os-release"} <= files
    for tool in TEST_IMAGE_TOOLS:
        assert any(path.endswith(f"/bin/{tool}") for path in files), tool
    libc = [path for path in files if "/libc.so" in path]
    assert libc, files
    unpacked = tmp_path / "unpacked"
    subprocess.run(["unsquashfs", "-d", str(unpacked), str(image)], capture_output=True, check=True)
    assert (unpacked / "etc/passwd").read_text() == "root:x:0:0:root:/root:/bin/sh\n"
    assert (unpacked / "etc/group").read_text() == "root:x:0:\n"
    assert (unpacked / "etc/os-release").read_text() == (
        'NAME="gpuclus sandbox test image"\nID=gpuclus-test\nVERSION_ID=1\n'
    )
    # Idempotent: a second run leaves the image alone.
    before = image.stat().st_mtime_ns
    again = run_image_script(image)
    assert again.returncode == 0, again.stderr
    assert image.stat().st_mtime_ns == before


def test_pyxis_image_script_without_mksquashfs(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uname = shutil.which("uname")
    assert uname is not None
    (bin_dir / "uname").symlink_to(uname)
    image = tmp_path / "images" / "test.sqsh"
    result = run_image_script(image, env={"PATH": str(bin_dir)})
    assert result.returncode == 1
    assert "error: mksquashfs is not installed on" in result.stderr
    assert "gpuclus sandbox down" in result.stderr
    assert not image.exists()
