"""What `sandbox up` made, kept in .gpuclus/sandbox.json so that down, status and ssh find it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_json_file
from gpuclus.sandbox.engine import SandboxError
from gpuclus.sandbox.layout import SandboxLayout, SandboxNode
from gpuclus.state import StateDir

STATE_FILE = "sandbox.json"
# A record names each node once: a few hundred bytes per node.
MAX_RECORD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class SandboxRecord:
    cluster: str
    engine: str
    subnet: str
    image: str
    nodes: tuple[SandboxNode, ...]
    # `up --artifacts`: the directory Enroot and Pyxis are built from (None: containers off).
    # A record written before this field existed has none.
    artifacts_dir: str | None = None
    # `up --wheelhouse`: the wheels the nodes' PyTorch environment is built from (None: pytorch off).
    wheelhouse_dir: str | None = None

    @property
    def layout(self) -> SandboxLayout:
        gpus = max((node.gpus for node in self.nodes), default=0)
        return SandboxLayout(self.cluster, self.subnet, self.nodes, gpus)

    def dumps(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, path: Path) -> SandboxRecord | None:
        """The record at ``path``, None when there is none; a damaged one is a SandboxError that says what is
        wrong without quoting it (another process may have put anything there)."""
        try:
            data = read_json_file(path, MAX_RECORD_BYTES)
        except FileNotFoundError:
            return None
        except (OSError, NotRegularFileError, FileTooLargeError, ValueError) as exc:
            raise _damaged(path, _unreadable(exc)) from None
        try:
            nodes = tuple(SandboxNode(**node) for node in data["nodes"])
            paths = {key: data.get(key) for key in ("artifacts_dir", "wheelhouse_dir")}
            for key, value in paths.items():
                if value is not None and not isinstance(value, str):
                    raise TypeError(f"{key} is not a path")
            return cls(data["cluster"], data["engine"], data["subnet"], data["image"], nodes, **paths)
        except (KeyError, TypeError, AttributeError):
            raise _damaged(path, "not the record `sandbox up` writes") from None


def _unreadable(problem: Exception) -> str:
    if isinstance(problem, NotRegularFileError):
        return f"it is {problem.kind}"
    if isinstance(problem, FileTooLargeError):
        return f"it holds more than {problem.limit} bytes"
    if isinstance(problem, OSError):
        return f"it cannot be read ({problem.strerror or type(problem).__name__})"
    return "it is not JSON that `sandbox up` writes"


def _damaged(path: Path, why: str) -> SandboxError:
    return SandboxError(f"{path} is damaged: {why}", "run `gpuclus sandbox down --name NAME`")


def record_path(state: StateDir) -> Path:
    return state.root / STATE_FILE
