"""Run records built from recorded event streams; the pipeline's status, exit code and --limit.

The streams are the recorded ones in tests/fixtures/events/ (see
test_deploy_events.py for how they were made).
"""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from deploy_specs import THREE_NODE_SPEC

from gpuclus.deploy import records
from gpuclus.deploy.events import EventTranslator, HostResult, PhaseStarted, TaskStarted
from gpuclus.deploy.pipeline import DeployRequest, _status, exit_code, prepare, resolve_limit
from gpuclus.deploy.records import (
    Failure,
    RecordBuilder,
    RunRecord,
    list_records,
    load_record,
    prune,
    runs_dir,
)
from gpuclus.deploy.workspace import new_run_id
from gpuclus.errors import ExitCode, UsageError
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.state import StateDir

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "events"
NO_LOG_MESSAGE = "output hidden (no_log): the task carries a secret; rerun with -vvv on a test cluster"
UNREACHABLE_MESSAGE = (
    "Task failed: Failed to connect to the host via ssh: ssh: connect to host 10.0.0.12 port 22: No route to host"
)
CHRONYD_MESSAGE = "non-zero return code (rc 1): See systemctl status chronyd.service for details."

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}
nfs: {exports: [/shared]}
"""


def raw_events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EVENTS / f"{name}.jsonl").read_text().splitlines()]


def new_record(run_id: str = "20260301T120000Z-ab12", started_at: float = 1_772_366_400.0) -> RunRecord:
    return RunRecord(
        id=run_id,
        spec="/home/admin/lab/cluster.yaml",
        spec_sha256="5" * 64,
        phases_requested=["base", "slurm"],
        limit=None,
        check=False,
        started_at=started_at,
        gpuclus_version="0.1.0",
    )


def replay(raws: list[dict[str, Any]], record: RunRecord | None = None) -> RecordBuilder:
    builder = RecordBuilder(record or new_record())
    translator = EventTranslator()
    for raw in raws:
        event = translator.translate(raw)
        if event is not None:
            builder.add(event)
    return builder


def build(name: str, record: RunRecord | None = None) -> RecordBuilder:
    return replay(raw_events(name), record)


def only_unreachable() -> list[dict[str, Any]]:
    """unreachable_and_failed without gpu01's failed task: a run where hosts were only unreachable."""
    return [raw for raw in raw_events("unreachable_and_failed") if raw["event"] != "runner_on_failed"]


# RecordBuilder -------------------------------------------------------------------------


def test_successful_run() -> None:
    builder = build("success")
    record = builder.finish("successful", 0)
    assert [(p.name, p.tasks, p.changed, p.failed) for p in record.phases] == [
        ("base", 3, 2, 0),
        ("slurm", 2, 3, 0),
    ]
    assert record.failures == []  # the ignored failure is not one
    assert record.failed_hosts() == []
    assert set(record.hosts) == {"head", "gpu01", "gpu02"}
    assert record.hosts["head"] == {
        "ok": 5,
        "changed": 2,
        "failures": 0,
        "dark": 0,
        "skipped": 0,
        "rescued": 0,
        "ignored": 1,
    }
    assert record.changed_total() == 5
    assert (record.status, record.rc) == ("successful", 0)
    assert record.finished_at is not None and record.finished_at >= record.started_at
    assert all(phase.seconds >= 0 for phase in record.phases)


def test_unreachable_and_failed_run() -> None:
    record = build("unreachable_and_failed").finish("failed", 2)
    assert [(p.name, p.tasks, p.changed, p.failed) for p in record.phases] == [("base", 2, 0, 2)]
    assert record.failures == [
        Failure("gpu02", "Install base packages", "base", UNREACHABLE_MESSAGE, unreachable=True),
        Failure("gpu01", "Start chronyd", "base", CHRONYD_MESSAGE, unreachable=False),
    ]
    assert record.failed_hosts() == ["gpu01", "gpu02"]
    assert record.hosts["gpu02"]["dark"] == 1
    assert record.hosts["gpu01"]["failures"] == 1


def test_no_log_failure_is_recorded_without_the_secret() -> None:
    record = build("no_log_failed").finish("failed", 2)
    assert [(p.name, p.tasks, p.failed) for p in record.phases] == [("slurm", 1, 1)]
    assert record.failures == [Failure("head", "Set the database password", "slurm", NO_LOG_MESSAGE, False)]
    text = json.dumps(record.as_dict())
    assert "censored" not in text
    assert "s3cretpassw0rd" not in text


def test_loop_failure_is_one_failure() -> None:
    record = build("loop_failed").finish("failed", 2)
    assert [(p.name, p.tasks, p.changed, p.failed) for p in record.phases] == [("base", 1, 0, 1)]
    assert [(f.host, f.task, f.unreachable) for f in record.failures] == [("head", "Install packages", False)]
    # Item results never reach the record, only the one-line message.
    assert "results" not in json.dumps(record.as_dict())


def test_failures_before_the_first_phase_are_kept() -> None:
    builder = RecordBuilder(new_record())
    builder.add(TaskStarted(None, "Check the inventory", "Assert"))
    builder.add(HostResult(None, "localhost", "Assert", "failed", "Assertion failed"))
    record = builder.finish("failed", 2)
    assert record.phases == []
    assert record.failures == [Failure("localhost", "Assert", None, "Assertion failed", False)]


def test_phase_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 112.34, 112.34, 120.0])
    monkeypatch.setattr(records, "time", SimpleNamespace(monotonic=lambda: next(clock), time=lambda: 2e9))
    builder = RecordBuilder(new_record())
    builder.add(PhaseStarted("base"))
    builder.add(PhaseStarted("slurm"))
    record = builder.finish("successful", 0)
    assert [(phase.name, phase.seconds) for phase in record.phases] == [("base", 12.3), ("slurm", 7.7)]
    assert record.finished_at == 2e9


@pytest.mark.parametrize(
    ("status", "rc"), [("successful", 0), ("failed", 2), ("unreachable", 4), ("interrupted", None)]
)
def test_finish_sets_status_and_rc(status: str, rc: int | None) -> None:
    builder = build("success")
    assert builder.record.status == "running"
    assert builder.record.rc is None
    record = builder.finish(status, rc)
    assert (record.status, record.rc) == (status, rc)


# Saving and loading ---------------------------------------------------------------------


def test_save_and_from_dict_round_trip(tmp_path: Path) -> None:
    record = build("unreachable_and_failed").finish("failed", 2)
    record.error = ""
    record.save(tmp_path)
    path = tmp_path / records.RECORD_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["changed"] == record.changed_total()
    assert data["seconds"] == round(record.seconds, 1)
    assert data["failures"][0] == {
        "host": "gpu02",
        "task": "Install base packages",
        "phase": "base",
        "message": UNREACHABLE_MESSAGE,
        "unreachable": True,
    }
    assert RunRecord.from_dict(data) == record


def test_from_dict_ignores_unknown_keys() -> None:
    data = {**new_record().as_dict(), "added_in_a_later_version": 1}
    assert RunRecord.from_dict(data) == new_record()


def test_seconds_of_a_running_record_counts_up() -> None:
    record = new_record(started_at=0.0)
    assert record.finished_at is None
    assert record.seconds > 1e9


def save_runs(state: StateDir, ids: list[str], stream: str = "success") -> None:
    for run_id in ids:
        build(stream, new_record(run_id)).finish("successful", 0).save(runs_dir(state) / run_id)


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir(tmp_path / ".gpuclus")


def run_ids(count: int) -> list[str]:
    start = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    return [new_run_id(start + timedelta(minutes=minute)) for minute in range(count)]


def test_list_records_newest_first(state: StateDir) -> None:
    ids = run_ids(3)
    save_runs(state, [ids[1], ids[0], ids[2]])
    assert [record.id for record in list_records(state)] == [ids[2], ids[1], ids[0]]


def test_list_records_skips_runs_without_a_readable_record(state: StateDir) -> None:
    ids = run_ids(3)
    save_runs(state, [ids[0]])
    (runs_dir(state) / ids[1]).mkdir()  # interrupted before the record was written
    (runs_dir(state) / ids[2]).mkdir()
    (runs_dir(state) / ids[2] / records.RECORD_FILE).write_text("{not json")
    assert [record.id for record in list_records(state)] == [ids[0]]


def test_list_records_without_runs(state: StateDir) -> None:
    assert list_records(state) == []


def test_load_record_by_unique_prefix(state: StateDir) -> None:
    ids = ["20260301T120000Z-aa11", "20260301T120000Z-aa22", "20260302T080000Z-bb33"]
    save_runs(state, ids)
    assert load_record(state, ids[0]) == list_records(state)[2]
    assert load_record(state, "20260302").id == ids[2]  # type: ignore[union-attr]
    assert load_record(state, "20260301T120000Z-aa2").id == ids[1]  # type: ignore[union-attr]
    assert load_record(state, "20260301T120000Z-aa") is None  # ambiguous
    assert load_record(state, "nope") is None


def test_prune_keeps_the_newest(state: StateDir) -> None:
    ids = run_ids(5)
    save_runs(state, ids)
    assert sorted(prune(state, 2)) == ids[:3]
    assert sorted(path.name for path in runs_dir(state).iterdir()) == ids[3:]
    assert prune(state, 2) == []
    assert [record.id for record in list_records(state)] == [ids[4], ids[3]]


def test_prune_refuses_to_remove_everything_and_tolerates_no_runs(state: StateDir) -> None:
    assert prune(state, 1) == []
    save_runs(state, run_ids(2))
    assert prune(state, 0) == []
    assert len(list_records(state)) == 2


# pipeline: status and exit code -------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "runner_status", "cancelled", "status", "code"),
    [
        ("success", "successful", False, "successful", 0),
        ("unreachable_and_failed", "failed", False, "failed", 1),
        ("no_log_failed", "failed", False, "failed", 1),
        ("loop_failed", "failed", False, "failed", 1),
        ("success", "failed", False, "failed", 1),  # Ansible failed without a task failing (syntax, preflight)
        ("success", "timeout", False, "failed", 1),
        ("success", "successful", True, "interrupted", 130),
        ("unreachable_and_failed", "failed", True, "interrupted", 130),
        ("success", "canceled", False, "interrupted", 130),
    ],
)
def test_status_and_exit_code(stream: str, runner_status: str, cancelled: bool, status: str, code: int) -> None:
    builder = build(stream)
    found = _status(runner_status, builder.record, cancelled)
    assert found == status
    assert exit_code(builder.finish(found, None)) == code


def test_only_unreachable_hosts_exit_four() -> None:
    builder = replay(only_unreachable())
    assert [failure.unreachable for failure in builder.record.failures] == [True]
    status = _status("failed", builder.record, cancelled=False)
    assert status == "unreachable"
    assert exit_code(builder.finish(status, 4)) == ExitCode.UNREACHABLE
    assert int(ExitCode.UNREACHABLE) == 4


def test_ignored_failures_do_not_fail_the_run() -> None:
    builder = build("success")
    assert _status("successful", builder.record, cancelled=False) == "successful"


def test_unknown_status_exits_failed() -> None:
    assert exit_code(new_record()) == ExitCode.FAILED  # still "running": the run died under us


# pipeline: --limit and --retry-failed -------------------------------------------------------


@pytest.fixture
def loaded() -> LoadedSpec:
    spec = load_spec_text(SPEC)
    assert spec.ok, spec.findings
    return spec


def request(**options: Any) -> DeployRequest:
    return DeployRequest(spec_path=Path("cluster.yaml"), **options)


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (None, None),
        ("", None),
        ("head", "head"),
        ("gpu[01-02]", "gpu01,gpu02"),
        ("head,gpu02", "head,gpu02"),
        ("gpu[01-02],head", "gpu01,gpu02,head"),
    ],
)
def test_limit_is_expanded(loaded: LoadedSpec, state: StateDir, limit: str | None, expected: str | None) -> None:
    assert resolve_limit(request(limit=limit), loaded, state) == expected


def test_limit_with_unknown_nodes(loaded: LoadedSpec, state: StateDir) -> None:
    with pytest.raises(UsageError) as caught:
        resolve_limit(request(limit="gpu[02-04],login"), loaded, state)
    assert "gpu[03-04]" in caught.value.message
    assert "login" in caught.value.message
    assert caught.value.hint == "nodes: head,gpu[01-02]"
    assert caught.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("limit", ["gpu[01-", "head,,gpu01", "gpu[02-01]"])
def test_limit_with_bad_syntax(loaded: LoadedSpec, state: StateDir, limit: str) -> None:
    with pytest.raises(UsageError, match="--limit"):
        resolve_limit(request(limit=limit), loaded, state)


def test_retry_failed_takes_the_last_runs_failed_hosts(loaded: LoadedSpec, state: StateDir) -> None:
    ids = run_ids(2)
    save_runs(state, [ids[0]], "success")
    save_runs(state, [ids[1]], "unreachable_and_failed")
    assert resolve_limit(request(retry_failed=True), loaded, state) == "gpu01,gpu02"


def test_retry_failed_without_an_earlier_run(loaded: LoadedSpec, state: StateDir) -> None:
    with pytest.raises(UsageError, match="no earlier run"):
        resolve_limit(request(retry_failed=True), loaded, state)


def test_retry_failed_when_the_last_run_failed_nowhere(loaded: LoadedSpec, state: StateDir) -> None:
    ids = run_ids(2)
    save_runs(state, [ids[0]], "unreachable_and_failed")
    save_runs(state, [ids[1]], "success")  # the newest counts, not an older failure
    with pytest.raises(UsageError, match=f"last deploy \\({ids[1]}\\) had no failed or unreachable hosts"):
        resolve_limit(request(retry_failed=True), loaded, state)


def test_retry_failed_ignores_hosts_no_longer_in_the_spec(loaded: LoadedSpec, state: StateDir) -> None:
    builder = RecordBuilder(new_record(run_ids(1)[0]))
    builder.add(HostResult(None, "localhost", "Check the inventory", "failed", "Assertion failed"))
    builder.add(HostResult("base", "gpu09", "Write", "unreachable", "gone"))
    builder.finish("failed", 2).save(runs_dir(state) / builder.record.id)
    with pytest.raises(UsageError, match="had no failed or unreachable hosts"):
        resolve_limit(request(retry_failed=True), loaded, state)


def test_retry_failed_with_limit(loaded: LoadedSpec, state: StateDir) -> None:
    save_runs(state, run_ids(1), "unreachable_and_failed")
    with pytest.raises(UsageError, match="--retry-failed and --limit"):
        resolve_limit(request(retry_failed=True, limit="head"), loaded, state)


# pipeline.prepare with nodes left out by preflight ------------------------------------------

SANDBOX = THREE_NODE_SPEC
HEAD_DOWN = Failure("head", "preflight: ssh", "preflight", "Authentication failed.", unreachable=True)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, LoadedSpec]:
    monkeypatch.setenv("GPUCLUS_PLAYBOOKS_DIR", str(EVENTS.parent / "deploy_playbooks"))
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SANDBOX)
    StateDir.beside(spec).ensure_ssh_key()
    loaded = load_spec_text(SANDBOX, str(spec))
    assert loaded.ok
    return spec, loaded


def test_nodes_failing_preflight_are_left_out_and_recorded(sandbox: tuple[Path, LoadedSpec]) -> None:
    spec, loaded = sandbox
    prepared = prepare(DeployRequest(spec_path=spec), loaded, preflight_failures=(HEAD_DOWN,))
    assert prepared.config.limit == "gpu01,gpu02"
    assert prepared.record.failures == [HEAD_DOWN]
    assert _status("successful", prepared.record, cancelled=False) == "unreachable"
    saved = load_record(StateDir.beside(spec), prepared.record.id)
    assert saved is not None and saved.failures == [HEAD_DOWN]


def test_preflight_failures_outside_the_limit_are_not_the_runs(sandbox: tuple[Path, LoadedSpec]) -> None:
    spec, loaded = sandbox
    prepared = prepare(DeployRequest(spec_path=spec, limit="gpu01"), loaded, preflight_failures=(HEAD_DOWN,))
    assert prepared.config.limit == "gpu01"
    assert prepared.record.failures == []
