"""The controller's session: one SSH connection to the controller, and whether Slurm is there at all.

validate, nodes, users and the rolling upgrade open it the same way, so a refused login or a controller
without Slurm reads the same whichever command met it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import Remote
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.topology import Topology
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget, connect, is_auth_failure


class ControllerSession(Protocol):
    """What a workflow needs of the controller's session (Remote; a fake in a workflow's tests)."""

    def run(self, command: str, timeout: float = ...) -> CommandResult: ...

    def close(self) -> None: ...


# connect_controller's shape: a workflow takes it as a parameter, so its tests need no SSH.
Connect = Callable[[ClusterSpec, Topology, Path, Path], ControllerSession]


def connect_controller(spec: ClusterSpec, topology: Topology, key_file: Path, known_hosts: Path) -> Remote:
    controller = topology.controller
    assert controller is not None  # a checked spec has one
    target = SshTarget(controller.address, spec.cluster.admin_user, key_file, known_hosts)
    try:
        return Remote(connect(target))
    except SshFailure as failure:
        raise SshFailure(
            f"controller {controller.name} unreachable: {failure.message}",
            controller_hint(failure.message, spec.cluster.admin_user),
        ) from None


def controller_hint(message: str, admin_user: str) -> str:
    """What to do when SSH to the controller failed: a login refused is not a host that is down."""
    if "host key" in message:
        return "the controller's host key changed: if it was reinstalled, remove its line from .gpuclus/ssh/known_hosts"
    if is_auth_failure(message):
        return (
            f"the controller refused gpuclus' key as {admin_user}: check cluster.admin_user in the spec, and run "
            "validate from the directory the cluster was deployed from (its .gpuclus/ssh/ holds the key the nodes "
            "know); `gpuclus preflight` shows it for every node"
        )
    return "is it up and is sshd running? `gpuclus preflight` checks every node"


def require_slurm(remote: Remote, controller: str, spec_path: Path | None = None) -> None:
    """Stop before any check when the controller has no Slurm at all: the one thing to say is "deploy first"."""
    missing = slurm.not_deployed(remote.run("scontrol ping", timeout=30))
    if missing is not None:
        raise slurm.SlurmNotDeployed(controller, missing, spec_path)
