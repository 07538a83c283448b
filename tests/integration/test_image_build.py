"""`gpuclus image build` from a real podman image: the sandbox's node image, exported and squashed.

Needs root and podman (the node image is built as `gpuclus sandbox up` builds
it when it is not cached yet: debootstrap, about a minute), and mksquashfs and
unsquashfs (squashfs-tools, which CI's scripts/bootstrap.sh does not install:
the test skips without them, saying so). No sandbox node is started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="building the sandbox's node image needs root"),
    pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman"),
    pytest.mark.skipif(
        shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None,
        reason="mksquashfs/unsquashfs are not installed "
        "(squashfs-tools; CI's scripts/bootstrap.sh does not install it)",
    ),
]


@pytest.fixture(scope="module")
def node_image() -> str:
    """The sandbox's node image tag, built the way `gpuclus sandbox up` builds it when it is missing."""
    from gpuclus.sandbox.engine import podman_engine
    from gpuclus.sandbox.hostprep import ensure_debootstrap
    from gpuclus.sandbox.image import build_image, host_recipe, image_present

    engine = podman_engine()
    recipe = host_recipe()
    if not image_present(engine, recipe):
        build_image(engine, recipe, debootstrap=ensure_debootstrap(install=True, say=print))
    return recipe.tag


def test_build_from_the_node_image(node_image: str, tmp_path: Path) -> None:
    target = tmp_path / "node.sqsh"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuclus",
            "image",
            "build",
            node_image,
            "-o",
            str(target),
            "--engine",
            "podman",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    payload = json.loads(done.stdout)
    assert payload["ok"] is True and payload["source_kind"] == "podman image"
    assert payload["bytes"] == target.stat().st_size > 10 * 2**20
    listing = subprocess.run(
        ["unsquashfs", "-l", str(target)], capture_output=True, text=True, check=True, timeout=300
    ).stdout.splitlines()
    for path in ("etc/os-release", "etc/passwd", "etc/group", "bin"):
        assert f"squashfs-root/{path}" in listing, path
    # Debian 12 is usr-merged: /bin is a link to usr/bin, where sh is (a link to dash).
    links = subprocess.run(
        ["unsquashfs", "-lls", str(target), "bin", "usr/bin/sh"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "squashfs-root/bin -> usr/bin" in links
    assert "squashfs-root/usr/bin/sh -> dash" in links
    # What the engine put in /dev is not packed: the runtime brings its own /dev.
    assert not [line for line in listing if line.startswith("squashfs-root/dev/")]
    # The temporary container is gone, and no temporary file is left beside the image.
    containers = subprocess.run(
        ["podman", "ps", "--all", "--filter", f"ancestor={node_image}", "--format", "{{.Names}} {{.Command}}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "/bin/sh" not in containers
    assert sorted(path.name for path in tmp_path.iterdir()) == ["node.sqsh"]
