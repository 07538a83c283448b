"""Cluster secrets: made once, private, never rotated by accident."""

from __future__ import annotations

import stat
import string
from pathlib import Path

import pytest

from gpuclus.secret_files import DB_PASSWORD, GRAFANA_PASSWORD, MUNGE_KEY, PASSWORD_LENGTH, Secrets, ensure_secrets
from gpuclus.state import StateDir

ALPHANUMERIC = set(string.ascii_letters + string.digits)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir.beside(tmp_path / "cluster.yaml")


def test_creates_every_secret_privately(state: StateDir) -> None:
    secrets = ensure_secrets(state)
    assert secrets.directory == state.root / "secrets"
    assert mode(secrets.directory) == 0o700
    assert mode(state.root) == 0o700
    assert sorted(path.name for path in secrets.directory.iterdir()) == sorted(
        [MUNGE_KEY, DB_PASSWORD, GRAFANA_PASSWORD]
    )
    for path in secrets.directory.iterdir():
        assert mode(path) == 0o600, path


def test_munge_key_is_1024_random_bytes(state: StateDir) -> None:
    key = ensure_secrets(state).munge_key.read_bytes()
    assert len(key) == 1024
    assert len(set(key)) > 100  # random, not a padded or derived value


def test_passwords_are_32_alphanumeric_characters(state: StateDir) -> None:
    secrets = ensure_secrets(state)
    passwords = []
    for path in (secrets.db_password, secrets.grafana_password):
        text = path.read_text()
        assert text.endswith("\n")
        password = text.strip()
        assert len(password) == PASSWORD_LENGTH == 32
        assert set(password) <= ALPHANUMERIC
        passwords.append(password)
    assert passwords[0] != passwords[1]


def test_second_call_keeps_the_values(state: StateDir) -> None:
    first = ensure_secrets(state)
    before = first.values()
    key = first.munge_key.read_bytes()
    second = ensure_secrets(state)
    assert second == first
    assert second.values() == before
    assert second.munge_key.read_bytes() == key


def test_another_cluster_gets_other_values(tmp_path: Path) -> None:
    one = ensure_secrets(StateDir.beside(tmp_path / "a" / "cluster.yaml"))
    two = ensure_secrets(StateDir.beside(tmp_path / "b" / "cluster.yaml"))
    assert not set(one.values()) & set(two.values())


def test_loose_modes_are_tightened(state: StateDir) -> None:
    secrets = ensure_secrets(state)
    secrets.db_password.chmod(0o644)
    secrets.munge_key.chmod(0o666)
    secrets.directory.chmod(0o755)
    before = secrets.values()
    ensure_secrets(state)
    assert mode(secrets.db_password) == 0o600
    assert mode(secrets.munge_key) == 0o600
    assert mode(secrets.directory) == 0o700
    assert secrets.values() == before


def test_existing_secret_written_by_hand_is_kept_and_tightened(state: StateDir) -> None:
    directory = state.root / "secrets"
    directory.mkdir(parents=True)
    (directory / GRAFANA_PASSWORD).write_text("chosen-by-the-admin\n")
    (directory / GRAFANA_PASSWORD).chmod(0o644)
    secrets = ensure_secrets(state)
    assert secrets.grafana_password.read_text() == "chosen-by-the-admin\n"
    assert mode(secrets.grafana_password) == 0o600
    assert len(secrets.munge_key.read_bytes()) == 1024  # the missing ones are still made


def test_values_lists_every_secret(state: StateDir) -> None:
    secrets = ensure_secrets(state)
    values = secrets.values()
    assert values[0] == secrets.munge_key.read_bytes().hex()
    assert values[1:] == [secrets.db_password.read_text().strip(), secrets.grafana_password.read_text().strip()]
    assert Secrets(secrets.directory).values() == values
