"""Cluster secrets: generated once into .gpuclus/secrets/ (0700 dir, 0600 files).

Ansible gets the directory's path (gpuclus_secrets_dir), never the values:
roles copy the munge key from it and read passwords with a file lookup in
no_log tasks, so no value lands in run records, artifacts or logs.
"""

from __future__ import annotations

import os
import secrets as random_source
import string
from dataclasses import dataclass
from pathlib import Path

from gpuclus.state import StateDir

MUNGE_KEY = "munge.key"
DB_PASSWORD = "slurmdbd_db_password"
GRAFANA_PASSWORD = "grafana_admin_password"
PASSWORD_LENGTH = 32
# Letters and digits only: these passwords go into INI-like files
# (slurmdbd.conf) where quotes and '#' would need escaping.
_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Secrets:
    directory: Path

    @property
    def munge_key(self) -> Path:
        return self.directory / MUNGE_KEY

    @property
    def db_password(self) -> Path:
        return self.directory / DB_PASSWORD

    @property
    def grafana_password(self) -> Path:
        return self.directory / GRAFANA_PASSWORD

    def values(self) -> list[str]:
        """Every secret as text (for tests that look for leaks); the munge key in hex and raw form."""
        key = self.munge_key.read_bytes()
        return [key.hex(), self.db_password.read_text().strip(), self.grafana_password.read_text().strip()]


def secrets_directory(state: StateDir) -> Path:
    """Where the secrets are (ensure_secrets creates it)."""
    return state.root / "secrets"


def ensure_secrets(state: StateDir) -> Secrets:
    """Create missing secrets; existing ones are kept (rotating them is a deliberate act)."""
    directory = state.private_dir(secrets_directory(state))
    found = Secrets(directory)
    _write_once(found.munge_key, os.urandom(1024))
    for path in (found.db_password, found.grafana_password):
        password = "".join(random_source.choice(_ALPHABET) for _ in range(PASSWORD_LENGTH))
        _write_once(path, (password + "\n").encode())
    return found


def _write_once(path: Path, data: bytes) -> None:
    if path.exists():
        path.chmod(0o600)
        return
    # O_EXCL + 0600 from the start: the secret is never readable by others,
    # not even for the instant between create and chmod.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(data)
