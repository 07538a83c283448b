"""The .gpuclus/ state directory: SSH identity, known hosts, and the sandbox record."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gpuclus.sandbox.engine import SandboxError
from gpuclus.sandbox.layout import sandbox_layout
from gpuclus.sandbox.record import SandboxRecord, record_path
from gpuclus.state import STATE_DIR_NAME, StateDir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def host_key_line() -> str:
    public = Ed25519PrivateKey.generate().public_key()
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir.beside(tmp_path / "lab" / "cluster.yaml")


def test_state_dir_lives_beside_the_spec(tmp_path: Path) -> None:
    state = StateDir.beside(tmp_path / "lab" / "cluster.yaml")
    assert state.root == (tmp_path / "lab" / STATE_DIR_NAME).resolve()
    assert state.private_key == state.root / "ssh" / "id_ed25519"
    assert state.public_key == state.root / "ssh" / "id_ed25519.pub"
    assert state.known_hosts == state.root / "ssh" / "known_hosts"


# ensure_ssh_key ---------------------------------------------------------------------------


def test_ensure_ssh_key_creates_a_private_key_pair(state: StateDir) -> None:
    public_line = state.ensure_ssh_key()

    private = state.private_key.read_text()
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert private.rstrip().endswith("-----END OPENSSH PRIVATE KEY-----")
    assert mode(state.private_key) == 0o600
    assert mode(state.ssh_dir) == 0o700
    assert mode(state.root) == 0o700

    assert public_line.startswith("ssh-ed25519 AAAA")
    kind, blob, comment = public_line.split(" ", 2)
    assert comment == "gpuclus@lab"
    assert state.public_key.read_text() == public_line + "\n"
    assert "PRIVATE" not in public_line

    # paramiko (what gpuclus connects with) loads it, and it is the pair of the public line.
    key = paramiko.Ed25519Key.from_private_key_file(str(state.private_key))
    assert key.get_name() == kind == "ssh-ed25519"
    assert key.get_base64() == blob


def test_ensure_ssh_key_is_idempotent(state: StateDir) -> None:
    first = state.ensure_ssh_key()
    private = state.private_key.read_text()
    assert state.ensure_ssh_key() == first
    assert state.private_key.read_text() == private


def test_ensure_ssh_key_makes_an_existing_state_dir_private(state: StateDir) -> None:
    (state.root / "ssh").mkdir(parents=True)
    state.root.chmod(0o755)
    state.ssh_dir.chmod(0o755)
    state.ensure_ssh_key()
    assert mode(state.root) == 0o700
    assert mode(state.ssh_dir) == 0o700


def test_keys_differ_between_state_dirs(tmp_path: Path) -> None:
    one = StateDir.beside(tmp_path / "a" / "c.yaml").ensure_ssh_key()
    two = StateDir.beside(tmp_path / "b" / "c.yaml").ensure_ssh_key()
    assert one.split()[1] != two.split()[1]


# known_hosts ------------------------------------------------------------------------------------


def test_set_known_host_keys_replaces_given_hosts_and_keeps_others(state: StateDir) -> None:
    other, stale, other_port = host_key_line(), host_key_line(), host_key_line()
    state.private_dir(state.ssh_dir)
    state.known_hosts.write_text(f"192.168.1.5 {other}\n\n10.213.0.10 {stale}\n[10.213.0.10]:2222 {other_port}\n")
    head, gpu01 = host_key_line(), host_key_line()

    state.set_known_host_keys({"10.213.0.11": [gpu01], "10.213.0.10": [head]})

    lines = state.known_hosts.read_text().splitlines()
    assert lines == [
        f"192.168.1.5 {other}",
        f"[10.213.0.10]:2222 {other_port}",
        f"10.213.0.10 {head}",
        f"10.213.0.11 {gpu01}",
    ]
    assert mode(state.known_hosts) == 0o600

    # paramiko's RejectPolicy checks against exactly this file.
    known = paramiko.HostKeys(str(state.known_hosts))
    assert known.lookup("10.213.0.10")["ssh-ed25519"].get_base64() == head.split()[1]
    assert known.lookup("10.213.0.11")["ssh-ed25519"].get_base64() == gpu01.split()[1]
    assert known.lookup("192.168.1.5")["ssh-ed25519"].get_base64() == other.split()[1]


def test_set_known_host_keys_creates_the_file(state: StateDir) -> None:
    key = host_key_line()
    state.set_known_host_keys({"10.213.0.10": [key]})
    assert state.known_hosts.read_text() == f"10.213.0.10 {key}\n"
    assert mode(state.known_hosts) == 0o600
    assert mode(state.ssh_dir) == 0o700
    # Again with the same keys: the same file, no duplicates.
    state.set_known_host_keys({"10.213.0.10": [key]})
    assert state.known_hosts.read_text() == f"10.213.0.10 {key}\n"


def test_forget_known_hosts_removes_only_those(state: StateDir) -> None:
    keys = {address: host_key_line() for address in ("10.213.0.10", "10.213.0.11", "192.168.1.5")}
    state.set_known_host_keys({address: [key] for address, key in keys.items()})
    state.forget_known_hosts(["10.213.0.10", "10.213.0.11", "10.213.0.99"])
    assert state.known_hosts.read_text() == f"192.168.1.5 {keys['192.168.1.5']}\n"
    assert mode(state.known_hosts) == 0o600


def test_forget_known_hosts_without_a_file(state: StateDir) -> None:
    state.forget_known_hosts(["10.213.0.10"])
    assert not state.known_hosts.exists()
    assert not state.root.exists()


# The sandbox record -------------------------------------------------------------------------------


def record() -> SandboxRecord:
    layout = sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    return SandboxRecord(layout.cluster, "podman", layout.subnet, "localhost/gpuclus-node:0123456789ab", layout.nodes)


def test_sandbox_record_round_trip(state: StateDir) -> None:
    original = record()
    path = record_path(state)
    assert path == state.root / "sandbox.json"
    path.parent.mkdir(parents=True)
    path.write_text(original.dumps())

    loaded = SandboxRecord.load(path)
    assert loaded == original
    assert loaded is not None
    assert loaded.layout == sandbox_layout("lab", 3, 2, "10.213.0.0/24")
    data = json.loads(path.read_text())
    assert data["nodes"][1] == {
        "name": "lab-gpu01",
        "address": "10.213.0.11",
        "controller": False,
        "gpus": 2,
        "os": "debian12",
    }


def test_sandbox_record_layout_of_a_gpu_less_or_single_node_sandbox() -> None:
    for count, gpus in ((2, 0), (1, 3)):
        layout = sandbox_layout("lab", count, gpus, "10.213.0.0/24")
        rebuilt = replace(record(), nodes=layout.nodes).layout
        assert rebuilt == layout


def test_sandbox_record_missing(state: StateDir) -> None:
    assert SandboxRecord.load(record_path(state)) is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        "[]",
        '"a string"',
        '{"cluster": "lab"}',
        '{"cluster": "lab", "engine": "podman", "subnet": "s", "image": "i", "nodes": [{"name": "x"}]}',
        '{"cluster": "lab", "engine": "podman", "subnet": "s", "image": "i", "nodes": 3}',
    ],
    ids=["bad-json", "empty", "list", "string", "missing-keys", "bad-node", "nodes-not-a-list"],
)
def test_sandbox_record_damaged(tmp_path: Path, text: str) -> None:
    path = tmp_path / "sandbox.json"
    path.write_text(text)
    with pytest.raises(SandboxError, match="is damaged") as caught:
        SandboxRecord.load(path)
    assert str(path) in caught.value.message
    assert caught.value.hint and "sandbox down" in caught.value.hint


def test_knows_host_names_only_addresses_with_a_key_on_port_22(state: StateDir) -> None:
    assert not state.knows_host("10.213.0.10")  # no file yet
    state.private_dir(state.ssh_dir)
    state.known_hosts.write_text(f"[10.213.0.10]:2222 {host_key_line()}\n10.213.0.11 {host_key_line()}\n\n")
    assert state.knows_host("10.213.0.11")
    assert not state.knows_host("10.213.0.10")
    assert not state.knows_host("10.213.0.1")
