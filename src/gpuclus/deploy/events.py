"""Typed deploy events, made from ansible-runner's raw event dictionaries.

The runner adapter turns each raw event into one of these (or nothing); the
CLI draws progress from them and the run record sums them up. Kept free of
Ansible imports so recorded event streams can be replayed in unit tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PHASE_PLAY_PREFIX = "gpuclus phase "


@dataclass(frozen=True)
class PhaseStarted:
    phase: str


@dataclass(frozen=True)
class TaskStarted:
    phase: str | None
    play: str
    task: str


@dataclass(frozen=True)
class HostStarted:
    """A task began on a host (what the host is busy with until its HostResult)."""

    phase: str | None
    host: str
    task: str


@dataclass(frozen=True)
class HostResult:
    phase: str | None
    host: str
    task: str
    status: str  # ok, changed, failed, unreachable, skipped
    message: str = ""
    ignored: bool = False


@dataclass(frozen=True)
class PlayStats:
    per_host: dict[str, dict[str, int]]


Event = PhaseStarted | TaskStarted | HostStarted | HostResult | PlayStats

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
    "runner_item_on_failed": None,  # the task's own failed event follows; items would double count
}
_STAT_KEYS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")


class EventTranslator:
    """Stateful: remembers the current phase, as plays only name it at their start."""

    def __init__(self) -> None:
        self.phase: str | None = None

    def translate(self, raw: dict[str, Any]) -> Event | None:
        kind = raw.get("event", "")
        data: dict[str, Any] = raw.get("event_data") or {}
        if kind == "playbook_on_play_start":
            name = str(data.get("play") or data.get("name") or "")
            if name.startswith(PHASE_PLAY_PREFIX):
                self.phase = name.removeprefix(PHASE_PLAY_PREFIX).strip()
                return PhaseStarted(self.phase)
            return None
        if kind == "playbook_on_task_start":
            return TaskStarted(self.phase, str(data.get("play", "")), str(data.get("task", "")))
        if kind == "runner_on_start":
            return HostStarted(self.phase, str(data.get("host", "")), str(data.get("task", "")))
        if kind in _RESULT_EVENTS and _RESULT_EVENTS[kind] is not None:
            status = _RESULT_EVENTS[kind]
            result = data.get("res") or {}
            if status == "ok" and isinstance(result, dict) and result.get("changed"):
                status = "changed"
            return HostResult(
                phase=self.phase,
                host=str(data.get("host", "")),
                task=str(data.get("task", "")),
                status=str(status),
                message=failure_message(result) if status in {"failed", "unreachable"} else "",
                ignored=bool(data.get("ignore_errors")),
            )
        if kind == "playbook_on_stats":
            per_host: dict[str, dict[str, int]] = {}
            for key in _STAT_KEYS:
                for host, count in (data.get(key) or {}).items():
                    per_host.setdefault(host, dict.fromkeys(_STAT_KEYS, 0))[key] = int(count)
            return PlayStats(per_host)
        return None


def failure_message(result: Any, limit: int = 400) -> str:
    """The one line an admin needs from a failed module result, not a wall of JSON."""
    if not isinstance(result, dict):
        return str(result)[:limit]
    if result.get("no_log") or result.get("censored"):
        return "output hidden (no_log): the task carries a secret; rerun with -vvv on a test cluster"
    message = str(result.get("msg") or "").strip()
    stderr = str(result.get("stderr") or "").strip()
    if message.startswith("non-zero return code") and "rc" in result:
        message = f"{message} (rc {result['rc']})"
    if stderr and (not message or message.startswith("non-zero return code")):
        message = f"{message}: {_last_line(stderr)}" if message else _last_line(stderr)
    results = result.get("results")
    if isinstance(results, list) and (not message or message == "One or more items failed"):
        # A loop: the failed item says what went wrong, the task only that something did.
        failed = [item for item in results if isinstance(item, dict) and item.get("failed")]
        if failed:
            return failure_message(failed[0], limit)
    if not message:
        message = str(result.get("reason") or result.get("exception") or "failed (no message)")
    return re.sub(r"\s+", " ", message)[:limit]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
