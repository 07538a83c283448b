"""The deploy stamp: what each node itself says gpuclus deployed there last.

A full deploy (every phase the spec needs; `--limit` is fine) ends with
playbooks/stamp.yml, whose deploy_stamp role writes STAMP_PATH on every node
that completed the run: the digest of the rendered inputs and the gpuclus
version. `gpuclus plan` reads it back over SSH, so a node that was recreated
(empty, no stamp) is never reported as matching the last deploy just because
the local copy in .gpuclus/last-applied/ does.

The digest leaves out what depends on the control machine rather than the
cluster: ansible.cfg (absolute paths of the spec's .gpuclus/) and comment
lines (the header names the spec's file; gpuclus' version is in the stamp on
its own). The same spec rendered in two directories gives the
same digest.
"""

from __future__ import annotations

import enum
import hashlib
import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclus.fileio import parse_json
from gpuclus.render.files import ANSIBLE_CFG
from gpuclus.ssh.client import SshFailure, SshTarget, connect, run
from gpuclus.state import StateDir

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec

# Where the deploy_stamp role writes it (its default deploy_stamp_path; a unit test keeps both equal).
STAMP_PATH = "/var/lib/gpuclus/deployed.json"
# A node that does not answer within this is reported unreachable; plan must not wait on it.
CONNECT_TIMEOUT = 5.0
COMMAND_TIMEOUT = 10.0
# The exit status of the read command when the node has no stamp.
_NO_STAMP = 3
_READ = f"test -e {shlex.quote(STAMP_PATH)} || exit {_NO_STAMP}; head -c 4096 -- {shlex.quote(STAMP_PATH)}"


class StampState(enum.StrEnum):
    IN_SYNC = "in_sync"
    OTHER_RENDER = "other_render"
    NOT_DEPLOYED = "not_deployed"
    UNREACHABLE = "unreachable"


_WORDS = {
    StampState.IN_SYNC: "in sync: holds this render",
    StampState.OTHER_RENDER: "deployed from another spec or render",
    StampState.NOT_DEPLOYED: "not deployed by gpuclus (new or recreated node)",
    StampState.UNREACHABLE: "unreachable",
}


def render_digest(rendered: dict[str, str]) -> str:
    """SHA-256 of the rendered inventory and variables, without ansible.cfg and comment lines.

    Comments start at column 0 in the rendered YAML (a block scalar's lines are
    indented), so dropping them cannot hide a change of value.
    """
    digest = hashlib.sha256()
    for path in sorted(rendered):
        if path == ANSIBLE_CFG:
            continue
        text = "".join(line for line in rendered[path].splitlines(keepends=True) if not line.startswith("#"))
        digest.update(f"{path}\0{len(text)}\0{text}".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class NodeStamp:
    node: str
    address: str
    state: StampState
    message: str  # what the stamp says, or why it could not be read
    hint: str = ""
    render_sha256: str | None = None  # the node's stamp, when it has one
    gpuclus_version: str | None = None

    @property
    def words(self) -> str:
        return _WORDS[self.state]

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "address": self.address,
            "message": self.message,
            "hint": self.hint,
            "render_sha256": self.render_sha256,
            "gpuclus_version": self.gpuclus_version,
        }


def judge(node: str, address: str, text: str | None, digest: str) -> NodeStamp:
    """A node's state from its stamp's text (None: it has none) and the current render's digest."""
    if text is None:
        return NodeStamp(
            node,
            address,
            StampState.NOT_DEPLOYED,
            f"no {STAMP_PATH}",
            "a deploy sets it up (a node gets its stamp at the end of a full deploy)",
        )
    try:
        stamp = parse_json(text)  # the node's file: bounded in depth like gpuclus' own
        theirs, version = stamp["render_sha256"], stamp["gpuclus_version"]
        if not isinstance(theirs, str) or not isinstance(version, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        # Not something the deploy_stamp role wrote: nothing says what is deployed there.
        return NodeStamp(
            node,
            address,
            StampState.NOT_DEPLOYED,
            f"{STAMP_PATH} is not a gpuclus deploy stamp",
            "a deploy rewrites it",
        )
    if theirs == digest:
        return NodeStamp(node, address, StampState.IN_SYNC, f"deployed by gpuclus {version}", "", theirs, version)
    return NodeStamp(
        node,
        address,
        StampState.OTHER_RENDER,
        f"its stamp ({theirs[:12]}, gpuclus {version}) is not this render's ({digest[:12]})",
        "a deploy brings it to this spec; another spec or directory may manage this node",
        theirs,
        version,
    )


# (node name, address) -> the stamp's text, or None when the node has none; raises SshFailure.
StampReader = Callable[[str, str], str | None]


def check_nodes(
    nodes: list[tuple[str, str]],
    digest: str,
    reader: StampReader,
    hint_for: Callable[[str], str] = lambda message: "",
) -> list[NodeStamp]:
    """Every node's state, read in parallel, in the order given; an unreachable node is a state, not an error."""

    def one(node: tuple[str, str]) -> NodeStamp:
        name, address = node
        try:
            text = reader(name, address)
        except SshFailure as failure:
            return NodeStamp(name, address, StampState.UNREACHABLE, str(failure), hint_for(str(failure)))
        return judge(name, address, text, digest)

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        return list(pool.map(one, nodes))


def read_stamp(target: SshTarget) -> str | None:
    """The stamp's text on one node over SSH, or None when it has none (SshFailure when unreachable)."""
    import paramiko

    client = connect(target, timeout=CONNECT_TIMEOUT)
    try:
        result = run(client, _READ, timeout=COMMAND_TIMEOUT)
    except (OSError, paramiko.SSHException) as problem:  # the command's deadline, or the connection dropped
        raise SshFailure(f"{target.address}: {problem or type(problem).__name__}") from None
    finally:
        client.close()
    if result.exit_status == _NO_STAMP:
        return None
    if result.exit_status != 0:
        raise SshFailure(f"{target.address}: could not read {STAMP_PATH}: {result.stderr.strip() or 'no reason'}")
    return result.stdout


def check_spec_nodes(loaded: LoadedSpec, spec_path: Path, digest: str) -> list[NodeStamp]:
    """Read every node's stamp with gpuclus' key and known_hosts (never learning a new host key)."""
    from gpuclus.hints import gpuclus_command
    from gpuclus.preflight.runner import SshAdvice, ssh_hint

    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    user = loaded.spec.cluster.admin_user
    nodes = [(node.name, node.address) for node in loaded.topology.nodes]
    if not state.private_key.exists():
        # No key, no login: say so once per node instead of trying.
        return [
            NodeStamp(
                name,
                address,
                StampState.UNREACHABLE,
                f"gpuclus has no SSH key here ({state.private_key})",
                "run gpuclus from the directory where the cluster was set up (its .gpuclus/ holds the key)",
            )
            for name, address in nodes
        ]
    advice = SshAdvice.beside(spec_path)

    def reader(name: str, address: str) -> str | None:
        # Looked up when called, so a test can replace read_stamp.
        return read_stamp(SshTarget(address, user, state.private_key, state.known_hosts))

    def hint_for(message: str) -> str:
        if "not found in known_hosts" in message:
            # plan never learns a host key (RejectPolicy); preflight does, on first contact.
            return f"gpuclus has not seen this node's host key yet: run `{gpuclus_command('preflight', spec_path)}`"
        return ssh_hint(message, user, advice)

    return check_nodes(nodes, digest, reader, hint_for)
