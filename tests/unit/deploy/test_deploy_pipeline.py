"""pipeline.deploy(): the whole deploy sequence with a fake preflight and a fake Ansible run.

The fake run replays a recorded ansible-runner event stream, so everything
between the options and the run record is the real code: scope, preflight
exclusions, secrets, render, run directory, record, last-applied, pruning.

The ``spec`` and ``loaded`` fixtures (the sandbox's three nodes, tiny playbooks) are in this folder's conftest.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclus.deploy import in_sync, pipeline, records
from gpuclus.deploy.events import Event, EventTranslator, PhaseStarted
from gpuclus.deploy.last_applied import read_last_applied
from gpuclus.deploy.phases import PhaseChoice
from gpuclus.deploy.runner import RunOutcome, RunTerminated
from gpuclus.deploy.workspace import RunConfig
from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.preflight.report import NodeReport, PreflightCheck
from gpuclus.spec.load import LoadedSpec
from gpuclus.state import StateDir

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NODES = {"head": "172.28.0.10", "gpu01": "172.28.0.11", "gpu02": "172.28.0.12"}


class FakeRun:
    """A run that replays a recorded event stream instead of starting Ansible."""

    def __init__(self, config: RunConfig, stream: str, status: str, rc: int) -> None:
        self.config = config
        self.stream = stream
        self.status, self.rc = status, rc
        self.cancelled = threading.Event()
        self.outcome: RunOutcome | None = None
        self.closed = False  # the events ended, also when the consumer raised (DeployRun cleans up then)

    def events(self) -> Iterator[Event]:
        translator = EventTranslator()
        try:
            for line in (FIXTURES / "events" / f"{self.stream}.jsonl").read_text().splitlines():
                if self.cancelled.is_set():
                    break
                event = translator.translate(json.loads(line))
                if event is not None:
                    yield event
            self.outcome = RunOutcome("canceled" if self.cancelled.is_set() else self.status, self.rc)
        finally:
            self.closed = True

    def cancel(self) -> None:
        self.cancelled.set()

    def kill(self) -> None:
        self.cancelled.set()

    def output_tail(self) -> str:
        return "ERROR! the fake playbook said no"


class Runs:
    """start_run for the pipeline: records each RunConfig, hands out FakeRuns."""

    def __init__(self, stream: str = "success", status: str = "successful", rc: int = 0) -> None:
        self.stream, self.status, self.rc = stream, status, rc
        self.configs: list[RunConfig] = []

        self.runs: list[FakeRun] = []

    def __call__(self, config: RunConfig) -> FakeRun:
        self.configs.append(config)
        self.runs.append(FakeRun(config, self.stream, self.status, self.rc))
        return self.runs[-1]


class Preflight:
    """The SSH preflight, answered from a table: node -> failed check (or absent: ok)."""

    def __init__(self, failing: dict[str, PreflightCheck] | None = None) -> None:
        self.failing = failing or {}
        self.asked: list[list[str]] = []

    def __call__(self, loaded: LoadedSpec, spec_path: Path, hosts: list[str]) -> list[NodeReport]:
        self.asked.append(list(hosts))
        reports = []
        for name in hosts:
            problem = self.failing.get(name)
            reachable = problem is None or problem.name != "ssh"
            checks = [PreflightCheck("ssh", "ok", "fine")] if reachable else []
            reports.append(NodeReport(name, NODES[name], reachable, [*checks, problem] if problem else checks))
        return reports


class Observer:
    def __init__(self, cancel_at_start: bool = False) -> None:
        self.seen: list[str] = []
        self.reports: list[NodeReport] = []
        self.skipped: list[PhaseChoice] = []
        self.events: list[Event] = []
        self.verdicts: list[in_sync.Verdict] = []
        self.cancel_at_start = cancel_at_start

    def preflight_done(self, reports: list[NodeReport], seconds: float) -> None:
        self.seen.append("preflight")
        self.reports = reports
        assert seconds >= 0

    def in_sync_checked(self, verdict: in_sync.Verdict, seconds: float) -> None:
        self.seen.append("in-sync" if verdict.in_sync else "not-in-sync")
        self.verdicts.append(verdict)

    def phases_skipped(self, skipped: list[PhaseChoice]) -> None:
        self.seen.append("skipped")
        self.skipped = skipped

    def run_started(self, run: Any) -> None:
        self.seen.append("run")
        if self.cancel_at_start:
            run.cancel()

    def event(self, event: Event) -> None:
        self.events.append(event)


def test_a_successful_deploy_in_order(spec: Path, loaded: LoadedSpec) -> None:
    runs, probe, observer = Runs(), Preflight(), Observer()
    result = pipeline.deploy(pipeline.DeployRequest(spec_path=spec), loaded, observer, preflight=probe, start_run=runs)
    assert observer.seen == ["preflight", "skipped", "run"]
    assert probe.asked == [list(NODES)]
    assert [choice.phase.value for choice in observer.skipped] == ["nvidia", "users", "containers", "pytorch"]
    assert any(isinstance(event, PhaseStarted) for event in observer.events)
    (config,) = runs.configs
    assert config.limit is None
    assert result.exit_code is ExitCode.OK
    assert result.run_dir == config.run_dir
    assert result.record.status == "successful"
    # The record on disk is the one returned, and a full successful run is what plan diffs against.
    saved = records.load_record(StateDir.beside(spec), result.record.id)
    assert saved is not None and saved.status == "successful"
    assert read_last_applied(StateDir.beside(spec)) == pipeline.render_for_run(spec, loaded)


def test_nodes_failing_preflight_are_left_out_and_the_run_says_so(spec: Path, loaded: LoadedSpec) -> None:
    runs = Runs()
    probe = Preflight({"gpu02": PreflightCheck("ssh", "fail", "Authentication failed.", "install the key")})
    observer = Observer()
    result = pipeline.deploy(pipeline.DeployRequest(spec_path=spec), loaded, observer, preflight=probe, start_run=runs)
    assert [report.node for report in observer.reports if report.failed] == ["gpu02"]
    assert runs.configs[0].limit == "head,gpu01"
    (failure,) = result.record.failures
    assert (failure.host, failure.task, failure.unreachable) == ("gpu02", "preflight: ssh", True)
    assert result.exit_code is ExitCode.UNREACHABLE
    # A partial run is not what the cluster looks like: last-applied stays as it was.
    assert read_last_applied(StateDir.beside(spec)) is None


def test_a_failed_check_other_than_ssh_fails_the_run(spec: Path, loaded: LoadedSpec) -> None:
    probe = Preflight({"gpu01": PreflightCheck("disk", "fail", "1.0 GB free on /, need 10")})
    result = pipeline.deploy(
        pipeline.DeployRequest(spec_path=spec), loaded, Observer(), preflight=probe, start_run=Runs()
    )
    assert [(f.host, f.unreachable) for f in result.record.failures] == [("gpu01", False)]
    assert result.exit_code is ExitCode.FAILED


def test_preflight_probes_only_the_limited_nodes(spec: Path, loaded: LoadedSpec) -> None:
    probe, runs = Preflight(), Runs()
    pipeline.deploy(
        pipeline.DeployRequest(spec_path=spec, limit="gpu[01-02]"), loaded, Observer(), preflight=probe, start_run=runs
    )
    assert probe.asked == [["gpu01", "gpu02"]]
    assert runs.configs[0].limit == "gpu01,gpu02"


def test_without_preflight_nothing_is_probed(spec: Path, loaded: LoadedSpec) -> None:
    probe, observer = Preflight(), Observer()
    pipeline.deploy(
        pipeline.DeployRequest(spec_path=spec, preflight=False), loaded, observer, preflight=probe, start_run=Runs()
    )
    assert probe.asked == []
    assert observer.seen == ["skipped", "run"]


@pytest.mark.parametrize(
    "options",
    [{"only": "bogus"}, {"only": "base", "skip": "slurm"}, {"limit": "gpu09"}, {"retry_failed": True}],
    ids=["only-bogus", "only-and-skip", "unknown-node", "retry-without-run"],
)
def test_bad_options_fail_before_preflight_and_before_any_file(
    spec: Path, loaded: LoadedSpec, options: dict[str, Any]
) -> None:
    probe, runs = Preflight(), Runs()
    with pytest.raises(UsageError):
        pipeline.deploy(
            pipeline.DeployRequest(spec_path=spec, **options), loaded, Observer(), preflight=probe, start_run=runs
        )
    assert probe.asked == []
    assert runs.configs == []
    assert not (StateDir.beside(spec).root / "runs").exists()


def test_every_node_failing_preflight_stops_before_a_run(spec: Path, loaded: LoadedSpec) -> None:
    down = PreflightCheck("ssh", "fail", "No route to host")
    runs = Runs()
    with pytest.raises(GpuclusError, match="no node is left to deploy to") as raised:
        pipeline.deploy(
            pipeline.DeployRequest(spec_path=spec),
            loaded,
            Observer(),
            preflight=Preflight(dict.fromkeys(NODES, down)),
            start_run=runs,
        )
    assert raised.value.exit_code is ExitCode.UNREACHABLE
    assert runs.configs == []


def test_a_failed_run_without_task_failures_keeps_ansibles_last_words(spec: Path, loaded: LoadedSpec) -> None:
    runs = Runs(stream="success", status="failed", rc=4)
    result = pipeline.deploy(
        pipeline.DeployRequest(spec_path=spec, preflight=False), loaded, Observer(), start_run=runs
    )
    assert result.exit_code is ExitCode.FAILED
    assert result.record.error == "ERROR! the fake playbook said no"


def test_cancelling_the_run_exits_interrupted(spec: Path, loaded: LoadedSpec) -> None:
    result = pipeline.deploy(
        pipeline.DeployRequest(spec_path=spec, preflight=False),
        loaded,
        Observer(cancel_at_start=True),
        start_run=Runs(),
    )
    assert result.record.status == "interrupted"
    assert result.exit_code is ExitCode.INTERRUPTED


class RaisingObserver(Observer):
    """An observer that raises at the first phase (Ctrl-C or SIGTERM without a graceful cancel, or a bug)."""

    def __init__(self, problem: BaseException) -> None:
        super().__init__()
        self.problem = problem

    def event(self, event: Event) -> None:
        if isinstance(event, PhaseStarted):
            raise self.problem


@pytest.mark.parametrize(
    ("problem", "status", "error"),
    [
        (KeyboardInterrupt(), "interrupted", "interrupted (Ctrl-C)"),
        (RunTerminated("terminated (SIGTERM)"), "interrupted", "terminated (SIGTERM)"),
        (RuntimeError("module data"), "failed", "RuntimeError in gpuclus"),
    ],
    ids=["ctrl-c", "sigterm", "bug"],
)
def test_an_exception_during_the_run_closes_it_and_records_how_it_ended(
    spec: Path, loaded: LoadedSpec, problem: BaseException, status: str, error: str
) -> None:
    runs = Runs()
    request = pipeline.DeployRequest(spec_path=spec, preflight=False)
    with pytest.raises(type(problem)):
        pipeline.deploy(request, loaded, RaisingObserver(problem), start_run=runs)
    (run,) = runs.runs
    assert run.closed  # DeployRun's cleanup ran before the record was written
    (saved,) = records.list_records(StateDir.beside(spec))
    assert (saved.status, saved.error) == (status, error)
    assert saved.finished_at is not None


def test_old_records_are_pruned_unless_keep_is_none(spec: Path, loaded: LoadedSpec) -> None:
    state = StateDir.beside(spec)

    def deploy(keep: int | None) -> None:
        request = pipeline.DeployRequest(spec_path=spec, preflight=False, keep=keep)
        pipeline.deploy(request, loaded, pipeline.QuietObserver(), start_run=Runs())

    for _ in range(3):
        deploy(None)
    assert len(records.list_records(state)) == 3
    deploy(2)
    assert len(records.list_records(state)) == 2


def test_check_mode_changes_no_last_applied(spec: Path, loaded: LoadedSpec) -> None:
    runs = Runs()
    request = pipeline.DeployRequest(spec_path=spec, check=True, preflight=False, keep=None)
    result = pipeline.deploy(request, loaded, pipeline.QuietObserver(), start_run=runs)
    assert runs.configs[0].check
    assert result.record.check
    assert read_last_applied(StateDir.beside(spec)) is None


def test_changes_since_last_deploy(spec: Path, loaded: LoadedSpec) -> None:
    applied_before, changes = pipeline.changes_since_last_deploy(spec, loaded)
    assert not applied_before
    assert {change.status for change in changes} == {"added"}
    pipeline.deploy(pipeline.DeployRequest(spec_path=spec, preflight=False), loaded, Observer(), start_run=Runs())
    assert pipeline.changes_since_last_deploy(spec, loaded) == (True, [])
