"""One way of printing a duration to people: "12.3 s" (a number, a space, s), as validate, preflight and sandbox do."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from validate_stubs import SANDBOX_SPEC, healthy_remote

from gpuclus.cli.main import app
from gpuclus.slurm import session as controller_session
from gpuclus.ssh.client import SshTarget
from gpuclus.state import StateDir
from gpuclus.validate.checks import accounting

# A duration glued to its unit ("0.1s"): the other format, the one these commands no longer print.
GLUED = re.compile(r"\b\d+(\.\d+)?s\b")


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = healthy_remote()

    def connect(target: SshTarget, *args: Any, **kwargs: Any) -> object:
        return object()

    monkeypatch.setattr(controller_session, "connect", connect)
    monkeypatch.setattr(controller_session, "Remote", lambda client: remote)
    monkeypatch.setattr(accounting, "WAIT_FOR_ROWS_S", 0.0)


def test_validate_table_and_summary_print_seconds_with_a_space(tmp_path: Path, stubbed: None) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SANDBOX_SPEC)
    state = StateDir.beside(spec)
    state.private_dir(state.ssh_dir)
    state.private_key.write_text("not a key: the connection is stubbed\n")
    result = CliRunner().invoke(app, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    table = [line for line in result.stdout.splitlines() if line.startswith(("cluster  ", "launch  ", "storage  "))]
    assert table, result.stdout
    for line in table:
        assert re.search(r"\d+\.\d s$", line), line
    assert not GLUED.search(result.stdout), result.stdout
    assert not GLUED.search(result.stderr), result.stderr
