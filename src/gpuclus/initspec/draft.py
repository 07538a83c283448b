"""What `gpuclus init` is about to write: hosts, roles, GPUs and shared directories.

Flags, a hosts file and the wizard all end in a ``SpecDraft``; the template
turns it into text. The small ``*_problem`` functions return why a value is
unusable (or None) so the wizard can re-ask with the reason; the flag parsers
turn the same reasons into UsageError (exit 2) that name the flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuclus.errors import UsageError
from gpuclus.spec import hostlist
from gpuclus.spec.models import Gpus, Role
from gpuclus.spec.reserved import reserved_node_name_problem
from gpuclus.yamldoc.grammar import address_problem, export_path_problem, numeric_name_problem
from gpuclus.yamldoc.patterns import (
    CLUSTER_NAME_PATTERN,
    GPU_MODEL_PATTERN,
    NODE_NAME_PATTERN,
    PATTERN_RULES,
    USER_PATTERN,
)

DEFAULT_CLUSTER_NAME = "gpu-cluster"
DEFAULT_CONTROLLER_NAME = "head"
DEFAULT_GPUS_PER_NODE = 1
DEFAULT_EXPORTS: tuple[str, ...] = ("/shared",)
# Read from the model so init never offers a count that spec check refuses.
MAX_GPUS_PER_NODE = int(Gpus.model_json_schema()["properties"]["count"]["maximum"])
# A DNS label is at most 63 characters (NODE_NAME_PATTERN bounds it too; this names the length in words).
MAX_NODE_NAME_LENGTH = 63

# The controller carries the cluster's services; compute nodes only run jobs.
CONTROLLER_ROLES: tuple[Role, ...] = (Role.CONTROLLER, Role.NFS_SERVER, Role.MONITORING, Role.LOGIN)
COMPUTE_ROLES: tuple[Role, ...] = (Role.COMPUTE,)


def _pattern_problem(value: str, pattern: str) -> str | None:
    if re.fullmatch(pattern, value):
        return None
    return PATTERN_RULES[pattern]


def cluster_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a cluster name, or None."""
    return _pattern_problem(name, CLUSTER_NAME_PATTERN)


def admin_user_problem(user: str) -> str | None:
    """Why ``user`` cannot be the admin user, or None."""
    return _pattern_problem(user, USER_PATTERN)


def node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a node name (one host, already expanded), or None."""
    if len(name) > MAX_NODE_NAME_LENGTH:
        return f"is longer than a host name may be ({MAX_NODE_NAME_LENGTH})"
    problem = _pattern_problem(name, NODE_NAME_PATTERN)
    if problem is None:
        return numeric_name_problem(name) or reserved_node_name_problem(name)
    return f"{problem}: use lower-case letters, digits and '-' (Slurm node names are case sensitive)"


def gpu_model_problem(model: str) -> str | None:
    if not model.strip():
        return "is empty"
    return _pattern_problem(model, GPU_MODEL_PATTERN)


@dataclass(frozen=True)
class HostRange:
    """One host, or several written as a hostlist pair: ``gpu[01-04]`` at ``10.0.0.[11-14]``."""

    name: str
    address: str
    count: int


def expand_names(names: str) -> list[str]:
    """Expand a hostlist of node names, checking each name; ValueError says why not."""
    names = names.strip()
    if not names:
        raise ValueError("no node name given")
    try:
        expanded = hostlist.expand(names)
    except hostlist.HostlistError as exc:
        raise ValueError(str(exc)) from None
    for name in expanded:
        problem = node_name_problem(name)
        if problem is not None:
            raise ValueError(f"{name!r} {problem}")
    return expanded


def parse_host_range(names: str, addresses: str) -> HostRange:
    """Check a name range against its address range; ValueError says what is wrong."""
    names, addresses = names.strip(), addresses.strip()
    expanded_names = expand_names(names)
    if not addresses:
        raise ValueError(f"no address given for {names!r}")
    try:
        expanded_addresses = hostlist.expand(addresses)
    except hostlist.HostlistError as exc:
        raise ValueError(str(exc)) from None
    if len(expanded_names) != len(expanded_addresses):
        raise ValueError(
            f"{names!r} names {len(expanded_names)} host(s) but {addresses!r} gives "
            f"{len(expanded_addresses)} address(es)"
        )
    for address in expanded_addresses:
        problem = address_problem(address)
        if problem is not None:
            raise ValueError(f"address {address!r} {problem}")
    return HostRange(names, addresses, len(expanded_names))


def parse_assignment(value: str, *, single: bool) -> HostRange:
    """``NAME=ADDRESS`` as --controller and --compute take it; ``single`` refuses ranges."""
    name, separator, address = value.partition("=")
    if not separator:
        raise ValueError("expected NAME=ADDRESS")
    host = parse_host_range(name, address)
    if single and host.count != 1:
        raise ValueError(f"{host.name!r} names {host.count} hosts; the controller is one node")
    return host


def parse_exports(answer: str) -> tuple[str, ...]:
    """Space- or comma-separated absolute paths; 'none' (or nothing) means no NFS."""
    words = [word for word in re.split(r"[\s,]+", answer.strip()) if word]
    if not words or [word.lower() for word in words] == ["none"]:
        return ()
    paths: list[str] = []
    for word in words:
        # "/data/" is how many people write a directory; the spec wants "/data".
        path = word.rstrip("/") or "/"
        problem = export_path_problem(path)
        if problem is not None:
            raise ValueError(f"{word!r} {problem}")
        if path not in paths:
            paths.append(path)
    return tuple(paths)


@dataclass(frozen=True)
class DraftNode:
    """One `nodes:` entry as it will be written."""

    name: str
    address: str
    roles: tuple[Role, ...]
    gpus: int | None
    count: int


@dataclass(frozen=True)
class SpecDraft:
    """Everything the template needs; roles follow from controller vs compute."""

    name: str
    admin_user: str
    controller: HostRange
    compute: tuple[HostRange, ...] = ()
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    gpu_model: str | None = None
    exports: tuple[str, ...] = DEFAULT_EXPORTS

    @property
    def workstation(self) -> bool:
        """A single machine that is controller and compute node at once."""
        return not self.compute

    @property
    def controller_roles(self) -> tuple[Role, ...]:
        # An nfs_server with nothing to export only earns a warning from spec check.
        roles = [role for role in CONTROLLER_ROLES if self.exports or role is not Role.NFS_SERVER]
        if self.workstation:
            roles.insert(1, Role.COMPUTE)
        return tuple(roles)

    def nodes(self) -> list[DraftNode]:
        controller = DraftNode(
            self.controller.name,
            self.controller.address,
            self.controller_roles,
            self.gpus_per_node if self.workstation else None,
            self.controller.count,
        )
        compute = [
            DraftNode(host.name, host.address, COMPUTE_ROLES, self.gpus_per_node, host.count) for host in self.compute
        ]
        return [controller, *compute]

    @property
    def host_count(self) -> int:
        return sum(node.count for node in self.nodes())

    @property
    def gpu_count(self) -> int:
        return sum(node.count * (node.gpus or 0) for node in self.nodes())


def default_cluster_name(output: Path) -> str:
    """The spec's directory name when it is a valid cluster name (~/dl-lab/cluster.yaml → dl-lab)."""
    candidate = output.absolute().parent.name
    return candidate if cluster_name_problem(candidate) is None else DEFAULT_CLUSTER_NAME


def default_admin_user(environ: Mapping[str, str]) -> str:
    """$SUDO_USER (who ran sudo), else $USER, else root: the first that is a valid user name."""
    for variable in ("SUDO_USER", "USER"):
        value = environ.get(variable)
        if value and admin_user_problem(value) is None:
            return value
    return "root"


def resolve_identity(
    name: str | None, admin_user: str | None, output: Path, environ: Mapping[str, str]
) -> tuple[str, str]:
    """The cluster name and admin user: the flags when given (checked), else the defaults."""
    if name is not None:
        problem = cluster_name_problem(name)
        if problem is not None:
            raise UsageError(f"--name {name!r} {problem}", "for example --name dl-lab")
    if admin_user is not None:
        problem = admin_user_problem(admin_user)
        if problem is not None:
            raise UsageError(
                f"--admin-user {admin_user!r} {problem}",
                "the user gpuclus logs in as over SSH, e.g. --admin-user ubuntu",
            )
    return (
        name if name is not None else default_cluster_name(output),
        admin_user if admin_user is not None else default_admin_user(environ),
    )


def _flag_range(flag: str, value: str, *, single: bool) -> HostRange:
    example = "head=10.0.0.10" if single else "'gpu[01-04]=10.0.0.[11-14]'"
    try:
        return parse_assignment(value, single=single)
    except ValueError as exc:
        raise UsageError(f"{flag} {value!r}: {exc}", f"for example {flag} {example}") from None


def draft_from_flags(
    *,
    name: str,
    admin_user: str,
    controller: str | None,
    compute: Sequence[str],
    file_hosts: Sequence[HostRange] = (),
    file_source: str | None = None,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    gpu_model: str | None = None,
) -> SpecDraft:
    """Build the draft from --controller/--compute and the hosts of --from-hosts.

    The first file host is the controller unless --controller is given; then
    every file host is a compute node, except one of the same name, which
    --controller picks out (so ``--controller head`` alone works with a file).
    """
    remaining = list(file_hosts)
    controller_range: HostRange | None = None
    if controller is not None:
        by_name = {host.name: host for host in remaining}
        if "=" not in controller and controller.strip() in by_name:
            controller_range = by_name[controller.strip()]
        elif "=" not in controller and file_source is not None:
            raise UsageError(
                f"--controller {controller!r} is not a host of {file_source}",
                f"pick one of {', '.join(sorted(by_name))}, or give NAME=ADDRESS",
            )
        else:
            controller_range = _flag_range("--controller", controller, single=True)
            listed = by_name.get(controller_range.name)
            if listed is not None and listed.address != controller_range.address:
                raise UsageError(
                    f"--controller {controller!r}: {file_source} gives {listed.name} the address {listed.address}",
                    f"pass --controller {listed.name} to use the file's address, or fix one of them",
                )
        remaining = [host for host in remaining if host.name != controller_range.name]
    compute_ranges = [_flag_range("--compute", value, single=False) for value in compute]
    if controller_range is None and remaining:
        controller_range, remaining = remaining[0], remaining[1:]
    if controller_range is None:
        if compute_ranges:
            raise UsageError(
                "no controller given",
                "pass --controller NAME=ADDRESS for the node that runs slurmctld, e.g. --controller head=10.0.0.10",
            )
        raise UsageError(
            "no nodes given",
            "pass --controller head=10.0.0.10 --compute 'gpu[01-04]=10.0.0.[11-14]', or --from-hosts FILE, "
            "or run `gpuclus init --wizard` in a terminal",
        )
    if gpu_model is not None:
        problem = gpu_model_problem(gpu_model)
        if problem is not None:
            raise UsageError(
                f"--gpu-model {gpu_model!r} {problem}", "a short name without spaces, e.g. --gpu-model h100"
            )
    if not 1 <= gpus_per_node <= MAX_GPUS_PER_NODE:
        raise UsageError(f"--gpus-per-node {gpus_per_node} must be between 1 and {MAX_GPUS_PER_NODE}")
    return SpecDraft(
        name=name,
        admin_user=admin_user,
        controller=controller_range,
        compute=(*compute_ranges, *remaining),
        gpus_per_node=gpus_per_node,
        gpu_model=gpu_model,
    )
