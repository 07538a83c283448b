"""`spec check` warns about the phases `gpuclus deploy` would refuse (no playbook for them).

Every phase ships today; the tests take a playbooks directory without the
containers phase (GPUCLUS_PLAYBOOKS_DIR), as a development tree may be.
"""

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

# Line 6 holds containers.
ENROOT_ONLY = (
    HEAD
    + """\
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2, fake: true}}
containers:
  enroot: true
  pyxis: false
  allow_unverified_downloads: true
nvidia: {driver: {install: false}, cuda: {install: false}}
"""
)

# Real GPUs on line 5 and nothing written under nvidia or containers: nvidia defaults to on, containers to off.
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
    """A playbooks directory with every phase but containers."""
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
    assert finding["path"] == "containers"
    assert (finding["file"], finding["line"]) == (str(path), 6)
    assert "deploy` refuses" in finding["message"]
    assert finding["hint"] == "deploy with --skip containers"


def test_human_output_points_at_the_line(tmp_path: Path, shipped: Path) -> None:
    path = write(tmp_path, ENROOT_ONLY)
    result = runner.invoke(app, ["spec", "check", str(path)])
    assert result.exit_code == 0
    assert f"{path}:6:" in result.output
    assert "warning[containers-not-shipped] containers" in result.output
    assert "(1 warning)" in result.output


def test_strict_fails_on_it(tmp_path: Path, shipped: Path) -> None:
    result = runner.invoke(app, ["spec", "check", str(write(tmp_path, ENROOT_ONLY)), "--strict"])
    assert result.exit_code == 3


def test_defaults_leave_containers_off_so_nothing_is_refused(tmp_path: Path, shipped: Path) -> None:
    # The nvidia phase ships: real GPUs with the driver's default install are deployable.
    assert deploy_refusals(load_spec(write(tmp_path, DEFAULTS))) == []


def test_an_unshipped_phase_without_its_own_words_still_warns(tmp_path: Path, shipped: Path) -> None:
    (shipped / "nvidia.yml").unlink()
    by_code = {finding.code: finding for finding in deploy_refusals(load_spec(write(tmp_path, DEFAULTS)))}
    assert sorted(by_code) == ["nvidia-not-shipped"]
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
