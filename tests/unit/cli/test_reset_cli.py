"""`gpuclus reset`: the CLI's refusals and dry run, and the reset pipeline with a fake Ansible run.

The pipeline runs for real up to Ansible: node choice, lock, preflight
exclusion, secrets, render, run directory, entry playbook, record, and
forgetting last-applied; only the ansible-runner run is a stand-in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_specs import THREE_NODE_SPEC
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.deploy import records
from gpuclus.deploy.events import Event, PhaseStarted
from gpuclus.deploy.last_applied import last_applied_dir, read_last_applied, save_last_applied
from gpuclus.deploy.runner import RunOutcome
from gpuclus.deploy.workspace import RunConfig
from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.preflight.report import NodeReport
from gpuclus.reset import pipeline
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.state import StateDir

runner = CliRunner()
NODES = {"head": "172.28.0.10", "gpu01": "172.28.0.11", "gpu02": "172.28.0.12"}


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(THREE_NODE_SPEC)
    StateDir.beside(path).ensure_ssh_key()
    return path


@pytest.fixture
def loaded(spec: Path) -> LoadedSpec:
    found = load_spec(spec)
    assert found.ok
    return found


def _invoke(*args: str) -> Any:
    return runner.invoke(app, ["reset", *args])


def test_dry_run_lists_per_node_what_its_roles_put_there(spec: Path) -> None:
    result = _invoke(str(spec), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["dry_run"] is True and payload["full"] is True
    plan = payload["plan"]
    assert list(plan) == ["head", "gpu01", "gpu02"]
    # The controller's daemons only where the spec puts the controller; chrony everywhere.
    assert "slurmctld" in plan["head"]["units"] and "slurmctld" not in plan["gpu01"]["units"]
    assert "slurmd" in plan["gpu01"]["units"] and "prometheus" not in plan["gpu01"]["units"]
    assert all("chrony" in node["units"] for node in plan.values())
    assert "mariadb-server" in plan["head"]["packages"] and "/var/lib/mysql" in plan["head"]["paths"]
    assert any("accounting database" in text for text in payload["deleted_data"])
    assert not (spec.parent / ".gpuclus" / "runs").exists(), "a dry run must not start a run"


def test_dry_run_of_some_nodes_names_only_those(spec: Path) -> None:
    result = _invoke(str(spec), "--dry-run", "--nodes", "gpu02")
    assert result.exit_code == 0, result.output
    assert "would reset gpu02 (some nodes" in result.stdout
    assert "Prometheus targets" in result.stdout
    assert "\nhead" not in result.stdout


def test_unknown_nodes_are_refused_with_the_spec_s_nodes(spec: Path) -> None:
    result = _invoke(str(spec), "--nodes", "gpu09", "--yes")
    assert result.exit_code == ExitCode.USAGE
    assert "gpu09" in result.stderr and "head,gpu[01-02]" in result.stderr
    assert "Traceback" not in result.output


def test_without_a_terminal_it_needs_yes(spec: Path) -> None:
    result = _invoke(str(spec))
    assert result.exit_code == ExitCode.USAGE
    assert "--yes" in result.stderr


def test_a_no_at_the_prompt_changes_nothing(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuclus.cli.reset._interactive", lambda: True)
    result = runner.invoke(app, ["reset", str(spec)], input="n\n")
    assert result.exit_code == ExitCode.FAILED
    assert "not confirmed" in result.stderr
    assert not (spec.parent / ".gpuclus" / "runs").exists()


def test_purge_data_is_not_confirmed_by_yes(spec: Path) -> None:
    result = _invoke(str(spec), "--purge-data", "--yes")
    assert result.exit_code == ExitCode.USAGE
    assert "--confirm-purge sbx" in result.stderr


def test_purge_data_with_the_wrong_name_changes_nothing(spec: Path) -> None:
    result = _invoke(str(spec), "--purge-data", "--confirm-purge", "other", "--yes")
    assert result.exit_code == ExitCode.FAILED
    assert "does not match" in result.stderr
    assert not (spec.parent / ".gpuclus" / "runs").exists()


def test_a_typed_name_that_differs_is_refused(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuclus.cli.reset._interactive", lambda: True)
    result = runner.invoke(app, ["reset", str(spec), "--purge-data", "--yes"], input="sbx-typo\n")
    assert result.exit_code == ExitCode.FAILED
    assert "does not match" in result.stderr


def test_confirm_purge_needs_purge_data(spec: Path) -> None:
    result = _invoke(str(spec), "--confirm-purge", "sbx", "--yes")
    assert result.exit_code == ExitCode.USAGE


# The pipeline, with a stand-in for Ansible ------------------------------------------------


class FakeRun:
    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.cancelled = threading.Event()
        self.outcome: RunOutcome | None = None

    def events(self) -> Iterator[Event]:
        yield PhaseStarted(pipeline.PHASE)
        self.outcome = RunOutcome("successful", 0)

    def cancel(self) -> None:
        self.cancelled.set()

    def kill(self) -> None:
        self.cancelled.set()

    def output_tail(self) -> str:
        return ""


class Runs:
    def __init__(self) -> None:
        self.configs: list[RunConfig] = []

    def __call__(self, config: RunConfig) -> FakeRun:
        self.configs.append(config)
        return FakeRun(config)


class Quiet:
    def __init__(self) -> None:
        self.reports: list[NodeReport] = []

    def preflight_done(self, reports: list[NodeReport], seconds: float) -> None:
        self.reports = reports

    def in_sync_checked(self, verdict: Any, seconds: float) -> None:
        pass

    def phases_skipped(self, skipped: list[Any]) -> None:
        pass

    def run_started(self, run: Any) -> None:
        pass

    def event(self, event: Event) -> None:
        pass


def _preflight(down: set[str]) -> Any:
    def probe(loaded: LoadedSpec, spec_path: Path, hosts: list[str]) -> list[NodeReport]:
        return [NodeReport(name, NODES[name], name not in down) for name in hosts]

    return probe


def test_a_full_reset_runs_the_reset_playbook_and_forgets_last_applied(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    save_last_applied(state, {"inventory/hosts.yml": "old"})
    runs = Runs()
    result = pipeline.reset(
        pipeline.ResetRequest(spec_path=spec), loaded, Quiet(), preflight=_preflight(set()), start_run=runs
    )
    assert result.exit_code == ExitCode.OK and result.full and result.forgot_last_applied
    assert read_last_applied(state) is None and not last_applied_dir(state).exists()
    config = runs.configs[0]
    assert config.limit is None
    assert config.extravars["reset_full"] is True
    assert config.extravars["reset_nodes"] == ["head", "gpu01", "gpu02"]
    assert config.extravars["reset_purge_data"] is False
    playbook = yaml.safe_load(config.playbook.read_text())
    assert playbook[-1]["ansible.builtin.import_playbook"].endswith("/playbooks/reset.yml")
    assert playbook[1]["name"] == "gpuclus phase reset"
    record = records.load_record(state, config.run_id)
    assert record is not None and record.phases_requested == ["reset"] and record.status == "successful"


def test_a_partial_reset_limits_the_run_and_keeps_last_applied(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    save_last_applied(state, {"inventory/hosts.yml": "old"})
    runs = Runs()
    result = pipeline.reset(
        pipeline.ResetRequest(spec_path=spec, nodes="gpu02", purge_data=True),
        loaded,
        Quiet(),
        preflight=_preflight(set()),
        start_run=runs,
    )
    assert not result.full and not result.forgot_last_applied
    assert read_last_applied(state) == {"inventory/hosts.yml": "old"}
    config = runs.configs[0]
    assert config.limit == "gpu02"
    assert config.extravars["reset_full"] is False and config.extravars["reset_nodes"] == ["gpu02"]
    assert config.extravars["reset_purge_data"] is True


def test_unreachable_nodes_are_named_and_the_others_reset(spec: Path, loaded: LoadedSpec) -> None:
    runs = Runs()
    result = pipeline.reset(
        pipeline.ResetRequest(spec_path=spec), loaded, Quiet(), preflight=_preflight({"gpu01"}), start_run=runs
    )
    assert result.unreachable == ["gpu01"]
    assert result.exit_code == ExitCode.UNREACHABLE
    assert runs.configs[0].limit == "head,gpu02"
    assert runs.configs[0].extravars["gpuclus_excluded_nodes"] == ["gpu01"]
    assert result.record.failed_hosts() == ["gpu01"]


def test_nothing_reachable_is_an_error_before_any_run(spec: Path, loaded: LoadedSpec) -> None:
    runs = Runs()
    with pytest.raises(GpuclusError) as caught:
        pipeline.reset(
            pipeline.ResetRequest(spec_path=spec, nodes="gpu[01-02]"),
            loaded,
            Quiet(),
            preflight=_preflight({"gpu01", "gpu02"}),
            start_run=runs,
        )
    assert caught.value.exit_code == ExitCode.UNREACHABLE and not runs.configs


def test_a_spec_directory_without_gpuclus_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(THREE_NODE_SPEC)
    found = load_spec(path)
    with pytest.raises(UsageError, match="no SSH key"):
        pipeline.reset(pipeline.ResetRequest(spec_path=path), found, Quiet(), preflight=_preflight(set()))


def test_a_reset_record_is_a_reset_and_never_the_last_deploy(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    result = pipeline.reset(
        pipeline.ResetRequest(spec_path=spec), loaded, Quiet(), preflight=_preflight({"gpu01"}), start_run=Runs()
    )
    assert result.record.kind == "reset"
    # `deploy --retry-failed` must not take the reset's unreachable node for a failed deploy.
    assert records.last_deploy(state) is None
