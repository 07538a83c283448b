"""`preflight --password`, first step: every node's host key, read without logging in, and what it is worth."""

from __future__ import annotations

import base64
import hashlib
import hmac
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclus.errors import UsageError
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import FIRST_CONTACT, SshFailure, SshTarget, fingerprint, host_key, key_label, known_hosts_name
from gpuclus.state import StateDir, read_known_hosts_text

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec

SSH_PORT = 22  # every node's SSH port for --password (tests point it at a local server)

# What a node's offered host key is, against what gpuclus and the admin know:
#   pinned    matches a key in gpuclus' known_hosts that was trusted (sandbox, confirmed, --known-hosts)
#   listed    matches the admin's --known-hosts FILE
#   new       unknown, or only learned on first contact by an earlier preflight: needs a confirmation
#   changed   differs from the key in gpuclus' known_hosts: refused
#   mismatch  differs from the admin's --known-hosts FILE: refused
#   unreachable  no key was read: refused
REFUSED = frozenset({"changed", "mismatch", "unreachable"})


@dataclass
class HostKeyCheck:
    node: str
    address: str
    status: str
    key_type: str = ""  # ssh-ed25519, as in known_hosts
    key: str = ""  # the base64 blob
    message: str = ""

    @property
    def refused(self) -> bool:
        return self.status in REFUSED

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key) if self.key else ""

    def describe(self) -> str:
        """head (10.0.0.10): ED25519 key SHA256:..., as ssh shows a new host's key."""
        if not self.key:
            return f"{self.node} ({self.address})"
        return f"{self.node} ({self.address}): {key_label(self.key_type)} key {self.fingerprint}"

    def offered(self) -> str:
        return f"{self.address} offers {key_label(self.key_type)} key {self.fingerprint}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "address": self.address,
            "status": self.status,
            "type": key_label(self.key_type) if self.key_type else None,
            "fingerprint": self.fingerprint or None,
            "key": f"{self.key_type} {self.key}" if self.key else None,
            "message": self.message,
        }


@dataclass(frozen=True)
class KnownKey:
    names: str  # the line's host field: names and patterns, plain or hashed, comma-separated
    key_type: str
    key: str
    first_contact: bool  # learned on first contact by a preflight, never confirmed

    def matches(self, name: str) -> bool:
        return any(_name_matches(pattern, name) for pattern in self.names.split(","))


def read_known_hosts(path: Path) -> list[KnownKey]:
    """An OpenSSH known_hosts file's keys (marker lines such as @revoked skipped); a missing file holds none."""
    try:
        text = read_known_hosts_text(path)
    except FileNotFoundError:
        return []
    keys = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith(("#", "@")):
            keys.append(KnownKey(fields[0], fields[1], fields[2], FIRST_CONTACT in fields[3:]))
    return keys


def _name_matches(pattern: str, name: str) -> bool:
    if not pattern.startswith("|1|"):
        return pattern == name
    # HashKnownHosts: |1|base64(salt)|base64(HMAC-SHA1(salt, name))
    try:
        salt, digest = (base64.b64decode(part) for part in pattern[3:].split("|", 1))
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def scan_host_keys(
    loaded: LoadedSpec, spec_path: Path, known_hosts_file: Path | None = None, timeout: float = 10.0
) -> list[HostKeyCheck]:
    """Every node's host key, read without logging in (all nodes in parallel), and what it is worth.

    Nothing is sent to a node but the key exchange, and nothing is written.
    ``known_hosts_file``: the admin's OpenSSH known_hosts file, whose keys are
    trusted; a missing or unreadable one is a UsageError (exit 2).
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    user = loaded.spec.cluster.admin_user
    ours = read_known_hosts(state.known_hosts)
    theirs: list[KnownKey] = []
    if known_hosts_file is not None:
        try:
            if not known_hosts_file.is_file():
                raise FileNotFoundError(2, "no such file", str(known_hosts_file))
            theirs = read_known_hosts(known_hosts_file)
        except OSError as problem:
            raise UsageError(
                f"--known-hosts {known_hosts_file}: {problem.strerror or problem}",
                "pass an OpenSSH known_hosts file, e.g. from ssh-keyscan, whose fingerprints you checked",
            ) from None

    def one(node: Node) -> HostKeyCheck:
        name = known_hosts_name(node.address, SSH_PORT)
        pinned = [known for known in ours if known.matches(name)]
        listed = [known for known in theirs if known.matches(name)]
        prefer = (pinned or listed)[0].key_type if pinned or listed else None
        target = SshTarget(node.address, user, state.private_key, state.known_hosts, SSH_PORT)
        try:
            key_type, key = host_key(target, timeout, prefer)
        except SshFailure as failure:
            return HostKeyCheck(node.name, node.address, "unreachable", message=str(failure))
        check = HostKeyCheck(node.name, node.address, "new", key_type, key)
        same = [known for known in pinned if (known.key_type, known.key) == (key_type, key)]
        if any(not known.first_contact for known in same):
            check.status, check.message = "pinned", "matches .gpuclus/ssh/known_hosts"
        elif pinned and not same:
            check.status = "changed"
            check.message = f"{check.offered()}, not the key in .gpuclus/ssh/known_hosts"
        elif any((known.key_type, known.key) == (key_type, key) for known in listed):
            check.status, check.message = "listed", f"matches {known_hosts_file}"
        elif listed:
            check.status = "mismatch"
            check.message = f"{check.offered()}, not the key in {known_hosts_file}"
        elif same:
            check.message = "learned on first contact by an earlier preflight, never confirmed"
        else:
            check.message = "not seen before"
        return check

    nodes = loaded.topology.nodes
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
        return list(pool.map(one, nodes))


def pin_host_keys(spec_path: Path, checks: list[HostKeyCheck]) -> None:
    """Record the new and listed keys in gpuclus' known_hosts as trusted (call it once the admin trusted them)."""
    entries = {
        known_hosts_name(check.address, SSH_PORT): [f"{check.key_type} {check.key}"]
        for check in checks
        if check.status in {"new", "listed"}
    }
    if entries:
        StateDir.beside(spec_path).set_known_host_keys(entries)
