"""The deploy tests' shared fixtures: the sandbox's three-node spec with tiny playbooks, loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_specs import THREE_NODE_SPEC

from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.state import StateDir

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCLUS_PLAYBOOKS_DIR", str(FIXTURES / "deploy_playbooks"))
    path = tmp_path / "cluster.yaml"
    path.write_text(THREE_NODE_SPEC)
    StateDir.beside(path).ensure_ssh_key()
    return path


@pytest.fixture
def loaded(spec: Path) -> LoadedSpec:
    found = load_spec(spec)
    assert found.ok
    return found
