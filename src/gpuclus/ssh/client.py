"""gpuclus' one SSH client (paramiko): connect with gpuclus' key, verify host keys, run a command.

Every SSH connection in gpuclus comes from here: preflight, the sandbox,
validate (whose channels with deadlines, slurm/remote.py, open on a
connection from connect() through open_channel()).

Host keys are always checked against gpuclus' known_hosts (RejectPolicy):
the sandbox records them through the container engine before the first
connection, and deploy's preflight learns real nodes' keys explicitly
(marked as learned on first contact, so that `preflight --password` still
asks before sending a password to them). host_key() reads a server's key
without logging in, for showing its fingerprint first.
paramiko is imported lazily: it is slow to import and `--help` need not pay.
"""

from __future__ import annotations

import base64
import errno
import functools
import hashlib
import logging
import os
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file


@dataclass(frozen=True)
class SshTarget:
    address: str
    user: str
    key_file: Path
    known_hosts: Path
    port: int = 22


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str


class SshFailure(GpuclusError):
    """Could not reach or log in to a node; the message says which and why (exit 4)."""

    exit_code = ExitCode.UNREACHABLE


# The comment that ends a known_hosts line gpuclus learned on first contact
# (accept-new): the key was never confirmed by anyone, so no password goes to it.
FIRST_CONTACT = "gpuclus:first-contact"

_KEY_LABELS = {"ssh-ed25519": "ED25519", "ssh-rsa": "RSA", "ssh-dss": "DSA"}


def known_hosts_name(address: str, port: int = 22) -> str:
    """A host's name in known_hosts, as OpenSSH writes it: [address]:port for a port other than 22."""
    return address if port == 22 else f"[{address}]:{port}"


def fingerprint(key_base64: str) -> str:
    """SHA256:... of a public key blob, as `ssh-keygen -l` and ssh print it."""
    digest = hashlib.sha256(base64.b64decode(key_base64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def key_label(key_type: str) -> str:
    """ED25519, ECDSA, RSA: a key type as `ssh-keygen -l` names it."""
    if key_type.startswith("ecdsa-"):
        return "ECDSA"
    return _KEY_LABELS.get(key_type, key_type.upper())


def host_key(target: SshTarget, timeout: float = 10.0, prefer: str | None = None) -> tuple[str, str]:
    """The key type and base64 blob a server offers, read without logging in (nothing is sent but the key exchange).

    prefer: ask for this key type first (the one a known_hosts file holds for
    the host), as paramiko's client does when it connects.
    """
    import paramiko

    _quiet_paramiko()
    try:
        sock = socket.create_connection((target.address, target.port), timeout=timeout)
    except OSError as exc:
        raise SshFailure(f"{target.address}:{target.port}: {exc.strerror or exc}") from None
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = timeout
        if prefer is not None:
            options = transport.get_security_options()
            wanted = ["rsa-sha2-512", "rsa-sha2-256"] if prefer == "ssh-rsa" else [prefer]
            offered = list(options.key_types)
            options.key_types = [*[t for t in wanted if t in offered], *[t for t in offered if t not in wanted]]
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return str(key.get_name()), str(key.get_base64())
    except (paramiko.SSHException, EOFError) as exc:
        raise SshFailure(f"{target.address}: {str(exc) or type(exc).__name__}") from None
    except OSError as exc:
        raise SshFailure(f"{target.address}:{target.port}: {exc.strerror or exc}") from None
    finally:
        transport.close()


@functools.cache
def _quiet_paramiko() -> None:
    # paramiko logs a traceback ("Exception (client): Error reading SSH protocol
    # banner") when a host drops the connection early; with no handler set,
    # Python prints it on stderr. The exception it raises is what gpuclus
    # reports, one line per host.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())


# Seconds between tries when a server closes the connection before the login
# (5 tries, 31 s in all). OpenSSH 9.8 and later (Debian 13, Ubuntu 24.10) close
# every connection from an address it penalises (PerSourcePenalties: failed
# logins, connections that never log in, such as host-key reads, add up to 15 s
# and more), and a busy sshd drops new connections past MaxStartups; both pass.
# A host that does not answer at all (timeout, refused, no route) is not retried.
DROPPED_RETRY_DELAYS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)


def connect(target: SshTarget, timeout: float = 10.0, *, accept_new: bool = False, password: str | None = None) -> Any:
    """An authenticated paramiko client.

    accept_new: a host seen for the first time has its key recorded in
    gpuclus' known_hosts (OpenSSH's StrictHostKeyChecking=accept-new, as the
    Ansible runs use); a key that differs from the recorded one is always
    refused. password: log in with it instead of gpuclus' key (bootstrap).
    A connection the server drops before the login is tried again
    (DROPPED_RETRY_DELAYS).
    """
    for delay in (*DROPPED_RETRY_DELAYS, None):
        try:
            return _connect_once(target, timeout, accept_new=accept_new, password=password)
        except _DroppedBeforeLogin as dropped:
            if delay is None:
                raise SshFailure(
                    f"{target.address}: the server closed the connection before the login, "
                    f"{len(DROPPED_RETRY_DELAYS) + 1} times ({dropped})"
                ) from None
            time.sleep(delay)
    raise AssertionError("unreachable")  # the loop returns or raises


class _DroppedBeforeLogin(Exception):
    """The server closed the connection during the banner or the key exchange."""


def _connect_once(target: SshTarget, timeout: float, *, accept_new: bool, password: str | None) -> Any:
    import paramiko

    _quiet_paramiko()
    client = paramiko.SSHClient()
    _load_known_hosts(client, target.known_hosts)
    if password is None:
        _require_key_file(target.key_file)
    client.set_missing_host_key_policy(
        _accept_new_policy(target.known_hosts) if accept_new else paramiko.RejectPolicy()
    )
    credentials: dict[str, Any] = (
        {"password": password} if password is not None else {"key_filename": str(target.key_file)}
    )
    try:
        client.connect(
            target.address,
            port=target.port,
            username=target.user,
            look_for_keys=False,
            allow_agent=False,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            **credentials,
        )
    except paramiko.BadHostKeyException:
        client.close()
        raise SshFailure(f"{target.address}: host key does not match gpuclus' known_hosts") from None
    except (EOFError, ConnectionResetError) as exc:
        client.close()
        raise _DroppedBeforeLogin(type(exc).__name__) from None
    except paramiko.SSHException as exc:
        client.close()
        # paramiko words a banner cut off and a banner never sent alike; what it caught tells them apart.
        if isinstance(exc.__cause__ or exc.__context__, EOFError | ConnectionResetError):
            raise _DroppedBeforeLogin(str(exc)) from None
        raise SshFailure(f"{target.address}: {exc}") from None
    except OSError as exc:  # socket timeouts are OSErrors too
        client.close()
        raise SshFailure(f"{target.address}:{target.port}: {exc.strerror or exc}") from None
    return client


# gpuclus' known_hosts holds one line per key of a node (a 10,000-node cluster's is about 3 MB); its private
# key is one short PEM file. paramiko would open either itself, and block on a FIFO put in its place.
MAX_KNOWN_HOSTS_BYTES = 64 * 1024 * 1024
MAX_PRIVATE_KEY_BYTES = 64 * 1024
_STATE_FILE_HINT = "gpuclus keeps this file itself: move what is in its place away, then run `gpuclus preflight`"


def _load_known_hosts(client: Any, path: Path) -> None:
    """The host keys of gpuclus' known_hosts, read bounded, each line parsed as paramiko's load_host_keys does."""
    from paramiko.hostkeys import HostKeyEntry, InvalidHostKey
    from paramiko.ssh_exception import SSHException

    try:
        data = read_regular_file(path, MAX_KNOWN_HOSTS_BYTES)
    except FileNotFoundError:
        return
    except (OSError, NotRegularFileError, FileTooLargeError) as exc:
        raise UsageError(f"{path}: cannot read gpuclus' known_hosts: {_unreadable(exc)}", _STATE_FILE_HINT) from None
    keys = client.get_host_keys()
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line)
        except (SSHException, InvalidHostKey, ValueError):
            continue  # a line paramiko cannot read is skipped (load_host_keys would stop at a bad base64 one)
        if entry is not None:
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)


def _require_key_file(path: Path) -> None:
    """Refuse a key file paramiko would block on (a FIFO) or read without end (a device), before it opens it."""
    try:
        read_regular_file(path, MAX_PRIVATE_KEY_BYTES)
    except FileNotFoundError:
        return  # paramiko's own error names it
    except (OSError, NotRegularFileError, FileTooLargeError) as exc:
        raise UsageError(f"{path}: cannot read gpuclus' SSH key: {_unreadable(exc)}", _STATE_FILE_HINT) from None


def _unreadable(problem: Exception) -> str:
    if isinstance(problem, NotRegularFileError):
        return f"it is {problem.kind}"
    if isinstance(problem, FileTooLargeError):
        return f"it holds more than {problem.limit} bytes"
    return problem.strerror if isinstance(problem, OSError) and problem.strerror else type(problem).__name__


def is_auth_failure(message: str) -> bool:
    """Did the server refuse the login (wrong user, key not installed), as opposed to not answering?"""
    lowered = message.lower()
    return "authentication" in lowered or "permission denied" in lowered or "no authentication methods" in lowered


def _accept_new_policy(known_hosts: Path) -> Any:
    import paramiko

    class AcceptNew(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]  # paramiko is untyped
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            client.get_host_keys().add(hostname, key.get_name(), key)
            known_hosts.parent.mkdir(parents=True, exist_ok=True)
            line = f"{hostname} {key.get_name()} {key.get_base64()} {FIRST_CONTACT}\n"
            with _open_known_hosts_for_append(known_hosts) as stream:
                stream.write(line)

    return AcceptNew()


def _open_known_hosts_for_append(known_hosts: Path) -> Any:
    # Never through a link: one planted in .gpuclus/ssh/ would have gpuclus
    # append to, and chmod, a file of someone else's.
    try:
        descriptor = os.open(known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UsageError(
            f"{known_hosts} is a symbolic link; gpuclus does not write through links",
            f"remove the link (rm {known_hosts}) and run the command again",
        ) from None
    os.fchmod(descriptor, 0o600)
    return os.fdopen(descriptor, "a", encoding="utf-8")


def install_key(target: SshTarget, password: str, public_key: str) -> None:
    """Log in with a password once and add gpuclus' public key to authorized_keys (like ssh-copy-id).

    The host's key must already be in gpuclus' known_hosts (RejectPolicy): a
    password never goes to a host whose key nobody trusted.
    """
    client = connect(target, password=password)
    try:
        quoted = shlex.quote(public_key)
        result = run(
            client,
            "umask 077 && mkdir -p ~/.ssh && touch ~/.ssh/authorized_keys && "
            f"(grep -qxF {quoted} ~/.ssh/authorized_keys || printf '%s\\n' {quoted} >> ~/.ssh/authorized_keys)",
        )
    finally:
        client.close()
    if result.exit_status != 0:
        raise SshFailure(f"{target.address}: could not install gpuclus' key: {result.stderr.strip()}")


def open_channel(client: Any, timeout: float, peer: str = "the node") -> Any:
    """A new session channel on ``client``'s connection, for a caller that reads it itself.

    A connection that is gone becomes an OSError, as a broken socket would,
    so callers handle one kind of "the connection dropped".
    """
    import paramiko

    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise OSError(f"the SSH session to {peer} is closed")
    try:
        return transport.open_session(timeout=timeout)
    except paramiko.SSHException as problem:  # "SSH session not active", "Timeout opening channel."
        raise OSError(str(problem)) from None


def run(client: Any, command: str, timeout: float = 60.0) -> CommandResult:
    _stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    # Output first, to its end of file, then the status: the status can arrive
    # before the last output, and a command whose output fills the channel's
    # window would wait for a reader that is waiting for its exit.
    out, err = stdout.read(), stderr.read()
    status = stdout.channel.recv_exit_status()
    return CommandResult(status, out.decode(errors="replace"), err.decode(errors="replace"))


def run_once(target: SshTarget, command: str, *, timeout: float = 60.0, attempts: int = 1) -> CommandResult:
    """Connect, run one command, disconnect; retry the connection while sshd is starting."""
    last: SshFailure | None = None
    for attempt in range(attempts):
        try:
            client = connect(target)
        except SshFailure as failure:
            last = failure
            if attempt + 1 < attempts:
                time.sleep(1.0)
            continue
        try:
            return run(client, command, timeout)
        finally:
            client.close()
    assert last is not None
    raise last
