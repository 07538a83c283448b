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
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.cli.main import app

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses Linux devices, FIFOs and RLIMIT_AS")

MAX_BYTES = 2 * 1024 * 1024
CHILD_MEMORY = 1 << 30
CHILD_TIMEOUT_S = 20

INIT_FLAGS = ["--name", "lab", "--admin-user", "ubuntu", "--controller", "head=10.0.0.10", "--gpus-per-node", "1"]

runner = CliRunner()


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


# -- outputs ----------------------------------------------------------------------------------------


def _init_to(output: Path, *extra: str) -> tuple[int, str]:
    result = runner.invoke(app, ["init", *INIT_FLAGS, "-o", str(output), *extra])
    return result.exit_code, result.stderr


def test_init_never_replaces_a_fifo_even_with_force(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    code, stderr = _init_to(fifo, "--force")
    assert code == 2, stderr
    assert "FIFO" in stderr and "not a regular file" in stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_init_never_replaces_a_socket_even_with_force(unix_socket: Path) -> None:
    code, stderr = _init_to(unix_socket, "--force")
    assert code == 2, stderr
    assert "socket" in stderr
    assert stat.S_ISSOCK(unix_socket.lstat().st_mode)


def test_init_never_replaces_a_directory_even_with_force(tmp_path: Path) -> None:
    directory = tmp_path / "cluster.yaml"
    directory.mkdir()
    code, stderr = _init_to(directory, "--force")
    assert code == 2, stderr
    assert "directory" in stderr
    assert directory.is_dir()


def test_init_never_replaces_a_symlink_to_a_fifo(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    link = tmp_path / "cluster.yaml"
    link.symlink_to(fifo)
    code, stderr = _init_to(link, "--force")
    assert code == 2, stderr
    assert "symbolic link" in stderr
    assert link.is_symlink() and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_init_never_replaces_a_symlink_even_to_a_regular_file(tmp_path: Path) -> None:
    # The rename would replace the link, not the file: /dev/stdout is such a
    # link (to /proc/self/fd/1) whenever stdout is redirected to a file.
    target = tmp_path / "elsewhere.yaml"
    target.write_text("mine\n")
    link = tmp_path / "cluster.yaml"
    link.symlink_to(target)
    code, stderr = _init_to(link, "--force")
    assert code == 2, stderr
    assert "symbolic link" in stderr and str(target) in stderr
    assert link.is_symlink() and target.read_text() == "mine\n"


def test_init_never_replaces_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "cluster.yaml"
    link.symlink_to(tmp_path / "gone")
    code, stderr = _init_to(link)
    assert code == 2, stderr
    assert "symbolic link" in stderr
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_init_refuses_an_output_directory_that_does_not_exist(tmp_path: Path) -> None:
    output = tmp_path / "no" / "such" / "cluster.yaml"
    code, stderr = _init_to(output)
    assert code == 2, stderr
    assert f"{tmp_path / 'no' / 'such'}: no such directory" in stderr
    assert "mkdir -p" in stderr
    assert not (tmp_path / "no").exists()


def test_init_refuses_an_output_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x\n")
    code, stderr = _init_to(tmp_path / "plain" / "cluster.yaml")
    assert code == 2, stderr
    assert "not a directory" in stderr
    assert (tmp_path / "plain").read_text() == "x\n"


def test_init_refuses_a_bad_output_before_asking_anything(tmp_path: Path) -> None:
    result = runner.invoke(app, ["init", "--wizard", "-o", str(tmp_path / "no" / "cluster.yaml")], input="")
    assert result.exit_code == 2, result.stderr
    assert "no such directory" in result.stderr
    assert "?" not in result.stderr  # no question was asked


def test_spec_schema_never_replaces_a_fifo(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    result = runner.invoke(app, ["spec", "schema", "-o", str(fifo)])
    assert result.exit_code == 2, result.stderr
    assert "FIFO" in result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_spec_schema_never_replaces_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "stdout"
    target.write_text("log\n")
    link = tmp_path / "schema.json"
    link.symlink_to(target)
    result = runner.invoke(app, ["spec", "schema", "-o", str(link)])
    assert result.exit_code == 2, result.stderr
    assert "symbolic link" in result.stderr
    assert link.is_symlink() and target.read_text() == "log\n"


def test_spec_schema_refuses_an_output_directory_that_does_not_exist(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spec", "schema", "-o", str(tmp_path / "no" / "schema.json")])
    assert result.exit_code == 2, result.stderr
    assert "no such directory" in result.stderr
    assert not (tmp_path / "no").exists()
