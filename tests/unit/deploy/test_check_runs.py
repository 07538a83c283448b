"""Check runs (`gpuclus deploy --check`) are recorded and shown as checks, with diffs (issue 12 item 3).

A check run used to print "✓ deploy ...: 3 changed", count as the last deploy
for --retry-failed, look like a deploy in `runs list`, and show no diff. The
runs here are the real pipeline and CLI with the SSH preflight off and the
Ansible run replaced by the recorded check_diff stream (test_deploy_pipeline's
FakeRun; the stream is described in test_deploy_events.py).
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from deploy_specs import THREE_NODE_SPEC
from test_deploy_pipeline import Observer, Runs
from typer.testing import CliRunner

from gpuclus.cli.deploy_view import _ProgressView
from gpuclus.deploy import pipeline, records, workspace
from gpuclus.deploy.events import DIFF_LINES, EventTranslator, HostResult, PhaseStarted, PlayStats, result_diff
from gpuclus.deploy.last_applied import read_last_applied
from gpuclus.deploy.records import RecordBuilder, RunRecord, last_deploy, runs_dir
from gpuclus.errors import UsageError
from gpuclus.output import Output
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.state import StateDir

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CHECK_DIFF = FIXTURES / "events" / "check_diff.jsonl"
# Lines of the recorded diffs: the motd head would get, and a line of gpu01's new slurm.conf.
MOTD_DIFF = ["--- /srv/demo/head/motd", "+++ /srv/demo/head/motd", "@@ -1 +1,2 @@", "-old motd"]


def app() -> Any:
    from gpuclus.cli.main import app as gpuclus_app

    return gpuclus_app


def translated(name: str = "check_diff") -> list[Any]:
    translator = EventTranslator()
    lines = (FIXTURES / "events" / f"{name}.jsonl").read_text().splitlines()
    return [event for line in lines if (event := translator.translate(json.loads(line))) is not None]


def result(host: str, task: str) -> HostResult:
    (found,) = [e for e in translated() if isinstance(e, HostResult) and (e.host, e.task) == (host, task)]
    return found


@pytest.fixture
def spec(spec: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This folder's conftest.py's spec, with run ids a minute apart: ids sort by time to the second, so
    "newest" is the later run. (``loaded`` is the conftest's.)"""
    minutes = itertools.count()
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    real = workspace.new_run_id
    monkeypatch.setattr(workspace, "new_run_id", lambda: real(start + timedelta(minutes=next(minutes))))
    return spec


def run(spec: Path, loaded: LoadedSpec, stream: str, **options: Any) -> records.RunRecord:
    request = pipeline.DeployRequest(spec_path=spec, preflight=False, keep=None, **options)
    return pipeline.deploy(request, loaded, Observer(), start_run=Runs(stream)).record


# Counting as Ansible's recap does -------------------------------------------------------


def test_phase_totals_add_up_to_the_recap_handlers_no_log_and_ignored_failures_included() -> None:
    builder = RecordBuilder(RunRecord("r", "s", "0", ["base", "slurm"], None, True, 0.0, "0"))
    for event in translated():
        builder.add(event)
    record = builder.finish("successful", 0)
    (stats,) = [event for event in translated() if isinstance(event, PlayStats)]
    assert {host: counts["changed"] for host, counts in stats.per_host.items()} == {"head": 7, "gpu01": 5, "gpu02": 2}
    assert [(phase.name, phase.changed) for phase in record.phases] == [("base", 9), ("slurm", 5)]
    assert sum(phase.changed for phase in record.phases) == record.changed_total() == 14


def test_results_ansible_counts_as_changed() -> None:
    assert result("head", "Reload the motd").status == "changed"  # a handler: runner_on_ok like a task
    # no_log: ansible-runner drops `changed` from the censored result; Ansible's line still says it.
    assert result("gpu02", "Write the database password").status == "changed"
    assert result("head", "Write the accounting secrets").status == "changed"  # a no_log loop: its items say it
    ignored = result("gpu01", "Try a command that may fail")
    assert (ignored.status, ignored.ignored, ignored.counts_changed) == ("failed", True, True)
    assert result("gpu02", "Write the motd").status == "ok"
    # A failure that is not ignored stops the host: Ansible's recap does not count it changed.
    assert not HostResult("p", "h", "t", "failed", changed_anyway=True).counts_changed


# Diffs --------------------------------------------------------------------------------------


def test_a_changed_result_carries_its_unified_diff() -> None:
    assert result("head", "Write the motd").diff.splitlines() == [*MOTD_DIFF, "+managed by gpuclus", "+node head"]
    # A loop: every changed item's diff, one after the other.
    loop = result("gpu01", "Render the Slurm files").diff
    assert "+++ /srv/demo/gpu01/slurm.conf" in loop
    assert "+++ /srv/demo/gpu01/cgroup.conf" in loop


def test_no_diff_for_no_log_diff_false_or_unchanged_results() -> None:
    assert result("head", "Write the database password").diff == ""  # no_log: censored
    assert result("head", "Write the accounting secrets").diff == ""  # a no_log loop
    assert result("head", "Write the munge key").diff == ""  # diff: false
    assert result("gpu02", "Write the motd").diff == ""  # unchanged (its diff only names the path)
    texts = "".join(event.diff for event in translated() if isinstance(event, HostResult))
    assert "s3cretpassw0rd" not in texts and "m0ngek3y" not in texts


def test_a_long_diff_is_capped() -> None:
    lines = result("head", "Render a long file").diff.splitlines()
    assert len(lines) == DIFF_LINES
    assert lines[-1] == f"... {63 - DIFF_LINES + 1} more lines"  # 3 header lines and 60 added


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        (
            {"diff": {"prepared": "The following NEW packages will be installed:\n  munge\n"}},
            ["The following", "  munge"],
        ),
        (
            {
                "diff": {
                    "before": {"path": "/etc/munge", "mode": "0755"},
                    "after": {"path": "/etc/munge", "mode": "0700"},
                }
            },
            ["--- before", "+++ after", "@@ -1,2 +1,2 @@", "-mode: 0755", "+mode: 0700", " path: /etc/munge"],
        ),
        ({"censored": "hidden", "diff": {"before": "a", "after": "b"}}, []),
        (
            {"results": [{"censored": "hidden"}, {"changed": True, "diff": {"before": "a\n", "after": "b\n"}}]},
            ["--- before"],
        ),
        ({"changed": True}, []),
    ],
    ids=["prepared", "attributes", "censored", "censored-item", "none"],
)
def test_result_diff_shapes(res: dict[str, Any], expected: list[str]) -> None:
    lines = result_diff(res).splitlines()
    assert [line[: len(want)] for line, want in zip(lines, expected, strict=False)] == expected
    assert bool(lines) == bool(expected)


# What a check run shows ----------------------------------------------------------------------


def shown(check: bool, events: list[Any]) -> tuple[list[str], str]:
    """The finished phase lines and what the view printed above them."""
    out = Output(json_mode=False)
    view = _ProgressView(out, host_count=3, check=check)
    view.progress.console.record = True
    view.run_started(SimpleNamespace(cancelled=SimpleNamespace(is_set=lambda: False)))
    with view:
        for event in events:
            view.event(event)
    return [task.description for task in view.progress.tasks], view.progress.console.export_text()


def test_check_phase_lines_say_would_change_and_show_the_diffs() -> None:
    lines, printed = shown(True, translated())
    assert lines[0].endswith("[dim](9 would change)[/]")
    assert lines[1].endswith("[dim](5 would change)[/]")
    assert "~ Write the motd would change on gpu01, head" in printed
    assert "\n".join(f"      {line}" for line in MOTD_DIFF) in printed
    # Tasks without a diff are still named; their secrets never are.
    assert "~ Write the database password would change on gpu01, head, gpu02" in printed
    assert "s3cretpassw0rd" not in printed


def test_identical_diffs_are_shown_once_for_their_hosts() -> None:
    same = "--- /etc/hosts\n+++ /etc/hosts\n+10.0.0.13 gpu03"
    events = [PhaseStarted("base"), *(HostResult("base", h, "Write /etc/hosts", "changed", diff=same) for h in "ab")]
    _, printed = shown(True, events)
    assert printed.count("+10.0.0.13 gpu03") == 1
    assert "    a, b:" in printed


def test_a_deploy_shows_no_would_change_lines() -> None:
    lines, printed = shown(False, [PhaseStarted("base"), HostResult("base", "head", "t", "changed", diff="+x")])
    assert lines[0].endswith("[dim](1 changed)[/]")
    assert "would change" not in printed


def deploy_cli(spec: Path, monkeypatch: pytest.MonkeyPatch, stream: str, *args: str) -> Any:
    monkeypatch.setattr(pipeline, "DeployRun", Runs(stream))
    return runner.invoke(app(), ["deploy", str(spec), "--no-preflight", *args])


def test_check_run_summary_and_record(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = deploy_cli(spec, monkeypatch, "check_diff", "--check")
    assert done.exit_code == 0, done.output
    assert "✓ deploy" not in done.output
    assert re.search(r"check run \S+: 14 task results would change, nothing was changed", done.stdout)
    assert "+node gpu01" in done.stderr  # the diff, above the phase lines
    (record_file,) = (StateDir.beside(spec).root / "runs").glob("*/record.json")
    saved = json.loads(record_file.read_text())
    assert (saved["check"], saved["kind"], saved["changed"]) == (True, "check", 14)
    # The record holds no module results: no diff text.
    assert "managed by gpuclus" not in record_file.read_text()
    assert "/srv/demo" not in record_file.read_text()


def test_check_run_json(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = deploy_cli(spec, monkeypatch, "check_diff", "--check", "--json")
    assert done.exit_code == 0, done.output
    payload = json.loads(done.stdout)
    assert (payload["ok"], payload["check"], payload["kind"]) == (True, True, "check")
    assert "managed by gpuclus" not in done.stdout


def test_a_failed_check_run_names_its_failures_and_not_retry_failed(
    spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = deploy_cli(spec, monkeypatch, "unreachable_and_failed", "--check")
    assert done.exit_code == 1, done.output
    assert re.search(r"✗ check run \S+ failed after \d+ s \(base \d+ s\); nothing was changed", done.stdout)
    assert "✗ gpu01 failed: Start chronyd" in done.stderr
    # --retry-failed never takes a check run: the hint re-checks the hosts instead.
    assert "--check --limit 'gpu[01-02]'" in done.stdout
    assert "--retry-failed" not in done.stdout


def test_a_deploy_summary_is_unchanged(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = deploy_cli(spec, monkeypatch, "success")
    assert done.exit_code == 0, done.output
    assert re.search(r"✓ deploy \S+: 5 changed in", done.stdout)


def test_only_says_nothing_about_the_phases_it_was_not_asked_for(spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    everything = deploy_cli(spec, monkeypatch, "success", "--check")
    assert "skipping phase nvidia" in everything.stderr
    only = deploy_cli(spec, monkeypatch, "success", "--check", "--only", "slurm")
    assert only.exit_code == 0, only.output
    assert "skipping phase" not in only.stderr


# Check runs are never the last deploy -----------------------------------------------------------


def test_a_check_run_never_updates_last_applied(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    run(spec, loaded, "success")
    applied = read_last_applied(state)
    assert applied is not None
    spec.write_text(THREE_NODE_SPEC.replace("exports: [/home]", "exports: [/home, /scratch]"))
    changed = load_spec(spec)
    record = run(spec, changed, "check_diff", check=True)
    assert (record.status, record.check) == ("successful", True)
    assert read_last_applied(state) == applied
    assert pipeline.changes_since_last_deploy(spec, changed)[1]  # plan still sees the change


def test_retry_failed_takes_the_last_deploy_not_a_newer_check(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    failed = run(spec, loaded, "unreachable_and_failed")
    check = run(spec, loaded, "success", check=True)  # newer, and nothing failed in it
    assert last_deploy(state) == failed
    assert records.list_records(state)[0] == check
    assert pipeline.resolve_limit(pipeline.DeployRequest(spec, retry_failed=True), loaded, state) == "gpu01,gpu02"


def test_retry_failed_ignores_a_check_runs_failures(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)
    run(spec, loaded, "success")
    run(spec, loaded, "unreachable_and_failed", check=True)
    with pytest.raises(UsageError, match=r"the last deploy \(\S+\) had no failed or unreachable hosts"):
        pipeline.resolve_limit(pipeline.DeployRequest(spec, retry_failed=True), loaded, state)


def test_retry_failed_after_only_check_runs(spec: Path, loaded: LoadedSpec) -> None:
    run(spec, loaded, "unreachable_and_failed", check=True)
    with pytest.raises(UsageError, match="no earlier run other than check runs"):
        pipeline.resolve_limit(pipeline.DeployRequest(spec, retry_failed=True), loaded, StateDir.beside(spec))


def test_kind_in_the_record() -> None:
    record = RunRecord("r", "s", "0", [], None, True, 0.0, "0")
    assert (record.kind, record.as_dict()["kind"]) == ("check", "check")
    record.check = False
    assert record.as_dict()["kind"] == "deploy"
    assert RunRecord.from_dict(record.as_dict()) == record


# runs list / show -------------------------------------------------------------------------------

ALL_PHASES = ["base", "nfs", "nvidia", "slurm", "containers", "monitoring"]


def saved(state: StateDir, run_id: str, *, check: bool, status: str, stream: str, limit: str | None = None) -> None:
    record = RunRecord(run_id, "/home/admin/lab/cluster.yaml", "5" * 64, ALL_PHASES, limit, check, 1e9, "0.1.0")
    builder = RecordBuilder(record)
    for event in translated(stream):
        builder.add(event)
    done = builder.finish(status, 2)
    done.phases = [records.PhaseRecord(name, 1234.5, 40, 12) for name in ALL_PHASES]
    done.finished_at = done.started_at + 7407.0
    done.save(runs_dir(state) / run_id)


@pytest.fixture
def listed(tmp_path: Path) -> Path:
    spec = tmp_path / "cluster.yaml"
    state = StateDir.beside(spec)
    saved(state, "20260301T120000Z-aa11", check=False, status="failed", stream="unreachable_and_failed")
    saved(state, "20260301T130000Z-bb22", check=False, status="interrupted", stream="success", limit="gpu[01-64],head")
    saved(state, "20260302T080000Z-cc33", check=True, status="unreachable", stream="unreachable_and_failed")
    return spec


def test_runs_list_fits_80_columns_with_a_kind_column(listed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    done = runner.invoke(app(), ["runs", "list", "--spec", str(listed)])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    assert lines[0].split()[:3] == ["run", "kind", "status"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["20260302T080000Z-cc33"][1:3] == ["check", "unreachable"]
    assert rows["20260301T130000Z-bb22"][1:3] == ["deploy", "interrupted"]
    assert "base,nfs,nvidia,slurm" in done.stdout
    assert "on gpu[01-64],head" in done.stdout  # the --limit, on the row's second line


def test_runs_list_hint_names_the_last_deploy_not_the_newer_check(listed: Path) -> None:
    done = runner.invoke(app(), ["runs", "list", "--spec", str(listed)])
    assert done.exit_code == 0, done.output
    # The newest run is a check that failed; the newest deploy (bb22) failed nowhere: no hint.
    assert "--retry-failed" not in done.stderr
    state = StateDir.beside(listed)
    saved(state, "20260303T080000Z-dd44", check=False, status="failed", stream="unreachable_and_failed")
    saved(state, "20260303T090000Z-ee55", check=True, status="successful", stream="success")
    hint = " ".join(runner.invoke(app(), ["runs", "list", "--spec", str(listed)]).stderr.split())
    assert "re-runs gpu[01-02], the hosts that failed or were unreachable in 20260303T080000Z-dd44" in hint


def test_runs_list_json_carries_the_kind(listed: Path) -> None:
    done = runner.invoke(app(), ["runs", "list", "--spec", str(listed), "--json"])
    assert [run["kind"] for run in json.loads(done.stdout)["runs"]] == ["check", "deploy", "deploy"]


def test_runs_show_says_check_run(listed: Path) -> None:
    done = runner.invoke(app(), ["runs", "show", "20260302", "--spec", str(listed)])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("check run 20260302T080000Z-cc33")
    assert "12 would change" in done.stdout
    assert "✗ check run 20260302T080000Z-cc33 unreachable" in done.stdout
    shown_json = json.loads(runner.invoke(app(), ["runs", "show", "20260302", "--spec", str(listed), "--json"]).stdout)
    assert shown_json["kind"] == "check"


# Secrets stay out of diffs -------------------------------------------------------------------

ROLES = Path(__file__).resolve().parents[3] / "roles"
# What a file holding a secret looks like from its task: its path, or a template that reads one.
SECRET = re.compile(r"slurmdbd\.conf|munge\.key|password|secret|private|id_(rsa|ed25519|ecdsa)(?!\.pub)", re.IGNORECASE)
WRITERS = {"ansible.builtin.copy", "ansible.builtin.template", "copy", "template"}


def file_tasks() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            for inner in [task, *task.get("block", []), *task.get("rescue", []), *task.get("always", [])]:
                module = next((key for key in inner if key in WRITERS), None)
                if module is not None:
                    found.append((f"{path.relative_to(ROLES)}: {inner.get('name')}", inner | {"_args": inner[module]}))
    return found


def holds_a_secret(task: dict[str, Any]) -> bool:
    args = task["_args"] if isinstance(task["_args"], dict) else {}
    words = " ".join(str(args.get(key, "")) for key in ("src", "dest", "content")) + " " + str(task.get("name"))
    if SECRET.search(words):
        return True
    source = str(args.get("src", ""))
    template = next(ROLES.glob(f"*/templates/{source}"), None) if source and "{{" not in source else None
    return template is not None and bool(SECRET.search(template.read_text()))


def test_every_task_writing_a_secret_shows_no_diff() -> None:
    """A check run prints diffs: a task writing a secret must hide its result (no_log) or its diff."""
    secret = [(name, task) for name, task in file_tasks() if holds_a_secret(task)]
    names = [name for name, _ in secret]
    assert any("slurmdbd.conf" in name for name in names), names  # the scan finds what it must
    assert any("MUNGE key" in name for name in names), names
    assert any("private key" in name for name in names), names
    leaking = [name for name, task in secret if task.get("no_log") is not True and task.get("diff") is not False]
    assert leaking == []
