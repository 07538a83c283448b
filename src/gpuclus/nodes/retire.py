"""The last step of a removal, on the removed nodes themselves and on the control machine.

Once slurm.conf no longer names a node, its slurmd would go on trying to
register and fill the controller's log: it is stopped and disabled there
(best effort: a node that is already switched off is the common case, and
nothing else is left to do on it). gpuclus then forgets the node's host key,
so an address reused by a new machine later is not refused as a changed key.
Nothing else on the node is removed: its data stays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget, run_once
from gpuclus.state import StateDir

STOP_SLURMD = "sudo -n systemctl disable --now slurmd 2>&1 || true; systemctl is-active slurmd || true"

Runner = Callable[[SshTarget, str], CommandResult]


@dataclass(frozen=True)
class Retired:
    node: str
    slurmd_stopped: bool
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def retire_nodes(admin_user: str, nodes: list[Node], state: StateDir, runner: Runner | None = None) -> list[Retired]:
    run = runner or (lambda target, command: run_once(target, command, timeout=60))
    outcomes = []
    for node in nodes:
        target = SshTarget(node.address, admin_user, state.private_key, state.known_hosts)
        try:
            answer = run(target, STOP_SLURMD)
        except SshFailure as failure:
            outcomes.append(Retired(node.name, False, failure.message))
            continue
        # is-active prints "inactive" (or "unknown" without the unit) once slurmd is gone.
        last = answer.stdout.strip().splitlines()[-1:] or [""]
        stopped = last[0] != "active"
        problem = None if stopped else f"slurmd still active: {answer.stdout.strip()}"
        outcomes.append(Retired(node.name, stopped, problem))
    state.forget_known_hosts([node.address for node in nodes])
    return outcomes
