"""Files that are not regular files, or are endless, in and out of the CLI (issue 11).

Reading: a spec or a hosts file that is a device, a FIFO or a socket is refused
by its type before it is opened (opening a FIFO waits for a writer), and no
file is read past the documented 2 MiB. Writing: an output that exists and is
not a regular file is never replaced, not even with --force, and an output's
directory must already exist.

The read tests run `python -m gpuclus` in a child with a timeout and a memory
limit, so that a regression fails instead of hanging or eating the machine.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses Linux devices, FIFOs and RLIMIT_AS")

MAX_BYTES = 2 * 1024 * 1024
CHILD_MEMORY = 1 << 30
CHILD_TIMEOUT_S = 20


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def gpuclus(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child that cannot hang the tests or take more than 1 GiB."""
    return subprocess.run(
        [sys.executable, "-m", "gpuclus", *args],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
        preexec_fn=_limit_memory,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"},
    )


@pytest.fixture
def unix_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Bound by a relative name: a socket path must fit in 108 bytes, tmp_path may not.
    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("sock")
        yield tmp_path / "sock"


def _fifo(directory: Path) -> Path:
    path = directory / "pipe"
    os.mkfifo(path)
    return path


def _oversize(directory: Path) -> Path:
    path = directory / "big.txt"
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    return path


# (make the input, words the one-line message must hold)
NOT_READABLE: dict[str, tuple[Callable[[Path], Path], str]] = {
    "dev-zero": (lambda _: Path("/dev/zero"), "character device"),
    "dev-urandom": (lambda _: Path("/dev/urandom"), "character device"),
    "fifo": (_fifo, "FIFO"),
    "oversize": (_oversize, "too large"),
}


def _message_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("case", NOT_READABLE, ids=list(NOT_READABLE))
def test_spec_check_refuses_special_and_oversize_files(tmp_path: Path, case: str) -> None:
    make, words = NOT_READABLE[case]
    result = gpuclus("spec", "check", str(make(tmp_path)))
    assert result.returncode == 3, result.stderr[-600:]
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert len(_message_lines(result.stderr)) == 2  # the message and its hint


def test_spec_check_refuses_a_socket(unix_socket: Path) -> None:
    result = gpuclus("spec", "check", str(unix_socket))
    assert result.returncode == 3, result.stderr[-600:]
    assert "socket" in result.stderr


def test_render_refuses_a_device_as_its_spec(tmp_path: Path) -> None:
    result = gpuclus("render", "/dev/zero", "-o", str(tmp_path / "out"))
    assert result.returncode == 3, result.stderr[-600:]
    assert "character device" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", NOT_READABLE, ids=list(NOT_READABLE))
def test_init_from_hosts_refuses_special_and_oversize_files(tmp_path: Path, case: str) -> None:
    make, words = NOT_READABLE[case]
    output = tmp_path / "cluster.yaml"
    result = gpuclus("init", "--from-hosts", str(make(tmp_path)), "-o", str(output))
    assert result.returncode == 2, result.stderr[-600:]
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert len(_message_lines(result.stderr)) == 2
    assert not output.exists()


def test_init_from_hosts_refuses_a_socket(unix_socket: Path) -> None:
    result = gpuclus("init", "--from-hosts", str(unix_socket), "-o", str(unix_socket.parent / "cluster.yaml"))
    assert result.returncode == 2, result.stderr[-600:]
    assert "socket" in result.stderr
