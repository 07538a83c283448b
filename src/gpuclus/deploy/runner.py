"""Run a RunConfig with ansible-runner; yield typed events; never print.

ansible_runner.run_async runs ansible-playbook in a thread; its event handler
only translates and queues events (and returns True, without which runner
drops them and `stats` stays empty), and the caller consumes the queue on its
own thread. Cancelling sets an Event that runner polls to stop the playbook.

However a run ends (done, cancelled, an exception in the handler or in the
code consuming the events, Ctrl-C, SIGTERM), ansible-playbook is stopped and
the artifacts that may hold secrets are removed before ``events()`` returns
or raises. (Runner kills the playbook's process group; a worker busy with a
task runs in a session of its own and finishes that task, writing nothing
here.)
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from gpuclus.deploy.events import Event, EventTranslator
from gpuclus.deploy.workspace import RunConfig

# How long a run that ends early may take to stop: runner polls the cancel
# callback every few seconds (pexpect_timeout, 5 s), kills the playbook's
# process group, then reads what is left of its output (up to 5 s).
STOP_SECONDS = 30.0


class RunTerminated(KeyboardInterrupt):
    """SIGTERM arrived during a run; raised like Ctrl-C, so the CLI exits 130 after the cleanup."""


@dataclass
class RunOutcome:
    status: str  # successful, failed, canceled, timeout
    rc: int | None


class DeployRun:
    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.cancelled = threading.Event()
        self.outcome: RunOutcome | None = None
        self._events: queue.Queue[Event] = queue.Queue()
        self._translator = EventTranslator()
        self._handler_error: BaseException | None = None

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

        thread: threading.Thread | None = None
        try:
            with _sigterm_raises():
                thread, runner = ansible_runner.run_async(
                    **self.config.runner_kwargs(),
                    event_handler=self._handle,
                    cancel_callback=self.cancelled.is_set,
                )
                while thread.is_alive() or not self._events.empty():
                    try:
                        event = self._events.get(timeout=poll)
                    except queue.Empty:
                        continue
                    yield event
                thread.join()
            if self._handler_error is not None:
                raise self._handler_error
            self.outcome = RunOutcome(str(runner.status), runner.rc)
        finally:
            # Also when the consumer raised (the generator is closed) or a
            # signal interrupted the wait: Ansible stops before the files go.
            if thread is not None and thread.is_alive():
                self.cancel()
                thread.join(STOP_SECONDS)
            self._trim_artifacts()

    def cancel(self) -> None:
        self.cancelled.set()

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
def _sigterm_raises() -> Iterator[None]:
    """While a run is on, SIGTERM raises RunTerminated instead of ending the process on the spot.

    Only on the main thread (where Python runs signal handlers) and only when
    SIGTERM still has its default action: a caller's own handler is kept.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise RunTerminated("terminated (SIGTERM)")

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
