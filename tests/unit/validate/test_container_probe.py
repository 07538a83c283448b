"""The containers check's probe, run for real: in the smallest root `gpuclus image build` accepts, in a
user namespace of its own (as Enroot starts every container), and on the host.

The root holds /bin/sh (a static busybox where the host has one, else the host's
own shell and the libraries it links), /etc/passwd and /etc/group, and nothing
else: no grep, no cat, no /etc/os-release. Enroot binds the host's /proc into
every container; so does this test. It needs `unshare` and user namespaces
(no container engine, no root): it skips where the kernel refuses them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuclus import squashfs
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.checks import container_probe


def _with_libraries(program: Path) -> list[Path]:
    """``program`` and every library it loads (none for a static one), as the sandbox's test image copies them."""
    linked = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=False).stdout
    return [program, *(Path(word) for line in linked.splitlines() for word in line.split() if word.startswith("/"))]


def _copy(source: Path, root: Path, as_path: Path | None = None) -> None:
    target = root / (as_path or source).relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source.resolve(), target)


@pytest.fixture
def minimal_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    busybox = shutil.which("busybox")
    shell, *libraries = _with_libraries(Path(busybox) if busybox else Path("/bin/sh").resolve())
    _copy(shell, root, Path("/bin/sh"))
    for library in libraries:
        _copy(library, root)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    squashfs.check_root(root)  # what `gpuclus image build` accepts, and no more
    (root / "proc").mkdir()  # Enroot makes its mount points (x-create) where the image has none
    return root


def _unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("chroot") is None:
        return False
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True, check=False)
    return done.returncode == 0


needs_user_namespaces = pytest.mark.skipif(
    not _unshare_works(), reason="unshare cannot make a user and mount namespace here (kernel or policy refuses it)"
)


def _run(argv: list[str]) -> CommandResult:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    return CommandResult(done.returncode, done.stdout, done.stderr)


@needs_user_namespaces
def test_the_probe_runs_in_a_minimal_image_and_knows_it_is_inside(minimal_root: Path) -> None:
    # As Enroot: a user namespace, the host's /proc bound in, then /bin/sh -c PROBE by its path.
    boot = 'mount --rbind /proc "$0/proc" && exec chroot "$0" /bin/sh -c "$1"'
    answer = _run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            boot,
            str(minimal_root),
            container_probe.PROBE,
        ]
    )
    assert answer.exit_status == 0, answer.stderr
    assert answer.stderr == ""  # not one "not found" from the image's shell
    verdict = container_probe.read(answer)
    assert verdict.stage == container_probe.INSIDE, answer.stdout
    assert verdict.detail == "/bin/sh ran in the container (user namespace map 0 0 1)"


def test_the_probe_on_the_host_says_so() -> None:
    answer = _run(["/bin/sh", "-c", container_probe.PROBE])
    assert answer.exit_status == 0, answer.stderr
    verdict = container_probe.read(answer)
    assert verdict.stage == container_probe.HOST, answer.stdout
    assert verdict.detail == "the job ran on the host, not in a container"


def test_the_probe_without_proc_is_unknown_not_a_verdict(tmp_path: Path) -> None:
    # As where /proc hides other users' processes (hidepid): the parent's map cannot be read.
    if not os.access("/proc/self/uid_map", os.R_OK):
        pytest.skip("this host has no /proc/self/uid_map to read")
    probe = container_probe.PROBE.replace('"/proc/$PPID/uid_map"', f'"{tmp_path}/hidden"')
    assert probe != container_probe.PROBE
    verdict = container_probe.read(_run(["/bin/sh", "-c", probe]))
    assert verdict.stage == container_probe.UNKNOWN
