"""`preflight --password` as one call: host keys first (shown, trusted or refused), then the password, sent only
to nodes whose key is trusted, and gpuclus' key installed there.

The order is the security: nothing but the key exchange reaches a node before its host key is trusted, and the
password is asked for only once every new key is. What a person must see or answer goes to a KeyBootstrapObserver
(the CLI asks at the terminal; a test answers in code); nothing here prints or reads the terminal.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpuclus.errors import UsageError
from gpuclus.preflight.hostkeys import HostKeyCheck, pin_host_keys, scan_host_keys
from gpuclus.preflight.keyinstall import install_failure, install_keys

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec


class NewKeys(Enum):
    """How the host keys not trusted yet are to be trusted, decided before they are shown."""

    ACCEPTED = "accepted"  # --accept-new-host-keys: trusted without asking
    ASKING = "asking"  # the observer can ask: trusted only if the person says so
    NO_ONE_TO_ASK = "no_one_to_ask"  # refused: nothing is sent


class KeyBootstrapObserver(Protocol):
    """What the bootstrap shows and asks, in this order."""

    def scanned(self, checks: list[HostKeyCheck]) -> None:
        """Every node's host key and what it is worth; a refused one gets nothing."""

    def can_ask(self) -> bool:
        """Whether someone is there to confirm host keys (a terminal)."""

    def new_keys(self, new: list[HostKeyCheck], how: NewKeys) -> None:
        """The keys not trusted yet, to be seen before anything is decided about them."""

    def trust(self, new: list[HostKeyCheck]) -> bool:
        """Whether the person trusts these keys and wants the password sent (asked only with NewKeys.ASKING)."""

    def password(self, user: str) -> str | None:
        """``user``'s SSH password on the nodes; None when there is no one to ask."""

    def installed(self, node: str) -> None: ...


def bootstrap_keys(
    loaded: LoadedSpec,
    spec_path: Path,
    observer: KeyBootstrapObserver,
    *,
    known_hosts_file: Path | None = None,
    accept_new: bool = False,
) -> list[HostKeyCheck]:
    """Scan, trust, pin, ask the password, install; returns the host key checks.

    A UsageError (exit 2) when new keys were not trusted or no password could be asked: nothing was sent then.
    The nodes that refused or were refused are named in one GpuclusError (exit 4) at the end.
    """
    assert loaded.spec is not None  # a checked spec
    checks = scan_host_keys(loaded, spec_path, known_hosts_file)
    observer.scanned(checks)
    if all(check.refused for check in checks):
        raise install_failure([f"{check.node}: {check.message}" for check in checks], checks)
    new = [check for check in checks if check.status == "new"]
    if new:
        how = NewKeys.ACCEPTED if accept_new else NewKeys.ASKING if observer.can_ask() else NewKeys.NO_ONE_TO_ASK
        observer.new_keys(new, how)
        if how is NewKeys.NO_ONE_TO_ASK:
            raise UsageError(
                f"{len(new)} host key{'s' if len(new) != 1 else ''} to confirm and no terminal to ask in: "
                "nothing was sent",
                "pass --known-hosts FILE (an OpenSSH known_hosts file you prepared, e.g. with ssh-keyscan, its "
                "fingerprints checked out of band) or --accept-new-host-keys",
            )
        if how is NewKeys.ASKING and not observer.trust(new):
            raise UsageError(
                "host keys not trusted: nothing was sent",
                "check the fingerprints on the nodes' consoles (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
                "or pass --known-hosts FILE",
            )
    pin_host_keys(spec_path, checks)
    secret = observer.password(loaded.spec.cluster.admin_user)
    if secret is None:
        raise UsageError("--password needs a terminal to ask for the password")
    install_keys(loaded, spec_path, secret, observer.installed, checks)
    return checks
