"""What `gpuclus nodes remove` will do, worked out before anything on the cluster is touched.

Only plain compute nodes can leave: a node that also runs the controller, the
NFS server, monitoring or the login role carries services the rest of the
cluster needs, and at least one compute node must stay. The spec's new text
is built here and checked like any spec, so a removal that would leave the
spec invalid (a partition with no nodes left) stops before any node is drained.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from gpuclus.errors import UsageError
from gpuclus.spec import hostlist
from gpuclus.spec.edit import SpecEditError, remove_nodes
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.spec.models import Role
from gpuclus.spec.topology import Node
from gpuclus.yamldoc.findings import Severity


@dataclass(frozen=True)
class RemovalPlan:
    nodes: list[Node]  # leaving, in spec order
    staying_compute: list[Node]
    new_text: str
    diff: str  # unified diff of the spec, for --dry-run and the summary

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    @property
    def hostlist(self) -> str:
        return hostlist.compress(self.names)


def plan_removal(loaded: LoadedSpec, spec_name: str, requested: list[str]) -> RemovalPlan:
    """The nodes ``requested`` (hostlists allowed) checked against the spec, and the spec without them."""
    assert loaded.topology is not None and loaded.spec is not None  # a checked spec
    try:
        names = hostlist.expand_list(",".join(requested))
    except hostlist.HostlistError as problem:
        raise UsageError(str(problem), "name nodes as in the spec, e.g. gpu03 or 'gpu[03-04]'") from None
    by_name = {node.name: node for node in loaded.topology.nodes}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise UsageError(
            f"{', '.join(unknown)}: not a node of {spec_name}",
            f"its nodes: {hostlist.compress(by_name)}",
        )
    leaving = [node for node in loaded.topology.nodes if node.name in set(names)]
    busy = [node for node in leaving if node.roles != frozenset({Role.COMPUTE})]
    if busy:
        roles = "; ".join(f"{node.name}: {', '.join(sorted(role.value for role in node.roles))}" for node in busy)
        raise UsageError(
            f"only plain compute nodes can be removed ({roles})",
            "move the other roles to another node in the spec and deploy first",
        )
    staying = [node for node in loaded.topology.with_role(Role.COMPUTE) if node.name not in set(names)]
    if not staying:
        raise UsageError("that would remove every compute node", "keep at least one; Slurm needs a node to run jobs")
    old_text = loaded.document.text
    try:
        new_text = remove_nodes(old_text, set(names))
    except SpecEditError as problem:
        raise UsageError(
            f"{spec_name}: cannot take {hostlist.compress(names)} out of the spec: {problem}",
            f"edit {spec_name} by hand, then run `gpuclus nodes remove` again with the same names",
        ) from None
    _check_new_spec(new_text, spec_name)
    diff = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True), new_text.splitlines(keepends=True), spec_name, spec_name + " (new)"
        )
    )
    return RemovalPlan(leaving, staying, new_text, diff)


def _check_new_spec(text: str, spec_name: str) -> None:
    result = load_spec_text(text, spec_name)
    errors = [finding for finding in result.findings if finding.severity is Severity.ERROR]
    if errors or not result.ok:
        first = errors[0] if errors else None
        said = (
            f"line {first.line}: {first.message}"
            if first is not None and first.line
            else (first.message if first is not None else "it does not load")
        )
        raise UsageError(
            f"{spec_name} without those nodes would be invalid ({said})",
            f"edit {spec_name} by hand so it stays valid without them, then deploy",
        )
