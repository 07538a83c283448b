"""Run records: what each deploy did, kept under .gpuclus/runs/<id>/record.json.

A record is built from typed events (never from raw Ansible output), so it
holds statuses, counts, durations and one-line failure messages, and no
module results that could carry secrets.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuclus.deploy.events import Event, HostResult, HostStarted, PhaseStarted, PlayStats, TaskStarted
from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_json_file, write_text_atomic
from gpuclus.state import StateDir

RECORD_FILE = "record.json"
DEFAULT_KEEP = 20
# A record holds statuses, counts and one-line messages: a 10,000-node run writes well under a megabyte.
MAX_RECORD_BYTES = 16 * 1024 * 1024


@dataclass
class PhaseRecord:
    name: str
    seconds: float = 0.0
    tasks: int = 0
    changed: int = 0
    failed: int = 0


@dataclass
class Failure:
    host: str
    task: str
    phase: str | None
    message: str
    unreachable: bool


@dataclass
class Notice:
    host: str
    phase: str | None
    text: str


@dataclass
class Interruption:
    """Where a run was when it was stopped (Ctrl-C, SIGTERM): what may be half done."""

    phase: str | None  # None: before the first phase (Ansible starting, or the inventory gate)
    task: str | None  # the task under way, or the last one started
    hosts: list[str]  # the hosts that had a task under way; else the hosts the phase had reached

    def describe(self) -> str:
        where = f"in phase {self.phase}" if self.phase else "before the first phase"
        task = f", task {self.task!r}" if self.task else ""
        hosts = f", on {', '.join(self.hosts)}" if self.hosts else ""
        return where + task + hosts


@dataclass
class RunRecord:
    id: str
    spec: str
    spec_sha256: str
    phases_requested: list[str]
    limit: str | None
    check: bool
    started_at: float
    gpuclus_version: str
    status: str = "running"  # running, successful, failed, unreachable, interrupted
    rc: int | None = None
    finished_at: float | None = None
    phases: list[PhaseRecord] = field(default_factory=list)
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    error: str = ""  # why the run ended when no task failed (Ansible's own last words)
    interrupted: Interruption | None = None  # set when the status is "interrupted"
    # Nodes whose new NVIDIA driver loads only after a reboot this run did not do (no --reboot),
    # and nodes this run rebooted to load it.
    reboot_pending: list[str] = field(default_factory=list)
    rebooted: list[str] = field(default_factory=list)
    # What roles said they left undone on purpose (HostResult.notice), once per host and text.
    notices: list[Notice] = field(default_factory=list)
    # Set when nothing ran because every node still held this run's state (deploy/in_sync.py).
    in_sync_with: str | None = None

    @property
    def seconds(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    def failed_hosts(self) -> list[str]:
        return sorted({failure.host for failure in self.failures})

    @property
    def kind(self) -> str:
        """ "check" for a dry run (`deploy --check`: nothing changed), "reset" for `gpuclus reset`, else "deploy"."""
        if self.check:
            return "check"
        return "reset" if self.phases_requested == ["reset"] else "deploy"

    def changed_total(self) -> int:
        """Task results that changed something (in a check run: would have), as Ansible's recap counts them."""
        return sum(stats.get("changed", 0) for stats in self.hosts.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind, "seconds": round(self.seconds, 1), "changed": self.changed_total()}

    def save(self, run_dir: Path) -> None:
        write_text_atomic(run_dir / RECORD_FILE, json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n", 0o600)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {key: data[key] for key in cls.__dataclass_fields__ if key in data}
        known["phases"] = [PhaseRecord(**phase) for phase in data.get("phases", [])]
        known["failures"] = [Failure(**failure) for failure in data.get("failures", [])]
        known["notices"] = [Notice(**notice) for notice in data.get("notices", [])]
        if isinstance(data.get("interrupted"), dict):
            known["interrupted"] = Interruption(**data["interrupted"])
        return cls(**known)


class RecordBuilder:
    """Folds the event stream into a RunRecord as it arrives."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self._phase_started: float | None = None
        self._task: str | None = None  # the last task started
        self._busy: dict[str, str] = {}  # host -> the task under way there
        self._reached: list[str] = []  # hosts the current phase has started a task on

    @property
    def current(self) -> PhaseRecord | None:
        return self.record.phases[-1] if self.record.phases else None

    def add(self, event: Event) -> None:
        if isinstance(event, PhaseStarted):
            self._close_phase()
            self.record.phases.append(PhaseRecord(event.phase))
            self._phase_started = time.monotonic()
            self._task, self._busy, self._reached = None, {}, []
        elif isinstance(event, TaskStarted):
            self._task = event.task
            if self.current is not None:
                self.current.tasks += 1
        elif isinstance(event, HostStarted):
            self._busy[event.host] = event.task
            if event.host not in self._reached:
                self._reached.append(event.host)
        elif isinstance(event, HostResult):
            self._busy.pop(event.host, None)
            if event.reboot:
                self._note_reboot(event.host, event.reboot)
            if event.notice and not any((n.host, n.text) == (event.host, event.notice) for n in self.record.notices):
                self.record.notices.append(Notice(event.host, event.phase, event.notice))
            # As Ansible's recap counts (handlers and no_log results included), so the
            # phases' changed add up to the recap's.
            if event.counts_changed and self.current is not None:
                self.current.changed += 1
            if event.status in {"failed", "unreachable"} and not event.ignored:
                if self.current is not None:
                    self.current.failed += 1
                self.record.failures.append(
                    Failure(event.host, event.task, event.phase, event.message, event.status == "unreachable")
                )
        elif isinstance(event, PlayStats):
            self.record.hosts = event.per_host

    def _note_reboot(self, host: str, word: str) -> None:
        pending, rebooted = self.record.reboot_pending, self.record.rebooted
        target = rebooted if word == "done" else pending
        if host not in target:
            target.append(host)
            target.sort()
        if word == "done" and host in pending:
            pending.remove(host)

    def interruption(self) -> Interruption:
        """Where the run is now: the phase, the task and the hosts it was busy on."""
        busy = sorted(self._busy)
        tasks = sorted(set(self._busy.values()))
        task = tasks[0] if len(tasks) == 1 else self._task
        return Interruption(self.current.name if self.current else None, task, busy or sorted(self._reached))

    def finish(self, status: str, rc: int | None) -> RunRecord:
        self._close_phase()
        if status == "interrupted" and self.record.interrupted is None:
            self.record.interrupted = self.interruption()
        self.record.status = status
        self.record.rc = rc
        self.record.finished_at = time.time()
        return self.record

    def _close_phase(self) -> None:
        if self.current is not None and self._phase_started is not None:
            self.current.seconds = round(time.monotonic() - self._phase_started, 1)
            self._phase_started = None


def runs_dir(state: StateDir) -> Path:
    return state.root / "runs"


def list_records(state: StateDir) -> list[RunRecord]:
    """Every readable record, newest first (run ids sort by time)."""
    records = []
    directory = runs_dir(state)
    if not directory.is_dir():
        return []
    for run in sorted(directory.iterdir(), reverse=True):
        record = _read_record(run / RECORD_FILE)
        if record is not None:
            records.append(record)
    return records


def _read_record(path: Path) -> RunRecord | None:
    """The record at ``path``; None for a missing or broken one (a FIFO, a huge or malformed file), which
    the listing skips rather than hang on or fail over."""
    try:
        data = read_json_file(path, MAX_RECORD_BYTES)
        if not isinstance(data, dict):
            return None
        return RunRecord.from_dict(data)
    except (OSError, NotRegularFileError, FileTooLargeError, ValueError, TypeError, KeyError, AttributeError):
        return None


def last_deploy(state: StateDir) -> RunRecord | None:
    """The newest record of a run that could change the cluster: check runs changed nothing,
    so `deploy --retry-failed` and its hint in `runs list` never take one for the last deploy.
    Nor a reset: retrying its failed nodes with a deploy would build what it was tearing down."""
    return next((record for record in list_records(state) if record.kind == "deploy"), None)


def load_record(state: StateDir, run_id: str) -> RunRecord | None:
    matches = [record for record in list_records(state) if record.id == run_id or record.id.startswith(run_id)]
    return matches[0] if len(matches) == 1 else None


def prune(state: StateDir, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` run directories; returns the removed ids."""
    directory = runs_dir(state)
    if keep < 1 or not directory.is_dir():
        return []
    runs = sorted((path for path in directory.iterdir() if path.is_dir()), reverse=True)
    removed = []
    for old in runs[keep:]:
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old.name)
    return removed
