"""A server that closes connections before the login: gpuclus' connect() tries again, a silent one it does not.

OpenSSH 9.8 and later (Debian 13's sshd) close every connection from an
address they penalise (PerSourcePenalties) and a busy sshd drops new ones
past MaxStartups; the Debian 13 lane met it once, in a test's SSH command.
The servers here are real sockets on loopback: one that closes the first
connections at once (or right after its banner, in the key exchange) and
then answers as paramiko's SSH server does; one that always closes; one
that never sends a banner (a hung host: no retry, or an unreachable node
would take minutes to name).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest

from gpuclus.ssh import client as ssh_client
from gpuclus.ssh.client import SshFailure, SshTarget, connect


class PasswordServer(paramiko.ServerInterface):
    def check_auth_password(self, username: str, password: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username: str) -> str:
        return "password"


class FlakyListener:
    """Accepts on loopback; the first ``drop`` connections are closed (after a banner when ``in_kex``),
    the rest get an SSH server (``serve``) or are held open in silence."""

    def __init__(self, host_key: Path, *, drop: int, in_kex: bool = False, serve: bool = True) -> None:
        self.host_key = host_key
        self.drop, self.in_kex, self.serve = drop, in_kex, serve
        self.accepted = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket | paramiko.Transport] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.accepted <= self.drop:
                if self.in_kex:
                    connection.sendall(b"SSH-2.0-OpenSSH_10.0p2 Debian-7\r\n")
                connection.close()
            elif self.serve:
                transport = paramiko.Transport(connection)
                transport.add_server_key(paramiko.Ed25519Key.from_private_key_file(str(self.host_key)))
                transport.start_server(server=PasswordServer())
                self.held.append(transport)
            else:
                self.held.append(connection)

    def close(self) -> None:
        self.listener.close()
        for held in self.held:
            held.close()


@pytest.fixture()
def host_key(tmp_path: Path) -> Path:
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture(autouse=True)
def short_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same number of tries as in gpuclus, with tenths of the pauses.
    monkeypatch.setattr(ssh_client, "DROPPED_RETRY_DELAYS", tuple(d / 10 for d in ssh_client.DROPPED_RETRY_DELAYS))


def target(tmp_path: Path, port: int) -> SshTarget:
    return SshTarget("127.0.0.1", "admin", tmp_path / "no-key", tmp_path / "known_hosts", port=port)


@pytest.mark.parametrize("in_kex", [False, True], ids=["before-the-banner", "in-the-key-exchange"])
def test_connections_closed_before_the_login_are_tried_again(tmp_path: Path, host_key: Path, in_kex: bool) -> None:
    server = FlakyListener(host_key, drop=3, in_kex=in_kex)
    try:
        started = time.monotonic()
        client = connect(target(tmp_path, server.port), timeout=5, accept_new=True, password="x")
        took = time.monotonic() - started
        client.close()
    finally:
        server.close()
    assert server.accepted == 4
    # The first three pauses (0.1 + 0.2 + 0.4 s here), then the login.
    assert 0.7 <= took < 5


def test_a_server_that_always_closes_is_named_after_the_last_try(tmp_path: Path, host_key: Path) -> None:
    server = FlakyListener(host_key, drop=100)
    try:
        with pytest.raises(SshFailure, match="closed the connection before the login, 6 times"):
            connect(target(tmp_path, server.port), timeout=5, accept_new=True, password="x")
    finally:
        server.close()
    assert server.accepted == 6


def test_a_server_that_never_answers_is_not_tried_again(tmp_path: Path, host_key: Path) -> None:
    server = FlakyListener(host_key, drop=0, serve=False)
    try:
        started = time.monotonic()
        # paramiko words it "Error reading SSH protocol banner" or, when the timeout strikes as the
        # login starts, "No existing session"; either way one try.
        with pytest.raises(SshFailure) as failure:
            connect(target(tmp_path, server.port), timeout=1, accept_new=True, password="x")
        took = time.monotonic() - started
    finally:
        server.close()
    assert server.accepted == 1
    assert "closed the connection before the login" not in str(failure.value)
    assert took < 3
