"""`spec check` warns about the phases `gpuclus deploy` would refuse (playbook not shipped yet)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.cli.spec import deploy_refusals
from gpuclus.deploy.phases import Phase
from gpuclus.deploy.pipeline import DeployRequest, scope
from gpuclus.errors import UsageError
from gpuclus.spec.load import load_spec

runner = CliRunner()

HEAD = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login, monitoring]}
"""

# Line 7 holds containers.enroot.
ENROOT_ONLY = (
    HEAD
    + """\
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2, fake: true}}
containers:
  enroot: true
  pyxis: false
nvidia: {driver: {install: false}, cuda: {install: false}}
"""
)

# Real GPUs on line 5 and nothing written under nvidia or containers: both default to on.
DEFAULTS = HEAD + '  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}\n'

DEPLOYABLE = (
    DEFAULTS
    + """\
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: false, pyxis: false}
"""
)


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A playbooks directory with today's phases (not containers), whatever ships later."""
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    for phase in (Phase.BASE, Phase.NFS, Phase.NVIDIA, Phase.SLURM, Phase.MONITORING):
        (playbooks / f"{phase.value}.yml").write_text("---\n")
    monkeypatch.setenv("GPUCLUS_PLAYBOOKS_DIR", str(playbooks))
    return playbooks


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_a_phase_deploy_refuses_is_a_located_warning(tmp_path: Path, shipped: Path) -> None:
    path = write(tmp_path, ENROOT_ONLY)
    result = runner.invoke(app, ["spec", "check", str(path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] is True
    assert payload["counts"] == {"error": 0, "warning": 1, "info": 0}
    [finding] = payload["findings"]
    assert finding["code"] == "containers-not-shipped"
    assert finding["level"] == "warning"
    assert finding["path"] == "containers.enroot"
    assert (finding["file"], finding["line"]) == (str(path), 7)
    assert "deploy` refuses" in finding["message"]
    # Pyxis is off, so turning Enroot off is enough.
    assert finding["hint"] == "deploy with --skip containers, or set containers.enroot: false"


def test_human_output_points_at_the_line(tmp_path: Path, shipped: Path) -> None:
    path = write(tmp_path, ENROOT_ONLY)
    result = runner.invoke(app, ["spec", "check", str(path)])
    assert result.exit_code == 0
    assert f"{path}:7:" in result.output
    assert "warning[containers-not-shipped] containers.enroot" in result.output
    assert "(1 warning)" in result.output


def test_strict_fails_on_it(tmp_path: Path, shipped: Path) -> None:
    result = runner.invoke(app, ["spec", "check", str(write(tmp_path, ENROOT_ONLY)), "--strict"])
    assert result.exit_code == 3


def test_defaults_left_out_are_named_as_defaults(tmp_path: Path, shipped: Path) -> None:
    loaded = load_spec(write(tmp_path, DEFAULTS))
    by_code = {finding.code: finding for finding in deploy_refusals(loaded)}
    # The nvidia phase ships: real GPUs with the driver's default install are deployable.
    assert sorted(by_code) == ["containers-not-shipped"]
    containers = by_code["containers-not-shipped"]
    assert "the default" in containers.message
    # Pyxis defaults to on and needs Enroot: the hint turns both off, or it would lead to an error.
    assert containers.hint == (
        "deploy with --skip containers, or set containers.enroot: false and containers.pyxis: false"
    )


def test_an_unshipped_phase_without_its_own_words_still_warns(tmp_path: Path, shipped: Path) -> None:
    (shipped / "nvidia.yml").unlink()
    by_code = {finding.code: finding for finding in deploy_refusals(load_spec(write(tmp_path, DEFAULTS)))}
    assert sorted(by_code) == ["containers-not-shipped", "nvidia-not-shipped"]
    assert by_code["nvidia-not-shipped"].hint == "deploy with --skip nvidia"


def test_no_warning_when_every_phase_ships(tmp_path: Path, shipped: Path) -> None:
    for phase in Phase:
        (shipped / f"{phase.value}.yml").write_text("---\n")
    assert deploy_refusals(load_spec(write(tmp_path, DEFAULTS))) == []


@pytest.mark.parametrize("text", [DEFAULTS, ENROOT_ONLY, DEPLOYABLE], ids=["defaults", "enroot", "deployable"])
def test_warns_exactly_when_deploy_refuses(tmp_path: Path, text: str) -> None:
    # The real playbooks: spec check and deploy's scope must agree, whatever this version ships.
    path = write(tmp_path, text)
    loaded = load_spec(path)
    warned = bool(deploy_refusals(loaded))
    try:
        scope(DeployRequest(spec_path=path), loaded)
    except UsageError:
        deploy_refused = True
    else:
        deploy_refused = False
    assert warned == deploy_refused
    if text == DEPLOYABLE:
        assert not deploy_refused


def test_a_spec_with_errors_gets_no_refusal_warnings(tmp_path: Path, shipped: Path) -> None:
    loaded = load_spec(write(tmp_path, DEFAULTS.replace("roles: [compute]", "roles: [compute, bogus]")))
    assert deploy_refusals(loaded) == []


def test_the_codes_are_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text()
    for code in ("containers-not-shipped",):
        assert f"| `{code}` | warning |" in text
