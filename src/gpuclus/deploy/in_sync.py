"""Skipping a deploy that would change nothing: every node still holds what the last full deploy left there.

A no-change deploy costs the control machine ~10 CPU-s per node (docs/scale.md): about 136 task results per
node, most of which never reach it. When nothing changed on either side, none of that work can change
anything, so `gpuclus deploy` first asks whether anything did: ~1.5 CPU-s in all plus a few hundredths per
node on the control machine (benchmarks/README.md):

- on the control machine, the run key: the render's digest (node_stamps.render_digest), gpuclus' version, the
  playbooks and roles it ships, the secrets, the SSH public key and the spec's control-machine files it hands
  out, and the phases;
- on every node, its fingerprint: one SHA-256 the node computes itself (FINGERPRINT_SCRIPT) over its deploy
  stamp, boot, kernel, installed packages, running services and unit files' states, and the name, type, size,
  mode, owner and change time (ctime, which no tool can set back) of everything under /etc, /opt, /usr/local
  and /var/lib/gpuclus.

After a successful full deploy gpuclus reads each node's fingerprint and keeps it with the run key in
.gpuclus/in-sync.json. The next plain deploy skips Ansible only when every node of the run has an entry with
today's run key and answers with the same fingerprint; anything else (a node that does not answer, a package
removed, a service stopped, a file under those trees edited, chmod'ed or restored with `cp -p`, a reboot, a
spec or gpuclus change) is a full deploy as before. Any other run (some phases only, a failure, a reset)
forgets its nodes' entries, so what it did is never mistaken for the full deploy's state.

What the fingerprint does not see (docs/deploy.md#nothing-to-do says so): files outside those trees (home
directories, the NFS share's content), runtime settings changed without a file (`sysctl -w`, a mount unmounted
by hand) and a service that is running with a changed runtime state. `gpuclus deploy --full` runs every task regardless,
and validate's config stage checks drift on its own terms.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclus import __version__
from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_json_file, read_regular_file, write_text_atomic
from gpuclus.resources import data_dir
from gpuclus.ssh.client import SshFailure, SshTarget, connect, run
from gpuclus.state import StateDir

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec

STORE_NAME = "in-sync.json"
# in-sync.json holds three short strings per node: a 10,000-node cluster's is about 2 MB.
MAX_STORE_BYTES = 16 * 1024 * 1024
# The files hashed by content are small (secrets, the SSH key, the users file, the roles' files); one past this
# is not read: its size stands in for its content (the spec's own checks refuse such inputs anyway).
MAX_HASHED_BYTES = 64 * 1024 * 1024
# A node that does not answer within these is not in sync: the deploy runs and its preflight names the node.
CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 30.0
# What the node hashes; one line of output, the hex digest. Files that the OS itself rewrites while running
# (a DHCP client's resolv.conf, hwclock's adjtime) are left out so they do not make every deploy a full one.
_TREES = "/etc /opt /usr/local /var/lib/gpuclus"
_VOLATILE = ("/etc/resolv.conf", "/etc/adjtime", "/etc/ld.so.cache")
FINGERPRINT_SCRIPT = (
    "export LC_ALL=C; {"
    " cat /var/lib/gpuclus/deployed.json 2>/dev/null || echo no-stamp;"
    " cat /proc/sys/kernel/random/boot_id; uname -r;"
    f" find {_TREES} -xdev \\( "
    + " -o ".join(f"-path {path}" for path in _VOLATILE)
    + " \\) -prune -o -printf '%p %y %s %m %U %G %C@ %l\\n' 2>/dev/null | sort;"
    " if command -v dpkg-query >/dev/null; then dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n';"
    " else rpm -qa | sort; fi;"
    # The admin's own login (this probe's) starts user@UID.service: users' sessions are not the node's state.
    " systemctl list-units --type=service --state=running --no-legend --plain"
    " | awk '{print $1}' | grep -v -e '^user@' -e '^user-runtime-dir@' | sort;"
    " systemctl list-unit-files --no-legend --plain | awk '{print $1, $2}' | sort;"
    " } | sha256sum | cut -d' ' -f1"
)
_COMMAND = "sudo -n /bin/sh -c " + shlex.quote(FINGERPRINT_SCRIPT)


# The spec's fields that name files or directories on the control machine, whose content the playbooks hand
# to the nodes (every field checked by models._control_path; a unit test keeps the two lists equal).
CONTROL_INPUTS = (
    ("containers", "artifacts_dir"),
    ("containers", "credentials_file"),
    ("monitoring", "alert_receiver", "webhook_url_file"),
    ("pytorch", "wheelhouse"),
    ("users", "file"),
    ("users", "directory", "bind_password_file"),
    ("users", "directory", "ca_cert_file"),
)


def control_inputs(loaded: LoadedSpec, spec_path: Path) -> list[Path]:
    """The control machine's files and directories this spec hands to the nodes, resolved as the playbooks do."""
    found = []
    for fields in CONTROL_INPUTS:
        value: Any = loaded.spec
        for name in fields:
            value = getattr(value, name, None)
        if isinstance(value, str):
            found.append(spec_path.parent / value)  # an absolute value stays itself
    return found


def run_key(
    rendered: dict[str, str], phases: Iterable[str], secrets_dir: Path, public_key: Path, inputs: Iterable[Path] = ()
) -> str:
    """What the control machine would hand the nodes: equal keys, equal inputs.

    Files count by content (secrets only ever as this digest); a directory of release files or wheels by its
    listing (name, size, modification time), which changes when a file is replaced, without reading gigabytes.
    """
    from gpuclus.deploy.node_stamps import render_digest

    digest = hashlib.sha256()
    digest.update(f"render\0{render_digest(rendered)}\0gpuclus\0{__version__}\0".encode())
    digest.update(("phases\0" + ",".join(phases) + "\0").encode())
    for name in ("playbooks", "roles"):
        _hash_tree(digest, data_dir(name), name, content=True)
    _hash_tree(digest, secrets_dir, "secrets", content=True)
    _hash_file(digest, public_key, "key")
    for path in inputs:
        if path.is_dir():
            _hash_tree(digest, path, str(path), content=False)
        else:
            _hash_file(digest, path, str(path))
    return digest.hexdigest()


def _hash_file(digest: Any, path: Path, label: str) -> None:
    try:
        content = read_regular_file(path, MAX_HASHED_BYTES)
    except FileTooLargeError as problem:
        content = b""
        label += f"\0over {problem.limit} bytes: {problem.size}"
    except (OSError, NotRegularFileError):
        # Absent, unreadable, or a FIFO or device (whose read would block or never end): the deploy says so.
        content = b""
        label += "\0missing"
    digest.update(f"{label}\0{len(content)}\0".encode() + content)


def _hash_tree(digest: Any, root: Path, label: str, *, content: bool) -> None:
    if not root.is_dir():
        digest.update(f"{label}\0missing\0".encode())
        return
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        name = f"{label}/{path.relative_to(root)}"
        if content:
            _hash_file(digest, path, name)
        else:
            info = path.stat()
            digest.update(f"{name}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())


@dataclass(frozen=True)
class Verdict:
    """Whether a deploy can be skipped, and why not when it cannot."""

    in_sync: bool
    reason: str  # what differs, for the terminal ("" when in sync)
    since: str | None = None  # the run whose state every node still holds


# (loaded spec, spec path, node names) -> each node's fingerprint, None where it could not be read.
Probe = Callable[["LoadedSpec", Path, list[str]], dict[str, str | None]]


def store_path(state: StateDir) -> Path:
    return state.root / STORE_NAME


def read_store(state: StateDir) -> dict[str, dict[str, str]]:
    """node -> {key, fingerprint, run}; an unreadable or foreign file counts as empty (the deploy runs)."""
    try:
        data = read_json_file(store_path(state), MAX_STORE_BYTES)
    except (OSError, ValueError, NotRegularFileError, FileTooLargeError):
        return {}
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        return {}
    return {
        name: entry
        for name, entry in nodes.items()
        if isinstance(entry, dict) and all(isinstance(entry.get(field), str) for field in ("key", "fingerprint", "run"))
    }


def _write_store(state: StateDir, nodes: dict[str, dict[str, str]]) -> None:
    text = json.dumps({"nodes": dict(sorted(nodes.items()))}, indent=2) + "\n"
    write_text_atomic(store_path(state), text, 0o600)


def remember(state: StateDir, key: str, run_id: str, fingerprints: dict[str, str | None]) -> None:
    """After a successful full deploy: each node's fingerprint under this run key; a node that did not
    answer loses its entry (its next deploy runs)."""
    nodes = read_store(state)
    for name, fingerprint in fingerprints.items():
        if fingerprint is None:
            nodes.pop(name, None)
        else:
            nodes[name] = {"key": key, "fingerprint": fingerprint, "run": run_id}
    _write_store(state, nodes)


def forget(state: StateDir, names: Iterable[str] | None = None) -> None:
    """After any other run that may have changed nodes: their entries go (all of them when ``names`` is None)."""
    path = store_path(state)
    if not path.exists():
        return
    if names is None:
        path.unlink(missing_ok=True)
        return
    nodes = read_store(state)
    kept = {name: entry for name, entry in nodes.items() if name not in set(names)}
    if kept != nodes:
        _write_store(state, kept)


def judge(state: StateDir, key: str, names: list[str], read: Callable[[list[str]], dict[str, str | None]]) -> Verdict:
    """In sync when every node has an entry under ``key`` and ``read`` gives its recorded fingerprint.

    ``read`` (SSH) is called only when every entry matches the key: after a spec change no node is asked.
    """
    entries = read_store(state)
    missing = [name for name in names if name not in entries]
    if missing:
        return Verdict(False, f"no full deploy recorded for {_few(missing)}")
    if any(entries[name]["key"] != key for name in names):
        return Verdict(False, "the spec, gpuclus or what it hands the nodes changed since the last full deploy")
    answers = read(names)
    silent = [name for name in names if answers.get(name) is None]
    if silent:
        return Verdict(False, f"no fingerprint from {_few(silent)}")
    changed = [name for name in names if answers[name] != entries[name]["fingerprint"]]
    if changed:
        return Verdict(False, f"changed since the last full deploy: {_few(changed)}")
    runs = sorted({entries[name]["run"] for name in names})
    return Verdict(True, "", runs[-1])


def _few(names: list[str]) -> str:
    from gpuclus.spec import hostlist

    return hostlist.compress(sorted(names))


def read_fingerprint(target: SshTarget) -> str:
    """One node's fingerprint over SSH (SshFailure when it cannot be had)."""
    import paramiko

    client = connect(target, timeout=CONNECT_TIMEOUT)
    try:
        result = run(client, _COMMAND, timeout=COMMAND_TIMEOUT)
    except (OSError, paramiko.SSHException) as problem:
        raise SshFailure(f"{target.address}: {problem or type(problem).__name__}") from None
    finally:
        client.close()
    answer = result.stdout.strip()
    if result.exit_status != 0 or len(answer) != 64:
        raise SshFailure(f"{target.address}: no fingerprint (exit {result.exit_status})")
    return answer


def read_fingerprints(loaded: LoadedSpec, spec_path: Path, names: list[str]) -> dict[str, str | None]:
    """Every named node's fingerprint, in parallel, with gpuclus' key and known_hosts (no new host key)."""
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    addresses = {node.name: node.address for node in loaded.topology.nodes}
    user = loaded.spec.cluster.admin_user

    def one(name: str) -> str | None:
        try:
            return read_fingerprint(SshTarget(addresses[name], user, state.private_key, state.known_hosts))
        except SshFailure:
            return None

    if not names or not state.private_key.exists():
        return dict.fromkeys(names)
    with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))
