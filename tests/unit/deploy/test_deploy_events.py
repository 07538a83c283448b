"""EventTranslator and failure_message, fed ansible-runner events recorded for real.

The streams in tests/fixtures/events/ were all recorded (none hand-written):
ansible-runner 2.4.3 / ansible-core 2.19 ran tiny playbooks against inventory
hosts with `ansible_connection: local` (head, gpu01, gpu02) and the event
handler saved every event dict as one JSON line. Afterwards only names were
rewritten: temporary paths became a run directory, `play.yml` became
`deploy.yml`, and in unreachable_and_failed.jsonl the unreachable host (an SSH
target on 127.0.0.1 port 1, "Connection refused") became gpu02 at 10.0.0.12
port 22 with "No route to host". The marker plays are the ones
workspace.entry_playbook writes ("gpuclus phase NAME", localhost, no tasks).

- success.jsonl: phases base and slurm; ok, changed, skipped and one ignored
  failure (head, rc 3); playbook_on_stats.
- unreachable_and_failed.jsonl: gpu02 unreachable, gpu01 fails a command
  (rc 1, two stderr lines, "non-zero return code"), head fine.
- no_log_failed.jsonl: a no_log task fails on head; its res is censored.
- loop_failed.jsonl: a loop whose second item fails (rc 100): runner_item_on_ok,
  runner_item_on_failed, then runner_on_failed with results[].
- check_diff.jsonl: `--check --diff` with ANSIBLE_NOCOLOR=1 as a deploy sets it,
  id 20260301T120000Z-cd34 (files under /srv/demo/<host>/ were /tmp ones): phase
  base writes a motd (new on gpu01, changed on head, same on gpu02) that
  notifies a handler, a no_log copy of a password, a copy with `diff: false`
  (head), an ignored failing command with changed_when (gpu01); phase slurm a
  copy loop over two files, a no_log copy loop (head) and a 60-line file (head).
  Its recap: changed head 7, gpu01 5, gpu02 2. Used by test_check_runs.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuclus.deploy.events import (
    PHASE_PLAY_PREFIX,
    Event,
    EventTranslator,
    HostResult,
    HostStarted,
    PhaseStarted,
    PlayStats,
    TaskStarted,
    failure_message,
)

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "events"
STREAMS = ["success", "unreachable_and_failed", "no_log_failed", "loop_failed", "check_diff"]
NO_LOG_MESSAGE = "output hidden (no_log): the task carries a secret; rerun with -vvv on a test cluster"
STAT_KEYS = {"ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"}


def raw_events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (EVENTS / f"{name}.jsonl").read_text().splitlines()]


def translate(name: str) -> list[Event]:
    translator = EventTranslator()
    return [event for raw in raw_events(name) if (event := translator.translate(raw)) is not None]


def results(name: str) -> list[HostResult]:
    return [event for event in translate(name) if isinstance(event, HostResult)]


def result_for(name: str, host: str, task: str) -> HostResult:
    (found,) = [event for event in results(name) if event.host == host and event.task == task]
    return found


# The recordings themselves ------------------------------------------------------


@pytest.mark.parametrize("name", STREAMS)
def test_recorded_streams_have_ansible_runner_shape(name: str) -> None:
    events = raw_events(name)
    assert [event["counter"] for event in events] == list(range(1, len(events) + 1))
    assert len({event["uuid"] for event in events}) == len(events)
    assert events[0]["event"] == "playbook_on_start"
    assert events[-1]["event"] == "playbook_on_stats"
    for event in events:
        assert {"event", "event_data", "counter", "uuid", "stdout", "runner_ident"} <= event.keys()
        if event["event"].startswith("runner_on_") and event["event"] != "runner_on_start":
            assert {"play", "task", "host"} <= event["event_data"].keys()
        if event["event"] in {"runner_on_ok", "runner_on_failed", "runner_on_unreachable"}:
            assert isinstance(event["event_data"]["res"], dict)


@pytest.mark.parametrize("name", STREAMS)
def test_every_stream_starts_its_phase_with_a_marker_play(name: str) -> None:
    plays = [e["event_data"]["play"] for e in raw_events(name) if e["event"] == "playbook_on_play_start"]
    assert plays[0].startswith(PHASE_PLAY_PREFIX)


def test_no_log_recording_holds_no_secret() -> None:
    # The failing no_log task printed this password to stderr; Ansible censors it.
    assert "s3cretpassw0rd" not in (EVENTS / "no_log_failed.jsonl").read_text()


# Phases ----------------------------------------------------------------------------


def test_marker_plays_start_phases_in_order() -> None:
    assert [event.phase for event in translate("success") if isinstance(event, PhaseStarted)] == ["base", "slurm"]


def test_later_events_carry_the_current_phase() -> None:
    tasks = [(event.phase, event.task) for event in translate("success") if isinstance(event, TaskStarted)]
    assert tasks == [
        ("base", "Check the marker"),
        ("base", "Write the marker file"),
        ("base", "Only on the head node"),
        ("slurm", "Render slurm.conf"),
        ("slurm", "Probe an optional tool"),
    ]
    assert {event.phase for event in results("success") if event.task == "Render slurm.conf"} == {"slurm"}
    assert {event.phase for event in results("success") if event.task == "Write the marker file"} == {"base"}


def test_task_started_names_its_play() -> None:
    first = next(event for event in translate("success") if isinstance(event, TaskStarted))
    assert first == TaskStarted("base", "Base setup", "Check the marker")


def test_events_before_the_first_marker_have_no_phase() -> None:
    translator = EventTranslator()
    play = {"event": "playbook_on_play_start", "event_data": {"play": "Check the inventory", "name": "Check"}}
    task = {"event": "playbook_on_task_start", "event_data": {"play": "Check the inventory", "task": "Assert"}}
    assert translator.translate(play) is None
    assert translator.translate(task) == TaskStarted(None, "Check the inventory", "Assert")


def test_ordinary_plays_keep_the_phase_and_marker_names_are_stripped() -> None:
    translator = EventTranslator()
    marker = {"event": "playbook_on_play_start", "event_data": {"play": "gpuclus phase  nfs "}}
    assert translator.translate(marker) == PhaseStarted("nfs")
    assert translator.translate({"event": "playbook_on_play_start", "event_data": {"play": "Serve NFS"}}) is None
    assert translator.phase == "nfs"
    # Older runners put the name under `name` only.
    assert translator.translate(
        {"event": "playbook_on_play_start", "event_data": {"name": "gpuclus phase slurm"}}
    ) == PhaseStarted("slurm")


def test_a_task_starting_on_a_host_says_which_host_is_busy_with_what() -> None:
    started = [event for event in translate("success") if isinstance(event, HostStarted)]
    assert started[0] == HostStarted("base", "head", "Check the marker")
    assert {(event.phase, event.host) for event in started if event.task == "Render slurm.conf"} == {
        ("slurm", "head"),
        ("slurm", "gpu01"),
        ("slurm", "gpu02"),
    }


@pytest.mark.parametrize(
    "kind",
    ["playbook_on_start", "runner_item_on_ok", "runner_item_on_failed", "verbose", "debug", ""],
)
def test_events_without_meaning_for_gpuclus_are_dropped(kind: str) -> None:
    raw = {"event": kind, "event_data": {"host": "head", "task": "x", "res": {"failed": True, "msg": "boom"}}}
    assert EventTranslator().translate(raw) is None


def test_event_without_event_data_does_not_crash() -> None:
    translator = EventTranslator()
    assert translator.translate({"event": "runner_on_ok"}) == HostResult(None, "", "", "ok")
    assert translator.translate({}) is None


# Results ---------------------------------------------------------------------------


def test_ok_changed_and_skipped_results() -> None:
    statuses = {(event.task, event.host): event.status for event in results("success")}
    assert statuses[("Check the marker", "head")] == "ok"
    assert statuses[("Write the marker file", "head")] == "changed"
    assert statuses[("Write the marker file", "gpu01")] == "changed"
    assert statuses[("Write the marker file", "gpu02")] == "ok"
    assert statuses[("Only on the head node", "head")] == "ok"
    assert statuses[("Only on the head node", "gpu01")] == "skipped"
    assert statuses[("Only on the head node", "gpu02")] == "skipped"
    assert [statuses[("Render slurm.conf", host)] for host in ("head", "gpu01", "gpu02")] == ["changed"] * 3
    assert all(event.message == "" for event in results("success") if event.status != "failed")


def test_changed_comes_from_res_changed_only_on_ok_events() -> None:
    translator = EventTranslator()
    failed = {"event": "runner_on_failed", "event_data": {"host": "h", "task": "t", "res": {"changed": True}}}
    assert translator.translate(failed).status == "failed"  # type: ignore[union-attr]
    ok = {"event": "runner_on_ok", "event_data": {"host": "h", "task": "t", "res": {"changed": False}}}
    assert translator.translate(ok).status == "ok"  # type: ignore[union-attr]


def test_ignored_failure_is_flagged() -> None:
    probe = result_for("success", "head", "Probe an optional tool")
    assert probe.status == "failed"
    assert probe.ignored is True
    assert probe.message == "non-zero return code (rc 3): probe failed"
    others = [event for event in results("success") if (event.host, event.task) != (probe.host, probe.task)]
    assert not any(event.ignored for event in others)


def test_unreachable_host_gives_one_line() -> None:
    dark = result_for("unreachable_and_failed", "gpu02", "Install base packages")
    assert dark.status == "unreachable"
    assert dark.phase == "base"
    assert dark.ignored is False
    assert "\n" not in dark.message
    assert dark.message.endswith(
        "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.12 port 22: No route to host"
    )


def test_failed_command_gives_rc_and_last_stderr_line() -> None:
    failed = result_for("unreachable_and_failed", "gpu01", "Start chronyd")
    assert failed.status == "failed"
    assert failed.message == "non-zero return code (rc 1): See systemctl status chronyd.service for details."
    assert result_for("unreachable_and_failed", "head", "Start chronyd").status == "ok"


def test_no_log_failure_gives_the_no_log_message() -> None:
    failed = result_for("no_log_failed", "head", "Set the database password")
    assert failed.status == "failed"
    assert failed.phase == "slurm"
    assert failed.message == NO_LOG_MESSAGE


def test_loop_failure_is_counted_once_not_per_item() -> None:
    failed = [event for event in results("loop_failed") if event.status == "failed"]
    assert len(failed) == 1
    assert (failed[0].host, failed[0].task, failed[0].phase) == ("head", "Install packages", "base")


def test_loop_failure_gives_the_failed_items_message() -> None:
    failed = result_for("loop_failed", "head", "Install packages")
    assert failed.message == "non-zero return code (rc 100): E: Unable to locate package nonexistent-pkg"


# Stats -----------------------------------------------------------------------------


def test_stats_give_every_host_every_key() -> None:
    (stats,) = [event for event in translate("success") if isinstance(event, PlayStats)]
    assert stats.per_host == {
        "head": {"ok": 5, "changed": 2, "failures": 0, "dark": 0, "skipped": 0, "rescued": 0, "ignored": 1},
        "gpu01": {"ok": 3, "changed": 2, "failures": 0, "dark": 0, "skipped": 2, "rescued": 0, "ignored": 0},
        "gpu02": {"ok": 3, "changed": 1, "failures": 0, "dark": 0, "skipped": 2, "rescued": 0, "ignored": 0},
    }


def test_stats_of_a_run_with_an_unreachable_host() -> None:
    (stats,) = [event for event in translate("unreachable_and_failed") if isinstance(event, PlayStats)]
    assert {host: set(counts) for host, counts in stats.per_host.items()} == dict.fromkeys(
        ("head", "gpu01", "gpu02"), STAT_KEYS
    )
    assert stats.per_host["gpu02"]["dark"] == 1
    assert stats.per_host["gpu01"]["failures"] == 1
    assert stats.per_host["head"]["ok"] == 2


def test_empty_stats() -> None:
    assert EventTranslator().translate({"event": "playbook_on_stats", "event_data": {}}) == PlayStats({})


# failure_message on its own ----------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"msg": "Could not find the requested service foo: host"}, "Could not find the requested service foo: host"),
        ({"msg": "line one\n  line two\tend"}, "line one line two end"),
        ({"msg": "non-zero return code", "rc": 2}, "non-zero return code (rc 2)"),
        ({"msg": "non-zero return code", "rc": 1, "stderr": "a\nb\n\n"}, "non-zero return code (rc 1): b"),
        ({"stderr": "warning\nfatal: boom\n"}, "fatal: boom"),
        ({"msg": "Failed to download", "stderr": "curl: (6)"}, "Failed to download"),
        ({"censored": "the output has been hidden due to the fact that 'no_log: true' was specified"}, NO_LOG_MESSAGE),
        ({"no_log": True, "msg": "password=hunter2"}, NO_LOG_MESSAGE),
        ({"results": [{"failed": False, "msg": ""}, {"failed": True, "msg": "item broke"}]}, "item broke"),
        ({"reason": "Conditional check failed"}, "Conditional check failed"),
        ({"exception": "Traceback ..."}, "Traceback ..."),
        ({}, "failed (no message)"),
        ("plain text", "plain text"),
    ],
)
def test_failure_message(result: Any, expected: str) -> None:
    assert failure_message(result) == expected


def test_failure_message_is_bounded() -> None:
    assert len(failure_message({"msg": "x" * 5000})) == 400
    assert failure_message({"msg": "x" * 50}, limit=10) == "x" * 10
    assert len(failure_message("y" * 5000)) == 400
