"""The deploy sequence, without the terminal: scope, lock, preflight, prepare, run, record, prune.

`deploy()` is the one entry point (`gpuclus deploy` and `gpuclus plan --check`
call it); it never prints. What a terminal shows goes to a DeployObserver, and
the SSH preflight and the Ansible run are parameters, so the whole sequence is
unit-testable with fakes. The steps stay public for tests of each one.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuclus import __version__
from gpuclus.deploy import in_sync, records
from gpuclus.deploy.events import Event
from gpuclus.deploy.last_applied import FileChange, diff_renders, read_last_applied, save_last_applied
from gpuclus.deploy.lock import deploy_lock
from gpuclus.deploy.phases import Phase, PhaseChoice, parse_phase_list, select_phases, wanted_phases
from gpuclus.deploy.runner import DeployRun, RunOutcome
from gpuclus.deploy.workspace import RunConfig, missing_playbooks, new_run_id, prepare_run
from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.preflight import runner as preflight_runner
from gpuclus.preflight.report import NodeReport
from gpuclus.secret_files import ensure_secrets, keep_webhook_url, secrets_directory
from gpuclus.spec import hostlist
from gpuclus.spec.load import LoadedSpec
from gpuclus.spec.record import inline_secret_locs
from gpuclus.state import StateDir


@dataclass(frozen=True)
class DeployRequest:
    spec_path: Path
    only: str | None = None
    skip: str | None = None
    limit: str | None = None
    check: bool = False
    verbosity: int = 0
    retry_failed: bool = False
    # Run records to keep after this run; None leaves the old ones alone.
    keep: int | None = records.DEFAULT_KEEP
    # SSH preflight of the run's nodes first; the ones that fail are left out.
    preflight: bool = True
    # Reboot, once, the GPU nodes whose new NVIDIA driver is not loaded (drained in Slurm first).
    reboot: bool = False
    # Run nothing when every node still holds the last full deploy's state (deploy/in_sync.py); only a plain
    # deploy of every phase asks, and `gpuclus deploy --full` does not.
    skip_in_sync: bool = False


class AnsibleRun(Protocol):
    """What the pipeline needs of a run (runner.DeployRun; a fake in tests)."""

    cancelled: threading.Event
    outcome: RunOutcome | None

    def events(self) -> Iterator[Event]: ...

    def cancel(self) -> None:
        """Stop the run: Ansible gets its interrupt, what is left is killed a few seconds later."""

    def kill(self) -> None:
        """Stop the run now (a second Ctrl-C)."""

    def output_tail(self) -> str: ...


class DeployObserver(Protocol):
    """Everything a deploy has to show, as it happens; the pipeline itself never prints."""

    def preflight_done(self, reports: list[NodeReport], seconds: float) -> None: ...

    def in_sync_checked(self, verdict: in_sync.Verdict, seconds: float) -> None:
        """Whether the nodes still hold the last full deploy (asked before preflight; in sync: nothing runs)."""

    def phases_skipped(self, skipped: list[PhaseChoice]) -> None: ...

    def run_started(self, run: AnsibleRun) -> None:
        """The run about to start: cancel() it to stop Ansible (Ctrl-C), kill() to stop it at once."""

    def event(self, event: Event) -> None: ...


class QuietObserver:
    """Shows nothing (`gpuclus plan --check` reports only the outcome)."""

    def preflight_done(self, reports: list[NodeReport], seconds: float) -> None:
        pass

    def in_sync_checked(self, verdict: in_sync.Verdict, seconds: float) -> None:
        pass

    def phases_skipped(self, skipped: list[PhaseChoice]) -> None:
        pass

    def run_started(self, run: AnsibleRun) -> None:
        pass

    def event(self, event: Event) -> None:
        pass


class ShowsDeploys(Protocol):
    """The observer of a workflow that deploys as one of its steps (a rolling upgrade's batches, `nodes remove`)."""

    def watch_deploy(self, request: DeployRequest, loaded: LoadedSpec, deploy: Deploy) -> DeployResult:
        """Call ``deploy(request, loaded, observer)`` with an observer of its own, and return its result.

        The terminal's shows the phase lines and turns Ctrl-C into stopping Ansible; a test's just calls it.
        """


# (loaded spec, spec path, nodes to probe) -> one report per node.
Preflight = Callable[[LoadedSpec, Path, list[str]], list[NodeReport]]


@dataclass(frozen=True)
class DeployResult:
    record: records.RunRecord
    exit_code: ExitCode
    run_dir: Path
    seconds: float  # of the Ansible run, from its start to its record


# deploy()'s shape without its keyword parameters: what a workflow hands to ShowsDeploys.watch_deploy.
Deploy = Callable[[DeployRequest, LoadedSpec, DeployObserver], DeployResult]


def deploy(
    request: DeployRequest,
    loaded: LoadedSpec,
    observer: DeployObserver,
    *,
    preflight: Preflight | None = None,
    start_run: Callable[[RunConfig], AnsibleRun] | None = None,
    fingerprints: in_sync.Probe | None = None,
) -> DeployResult:
    """The whole deploy: scope once, lock, preflight, prepare, run, record, prune old records.

    Bad options fail (UsageError) before any SSH, and so does a second run in
    the same spec directory (deploy/lock.py). ``preflight``, ``start_run`` and
    ``fingerprints`` default to the real SSH preflight, ansible-runner and
    in_sync.read_fingerprints. A plain deploy of every phase (``skip_in_sync``)
    whose nodes all still hold the last full deploy's state runs nothing and
    records that; every other run keeps in-sync.json true afterwards.
    """
    chosen = scope(request, loaded)
    probe = fingerprints or in_sync.read_fingerprints
    full = _is_full(chosen, loaded)
    if request.skip_in_sync and full and not (request.check or request.retry_failed or request.reboot):
        skipped = _skip_if_in_sync(request, loaded, chosen, observer, probe)
        if skipped is not None:
            return skipped
    ran = run_locked(
        request.spec_path,
        loaded,
        chosen.hosts,
        observer,
        preflight=(preflight or ssh_preflight_nodes) if request.preflight else None,
        prepare=lambda reports: prepare(request, loaded, chosen, preflight_failures(reports)),
        keep=request.keep,
        start_run=start_run,
        after_run=lambda prepared, record: _record_in_sync(request, loaded, prepared, record, full, probe),
    )
    return DeployResult(ran.record, exit_code(ran.record), ran.prepared.config.run_dir, ran.seconds)


def _is_full(chosen: RunScope, loaded: LoadedSpec) -> bool:
    """Every phase the spec needs (such a run stamps its nodes)."""
    assert loaded.spec is not None and loaded.topology is not None
    return chosen.phases == [choice.phase for choice in wanted_phases(loaded.spec, loaded.topology)[0]]


def _keep_spec_secrets(state: StateDir, loaded: LoadedSpec) -> None:
    """The spec's own secrets into .gpuclus/secrets/, where the roles read them (never in the rendered files)."""
    assert loaded.spec is not None
    receiver = loaded.spec.monitoring.alert_receiver
    keep_webhook_url(state, receiver.webhook_url if receiver else None)


def _in_sync_key(spec_path: Path, loaded: LoadedSpec, rendered: dict[str, str], phases: list[Phase]) -> str:
    state = StateDir.beside(spec_path)
    return in_sync.run_key(
        rendered,
        [phase.value for phase in phases],
        secrets_directory(state),
        state.public_key,
        in_sync.control_inputs(loaded, spec_path),
    )


def _skip_if_in_sync(
    request: DeployRequest, loaded: LoadedSpec, chosen: RunScope, observer: DeployObserver, probe: in_sync.Probe
) -> DeployResult | None:
    """A successful record of a run that ran nothing when every node of ``chosen`` is in sync; else None."""
    state = StateDir.beside(request.spec_path)
    with deploy_lock(state):
        started = time.time()
        _keep_spec_secrets(state, loaded)  # before the key, which hashes them
        key = _in_sync_key(request.spec_path, loaded, render_for_run(request.spec_path, loaded), chosen.phases)
        verdict = in_sync.judge(state, key, chosen.hosts, lambda names: probe(loaded, request.spec_path, names))
        observer.in_sync_checked(verdict, time.time() - started)
        if not verdict.in_sync:
            return None
        # What that run's roles left undone on purpose (Grafana unreachable, no GPU exporter) still holds.
        matched = records.load_record(state, verdict.since) if verdict.since else None
        run_id = new_run_id()
        run_dir = state.private_dir(state.private_dir(state.root / "runs") / run_id)
        record = records.RunRecord(
            id=run_id,
            spec=str(request.spec_path),
            spec_sha256=hashlib.sha256(loaded.document.text.encode()).hexdigest(),
            phases_requested=[phase.value for phase in chosen.phases],
            limit=chosen.limit,
            check=False,
            started_at=started,
            gpuclus_version=__version__,
            status="successful",
            rc=0,
            finished_at=time.time(),
            in_sync_with=verdict.since,
            notices=matched.notices if matched is not None else [],
        )
        record.save(run_dir)
        if request.keep is not None:
            records.prune(state, request.keep)
    return DeployResult(record, ExitCode.OK, run_dir, 0.0)


def _record_in_sync(
    request: DeployRequest,
    loaded: LoadedSpec,
    prepared: PreparedDeploy,
    record: records.RunRecord,
    full: bool,
    probe: in_sync.Probe,
) -> None:
    """After a successful full run (prepare() forgot its nodes): their fingerprints, under this run's key."""
    if prepared.config.check or not full or record.status != "successful" or record.reboot_pending:
        return
    hosts = prepared.config.limit.split(",") if prepared.config.limit else list(prepared.config.hosts)
    key = _in_sync_key(request.spec_path, loaded, prepared.rendered, prepared.phases)
    in_sync.remember(prepared.state, key, record.id, probe(loaded, request.spec_path, hosts))


@dataclass(frozen=True)
class LockedRun:
    """What run_locked() gives back: the run's directory and first record, its final record, its preflight."""

    prepared: PreparedDeploy
    record: records.RunRecord
    seconds: float  # of the Ansible run, from its start to its record
    reports: list[NodeReport]  # preflight's answers; none when it was skipped


def run_locked(
    spec_path: Path,
    loaded: LoadedSpec,
    hosts: list[str],
    observer: DeployObserver,
    *,
    preflight: Preflight | None,
    prepare: Callable[[list[NodeReport]], PreparedDeploy],
    keep: int | None,
    start_run: Callable[[RunConfig], AnsibleRun] | None = None,
    shown: Callable[[list[NodeReport]], list[NodeReport]] = list,
    after_run: Callable[[PreparedDeploy, records.RunRecord], None] | None = None,
) -> LockedRun:
    """The sequence every playbook run shares (deploy, reset): lock, timed preflight, prepare, timed run, prune.

    ``preflight`` probes ``hosts`` (None skips it); ``prepare`` turns its
    reports into the run directory and first record; the observer sees the
    reports as ``shown`` words them. ``after_run`` runs inside the lock, once
    the record is final and before old records are pruned (reset forgets
    last-applied there). Ctrl-C and errors leave through the lock as they came.
    """
    # One run at a time per spec directory (refused with the holder's PID, exit 2).
    with deploy_lock(StateDir.beside(spec_path)):
        reports: list[NodeReport] = []
        if preflight is not None:
            started = time.monotonic()
            reports = preflight(loaded, spec_path, hosts)
            observer.preflight_done(shown(reports), time.monotonic() - started)
        prepared = prepare(reports)
        observer.phases_skipped(prepared.skipped)
        started = time.monotonic()
        record = execute(prepared, observer.event, observer.run_started, start_run)
        seconds = time.monotonic() - started
        if after_run is not None:
            after_run(prepared, record)
        if keep is not None:
            records.prune(prepared.state, keep)
    return LockedRun(prepared, record, seconds, reports)


def ssh_preflight_nodes(loaded: LoadedSpec, spec_path: Path, hosts: list[str]) -> list[NodeReport]:
    """The real SSH preflight of ``hosts`` (deploy's and reset's default)."""
    # Looked up when called, so a test can replace preflight.runner.preflight_spec.
    return preflight_runner.preflight_spec(loaded, spec_path, hosts=hosts)


def preflight_failures(reports: list[NodeReport]) -> list[records.Failure]:
    """The nodes that failed preflight, as run failures (their first failed check)."""
    failures = []
    for report in reports:
        if not report.failed:
            continue
        check = next(check for check in report.checks if check.status == "fail")
        failures.append(
            records.Failure(report.node, f"preflight: {check.name}", "preflight", check.message, not report.reachable)
        )
    return failures


@dataclass
class PreparedDeploy:
    config: RunConfig
    phases: list[Phase]
    skipped: list[PhaseChoice]
    record: records.RunRecord
    rendered: dict[str, str]
    state: StateDir


def render_for_run(request_spec: Path, loaded: LoadedSpec) -> dict[str, str]:
    """The Ansible inputs as a run (and `gpuclus plan`) sees them."""
    from gpuclus.render import render_files

    assert loaded.spec is not None and loaded.topology is not None
    # The run's own ansible.cfg (the run uses it, and it serves re-running by
    # hand) points two levels up, at .gpuclus/.
    return render_files(
        loaded.spec,
        loaded.topology,
        source_name=request_spec.name,
        state_dir="../..",
        known_hosts=str(StateDir.beside(request_spec).known_hosts),
        users=loaded.users,
    )


def changes_since_last_deploy(spec_path: Path, loaded: LoadedSpec) -> tuple[bool, list[FileChange]]:
    """(was anything deployed before, how this spec's render differs from the last full deploy's)."""
    before = read_last_applied(StateDir.beside(spec_path))
    return before is not None, diff_renders(before or {}, render_for_run(spec_path, loaded))


def resolve_limit(request: DeployRequest, loaded: LoadedSpec, state: StateDir) -> str | None:
    assert loaded.topology is not None
    names = [node.name for node in loaded.topology.nodes]
    if request.retry_failed:
        if request.limit:
            raise UsageError("--retry-failed and --limit cannot be used together")
        # A check run changed nothing: what to retry is the last run that could have.
        previous = records.last_deploy(state)
        if previous is None:
            checks_only = bool(records.list_records(state))
            raise UsageError(
                "--retry-failed: there is no earlier run"
                + (" other than check runs (--check), which change nothing" if checks_only else ""),
                "run `gpuclus deploy` first",
            )
        failed = [host for host in previous.failed_hosts() if host in names]
        if not failed:
            raise UsageError(
                f"--retry-failed: the last deploy ({previous.id}) had no failed or unreachable hosts",
                "run `gpuclus deploy` without it",
            )
        return ",".join(failed)
    if not request.limit:
        return None
    try:
        chosen = hostlist.expand_list(request.limit)
    except hostlist.HostlistError as exc:
        raise UsageError(f"--limit: {exc}") from None
    unknown = [name for name in chosen if name not in names]
    if unknown:
        raise UsageError(
            f"--limit names node(s) not in the spec: {hostlist.compress(unknown)}",
            f"nodes: {hostlist.compress(names)}",
        )
    return ",".join(chosen)


@dataclass(frozen=True)
class RunScope:
    phases: list[Phase]
    skipped: list[PhaseChoice]
    limit: str | None
    hosts: list[str]  # the nodes this run touches


def scope(request: DeployRequest, loaded: LoadedSpec) -> RunScope:
    """Check the options against the spec and decide phases and nodes; no side effects.

    Runs before preflight, so a mistyped option costs no SSH round.
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(request.spec_path)
    run_phases, skipped = wanted_phases(loaded.spec, loaded.topology)
    phases = select_phases(
        run_phases, parse_phase_list(request.only, "--only"), parse_phase_list(request.skip, "--skip")
    )
    absent = missing_playbooks(phases)
    if absent:
        names = ",".join(phase.value for phase in absent)
        raise UsageError(
            f"the spec needs the {names} phase(s), which this version of gpuclus does not ship yet",
            f"deploy the rest with --skip {names}, and install those parts by hand for now",
        )
    limit = resolve_limit(request, loaded, state)
    hosts = limit.split(",") if limit else [node.name for node in loaded.topology.nodes]
    return RunScope(phases, skipped, limit, hosts)


def prepare(
    request: DeployRequest,
    loaded: LoadedSpec,
    chosen: RunScope | None = None,
    preflight_failures: Sequence[records.Failure] = (),
) -> PreparedDeploy:
    """Secrets, the render and the run directory with its first record; ``chosen`` is scope()'s answer.

    Nodes in ``preflight_failures`` are left out of the run and recorded as its failures.
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(request.spec_path)
    chosen = chosen or scope(request, loaded)
    phases, skipped, limit = chosen.phases, chosen.skipped, chosen.limit
    # Only this run's nodes count: a node outside --limit that failed preflight is not this run's failure.
    failures = [failure for failure in preflight_failures if failure.host in chosen.hosts]
    excluded = {failure.host for failure in failures}
    if excluded:
        remaining = [name for name in chosen.hosts if name not in excluded]
        if not remaining:
            reasons = "; ".join(f"{f.host}: {f.message}" for f in failures[:3])
            # The same exit code `gpuclus preflight` gives for these nodes: 4 when
            # one is unreachable, else 1; not a usage error, the command was right.
            raise GpuclusError(
                f"no node is left to deploy to: every chosen node failed preflight ({reasons})",
                "run `gpuclus preflight` for the full report and a hint per problem",
                exit_code=ExitCode.UNREACHABLE if any(f.unreachable for f in failures) else ExitCode.FAILED,
            )
        limit = ",".join(remaining)
    if not state.private_key.exists():
        raise UsageError(
            f"gpuclus has no SSH key yet ({state.private_key})",
            "`gpuclus sandbox up` creates one for the sandbox; for real nodes run `gpuclus preflight --password`",
        )
    secrets = ensure_secrets(state)
    _keep_spec_secrets(state, loaded)
    rendered = render_for_run(request.spec_path, loaded)
    if not request.check:
        # From here the nodes may change: however this run ends (Ctrl-C, a crash), they no longer count as
        # in sync until a successful full run records them again (_record_in_sync).
        in_sync.forget(state, chosen.hosts)
    config = prepare_run(
        spec_path=request.spec_path,
        spec_text=loaded.document.text,
        spec_secrets=inline_secret_locs(loaded.spec),
        rendered=rendered,
        state=state,
        secrets_dir=secrets.directory,
        phases=phases,
        hosts=[node.name for node in loaded.topology.nodes],
        limit=limit,
        excluded=sorted(excluded),
        check=request.check,
        verbosity=request.verbosity,
        # Every phase the spec needs: the run's nodes get the deploy stamp that `gpuclus plan` reads.
        full=_is_full(chosen, loaded),
        reboot=request.reboot,
    )
    record = records.RunRecord(
        id=config.run_id,
        spec=str(request.spec_path),
        spec_sha256=config.spec_sha256,
        phases_requested=list(config.phases),
        limit=limit,
        check=request.check,
        started_at=time.time(),
        gpuclus_version=__version__,
        failures=failures,
    )
    record.save(config.run_dir)
    return PreparedDeploy(config, phases, skipped, record, rendered, state)


def execute(
    prepared: PreparedDeploy,
    on_event: Callable[[Event], None],
    on_start: Callable[[AnsibleRun], None],
    start_run: Callable[[RunConfig], AnsibleRun] | None = None,
) -> records.RunRecord:
    """Run it; ``on_start`` receives the run (to cancel it on Ctrl-C)."""
    run = (start_run or DeployRun)(prepared.config)
    builder = records.RecordBuilder(prepared.record)
    on_start(run)
    events = run.events()
    try:
        for event in events:
            builder.add(event)
            on_event(event)
    except BaseException as problem:
        # Ctrl-C or SIGTERM without a graceful cancel, or a bug: close the run
        # first (DeployRun stops Ansible and removes its artifacts), then say
        # in the record how it ended instead of leaving it "running".
        close = getattr(events, "close", None)
        if close is not None:
            close()
        interrupted = isinstance(problem, KeyboardInterrupt)
        record = builder.finish("interrupted" if interrupted else "failed", None)
        # Only the exception's type for a bug: its text might quote module data.
        record.error = (
            (str(problem) or "interrupted (Ctrl-C)") if interrupted else f"{type(problem).__name__} in gpuclus"
        )
        record.save(prepared.config.run_dir)
        raise
    outcome = run.outcome
    assert outcome is not None
    record = builder.finish(_status(outcome.status, builder.record, run.cancelled.is_set()), outcome.rc)
    if record.status == "failed" and not record.failures:
        record.error = run.output_tail() or f"ansible-playbook ended with {outcome.status} (rc {outcome.rc})"
    record.save(prepared.config.run_dir)
    if record.status == "successful" and not prepared.config.check and not prepared.config.limit:
        # What `gpuclus plan` diffs against: the inputs of the last full, successful deploy.
        save_last_applied(prepared.state, prepared.rendered)
    return record


def _status(runner_status: str, record: records.RunRecord, cancelled: bool) -> str:
    if cancelled or runner_status == "canceled":
        return "interrupted"
    if any(not failure.unreachable for failure in record.failures):
        return "failed"
    if record.failures:
        return "unreachable"
    if runner_status != "successful":
        return "failed"
    return "successful"


def exit_code(record: records.RunRecord) -> ExitCode:
    if record.status == "successful" and record.reboot_pending and not record.check:
        return ExitCode.REBOOT_NEEDED
    return {
        "successful": ExitCode.OK,
        "failed": ExitCode.FAILED,
        "unreachable": ExitCode.UNREACHABLE,
        "interrupted": ExitCode.INTERRUPTED,
    }.get(record.status, ExitCode.FAILED)
