"""`gpuclus image build`: refusals, atomic writes, --json, and the squashfs itself when mksquashfs is here.

Most tests put a stand-in mksquashfs on PATH (a script that logs its
arguments and writes a small file, or fails): they run without
squashfs-tools. The tests that need the real one skip when it is missing,
saying so (CI's scripts/bootstrap.sh does not install squashfs-tools).
No real container engine is used: an image SOURCE goes to a fake podman.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from gpuclus.cli.main import app
from gpuclus.sandbox import hostprep
from gpuclus.sandbox.engine import Engine
from gpuclus.sandbox.hostprep import EnginePick
from gpuclus.squashfs import resolve_in_root

runner = CliRunner()
REAL_MKSQUASHFS = shutil.which("mksquashfs")
needs_mksquashfs = pytest.mark.skipif(
    REAL_MKSQUASHFS is None,
    reason="mksquashfs is not installed (squashfs-tools); CI's scripts/bootstrap.sh does not install it",
)

STAND_IN = """#!{python}
import json, os, sys
args = sys.argv[1:]
if args == ["-version"]:
    print("mksquashfs version 4.5.1 (2022/03/17)")
    sys.exit(0)
with open(os.environ["FAKE_MKSQUASHFS_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
with open(args[1], "wb") as image:
    image.write(b"hsqs" + b"\\0" * 4092)
if os.environ.get("FAKE_MKSQUASHFS_FAIL"):
    sys.stderr.write("Write failed because No space left on device\\n")
    sys.stderr.write("FATAL ERROR: Failed to write to output filesystem\\n")
    sys.exit(1)
"""

FAKE_PODMAN = """#!{python}
import json, os, sys, tarfile
args = sys.argv[1:]
home = os.environ["FAKE_PODMAN_HOME"]
with open(os.path.join(home, "calls.log"), "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[0] == "create":
    if args[2] != "localhost/app:1":
        sys.stderr.write("Error: localhost/nope:1: image not known\\n")
        sys.exit(125)
    print("c0ffee")
elif args[0] == "export":
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        tar.add(os.path.join(home, "rootfs"), arcname=".")
elif args[0] == "rm":
    pass
"""


def minimal_root(root: Path, *, sh: bool = True, passwd: bool = True, group: bool = True) -> Path:
    """A usr-merged tree like Debian's: /bin -> usr/bin, /bin/sh -> dash."""
    (root / "usr/bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "bin").symlink_to("usr/bin")
    dash = root / "usr/bin/dash"
    dash.write_text("#!/bin/false\n")
    dash.chmod(0o755)
    if sh:
        (root / "usr/bin/sh").symlink_to("dash")
    if passwd:
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    if group:
        (root / "etc/group").write_text("root:x:0:\n")
    (root / "etc/os-release").write_text('ID=test\nPRETTY_NAME="gpuclus test image"\n')
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return minimal_root(tmp_path / "rootfs")


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in mksquashfs first on PATH; returns its log of argument lists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mksquashfs"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    log = tmp_path / "mksquashfs.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MKSQUASHFS_LOG", str(log))
    return log


@pytest.fixture
def no_mksquashfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without mksquashfs."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a real container engine was asked for")

    monkeypatch.setattr(hostprep, "pick_engine", refuse)


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["image", "build", *args])


def stdout_json(result: Result) -> dict[str, Any]:
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.endswith(".tmp"))


# Help and usage -------------------------------------------------------------------------------------


def test_help_lists_build() -> None:
    result = runner.invoke(app, ["image", "-h"])
    assert result.exit_code == 0, result.output
    assert "build" in result.stdout


def test_build_help_names_pyxis_rules() -> None:
    result = invoke("-h")
    assert result.exit_code == 0, result.output
    assert "--force" in result.stdout and "--json" in result.stdout and "'./'" in result.stdout


def test_output_is_required(tree: Path) -> None:
    result = invoke(str(tree))
    assert result.exit_code == 2


# Directory source with the stand-in ---------------------------------------------------------------


def test_directory_source_writes_image_with_portable_options(tree: Path, tmp_path: Path, stand_in: Path) -> None:
    target = tmp_path / "out" / "img.sqsh"
    target.parent.mkdir()
    result = invoke(str(tree), "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_bytes().startswith(b"hsqs")
    # Every job's user reads the image.
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert leftovers(target.parent) == []
    (argv,) = calls(stand_in)
    assert argv[0] == str(tree.resolve())
    assert Path(argv[1]).parent == target.parent and argv[1] != str(target)  # a temporary beside the target
    for option in ("-noappend", "-all-root", "-no-xattrs", "-no-progress"):
        assert option in argv
    assert argv[argv.index("-comp") + 1] == "gzip"
    assert argv[argv.index("-mkfs-time") + 1] == "0"  # 4.5.1 says the stand-in
    assert f"wrote {target.resolve()}" in result.stdout
    assert f"--container-image={target.resolve()}" in result.stdout


def test_json_is_one_object(tree: Path, tmp_path: Path, stand_in: Path) -> None:
    target = tmp_path / "img.sqsh"
    result = invoke(str(tree), "-o", str(target), "--json")
    assert result.exit_code == 0, result.output
    payload = stdout_json(result)
    assert payload["ok"] is True
    assert payload["image"] == str(target.resolve())
    assert payload["source_kind"] == "directory"
    assert payload["bytes"] == 4096
    assert payload["compression"] == "gzip"
    assert payload["mksquashfs_version"] == "4.5.1"
    assert payload["files"] >= 7
    assert isinstance(payload["seconds"], float)


def test_refuses_to_overwrite_without_force(tree: Path, tmp_path: Path, stand_in: Path) -> None:
    target = tmp_path / "img.sqsh"
    target.write_bytes(b"old")
    result = invoke(str(tree), "-o", str(target))
    assert result.exit_code == 2
    assert "already exists" in result.stderr and "--force" in result.stderr
    assert target.read_bytes() == b"old"
    assert calls(stand_in) == []
    forced = invoke(str(tree), "-o", str(target), "--force")
    assert forced.exit_code == 0, forced.output
    assert target.read_bytes().startswith(b"hsqs")


def test_refusal_with_json_is_one_object(tree: Path, tmp_path: Path, stand_in: Path) -> None:
    target = tmp_path / "img.sqsh"
    target.write_bytes(b"old")
    result = invoke(str(tree), "-o", str(target), "--json")
    assert result.exit_code == 2
    payload = stdout_json(result)
    assert payload["ok"] is False
    assert payload["error"]["exit_code"] == 2
    assert "already exists" in payload["error"]["message"]


def test_failing_mksquashfs_leaves_nothing(
    tree: Path, tmp_path: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MKSQUASHFS_FAIL", "1")
    target = tmp_path / "out" / "img.sqsh"
    target.parent.mkdir()
    result = invoke(str(tree), "-o", str(target))
    assert result.exit_code == 1, result.output
    assert "mksquashfs failed: FATAL ERROR: Failed to write to output filesystem" in result.stderr
    assert "Traceback" not in result.output
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # no temporary left either


def test_failing_mksquashfs_keeps_the_old_image(
    tree: Path, tmp_path: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MKSQUASHFS_FAIL", "1")
    target = tmp_path / "img.sqsh"
    target.write_bytes(b"old")
    result = invoke(str(tree), "-o", str(target), "--force")
    assert result.exit_code == 1
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_interrupt_leaves_nothing(tree: Path, tmp_path: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuclus import squashfs

    def interrupted(argv: list[str]) -> None:
        Path(argv[2]).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(squashfs, "_squash", interrupted)
    target = tmp_path / "img.sqsh"
    result = invoke(str(tree), "-o", str(target))
    assert result.exit_code == 130
    assert not target.exists()
    assert leftovers(tmp_path) == []


# Refusals before mksquashfs runs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("missing", "named"),
    [("sh", "/bin/sh"), ("passwd", "/etc/passwd"), ("group", "/etc/group")],
)
def test_refuses_tree_missing_what_pyxis_needs(tmp_path: Path, stand_in: Path, missing: str, named: str) -> None:
    root = minimal_root(tmp_path / "rootfs", **{missing: False})
    target = tmp_path / "img.sqsh"
    result = invoke(str(root), "-o", str(target))
    assert result.exit_code == 2
    assert f"lacks: {named} (" in result.stderr
    assert "hint:" in result.stderr
    assert "Traceback" not in result.output
    assert calls(stand_in) == []
    assert not target.exists()


def test_refusal_names_every_missing_file_without_mksquashfs(tmp_path: Path, no_mksquashfs: None) -> None:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    result = invoke(str(root), "-o", str(tmp_path / "img.sqsh"), "--json")
    assert result.exit_code == 2
    message = stdout_json(result)["error"]["message"]
    for named in ("/bin/sh", "/etc/passwd", "/etc/group"):
        assert named in message


def test_dangling_sh_link_is_named(tmp_path: Path, stand_in: Path) -> None:
    root = minimal_root(tmp_path / "rootfs", sh=False)
    (root / "usr/bin/sh").symlink_to("/usr/bin/busybox")
    result = invoke(str(root), "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "/bin/sh (a symbolic link to /usr/bin/busybox that does not resolve inside the image" in result.stderr


def test_absolute_links_resolve_inside_the_tree_not_on_the_host(tmp_path: Path, stand_in: Path) -> None:
    root = minimal_root(tmp_path / "rootfs", sh=False)
    (root / "usr/bin/sh").symlink_to("/usr/bin/dash")  # on the host that is the host's dash
    (root / "usr/bin/dash").unlink()
    result = invoke(str(root), "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "/bin/sh (a symbolic link" in result.stderr


def test_resolve_in_root_clamps_dotdot_and_stops_loops(tmp_path: Path) -> None:
    root = minimal_root(tmp_path / "rootfs")
    (root / "etc/loop").symlink_to("loop")
    (root / "etc/up").symlink_to("../../../../usr/bin/dash")
    assert resolve_in_root(root, "/bin/sh") == root / "usr/bin/dash"
    assert resolve_in_root(root, "/etc/up") == root / "usr/bin/dash"
    assert resolve_in_root(root, "/etc/loop") is None
    assert resolve_in_root(root, "/etc/passwd/x") is None


def test_non_executable_sh_is_refused(tmp_path: Path, stand_in: Path) -> None:
    root = minimal_root(tmp_path / "rootfs")
    (root / "usr/bin/dash").chmod(0o644)
    result = invoke(str(root), "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "/bin/sh (is not executable" in result.stderr


def test_missing_mksquashfs_is_one_line_with_install_hint(tree: Path, tmp_path: Path, no_mksquashfs: None) -> None:
    result = invoke(str(tree), "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "error: mksquashfs is not installed" in result.stderr
    assert "apt-get install squashfs-tools" in result.stderr and "dnf install squashfs-tools" in result.stderr
    assert "Traceback" not in result.output


def test_missing_source_directory(tmp_path: Path, stand_in: Path) -> None:
    result = invoke(str(tmp_path / "nope"), "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "no such directory" in result.stderr


def test_file_source_is_refused(tmp_path: Path, stand_in: Path) -> None:
    tarball = tmp_path / "root.tar"
    tarball.write_bytes(b"")
    result = invoke(str(tarball), "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "is not a directory" in result.stderr and "tar -xf" in result.stderr


def test_missing_output_directory(tree: Path, tmp_path: Path, stand_in: Path) -> None:
    result = invoke(str(tree), "-o", str(tmp_path / "no" / "img.sqsh"))
    assert result.exit_code == 2
    assert "no such directory" in result.stderr


def test_output_inside_the_source_is_refused(tree: Path, stand_in: Path) -> None:
    result = invoke(str(tree), "-o", str(tree / "img.sqsh"))
    assert result.exit_code == 2
    assert "inside the source directory" in result.stderr
    assert calls(stand_in) == []


def test_bad_engine_choice(tree: Path, tmp_path: Path, stand_in: Path) -> None:
    result = invoke("localhost/app:1", "-o", str(tmp_path / "img.sqsh"), "--engine", "lxc")
    assert result.exit_code == 2
    assert "--engine 'lxc'" in result.stderr


# Image source, with a fake podman ------------------------------------------------------------------


@pytest.fixture
def fake_podman(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "podman"
    home.mkdir()
    minimal_root(home / "rootfs")
    script = home / "podman"
    script.write_text(FAKE_PODMAN.format(python=sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("FAKE_PODMAN_HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(
        hostprep, "pick_engine", lambda *a, **k: EnginePick(Engine("podman", str(script)), "fake podman")
    )
    return home


def test_image_source_is_exported_then_removed(tmp_path: Path, stand_in: Path, fake_podman: Path) -> None:
    target = tmp_path / "img.sqsh"
    result = invoke("localhost/app:1", "-o", str(target), "--json")
    assert result.exit_code == 0, result.output
    payload = stdout_json(result)
    assert payload["source_kind"] == "podman image"
    assert target.exists()
    engine_calls = calls(fake_podman / "calls.log")
    assert engine_calls[0] == ["create", "--pull=never", "localhost/app:1", "/bin/sh"]
    assert engine_calls[1] == ["export", "c0ffee"]
    assert engine_calls[-1] == ["rm", "--force", "c0ffee"]
    # The export directory is gone.
    assert not list(tmp_path.glob("gpuclus-image-*"))


def test_unknown_image_is_a_usage_error(tmp_path: Path, stand_in: Path, fake_podman: Path) -> None:
    result = invoke("localhost/nope:1", "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "no local image 'localhost/nope:1'" in result.stderr and "image not known" in result.stderr
    assert not list(tmp_path.glob("gpuclus-image-*"))


@pytest.mark.parametrize("reference", ["--privileged", "-v=/:/host", "--volume=/:/host"])
def test_an_image_reference_starting_with_a_dash_never_reaches_the_engine(
    tmp_path: Path, stand_in: Path, fake_podman: Path, reference: str
) -> None:
    # `podman create` would read it as its own option (a host mount, a privileged container).
    result = invoke("-o", str(tmp_path / "img.sqsh"), "--", reference)
    assert result.exit_code == 2, result.output
    assert "starts with '-'" in result.stderr and "./" in result.stderr
    assert calls(fake_podman / "calls.log") == []
    assert not list(tmp_path.glob("gpuclus-image-*"))


def test_a_directory_whose_name_starts_with_a_dash_is_packed(
    tree: Path, tmp_path: Path, stand_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dashed = tree.rename(tree.parent / "-rootfs")
    monkeypatch.chdir(dashed.parent)
    result = invoke("-o", str(tmp_path / "img.sqsh"), "--", "-rootfs")
    assert result.exit_code == 0, result.output
    (argv,) = calls(stand_in)
    assert argv[0] == str(dashed)


def test_image_missing_sh_is_refused_and_cleaned_up(tmp_path: Path, stand_in: Path, fake_podman: Path) -> None:
    (fake_podman / "rootfs/usr/bin/sh").unlink()
    result = invoke("localhost/app:1", "-o", str(tmp_path / "img.sqsh"))
    assert result.exit_code == 2
    assert "lacks: /bin/sh" in result.stderr
    assert calls(stand_in) == []
    assert calls(fake_podman / "calls.log")[-1] == ["rm", "--force", "c0ffee"]
    assert not list(tmp_path.glob("gpuclus-image-*"))


# The real mksquashfs ----------------------------------------------------------------------------------


@needs_mksquashfs
def test_real_mksquashfs_image_holds_the_tree(tree: Path, tmp_path: Path) -> None:
    target = tmp_path / "img.sqsh"
    result = invoke(str(tree), "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:4] == b"hsqs"
    unsquashfs = shutil.which("unsquashfs")
    if unsquashfs is None:
        pytest.skip("unsquashfs is not installed (squashfs-tools)")
    listing = subprocess.run([unsquashfs, "-lls", str(target)], capture_output=True, text=True, check=True).stdout
    for path in ("squashfs-root/etc/os-release", "squashfs-root/etc/passwd", "squashfs-root/usr/bin/dash"):
        assert path in listing
    assert "root/root" in listing  # -all-root


@needs_mksquashfs
def test_real_mksquashfs_is_reproducible(tree: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.sqsh", tmp_path / "b.sqsh"
    assert invoke(str(tree), "-o", str(first)).exit_code == 0
    assert invoke(str(tree), "-o", str(second)).exit_code == 0
    assert first.read_bytes() == second.read_bytes()
