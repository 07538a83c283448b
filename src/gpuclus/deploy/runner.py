"""Run a RunConfig with ansible-runner; yield typed events; never print.

ansible_runner.run_async runs ansible-playbook in a thread; its event handler
only translates and queues events (and returns True, without which runner
drops them and `stats` stays empty), and the caller consumes the queue on its
own thread. Cancelling sets an Event that runner polls to stop the playbook.
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuclus.deploy.events import Event, EventTranslator
from gpuclus.deploy.workspace import RunConfig


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

    def _handle(self, raw: dict[str, Any]) -> bool:
        event = self._translator.translate(raw)
        if event is not None:
            self._events.put(event)
        return True

    def events(self, poll: float = 0.1) -> Iterator[Event]:
        """Start the run and yield events until it ends; then ``outcome`` is set."""
        import ansible_runner

        thread, runner = ansible_runner.run_async(
            **self.config.runner_kwargs(),
            event_handler=self._handle,
            cancel_callback=self.cancelled.is_set,
        )
        while thread.is_alive() or not self._events.empty():
            try:
                yield self._events.get(timeout=poll)
            except queue.Empty:
                continue
        thread.join()
        self.outcome = RunOutcome(str(runner.status), runner.rc)
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
        # The record keeps what matters. Per-event JSON files hold full module
        # results (large, and where a careless task could leak data), and
        # `command` holds the admin's whole environment.
        shutil.rmtree(self.artifacts / "job_events", ignore_errors=True)
        (self.artifacts / "command").unlink(missing_ok=True)
