"""A host that drops the connection early gives one line, not paramiko's traceback on stderr."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def dropping_server() -> Iterator[int]:
    """A TCP port that accepts connections and closes them before any SSH banner."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("call", ["connect", "host_key"])
def test_an_early_drop_prints_no_paramiko_traceback(dropping_server: int, tmp_path: Path, call: str) -> None:
    # A child process: paramiko's log goes through Python's last-resort
    # handler, which writes to the real stderr.
    script = f"""
from pathlib import Path
from gpuclus.ssh.client import SshFailure, SshTarget, connect, host_key
key, known_hosts = Path({str(tmp_path / "key")!r}), Path({str(tmp_path / "kh")!r})
target = SshTarget("127.0.0.1", "admin", key, known_hosts, {dropping_server})
try:
    {call}(target, timeout=5)
except SshFailure as failure:
    print("failure:", failure.message)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith("failure: 127.0.0.1"), result
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "Exception (client)" not in result.stderr, result.stderr
