"""The questions `gpuclus init` asks in a terminal.

The prompting itself is injected (``ask``, ``confirm``, ``tell``) so that the
CLI can use typer's prompts and tests can answer from a list. Each answer is
checked as it is given and asked again with the reason; what only shows up
across answers (a compute node reusing the controller's address) is left to
the spec checks that run before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gpuclus.errors import UsageError
from gpuclus.initspec.draft import (
    DEFAULT_CONTROLLER_NAME,
    DEFAULT_EXPORTS,
    DEFAULT_GPUS_PER_NODE,
    MAX_GPUS_PER_NODE,
    HostRange,
    SpecDraft,
    admin_user_problem,
    cluster_name_problem,
    expand_names,
    gpu_model_problem,
    parse_exports,
    parse_host_range,
)

# ask(question, default) -> answer. A default of None means an answer is
# required; "" means an empty answer is allowed (and shown without brackets).
Ask = Callable[[str, str | None], str]
# confirm(question, default) -> yes?
Confirm = Callable[[str, bool], bool]
# tell(text): why an answer was refused, or a note.
Tell = Callable[[str], None]

# Stops a script that pipes the same bad answer forever; a person never gets near it.
MAX_ATTEMPTS = 10

T = TypeVar("T")


@dataclass(frozen=True)
class WizardDefaults:
    name: str
    admin_user: str
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    gpu_model: str | None = None
    exports: tuple[str, ...] = DEFAULT_EXPORTS


def ask_until_valid(ask: Ask, tell: Tell, question: str, default: str | None, parse: Callable[[str], T]) -> T:
    """Ask until ``parse`` accepts the answer; its ValueError is the reason told."""
    for _ in range(MAX_ATTEMPTS):
        answer = ask(question, default).strip()
        try:
            return parse(answer)
        except ValueError as exc:
            tell(f"{answer!r} cannot be used: {exc}" if answer else f"an answer is needed: {exc}")
    raise UsageError(f"no usable answer to {question!r} after {MAX_ATTEMPTS} tries")


def _checked(problem: Callable[[str], str | None]) -> Callable[[str], str]:
    def parse(answer: str) -> str:
        reason = problem(answer)
        if reason is not None:
            raise ValueError(reason)
        return answer

    return parse


def _single_node(answer: str) -> str:
    names = expand_names(answer)
    if len(names) != 1:
        raise ValueError(f"names {len(names)} hosts; the controller is one node")
    return names[0]


def _address(name: str) -> Callable[[str], HostRange]:
    def parse(answer: str) -> HostRange:
        return parse_host_range(name, answer)

    return parse


def _gpu_count(answer: str) -> int:
    try:
        count = int(answer)
    except ValueError:
        raise ValueError("give a whole number") from None
    if not 1 <= count <= MAX_GPUS_PER_NODE:
        raise ValueError(f"must be between 1 and {MAX_GPUS_PER_NODE}")
    return count


def _gpu_model(answer: str) -> str | None:
    if not answer:
        return None
    problem = gpu_model_problem(answer)
    if problem is not None:
        raise ValueError(problem)
    return answer


def _names(answer: str) -> str:
    if answer:
        expand_names(answer)
    return answer


def run_wizard(ask: Ask, confirm: Confirm, tell: Tell, defaults: WizardDefaults) -> SpecDraft:
    """Ask for the cluster, node by node, and return the draft to write."""
    name = ask_until_valid(
        ask, tell, "Cluster name (Slurm's ClusterName)", defaults.name, _checked(cluster_name_problem)
    )
    admin_user = ask_until_valid(
        ask,
        tell,
        "Admin user gpuclus logs in as over SSH (needs passwordless sudo on every node)",
        defaults.admin_user,
        _checked(admin_user_problem),
    )
    controller_name = ask_until_valid(
        ask, tell, "Controller host name (runs slurmctld)", DEFAULT_CONTROLLER_NAME, _single_node
    )
    controller = ask_until_valid(
        ask, tell, f"Address of {controller_name} (IP or DNS name)", None, _address(controller_name)
    )

    compute: list[HostRange] = []
    while True:
        names = ask_until_valid(
            ask,
            tell,
            "Compute nodes: a host name or a range like gpu[01-04] (empty when done)",
            "",
            _names,
        )
        if names:
            example = " or a range like 10.0.0.[11-14]" if "[" in names else ""
            compute.append(
                ask_until_valid(ask, tell, f"Addresses of {names} (IP or DNS name{example})", None, _address(names))
            )
            continue
        if compute or confirm(
            f"No compute nodes: should {controller_name} run jobs itself (a single-machine workstation)?",
            True,
        ):
            break

    gpus = ask_until_valid(ask, tell, "GPUs per node", str(defaults.gpus_per_node), _gpu_count)
    model = ask_until_valid(
        ask,
        tell,
        "Short GPU model, e.g. h100 (empty to leave out)",
        defaults.gpu_model or "",
        _gpu_model,
    )
    exports = _ask_exports(ask, confirm, tell, controller_name, admin_user, defaults.exports)
    return SpecDraft(
        name=name,
        admin_user=admin_user,
        controller=controller,
        compute=tuple(compute),
        gpus_per_node=gpus,
        gpu_model=model,
        exports=exports,
    )


def _ask_exports(
    ask: Ask, confirm: Confirm, tell: Tell, controller: str, admin_user: str, default: tuple[str, ...]
) -> tuple[str, ...]:
    while True:
        exports = ask_until_valid(
            ask,
            tell,
            f"Directories {controller} shares over NFS (space-separated; 'none' for no NFS)",
            " ".join(default) or "none",
            parse_exports,
        )
        if "/home" not in exports or confirm(
            f"Mounting {controller}'s /home on the compute nodes hides their own home directories, "
            f"including ~{admin_user}/.ssh/authorized_keys that gpuclus logs in with. Share /home anyway?",
            False,
        ):
            return exports
