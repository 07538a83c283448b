"""What every spec check reads (``SpecView``) and how a domain module registers its checks.

The checks also run when part of the spec failed its structure (an unknown
key, a wrong type) or a node entry's hostlist does not expand: the loader
hands them the parts that parsed, in a ``SpecView`` that knows where the spec
is unsound. A check names the parts it ``needs`` whole; it is skipped while
one of them is unsound, so a dropped entry never comes back as a misleading
"no controller" or "partition names unknown nodes". Checks that need nothing
whole look at the parsed node entries only, where every finding is true
whatever the dropped entries say (two controllers among them are two too many).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuclus.spec.models import ClusterSpec, NodeEntry
from gpuclus.spec.topology import Topology
from gpuclus.users.load import LoadedUsers
from gpuclus.yamldoc.findings import Finding, Loc

# The parts of a spec the checks name in ``needs``: a pydantic loc prefix each.
NODES: Loc = ("nodes",)
PARTITIONS: Loc = ("slurm", "partitions")
EXPORTS: Loc = ("nfs", "exports")
MONITORING: Loc = ("monitoring",)


@dataclass(frozen=True)
class SpecView:
    """What the checks read: the parts of a spec whose structure is sound.

    ``unsound`` holds the locs where the structure failed (as pydantic gives
    them) and ``("nodes", i)`` for each entry whose hostlists do not expand.
    A part that failed holds its default in ``spec`` (never read: the checks
    that read it are skipped), and a failed node entry is left out of
    ``entries``, ``spec.nodes`` and ``topology``. So ``spec.nodes`` is not
    indexed like the file: checks use ``entries`` (index, entry) instead.

    ``spec_dir`` is the directory of the spec file: the paths the spec names
    on the machine running gpuclus (containers.artifacts_dir, ...) are
    relative to it.
    """

    spec: ClusterSpec
    topology: Topology
    entries: tuple[tuple[int, NodeEntry], ...]
    unsound: frozenset[Loc] = field(default_factory=frozenset)
    spec_dir: Path = field(default_factory=Path)
    # The users file as the users_file check read it, by path: the spec's load keeps that reading (one
    # read, so what was checked is what is rendered).
    users_read: dict[Path, LoadedUsers] = field(default_factory=dict, compare=False)

    @classmethod
    def whole(cls, spec: ClusterSpec, topology: Topology, spec_dir: Path | None = None) -> SpecView:
        """A spec that passed the schema and whose every entry expanded."""
        return cls(spec, topology, tuple(enumerate(spec.nodes)), spec_dir=spec_dir or Path())

    def control_path(self, value: str) -> Path:
        """A path the spec names on the machine running gpuclus: absolute, or relative to the spec's directory."""
        return self.spec_dir / value

    def is_whole(self, part: Loc) -> bool:
        """True when nothing in ``part`` (nor anything holding it) failed."""
        return not any(_overlap(loc, part) for loc in self.unsound)


def _overlap(first: Loc, second: Loc) -> bool:
    # ("nodes", 2, "gpu") lies in ("nodes",); ("slurm",) holds ("slurm", "partitions").
    shorter = min(len(first), len(second))
    return first[:shorter] == second[:shorter]


SpecCheck = Callable[[SpecView], list[Finding]]


@dataclass(frozen=True)
class RegisteredCheck:
    function: SpecCheck
    needs: tuple[Loc, ...]  # parts that must be whole for the check's findings to be true

    @property
    def name(self) -> str:
        return self.function.__name__

    def can_run(self, view: SpecView) -> bool:
        return all(view.is_whole(part) for part in self.needs)


def registrar(checks: list[RegisteredCheck]) -> Callable[..., Callable[[SpecCheck], SpecCheck]]:
    """A decorator ``@check(*needs)`` that appends each function it marks to ``checks``, in the order of definition."""

    def check(*needs: Loc) -> Callable[[SpecCheck], SpecCheck]:
        def register(function: SpecCheck) -> SpecCheck:
            checks.append(RegisteredCheck(function, needs))
            return function

        return register

    return check


def node_loc(index: int, field: str | None = None) -> Loc:
    return ("nodes", index) if field is None else ("nodes", index, field)
