"""Run a RunConfig with ansible-runner; yield typed events; never print.

ansible_runner.run_async runs ansible-playbook in a thread; its event handler
only translates and queues events (and returns True, without which runner
drops them and `stats` stays empty), and the caller consumes the queue on its
own thread.

Stopping a run early (Ctrl-C, SIGTERM, ``cancel()``, an exception in the
handler or in the code consuming the events) stops every process it started,
before ``events()`` returns or raises:

1. SIGINT to ansible-playbook: Ansible's own interrupt, which forwards the
   signal to each worker's process group (a worker runs in a session of its
   own, and so do the commands it runs) and ends with "User interrupted
   execution" in the log;
2. after GRACE_SECONDS at most (at once on a second Ctrl-C or ``kill()``):
   ansible-runner's cancel (SIGKILL to the playbook's process group), then
   SIGTERM and, TERM_SECONDS later, SIGKILL to every process the run left,
   found through /proc (deploy/processes.py: while a run is on gpuclus is a
   child subreaper, so orphans and ssh's ControlPersist masters stay below it).

Then the artifacts that may hold secrets are removed. A run that ends by itself
leaves only ssh's ControlPersist masters (idle, they exit after 60 s), as
Ansible always does. While a run is on, SIGINT and SIGTERM stop it this way
when they still have Python's default handling (a caller's own handler is
kept, and should call ``cancel()`` then ``kill()``); ``events()`` then raises
RunInterrupted or RunTerminated after the cleanup.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from gpuclus.deploy import processes
from gpuclus.deploy.events import Event, EventTranslator
from gpuclus.deploy.workspace import RunConfig

# How long Ansible gets to stop by itself after its SIGINT (it takes about a
# second), before the rest of the run is killed.
GRACE_SECONDS = 5.0
# Between SIGTERM and SIGKILL for what is left (ssh masters remove their
# control sockets on SIGTERM).
TERM_SECONDS = 1.0
# How long ansible-runner's thread may take to end once ansible-playbook is
# gone (it reads what is left of the output, up to 5 s).
STOP_SECONDS = 30.0


class RunInterrupted(KeyboardInterrupt):
    """SIGINT stopped a run whose caller had no handler of its own; raised after the cleanup."""


class RunTerminated(RunInterrupted):
    """SIGTERM arrived during a run; raised like Ctrl-C, so the CLI exits 130 after the cleanup."""


@dataclass
class RunOutcome:
    status: str  # successful, failed, canceled, timeout
    rc: int | None


class DeployRun:
    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.cancelled = threading.Event()  # stop the run (gracefully first)
        self.killed = threading.Event()  # stop it now
        self.outcome: RunOutcome | None = None
        self._events: queue.Queue[Event] = queue.Queue()
        self._translator = EventTranslator()
        self._handler_error: BaseException | None = None
        self._signalled: RunInterrupted | None = None  # what to raise once stopped by a signal
        self._hard_stop = threading.Event()  # ansible-runner's cancel_callback answers this
        self._stopped = False

    def _handle(self, raw: dict[str, Any]) -> bool:
        # Runs on runner's thread, inside its read of Ansible's output: an
        # exception here would end that thread and leave ansible-playbook
        # running. It is kept for events() to raise, and the run cancelled.
        try:
            event = self._translator.translate(raw)
        except Exception as problem:
            if self._handler_error is None:
                self._handler_error = problem
            self.cancelled.set()
            return True
        if event is not None:
            self._events.put(event)
        return True

    def events(self, poll: float = 0.1) -> Iterator[Event]:
        """Start the run and yield events until it ends; then ``outcome`` is set."""
        import ansible_runner

        if self.cancelled.is_set():  # stopped before it started: nothing to run
            self.outcome = RunOutcome("canceled", None)
            return
        thread: threading.Thread | None = None
        with _signals_stop(self), processes.subreaper():
            tree = processes.ProcessTree()
            try:
                thread, runner = ansible_runner.run_async(
                    **self.config.runner_kwargs(),
                    event_handler=self._handle,
                    cancel_callback=self._hard_stop.is_set,
                )
                while thread.is_alive() or not self._events.empty():
                    if self.cancelled.is_set() and not self._stopped:
                        self._stop(thread, tree)
                    try:
                        event = self._events.get(timeout=poll)
                    except queue.Empty:
                        continue
                    yield event
                thread.join()
                if self.cancelled.is_set() and not self._stopped:
                    # Stopped as the playbook ended: what it left goes too.
                    self._stop(thread, tree)
                if self._handler_error is not None:
                    raise self._handler_error
                self.outcome = RunOutcome(str(runner.status), runner.rc)
            finally:
                # Also when the consumer raised (the generator is closed) or a
                # caller's signal handler raised: every process of the run
                # ends before the files go.
                if thread is not None and (thread.is_alive() or self.cancelled.is_set()) and not self._stopped:
                    self.cancel()
                    self._stop(thread, tree)
                if thread is None or not thread.is_alive():
                    # The exit statuses of the run's orphans that came back to this process.
                    tree.reap()
                self._trim_artifacts()
        if self._signalled is not None:
            raise self._signalled

    def cancel(self) -> None:
        """Stop the run: Ansible first, then whatever it leaves (see the module's docstring)."""
        self.cancelled.set()

    def kill(self) -> None:
        """Stop the run now: SIGKILL to every process it started (a second Ctrl-C)."""
        self.killed.set()
        self.cancelled.set()

    def _stop(self, thread: threading.Thread, tree: processes.ProcessTree) -> None:
        self._stopped = True
        second: BaseException | None = None
        try:
            # Ansible's own interrupt first, once ansible-playbook is there.
            marker = str(self.config.inventory)
            deadline = time.monotonic() + GRACE_SECONDS
            interrupted = False
            while thread.is_alive() and not self.killed.is_set() and time.monotonic() < deadline:
                if not interrupted:
                    playbook = tree.children_running(marker)
                    processes.send(playbook, signal.SIGINT)
                    interrupted = bool(playbook)
                thread.join(0.05)
        except KeyboardInterrupt as problem:
            # A caller's handler raised on a second Ctrl-C: kill now, raise it after.
            second = problem
            self.killed.set()
        now = self.killed.is_set()
        self._hard_stop.set()
        tree.kill(term_seconds=0 if now else TERM_SECONDS)
        thread.join(STOP_SECONDS)
        tree.kill(term_seconds=0)  # anything forked while runner's thread ended
        if second is not None:
            raise second

    @property
    def artifacts(self) -> Path:
        return self.config.run_dir / "artifacts" / self.config.run_id

    def output_tail(self, lines: int = 5) -> str:
        """The last lines Ansible printed: why a run ended without a task failure."""
        try:
            text = (self.artifacts / "stdout").read_text(errors="replace")
        except OSError:
            return ""
        meaningful = [line.strip() for line in text.splitlines() if line.strip()]
        return "\n".join(meaningful[-lines:])

    def _trim_artifacts(self) -> None:
        # The record keeps what matters. Per-event JSON files (and the
        # callback's partial ones) hold full module results (large, and where
        # a careless task could leak data), and `command` holds the admin's
        # whole environment.
        shutil.rmtree(self.artifacts / "job_events", ignore_errors=True)
        (self.artifacts / "command").unlink(missing_ok=True)


@contextlib.contextmanager
def _signals_stop(run: DeployRun) -> Iterator[None]:
    """While a run is on, SIGINT and SIGTERM stop it (the first gracefully, a second at once).

    Only on the main thread (where Python runs signal handlers) and only for a
    signal that still has Python's default handling: a caller's own handler is
    kept (the CLI's shows a note, then calls cancel() or kill() itself).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults: dict[int, Callable[[int, FrameType | None], Any] | int] = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: signal.SIG_DFL,
    }
    reasons = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}
    ours = [signum for signum, default in defaults.items() if signal.getsignal(signum) == default]

    def stop(signum: int, frame: FrameType | None) -> None:
        if run._signalled is None:
            kind = RunTerminated if signum == signal.SIGTERM else RunInterrupted
            run._signalled = kind(reasons[signal.Signals(signum)])
        if run.cancelled.is_set():
            run.kill()
        else:
            run.cancel()

    for signum in ours:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum in ours:
            signal.signal(signum, defaults[signum])
