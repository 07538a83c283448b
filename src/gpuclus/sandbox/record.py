"""What `sandbox up` made, kept in .gpuclus/sandbox.json so that down, status and ssh find it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuclus.sandbox.engine import SandboxError
from gpuclus.sandbox.layout import SandboxLayout, SandboxNode
from gpuclus.state import StateDir

STATE_FILE = "sandbox.json"


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
        try:
            data = json.loads(path.read_text())
            nodes = tuple(SandboxNode(**node) for node in data["nodes"])
            paths = {key: data.get(key) for key in ("artifacts_dir", "wheelhouse_dir")}
            for key, value in paths.items():
                if value is not None and not isinstance(value, str):
                    raise TypeError(f"{key} is {value!r}, not a path")
            return cls(data["cluster"], data["engine"], data["subnet"], data["image"], nodes, **paths)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxError(f"{path} is damaged ({exc})", "run `gpuclus sandbox down --name NAME`") from None


def record_path(state: StateDir) -> Path:
    return state.root / STATE_FILE
