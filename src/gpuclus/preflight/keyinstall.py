"""`preflight --password`, last step: gpuclus' public key installed on every node whose host key is trusted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuclus.errors import ExitCode, GpuclusError
from gpuclus.preflight import hostkeys
from gpuclus.preflight.hostkeys import HostKeyCheck, read_known_hosts
from gpuclus.ssh.client import SshFailure, SshTarget, install_key, known_hosts_name
from gpuclus.state import StateDir

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec


def install_keys(
    loaded: LoadedSpec,
    spec_path: Path,
    password: str,
    on_installed: Callable[[str], None],
    host_keys: list[HostKeyCheck],
) -> None:
    """Install gpuclus' public key on every node, logging in with ``password`` (like ssh-copy-id).

    The password goes only to nodes whose host key is pinned as trusted in
    gpuclus' known_hosts (pin_host_keys), and the connection checks the key
    again. ``host_keys`` are scan_host_keys()' answers: a refused node is
    skipped. ``on_installed`` gets each node's name as its key is in place;
    the nodes that refused or were refused are named together in one
    GpuclusError (exit 4) at the end.
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    public_key = state.ensure_ssh_key()
    user = loaded.spec.cluster.admin_user
    checks = {check.node: check for check in host_keys}
    failed = [f"{check.node}: {check.message}" for check in host_keys if check.refused]
    for node in loaded.topology.nodes:
        check = checks.get(node.name)
        if check is None or check.refused:
            continue
        name = known_hosts_name(node.address, hostkeys.SSH_PORT)
        if not any(known.matches(name) and not known.first_contact for known in read_known_hosts(state.known_hosts)):
            failed.append(f"{node.name}: host key not trusted yet, password not sent")
            continue
        try:
            target = SshTarget(node.address, user, state.private_key, state.known_hosts, hostkeys.SSH_PORT)
            install_key(target, password, public_key)
            state.key_not_installed_marker.unlink(missing_ok=True)
            on_installed(node.name)
        except SshFailure as problem:
            failed.append(f"{node.name}: {problem}")
    if failed:
        raise install_failure(failed, host_keys)


def install_failure(failed: list[str], host_keys: list[HostKeyCheck]) -> GpuclusError:
    """The one error that names every node gpuclus' key could not be installed on (exit 4)."""
    hint = None
    if any(check.status in {"changed", "mismatch"} for check in host_keys):
        hint = (
            "compare the refused keys with the node's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on its "
            "console); a reinstalled node: remove its line from .gpuclus/ssh/known_hosts"
        )
    return GpuclusError("could not install gpuclus' key on: " + "; ".join(failed), hint, exit_code=ExitCode.UNREACHABLE)
