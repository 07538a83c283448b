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
    # A failure under ignore_errors that had changed something: Ansible's recap counts it changed.
    changed_anyway: bool = False
    # What a changed result would change, as a short unified diff: only check runs ask Ansible for
    # diffs (--check --diff). Shown on the terminal, never written to a run record.
    diff: str = ""
    # What the nvidia_reboot role said of the host: "pending" (its new driver loads only after a
    # reboot, which this run was not allowed to do) or "done" (rebooted once, driver loaded).
    reboot: str = ""
    # What a role asked to tell the admin about this host (a fact named <role>_notice, e.g.
    # grafana_notice "Grafana skipped: ..."): a thing not done on purpose, which no status shows.
    notice: str = ""

    @property
    def counts_changed(self) -> bool:
        """Whether Ansible's recap counts this result as changed, so phase totals add up to the recap."""
        return self.status == "changed" or (self.status == "failed" and self.ignored and self.changed_anyway)


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
    """Stateful: remembers the current phase, as plays only name it at their start, and which
    hosts changed an item of a no_log loop (its task result comes censored, see _changed)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self._changed_items: set[tuple[str, str]] = set()  # (host, task uuid)

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
        if kind == "runner_item_on_ok":
            if _changed(data.get("res"), raw):
                self._changed_items.add((str(data.get("host", "")), str(data.get("task_uuid", ""))))
            return None
        if kind in _RESULT_EVENTS and _RESULT_EVENTS[kind] is not None:
            status = _RESULT_EVENTS[kind]
            result = data.get("res") or {}
            item_changed = (str(data.get("host", "")), str(data.get("task_uuid", ""))) in self._changed_items
            self._changed_items.discard((str(data.get("host", "")), str(data.get("task_uuid", ""))))
            changed = _changed(result, raw) or item_changed
            if status == "ok" and changed:
                status = "changed"
            return HostResult(
                phase=self.phase,
                host=str(data.get("host", "")),
                task=str(data.get("task", "")),
                status=str(status),
                message=failure_message(result) if status in {"failed", "unreachable"} else "",
                ignored=bool(data.get("ignore_errors")),
                changed_anyway=status == "failed" and changed,
                diff=result_diff(result) if status == "changed" else "",
                reboot=reboot_report(result) if status in {"ok", "changed"} else "",
                notice=notice_text(result) if status in {"ok", "changed"} else "",
            )
        if kind == "playbook_on_stats":
            per_host: dict[str, dict[str, int]] = {}
            for key in _STAT_KEYS:
                for host, count in (data.get(key) or {}).items():
                    per_host.setdefault(host, dict.fromkeys(_STAT_KEYS, 0))[key] = int(count)
            return PlayStats(per_host)
        return None


# The facts roles/nvidia_reboot sets for gpuclus to read, and what each means when true.
REBOOT_FACTS = (("nvidia_reboot_done", "done"), ("nvidia_reboot_pending", "pending"))


def reboot_report(result: Any) -> str:
    """'pending' or 'done' when the result sets one of REBOOT_FACTS to true, else ''."""
    facts = result.get("ansible_facts") if isinstance(result, dict) else None
    if not isinstance(facts, dict):
        return ""
    return next((word for name, word in REBOOT_FACTS if facts.get(name) in (True, "true", "True")), "")


# Longest notice kept: a sentence or two, never a dump.
NOTICE_CHARS = 300


def notice_text(result: Any) -> str:
    """The text of a fact named <role>_notice that the result sets, or ''.

    Roles set one (ansible.builtin.set_fact) to say what they left undone on
    purpose, such as Grafana skipped where its repository is out of reach; the
    deploy summary and the run record repeat it per host.
    """
    facts = result.get("ansible_facts") if isinstance(result, dict) else None
    if not isinstance(facts, dict):
        return ""
    texts = [str(value).strip() for name, value in sorted(facts.items()) if name.endswith("_notice") and value]
    text = " ".join(" ".join(texts).split())
    return text if len(text) <= NOTICE_CHARS else text[: NOTICE_CHARS - 1] + "…"


def _changed(result: Any, raw: dict[str, Any]) -> bool:
    """Whether a result changed something, also when no_log hid it.

    ansible-runner replaces a no_log result with ``{"censored": ...}``, dropping
    the ``changed`` that Ansible keeps (and counts in its recap); the line
    Ansible printed for it ("changed: [head]") still says so. A no_log loop's
    own result prints nothing: its items' events say it (EventTranslator).
    """
    if not isinstance(result, dict):
        return False
    if "changed" in result or "censored" not in result:
        return bool(result.get("changed"))
    first = _ANSI.sub("", str(raw.get("stdout") or "")).lstrip().split("\n", 1)[0]
    return first.startswith("changed:")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
DIFF_LINES = 40  # per result: enough to read a config change, short enough for a cluster's worth
_DIFF_INPUT = 200_000  # characters of before/after beyond which a file is only described


def result_diff(result: Any, limit: int = DIFF_LINES) -> str:
    """A module result's diff (a loop's items' diffs) as one unified diff of at most ``limit`` lines.

    Empty for a censored (no_log) result and for a task with ``diff: false``:
    Ansible returns no diff for them, and nothing else is looked at.
    """
    if not isinstance(result, dict) or "censored" in result:
        return ""
    parts = _diff_parts(result.get("diff"))
    for item in result.get("results") or []:
        if isinstance(item, dict) and "censored" not in item and item.get("changed"):
            parts.extend(_diff_parts(item.get("diff")))
    lines = [line for part in parts for line in part]
    if len(lines) > limit:
        lines = [*lines[: limit - 1], f"... {len(lines) - limit + 1} more lines"]
    return "\n".join(lines)


def _diff_parts(diff: Any) -> list[list[str]]:
    """Ansible's ``diff``: one dict or a list of them, each with before/after (text or a dict of
    attributes) and their headers, or ``prepared`` (text a module wrote itself, e.g. apt's)."""
    entries = diff if isinstance(diff, list) else [diff]
    parts = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        if entry.get("prepared"):
            parts.append(str(entry["prepared"]).rstrip("\n").splitlines())
        if "before" in entry or "after" in entry:
            lines = _unified(entry)
            if lines:
                parts.append(lines)
    return parts


def _unified(entry: dict[str, Any]) -> list[str]:
    import difflib

    before, after = _diff_text(entry.get("before")), _diff_text(entry.get("after"))
    before_name = str(entry.get("before_header") or "before")
    after_name = str(entry.get("after_header") or "after")
    if before == after:
        return []
    if len(before) > _DIFF_INPUT or len(after) > _DIFF_INPUT:
        return [f"--- {before_name}", f"+++ {after_name}", "(too large to show)"]
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), fromfile=before_name, tofile=after_name, lineterm=""
    )
    return list(lines)


def _diff_text(value: Any) -> str:
    """Text as it is; a dict of attributes (the file module's state, mode, owner) as sorted lines."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return "".join(f"{key}: {value[key]}\n" for key in sorted(value))
    return str(value)


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
