"""`gpuclus deploy` up to the point where Ansible would start, and `gpuclus runs list|show`.

Nothing here touches the network or runs Ansible: the SSH preflight is
replaced by a fake that records its calls and returns canned reports, SSH
connections and pipeline.execute are traps, and every deploy below is refused
before a run starts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from deploy_specs import THREE_NODE_SPEC
from typer.testing import CliRunner

from gpuclus.deploy import phases, pipeline
from gpuclus.deploy.events import EventTranslator
from gpuclus.deploy.records import RecordBuilder, RunRecord, runs_dir
from gpuclus.preflight import runner as preflight_runner
from gpuclus.preflight.report import NodeReport, PreflightCheck
from gpuclus.ssh import client as ssh_client
from gpuclus.state import StateDir

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PLAYBOOKS = FIXTURES / "deploy_playbooks"  # no nvidia.yml, no containers.yml

# Real GPUs with the default driver and CUDA install: needs the nvidia phase.
REAL_GPUS = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}
nfs: {exports: [/shared]}
"""

# Sandbox-like, and nothing the test playbooks lack: base, nfs, slurm, monitoring.
SANDBOX = THREE_NODE_SPEC

INVALID = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.10, roles: [compute], gpus: {count: 2}}
"""

RUN_IDS = ["20260301T120000Z-aa11", "20260301T130000Z-bb22", "20260302T080000Z-cc33"]
RECORD_KEYS = {
    "id",
    "spec",
    "spec_sha256",
    "phases_requested",
    "limit",
    "check",
    "kind",
    "reboot_pending",
    "rebooted",
    "notices",
    "in_sync_with",
    "started_at",
    "gpuclus_version",
    "status",
    "rc",
    "finished_at",
    "phases",
    "hosts",
    "failures",
    "error",
    "interrupted",
    "seconds",
    "changed",
}


class FakePreflight:
    """Stands in for preflight.runner.preflight_spec: no SSH, canned reports, calls recorded."""

    def __init__(self) -> None:
        self.calls: list[Path] = []
        self.reports: list[NodeReport] = []

    def __call__(
        self, loaded: Any, spec: Path, min_disk_gb: float = 10.0, hosts: list[str] | None = None
    ) -> list[NodeReport]:
        self.calls.append(spec)
        return self.reports


@pytest.fixture(autouse=True)
def preflight(monkeypatch: pytest.MonkeyPatch) -> FakePreflight:
    monkeypatch.setenv("GPUCLUS_PLAYBOOKS_DIR", str(PLAYBOOKS))

    def trap(what: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"a unit test reached {what}")

        return refuse

    monkeypatch.setattr(pipeline, "execute", trap("pipeline.execute: Ansible would have run"))
    monkeypatch.setattr(ssh_client, "connect", trap("ssh.client.connect"))
    fake = FakePreflight()
    monkeypatch.setattr(preflight_runner, "preflight_spec", fake)
    return fake


def app() -> Any:
    from gpuclus.cli.main import app as gpuclus_app

    return gpuclus_app


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def with_key(spec: Path) -> StateDir:
    state = StateDir.beside(spec)
    state.ensure_ssh_key()
    return state


def deploy(*args: str) -> Any:
    return runner.invoke(app(), ["deploy", *args])


def assert_nothing_prepared(spec: Path) -> None:
    state = StateDir.beside(spec)
    assert not (state.root / "runs").exists()
    assert not (state.root / "secrets").exists()


# Help ----------------------------------------------------------------------------------


def test_deploy_help() -> None:
    result = runner.invoke(app(), ["deploy", "-h"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for option in ("--only", "--skip", "--limit", "--retry-failed", "--check", "--keep", "--json"):
        assert option in text
    assert "4 when hosts were unreachable" in text
    assert "3 spec invalid" in text
    # Every phase, with what it sets up, in deploy order: deploy/phases is the one list the help reads.
    unboxed = " ".join(result.output.replace("\u2502", " ").split())
    at = [unboxed.find(f"{phase.value} ({phases.WHAT[phase]})") for phase in phases.ORDER]
    assert -1 not in at and at == sorted(at), (at, unboxed)


def test_runs_help() -> None:
    result = runner.invoke(app(), ["runs", "-h"])
    assert result.exit_code == 0, result.output
    assert "list" in result.output
    assert "show" in result.output


# deploy refuses before Ansible ------------------------------------------------------------


def test_invalid_spec_exits_three(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, INVALID)
    result = deploy(str(spec))
    assert result.exit_code == 3, result.output
    assert "duplicate-address" in result.stderr
    assert_nothing_prepared(spec)


def test_missing_spec_exits_two(tmp_path: Path) -> None:
    result = deploy(str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2, result.output
    assert "no such file" in result.stderr
    assert "Traceback" not in result.output


def test_unknown_phase_exits_two(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    result = deploy(str(spec), "--only", "bogus")
    assert result.exit_code == 2, result.output
    assert "--only 'bogus' is not a phase" in result.stderr
    assert "phases: base, nfs, nvidia, slurm, users, containers, pytorch, monitoring" in result.stderr
    assert_nothing_prepared(spec)


def test_only_and_skip_exit_two(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    result = deploy(str(spec), "--only", "base", "--skip", "slurm")
    assert result.exit_code == 2, result.output
    assert "--only and --skip cannot be used together" in result.stderr


def test_only_a_phase_the_spec_does_not_use(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    result = deploy(str(spec), "--only", "nvidia")
    assert result.exit_code == 2, result.output
    assert "--only nvidia: the spec does not use that phase" in result.stderr


def test_phase_without_a_playbook_is_refused_with_a_hint(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, REAL_GPUS)
    with_key(spec)
    result = deploy(str(spec))
    assert result.exit_code == 2, result.output
    stderr = " ".join(result.stderr.split())
    assert "nvidia" in stderr
    assert "hint: deploy the rest with --skip nvidia" in stderr
    assert_nothing_prepared(spec)


def test_skipping_the_missing_phases_gets_past_that_check(tmp_path: Path) -> None:
    # Without a key the next check refuses: proof the phase check passed, and still no Ansible.
    spec = write_spec(tmp_path, REAL_GPUS)
    result = deploy(str(spec), "--skip", "nvidia,containers")
    assert result.exit_code == 2, result.output
    assert "no SSH key" in result.stderr


def test_phase_refusal_in_json_mode(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, REAL_GPUS)
    with_key(spec)
    result = deploy(str(spec), "--json")
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["error"]["exit_code"] == 2
    assert "--skip nvidia" in payload["error"]["hint"]


def test_no_ssh_key_exits_two_with_the_hint(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    result = deploy(str(spec))
    assert result.exit_code == 2, result.output
    stderr = " ".join(result.stderr.split())
    assert "gpuclus has no SSH key yet" in stderr
    assert "hint: `gpuclus sandbox up` creates one" in stderr
    assert_nothing_prepared(spec)


def test_no_ssh_key_without_preflight(tmp_path: Path, preflight: FakePreflight) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    result = deploy(str(spec), "--no-preflight")
    assert result.exit_code == 2, result.output
    assert "gpuclus has no SSH key yet" in result.stderr
    assert preflight.calls == []
    assert_nothing_prepared(spec)


def test_deploy_runs_the_preflight_first(tmp_path: Path, preflight: FakePreflight) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    deploy(str(spec))
    assert preflight.calls == [spec]


def recorded_in_sync(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a full deploy of every node had been recorded and the nodes still answered as then (no SSH)."""
    from gpuclus.deploy import in_sync
    from gpuclus.spec.load import load_spec

    loaded = load_spec(spec)
    chosen = pipeline.scope(pipeline.DeployRequest(spec_path=spec), loaded)
    key = pipeline._in_sync_key(spec, loaded, pipeline.render_for_run(spec, loaded), chosen.phases)
    fingerprints: dict[str, str | None] = {name: name.ljust(64, "0") for name in chosen.hosts}
    in_sync.remember(StateDir.beside(spec), key, "20261202T100000Z-abcd", fingerprints)
    monkeypatch.setattr(in_sync, "read_fingerprints", lambda loaded, spec_path, names: fingerprints)


def test_a_deploy_of_an_unchanged_cluster_runs_nothing_and_says_so(
    tmp_path: Path, preflight: FakePreflight, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    recorded_in_sync(spec, monkeypatch)
    result = deploy(str(spec))
    assert result.exit_code == 0, result.output
    assert preflight.calls == []  # and pipeline.execute, a trap, was not reached
    assert "every node still holds deploy 20261202T100000Z-abcd" in result.stderr
    stdout = " ".join(result.stdout.split())
    assert "nothing to do — the spec, gpuclus and every node are as deploy 20261202T100000Z-abcd left them" in stdout
    assert f"`gpuclus deploy {spec} --full` runs every task anyway" in stdout
    payload = json.loads(deploy(str(spec), "--json").stdout)
    assert (payload["ok"], payload["in_sync_with"], payload["changed"]) == (True, "20261202T100000Z-abcd", 0)


def test_full_runs_every_task_of_an_unchanged_cluster(
    tmp_path: Path, preflight: FakePreflight, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    recorded_in_sync(spec, monkeypatch)
    result = deploy(str(spec), "--full")
    assert preflight.calls == [spec]
    assert "Ansible would have run" in str(result.exception)


def unreachable(node: str, address: str) -> NodeReport:
    hint = "install gpuclus' key: `gpuclus preflight --password` (asks for ubuntu's password once)"
    return NodeReport(
        node, address, reachable=False, checks=[PreflightCheck("ssh", "fail", "Authentication failed.", hint)]
    )


def test_every_node_failing_preflight_exits_four(tmp_path: Path, preflight: FakePreflight) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    preflight.reports = [
        unreachable("head", "172.28.0.10"),
        *[unreachable(f"gpu0{i}", f"172.28.0.1{i}") for i in (1, 2)],
    ]
    result = deploy(str(spec))
    assert result.exit_code == 4, result.output  # as `gpuclus preflight` exits for them
    stderr = " ".join(result.stderr.split())
    assert "leaving out head, gpu01, gpu02: preflight failed" in stderr
    assert "no node is left to deploy to" in stderr
    assert "gpuclus preflight --password" in result.stdout
    assert_nothing_prepared(spec)


def test_every_node_failing_preflight_in_json_mode_says_why(tmp_path: Path, preflight: FakePreflight) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    preflight.reports = [
        unreachable("head", "172.28.0.10"),
        *[unreachable(f"gpu0{i}", f"172.28.0.1{i}") for i in (1, 2)],
    ]
    result = deploy(str(spec), "--json")
    assert result.exit_code == 4
    payload = json.loads(result.stdout)
    assert payload["error"]["exit_code"] == 4
    assert payload["error"]["hint"] or "Authentication failed." in result.stdout


@pytest.mark.parametrize(
    "options",
    [["--only", "bogus"], ["--only", "base", "--skip", "slurm"], ["--limit", "gpu09"], ["--retry-failed"]],
    ids=["only-bogus", "only-and-skip", "unknown-node", "retry-without-run"],
)
def test_bad_options_are_refused_before_any_ssh(tmp_path: Path, preflight: FakePreflight, options: list[str]) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    result = deploy(str(spec), *options)
    assert result.exit_code == 2, result.output
    assert preflight.calls == []


def test_limit_naming_an_unknown_node_exits_two(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    result = deploy(str(spec), "--limit", "gpu[02-03]")
    assert result.exit_code == 2, result.output
    assert "--limit names node(s) not in the spec: gpu03" in result.stderr
    assert_nothing_prepared(spec)


def test_retry_failed_without_an_earlier_run_exits_two(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    with_key(spec)
    result = deploy(str(spec), "--retry-failed")
    assert result.exit_code == 2, result.output
    assert "there is no earlier run" in result.stderr


@pytest.mark.parametrize("keep", ["0", "-1"])
def test_keep_below_one_is_a_usage_error(tmp_path: Path, keep: str) -> None:
    spec = write_spec(tmp_path, SANDBOX)
    assert deploy(str(spec), "--keep", keep).exit_code == 2


# runs list / show -----------------------------------------------------------------------------


def replayed(name: str, run_id: str, status: str, rc: int) -> RunRecord:
    """A record the way deploy builds one: the recorded event stream through RecordBuilder."""
    record = RunRecord(
        id=run_id,
        spec="/home/admin/lab/cluster.yaml",
        spec_sha256="5" * 64,
        phases_requested=["base", "slurm"],
        limit=None,
        check=False,
        started_at=1_772_366_400.0,
        gpuclus_version="0.1.0",
    )
    builder = RecordBuilder(record)
    translator = EventTranslator()
    for line in (FIXTURES / "events" / f"{name}.jsonl").read_text().splitlines():
        event = translator.translate(json.loads(line))
        if event is not None:
            builder.add(event)
    return builder.finish(status, rc)


@pytest.fixture
def spec_with_runs(tmp_path: Path) -> Path:
    spec = tmp_path / "cluster.yaml"  # runs need no spec file, only its .gpuclus/ beside it
    state = StateDir.beside(spec)
    made = [
        replayed("success", RUN_IDS[0], "successful", 0),
        replayed("unreachable_and_failed", RUN_IDS[1], "failed", 2),
        replayed("no_log_failed", RUN_IDS[2], "failed", 2),
    ]
    for record in made:
        record.save(runs_dir(state) / record.id)
    return spec


def test_runs_list_without_runs(tmp_path: Path) -> None:
    result = runner.invoke(app(), ["runs", "list", "--spec", str(tmp_path / "cluster.yaml")])
    assert result.exit_code == 0, result.output
    assert "no deploy runs recorded here yet" in result.stdout


def test_runs_list_json_without_runs(tmp_path: Path) -> None:
    result = runner.invoke(app(), ["runs", "list", "--spec", str(tmp_path / "cluster.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"ok": True, "runs": []}


def test_runs_list_json(spec_with_runs: Path) -> None:
    result = runner.invoke(app(), ["runs", "list", "--spec", str(spec_with_runs), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] is True
    runs = payload["runs"]
    assert [run["id"] for run in runs] == list(reversed(RUN_IDS))
    assert [run["status"] for run in runs] == ["failed", "failed", "successful"]
    for run in runs:
        assert set(run) == RECORD_KEYS
    success = runs[2]
    assert success["changed"] == 5
    assert success["rc"] == 0
    assert [phase["name"] for phase in success["phases"]] == ["base", "slurm"]
    assert set(success["phases"][0]) == {"name", "seconds", "tasks", "changed", "failed"}
    assert success["failures"] == []
    assert set(success["hosts"]) == {"head", "gpu01", "gpu02"}


def test_runs_list_human(spec_with_runs: Path) -> None:
    result = runner.invoke(app(), ["runs", "list", "--spec", str(spec_with_runs)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[0].split()[:4] == ["run", "kind", "status", "changed"]
    assert [line.split()[0] for line in lines[1:]] == list(reversed(RUN_IDS))
    assert lines[3].split()[1:4] == ["deploy", "successful", "5"]


def test_runs_show_json_by_prefix(spec_with_runs: Path) -> None:
    result = runner.invoke(app(), ["runs", "show", "20260301T13", "--spec", str(spec_with_runs), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] is True
    assert set(payload) == RECORD_KEYS | {"ok"}
    assert payload["id"] == RUN_IDS[1]
    assert payload["status"] == "failed"
    (phase,) = payload["phases"]
    assert phase == {"name": "base", "seconds": phase["seconds"], "tasks": 2, "changed": 0, "failed": 2}
    assert [(f["host"], f["unreachable"]) for f in payload["failures"]] == [("gpu02", True), ("gpu01", False)]
    assert payload["failures"][1]["message"] == (
        "non-zero return code (rc 1): See systemctl status chronyd.service for details."
    )
    assert payload["hosts"]["gpu02"]["dark"] == 1


def test_runs_show_human(spec_with_runs: Path) -> None:
    result = runner.invoke(app(), ["runs", "show", RUN_IDS[1], "--spec", str(spec_with_runs)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"run {RUN_IDS[1]}" in out
    assert "spec sha256 555555555555" in out
    assert "2 tasks, 0 changed, 2 failed" in out
    assert "✗ gpu02 unreachable: Install base packages:" in out
    assert "No route to host" in out
    assert "✗ gpu01 failed: Start chronyd:" in out
    # The hint names the run's spec when it is not ./cluster.yaml.
    assert re.search(r"`gpuclus deploy (\S+ )?--retry-failed`", out), out


def test_runs_show_no_log_failure_hides_output(spec_with_runs: Path) -> None:
    result = runner.invoke(app(), ["runs", "show", RUN_IDS[2], "--spec", str(spec_with_runs), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["failures"][0]["message"].startswith("output hidden (no_log)")


@pytest.mark.parametrize("run_id", ["nope", "20260301T1"])  # unknown, ambiguous
def test_runs_show_without_a_single_match_exits_two(spec_with_runs: Path, run_id: str) -> None:
    result = runner.invoke(app(), ["runs", "show", run_id, "--spec", str(spec_with_runs)])
    assert result.exit_code == 2, result.output
    assert f"no single run matches {run_id!r}" in result.stderr
    assert "gpuclus runs list" in result.stderr


def test_runs_show_nope_in_json_mode(spec_with_runs: Path) -> None:
    result = runner.invoke(app(), ["runs", "show", "nope", "--spec", str(spec_with_runs), "--json"])
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["error"]["exit_code"] == 2
