"""What a node `run` killed half-way (Ctrl-C during `sandbox up`) leaves, and the next `up`.

podman can leave storage under the node's name that no container owns: the
next `up` removes it and starts the node. A real container of that name that is
not gpuclus' is never removed. Against the fake engine (sandbox_fake.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sandbox_fake import FakeEngine, block_real_engines, wire
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.sandbox import hostprep

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    block_real_engines(monkeypatch)
    monkeypatch.setattr(hostprep, "require_root", lambda: None)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    engine = FakeEngine(tmp_path / "engine")
    wire(monkeypatch, engine)
    return engine


def up(tmp_path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["sandbox", "up", "--name", "lab", "--nodes", "2", "--spec", str(tmp_path / "s.yaml")])
    return result.exit_code, result.output


def test_storage_left_under_a_node_name_is_removed_and_the_node_started(tmp_path: Path, fake: FakeEngine) -> None:
    fake.save({**fake.state, "storage": ["lab-gpu01"]})
    code, output = up(tmp_path)
    assert code == 0, output
    assert ["rm", "--force", "lab-gpu01"] in fake.calls()
    assert fake.state["storage"] == []
    assert fake.state["containers"]["lab-gpu01"]["state"] == "running"


def test_a_real_container_of_that_name_is_left_alone_and_named(tmp_path: Path, fake: FakeEngine) -> None:
    theirs = {"cluster": "", "labels": {}, "state": "running", "argv": []}
    fake.save({**fake.state, "containers": {"lab-gpu01": theirs}})
    code, output = up(tmp_path)
    assert code != 0
    assert "starting lab-gpu01 failed" in output
    assert "already in use" in output
    assert ["rm", "--force", "lab-gpu01"] not in fake.calls()
    assert json.dumps(fake.state["containers"]["lab-gpu01"]) == json.dumps(theirs)
