"""`preflight --password` shows new host keys and sends the password only to keys someone trusted.

The nodes are real SSH servers (paramiko's server side) on loopback addresses
in threads: they accept password logins, record every password that reaches
them, and run the key-installing command with a temporary HOME. Only the
terminal (a TTY or not, the getpass prompt) and the probe after the key is
installed are stood in for.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from gpuclus.cli import preflight as cli_preflight
from gpuclus.cli.main import app
from gpuclus.preflight import hostkeys
from gpuclus.preflight import runner as preflight_runner
from gpuclus.ssh.client import SshFailure, SshTarget, connect
from gpuclus.state import StateDir

PASSWORD = "hunter2-do-not-print"

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 127.0.0.1, roles: [controller, login]}
  - {name: gpu01, address: 127.0.0.2, roles: [compute]}
monitoring: {prometheus: false}
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: false, pyxis: false}
"""


def ed25519_key() -> paramiko.PKey:
    pem = (
        Ed25519PrivateKey.generate()
        .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
        .decode()
    )
    return paramiko.Ed25519Key(file_obj=io.StringIO(pem))


@dataclass
class Node:
    """One SSH server: password logins for ubuntu, exec runs `sh -c` with HOME set to ``home``."""

    address: str
    home: Path
    key: paramiko.PKey = field(default_factory=ed25519_key)
    passwords: list[str] = field(default_factory=list)
    listener: socket.socket | None = None
    transports: list[paramiko.Transport] = field(default_factory=list)

    @property
    def known_hosts_line(self) -> str:
        port = self.port
        return f"[{self.address}]:{port} {self.key.get_name()} {self.key.get_base64()}"

    @property
    def port(self) -> int:
        assert self.listener is not None
        return int(self.listener.getsockname()[1])

    def serve(self, listener: socket.socket) -> None:
        self.listener = listener
        listener.listen(8)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self.listener is not None
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        transport = paramiko.Transport(conn)
        self.transports.append(transport)
        transport.add_server_key(self.key)
        try:
            transport.start_server(server=_Interface(self))
        except (paramiko.SSHException, EOFError, OSError):
            transport.close()

    def stop(self) -> None:
        if self.listener is not None:
            # shutdown() wakes the thread blocked in accept(); close() alone leaves it listening.
            with contextlib.suppress(OSError):
                self.listener.shutdown(socket.SHUT_RDWR)
            self.listener.close()
        for transport in self.transports:
            transport.close()

    def authorized_keys(self) -> str:
        path = self.home / ".ssh" / "authorized_keys"
        return path.read_text() if path.exists() else ""


class _Interface(paramiko.ServerInterface):  # type: ignore[misc]  # paramiko is untyped
    def __init__(self, node: Node) -> None:
        self.node = node

    def get_allowed_auths(self, username: str) -> str:
        return "password"

    def check_auth_password(self, username: str, password: str) -> int:
        self.node.passwords.append(password)
        ok = username == "ubuntu" and password == PASSWORD
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        threading.Thread(target=self._run, args=(channel, command.decode()), daemon=True).start()
        return True

    def _run(self, channel: Any, command: str) -> None:
        env = {"HOME": str(self.node.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, check=False)
        channel.sendall(done.stdout)
        channel.sendall_stderr(done.stderr)
        channel.send_exit_status(done.returncode)
        channel.close()


def listen_on_one_port(addresses: list[str]) -> list[socket.socket]:
    """A listening socket on each loopback address, all on the same port (the nodes share SSH_PORT)."""
    for _attempt in range(20):
        first = socket.socket()
        first.bind((addresses[0], 0))
        port = first.getsockname()[1]
        sockets = [first]
        try:
            for address in addresses[1:]:
                other = socket.socket()
                sockets.append(other)
                other.bind((address, port))
        except OSError:
            for sock in sockets:
                sock.close()
            continue
        return sockets
    raise RuntimeError("no free port on every loopback address")


@dataclass
class Cluster:
    spec: Path
    nodes: dict[str, Node]
    port: int

    @property
    def state(self) -> StateDir:
        return StateDir.beside(self.spec)

    def passwords(self) -> dict[str, list[str]]:
        return {name: list(node.passwords) for name, node in self.nodes.items()}

    def known_hosts_file(self, tmp_path: Path, **keys: paramiko.PKey) -> Path:
        """An admin's known_hosts file: each node's real key, or the key given for it."""
        lines = []
        for name, node in self.nodes.items():
            key = keys.get(name, node.key)
            lines.append(f"[{node.address}]:{self.port} {key.get_name()} {key.get_base64()}")
        path = tmp_path / "admin_known_hosts"
        path.write_text("# checked on the consoles\n" + "\n".join(lines) + "\n")
        return path


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    names = {"head": "127.0.0.1", "gpu01": "127.0.0.2"}
    sockets = listen_on_one_port(list(names.values()))
    nodes = {}
    for (name, address), sock in zip(names.items(), sockets, strict=True):
        home = tmp_path / f"home-{name}"
        home.mkdir()
        nodes[name] = Node(address, home)
        nodes[name].serve(sock)
    port = nodes["head"].port
    monkeypatch.setattr(hostkeys, "SSH_PORT", port)
    yield Cluster(spec, nodes, port)
    for node in nodes.values():
        node.stop()


@dataclass
class Terminal:
    """The admin at the keyboard: whether stdin is a TTY, and how often the password was asked for."""

    tty: bool = False
    asked: int = 0


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    term = Terminal()

    def getpass(prompt: str = "") -> str:
        term.asked += 1
        return PASSWORD

    monkeypatch.setattr(cli_preflight.getpass, "getpass", getpass)
    monkeypatch.setattr(cli_preflight, "_stdin_is_terminal", lambda: term.tty, raising=False)
    # After the key is installed, the probe would log in with it: not what these tests are about.
    monkeypatch.setattr(preflight_runner, "preflight_spec", lambda loaded, spec, min_disk_gb, **progress: [])
    return term


def preflight(cluster: Cluster, *args: str, answer: str = "") -> Any:
    return CliRunner().invoke(app, ["preflight", str(cluster.spec), "--password", *args], input=answer)


def fingerprint_of(key: paramiko.PKey) -> str:
    """As `ssh-keygen -lf` prints it, computed here independently of gpuclus."""
    import base64
    import hashlib

    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def trusted_lines(cluster: Cluster) -> list[str]:
    text = cluster.state.known_hosts.read_text() if cluster.state.known_hosts.exists() else ""
    return sorted(line for line in text.splitlines() if line and "first-contact" not in line)


# The fingerprint ---------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
@pytest.mark.parametrize(
    "make", [ed25519_key, lambda: paramiko.ECDSAKey.generate(), lambda: paramiko.RSAKey.generate(1024)]
)
def test_the_fingerprint_reads_as_ssh_keygen_prints_it(tmp_path: Path, make: Any) -> None:
    from gpuclus.ssh.client import fingerprint, key_label

    key = make()
    public = tmp_path / "key.pub"
    public.write_text(f"{key.get_name()} {key.get_base64()} node\n")
    printed = subprocess.run(["ssh-keygen", "-lf", str(public)], capture_output=True, text=True, check=True).stdout
    _bits, expected, _comment, label = printed.split()
    assert fingerprint(key.get_base64()) == expected
    assert f"({key_label(key.get_name())})" == label


# Confirming in a terminal ------------------------------------------------------------------------


def test_new_host_keys_are_shown_and_nothing_is_sent_when_the_admin_says_no(
    cluster: Cluster, terminal: Terminal
) -> None:
    terminal.tty = True
    result = preflight(cluster, answer="n\n")
    assert result.exit_code == 2, result.output
    assert cluster.passwords() == {"head": [], "gpu01": []}
    assert terminal.asked == 0
    for name, node in cluster.nodes.items():
        assert f"{name} ({node.address}): ED25519 key {fingerprint_of(node.key)}" in result.stderr
    assert result.stderr.count("Trust these 2 host keys and send the password? [y/N]") == 1
    assert "nothing was sent" in result.stderr
    assert trusted_lines(cluster) == []
    assert PASSWORD not in result.output


def test_the_password_goes_to_every_node_once_the_admin_says_yes(cluster: Cluster, terminal: Terminal) -> None:
    terminal.tty = True
    result = preflight(cluster, answer="y\n")
    assert result.exit_code == 0, result.output
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": [PASSWORD]}
    public_key = cluster.state.public_key.read_text().strip()
    assert all(node.authorized_keys() == public_key + "\n" for node in cluster.nodes.values())
    assert trusted_lines(cluster) == sorted(node.known_hosts_line for node in cluster.nodes.values())
    assert PASSWORD not in result.output

    # Pinned now: the next run asks nothing, even without a terminal.
    terminal.tty = False
    again = preflight(cluster)
    assert again.exit_code == 0, again.output
    assert "Trust" not in again.stderr
    assert cluster.passwords() == {"head": [PASSWORD] * 2, "gpu01": [PASSWORD] * 2}


def test_a_key_learned_on_first_contact_still_needs_a_confirmation(cluster: Cluster, terminal: Terminal) -> None:
    # A plain preflight (gpuclus' key, not installed yet) learns head's key on first contact.
    state = cluster.state
    state.ensure_ssh_key()
    target = SshTarget("127.0.0.1", "ubuntu", state.private_key, state.known_hosts, cluster.port)
    with pytest.raises(SshFailure):
        connect(target, accept_new=True)
    assert "127.0.0.1" in state.known_hosts.read_text()

    terminal.tty = True
    result = preflight(cluster, answer="no\n")
    assert result.exit_code == 2, result.output
    assert "Trust these 2 host keys" in result.stderr
    assert "head (127.0.0.1): ED25519 key" in result.stderr
    assert "never confirmed" in result.stderr
    assert cluster.passwords() == {"head": [], "gpu01": []}


def test_a_changed_host_key_is_refused_and_the_others_still_get_the_password(
    cluster: Cluster, terminal: Terminal
) -> None:
    terminal.tty = True
    assert preflight(cluster, answer="y\n").exit_code == 0
    cluster.nodes["gpu01"].key = ed25519_key()  # reinstalled, or someone in between
    for node in cluster.nodes.values():
        node.passwords.clear()

    result = preflight(cluster, "--json", answer="")
    assert result.exit_code == 4, result.output
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": []}
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert "gpu01" in payload["error"]["message"] and "head" not in payload["error"]["message"]
    assert "known_hosts" in payload["error"]["hint"]
    statuses = {entry["node"]: entry["status"] for entry in payload["host_keys"]}
    assert statuses == {"head": "pinned", "gpu01": "changed"}


def test_an_unreachable_node_is_named_and_the_others_still_get_the_password(
    cluster: Cluster, terminal: Terminal
) -> None:
    cluster.nodes["gpu01"].stop()
    terminal.tty = True
    result = preflight(cluster, answer="y\n")
    assert result.exit_code == 4, result.output
    assert "Trust this host key and send the password? [y/N]" in result.stderr
    assert "could not install gpuclus' key on: gpu01: 127.0.0.2:" in result.stderr
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": []}


# Without a terminal ------------------------------------------------------------------------------


def test_without_a_terminal_new_keys_are_refused_with_a_hint(cluster: Cluster, terminal: Terminal) -> None:
    result = preflight(cluster)
    assert result.exit_code == 2, result.output
    assert cluster.passwords() == {"head": [], "gpu01": []}
    assert terminal.asked == 0
    assert "nothing was sent" in result.stderr
    assert "--known-hosts FILE" in result.stderr and "--accept-new-host-keys" in result.stderr
    assert f"ED25519 key {fingerprint_of(cluster.nodes['head'].key)}" in result.stderr


def test_json_shows_every_fingerprint_and_never_the_password(cluster: Cluster, terminal: Terminal) -> None:
    result = preflight(cluster, "--json")
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["error"]["exit_code"] == 2
    assert payload["host_keys"] == [
        {
            "node": name,
            "address": node.address,
            "status": "new",
            "type": "ED25519",
            "fingerprint": fingerprint_of(node.key),
            "key": f"ssh-ed25519 {node.key.get_base64()}",
            "message": "not seen before",
        }
        for name, node in cluster.nodes.items()
    ]

    accepted = preflight(cluster, "--json", "--accept-new-host-keys")
    assert accepted.exit_code == 0, accepted.output
    assert PASSWORD not in accepted.output
    assert [entry["fingerprint"] for entry in json.loads(accepted.stdout)["host_keys"]] == [
        fingerprint_of(node.key) for node in cluster.nodes.values()
    ]


def test_accept_new_host_keys_sends_without_asking_and_pins(cluster: Cluster, terminal: Terminal) -> None:
    result = preflight(cluster, "--accept-new-host-keys")
    assert result.exit_code == 0, result.output
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": [PASSWORD]}
    assert trusted_lines(cluster) == sorted(node.known_hosts_line for node in cluster.nodes.values())


def test_a_password_that_cannot_be_asked_for_sends_nothing(
    cluster: Cluster, terminal: Terminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_terminal(prompt: str = "") -> str:
        raise EOFError

    monkeypatch.setattr(cli_preflight.getpass, "getpass", no_terminal)
    result = preflight(cluster, "--accept-new-host-keys")
    assert result.exit_code == 2, result.output
    assert "--password needs a terminal to ask for the password" in result.stderr
    assert cluster.passwords() == {"head": [], "gpu01": []}


# An admin's known_hosts file ---------------------------------------------------------------------


def test_keys_from_a_known_hosts_file_are_trusted_and_a_different_key_is_refused(
    cluster: Cluster, terminal: Terminal, tmp_path: Path
) -> None:
    admin_file = cluster.known_hosts_file(tmp_path, gpu01=ed25519_key())
    result = preflight(cluster, "--known-hosts", str(admin_file))
    assert result.exit_code == 4, result.output
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": []}
    offered = fingerprint_of(cluster.nodes["gpu01"].key)
    assert f"gpu01: 127.0.0.2 offers ED25519 key {offered}, not the key in {admin_file}" in result.stderr
    assert cluster.nodes["gpu01"].authorized_keys() == ""
    assert trusted_lines(cluster) == [cluster.nodes["head"].known_hosts_line]


def test_a_host_missing_from_the_known_hosts_file_is_confirmed_like_a_new_one(
    cluster: Cluster, terminal: Terminal, tmp_path: Path
) -> None:
    admin_file = tmp_path / "admin_known_hosts"
    admin_file.write_text(cluster.nodes["head"].known_hosts_line + "\n")
    terminal.tty = True
    declined = preflight(cluster, "--known-hosts", str(admin_file), answer="\n")
    assert declined.exit_code == 2
    assert "Trust this host key and send the password? [y/N]" in declined.stderr
    assert "gpu01 (127.0.0.2)" in declined.stderr and "head (127.0.0.1)" not in declined.stderr
    assert cluster.passwords() == {"head": [], "gpu01": []}

    confirmed = preflight(cluster, "--known-hosts", str(admin_file), answer="yes\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": [PASSWORD]}


@pytest.mark.skipif(shutil.which("ssh-keyscan") is None, reason="needs ssh-keyscan")
def test_hashed_ssh_keyscan_output_is_a_known_hosts_file(cluster: Cluster, terminal: Terminal, tmp_path: Path) -> None:
    scanned = subprocess.run(
        ["ssh-keyscan", "-H", "-t", "ed25519", "-p", str(cluster.port), "127.0.0.1", "127.0.0.2"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    ).stdout
    assert scanned.count("|1|") == 2, scanned
    admin_file = tmp_path / "scanned"
    admin_file.write_text(scanned)
    result = preflight(cluster, "--known-hosts", str(admin_file))
    assert result.exit_code == 0, result.output
    assert cluster.passwords() == {"head": [PASSWORD], "gpu01": [PASSWORD]}


def test_the_host_key_options_go_with_password(cluster: Cluster, terminal: Terminal, tmp_path: Path) -> None:
    plain = CliRunner().invoke(app, ["preflight", str(cluster.spec), "--accept-new-host-keys"])
    assert plain.exit_code == 2
    assert "--password" in plain.stderr
    missing = preflight(cluster, "--known-hosts", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2
    assert "nowhere" in missing.stderr
    assert cluster.passwords() == {"head": [], "gpu01": []}
