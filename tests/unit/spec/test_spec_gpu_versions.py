"""The driver branch and CUDA version against the nodes' GPUs: the GPU catalogue's minimums as spec checks.

A B200 needs driver branch 570 and CUDA 12.8; the spec's defaults (550, 12.4) are older. Before these checks
`spec check` called such a spec valid and only the nvidia_driver role refused it, at deploy time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.spec.load import load_spec
from gpuclus.yamldoc.findings import Finding

runner = CliRunner()

BASE = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 8, model: MODEL}}
nvidia:
  driver:
    install: true
    branch: "BRANCH"
  cuda:
    install: true
    version: "CUDA"
"""
BRANCH_LINE = 9
CUDA_LINE = 12
CODES = {"nvidia-driver-too-old", "cuda-too-old"}


def findings(tmp_path: Path, model: str, branch: str, cuda: str) -> list[Finding]:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE.replace("MODEL", model).replace("BRANCH", branch).replace("CUDA", cuda), encoding="utf-8")
    return [f for f in load_spec(path).findings if f.code in CODES]


def test_b200_with_550_and_12_4_is_refused_at_both_lines(tmp_path: Path) -> None:
    driver, cuda = findings(tmp_path, "b200", "550", "12.4")
    assert (driver.code, driver.line, driver.path) == ("nvidia-driver-too-old", BRANCH_LINE, "nvidia.driver.branch")
    assert (cuda.code, cuda.line, cuda.path) == ("cuda-too-old", CUDA_LINE, "nvidia.cuda.version")
    assert "b200" in driver.message and "570" in driver.message and "gpu[01-02]" in driver.message
    assert driver.hint == 'set nvidia.driver.branch: "570" or newer'
    assert cuda.hint == 'set nvidia.cuda.version: "12.8" or newer'


@pytest.mark.parametrize(
    ("model", "branch", "cuda"),
    [("b200", "570", "12.8"), ("b200", "580", "12.10"), ("h100", "550", "12.4"), ("h100", "525", "11.8")],
)
def test_versions_at_or_above_the_minimum_pass(tmp_path: Path, model: str, branch: str, cuda: str) -> None:
    assert findings(tmp_path, model, branch, cuda) == []


@pytest.mark.parametrize(
    ("model", "branch", "cuda", "codes"),
    [
        ("h100", "520", "12.4", ["nvidia-driver-too-old"]),
        ("h100", "550", "11.7", ["cuda-too-old"]),
        ("gh200", "530", "12.4", ["nvidia-driver-too-old"]),  # Grace Hopper's own floor, 535, over Hopper's 525
        ("rtx5090", "565", "12.8", ["nvidia-driver-too-old"]),
    ],
)
def test_below_the_minimum_is_refused(tmp_path: Path, model: str, branch: str, cuda: str, codes: list[str]) -> None:
    assert [f.code for f in findings(tmp_path, model, branch, cuda)] == codes


def test_a_model_the_catalogue_does_not_know_sets_no_floor(tmp_path: Path) -> None:
    assert findings(tmp_path, "mystery9", "450", "11.0") == []


def test_what_gpuclus_does_not_install_is_not_judged(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    text = BASE.replace("MODEL", "b200").replace("BRANCH", "550").replace("CUDA", "12.4")
    path.write_text(text.replace("install: true", "install: false"))
    assert [f for f in load_spec(path).findings if f.code in CODES] == []


def test_fake_gpus_are_not_judged(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    text = BASE.replace("MODEL", "b200").replace("BRANCH", "550").replace("CUDA", "12.4")
    path.write_text(text.replace("model: b200}", "model: b200, fake: true}"))
    assert [f for f in load_spec(path).findings if f.code in CODES] == []


def test_spec_check_exits_3_pointing_at_the_branch(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE.replace("MODEL", "b200").replace("BRANCH", "550").replace("CUDA", "12.4"))
    result = runner.invoke(app, ["spec", "check", str(path)])
    assert result.exit_code == 3
    assert f"cluster.yaml:{BRANCH_LINE}:" in result.output and "nvidia-driver-too-old" in result.output
