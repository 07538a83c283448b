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

from gpuclus.fileio import (
    FileTooLargeError,
    chmod_no_follow,
    read_regular_file,
    refuse_link_or_special,
    write_text_atomic,
)
from gpuclus.state import StateDir

SECRETS_DIR_NAME = "secrets"
MUNGE_KEY = "munge.key"
DB_PASSWORD = "slurmdbd_db_password"
GRAFANA_PASSWORD = "grafana_admin_password"
# Not generated: the spec's monitoring.alert_receiver.webhook_url, kept here because such URLs carry tokens.
WEBHOOK_URL = "alertmanager_webhook_url"
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
    return state.root / SECRETS_DIR_NAME


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
    # A link in a secret's place is refused, never followed: the chmod would
    # change, and the roles would copy to the nodes, a file of someone else's.
    refuse_link_or_special(path)
    if path.exists():
        chmod_no_follow(path, 0o600)
        return
    # O_EXCL + 0600 from the start: the secret is never readable by others,
    # not even for the instant between create and chmod.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(data)


def keep_webhook_url(state: StateDir, url: str | None) -> None:
    """Keep the spec's Alertmanager webhook URL as a secret (0600) for the alertmanager role, or drop it.

    Unlike the generated secrets it follows the spec: written whenever it differs, removed when the spec has
    none, so a URL taken out of the spec does not stay behind with its token.
    """
    if url is None:
        # Nothing to keep: no directory is made for it (a deploy refused before its secrets makes none).
        stale = secrets_directory(state) / WEBHOOK_URL
        if stale.parent.is_dir() and (stale.exists() or stale.is_symlink()):
            refuse_link_or_special(stale)
            stale.unlink()
        return
    path = state.private_dir(secrets_directory(state)) / WEBHOOK_URL
    refuse_link_or_special(path)
    text = url + "\n"
    if not _holds(path, text.encode()):
        write_text_atomic(path, text, 0o600, make_parents=False)
    chmod_no_follow(path, 0o600)


def _holds(path: Path, data: bytes) -> bool:
    try:
        return read_regular_file(path, len(data), follow_symlinks=False) == data
    except (FileNotFoundError, FileTooLargeError):
        return False
