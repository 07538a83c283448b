"""Reading a command's output over a real SSH connection whose server sends the exit status first.

OpenSSH's sshd sends a command's exit status when its process ends, which can be
before the last of its output has crossed the connection; the validate stage's
channel reader (slurm/remote.py) and the one-shot ``ssh.client.run`` must read
on to the channel's end of file. The server here is paramiko's own server side
on a loopback socket, scripted to send output, then the exit status, then the
rest of the output after a pause: the order that cut a node exporter page short
once in a while on the sandbox (no slurm_* lines, the page's last ones).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from gpuclus.slurm.remote import AFTER_EXIT_WAIT_S, Remote
from gpuclus.ssh.client import run

FIRST = b"node_load1 0.5\n" * 4000  # about 60 KB, more than one SSH packet
LAST = b"slurm_up 1\n"


class ScriptedServer(paramiko.ServerInterface):
    """Accepts any password and answers every command with FIRST, the exit status, a pause, LAST, EOF."""

    def __init__(self, pause_after_exit_s: float, send_eof: bool) -> None:
        self.pause_after_exit_s = pause_after_exit_s
        self.send_eof = send_eof
        self.commands: list[bytes] = []

    def check_auth_password(self, username: str, password: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.commands.append(command)
        threading.Thread(target=self._answer, args=(channel,), daemon=True).start()
        return True

    def _answer(self, channel: paramiko.Channel) -> None:
        channel.sendall(FIRST)
        channel.sendall_stderr(b"warning\n")
        channel.send_exit_status(0)
        time.sleep(self.pause_after_exit_s)
        channel.sendall(LAST)
        if self.send_eof:
            channel.shutdown_write()
            time.sleep(0.2)
            channel.close()


def _serve(listener: socket.socket, server: ScriptedServer, host_key: Path) -> paramiko.Transport:
    connection, _ = listener.accept()
    transport = paramiko.Transport(connection)
    transport.add_server_key(paramiko.Ed25519Key.from_private_key_file(str(host_key)))
    transport.start_server(server=server)
    return transport


@pytest.fixture()
def host_key(tmp_path: Path) -> Path:
    # paramiko cannot generate Ed25519 keys itself; ssh-keygen is on every machine that runs gpuclus.
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@contextlib.contextmanager
def _connected(server: ScriptedServer, host_key: Path) -> Iterator[paramiko.SSHClient]:
    """A client logged in to ``server`` on loopback; both ends closed afterwards."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    transports: list[paramiko.Transport] = []
    accepting = threading.Thread(target=lambda: transports.append(_serve(listener, server, host_key)), daemon=True)
    accepting.start()
    client = paramiko.SSHClient()
    # A server made by this test on loopback; no host key to check it against.
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(
        "127.0.0.1",
        port=listener.getsockname()[1],
        username="admin",
        password="x",
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    accepting.join(10)
    listener.close()
    try:
        yield client
    finally:
        client.close()
        for transport in transports:
            transport.close()


def test_remote_reads_output_that_arrives_after_the_exit_status(host_key: Path) -> None:
    server = ScriptedServer(pause_after_exit_s=0.5, send_eof=True)
    with _connected(server, host_key) as client:
        answer = Remote(client).run("curl -fsS http://head:9100/metrics", timeout=20)
    assert server.commands == [b"curl -fsS http://head:9100/metrics"]
    assert answer.exit_status == 0
    assert answer.stdout == (FIRST + LAST).decode()
    assert answer.stderr == "warning\n"


def test_remote_stops_waiting_for_the_end_of_file_soon_after_the_exit_status(host_key: Path) -> None:
    # A background child that keeps the output open: the exit status counts, with what came by then.
    server = ScriptedServer(pause_after_exit_s=60, send_eof=False)
    with _connected(server, host_key) as client:
        started = time.monotonic()
        answer = Remote(client).run("nohup sleep 60 &", timeout=30)
        took = time.monotonic() - started
    assert answer.exit_status == 0
    assert answer.stdout == FIRST.decode()
    assert AFTER_EXIT_WAIT_S <= took < AFTER_EXIT_WAIT_S + 5


def test_one_shot_run_reads_output_that_arrives_after_the_exit_status(host_key: Path) -> None:
    server = ScriptedServer(pause_after_exit_s=0.5, send_eof=True)
    with _connected(server, host_key) as client:
        answer = run(client, "cat /etc/os-release", timeout=20)
    assert (answer.exit_status, answer.stdout, answer.stderr) == (0, (FIRST + LAST).decode(), "warning\n")
