"""A small paramiko wrapper: connect with gpuclus' key, verify host keys, run a command.

Host keys are always checked against gpuclus' known_hosts (RejectPolicy):
the sandbox records them through the container engine before the first
connection, and deploy's preflight learns real nodes' keys explicitly.
paramiko is imported lazily: it is slow to import and `--help` need not pay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


class SshFailure(Exception):
    """Could not reach or log in to a node; the message says which and why."""


def connect(target: SshTarget, timeout: float = 10.0) -> Any:
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(str(target.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            target.address,
            port=target.port,
            username=target.user,
            key_filename=str(target.key_file),
            look_for_keys=False,
            allow_agent=False,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
        )
    except paramiko.BadHostKeyException:
        client.close()
        raise SshFailure(f"{target.address}: host key does not match gpuclus' known_hosts") from None
    except paramiko.SSHException as exc:
        client.close()
        raise SshFailure(f"{target.address}: {exc}") from None
    except OSError as exc:  # socket timeouts are OSErrors too
        client.close()
        raise SshFailure(f"{target.address}:{target.port}: {exc.strerror or exc}") from None
    return client


def run(client: Any, command: str, timeout: float = 60.0) -> CommandResult:
    _stdin, stdout, stderr = client.exec_command(command, timeout=timeout)
    status = stdout.channel.recv_exit_status()
    return CommandResult(status, stdout.read().decode(errors="replace"), stderr.read().decode(errors="replace"))


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
