"""Which nodes a deploy rebooted, and which still need a reboot (roles/nvidia_reboot's facts).

reboot_facts.jsonl was recorded like the other streams (see test_deploy_events.py):
ansible-runner ran a playbook on gpu01..gpu03 (ansible_connection local) whose
set_fact tasks say what the nvidia_reboot role says: gpu01 nvidia_reboot_pending
true, gpu02 and gpu03 false, then gpu02 nvidia_reboot_done true. Only the
temporary path was rewritten to a run directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuclus.deploy.events import EventTranslator, HostResult, reboot_report
from gpuclus.deploy.pipeline import exit_code
from gpuclus.deploy.records import RecordBuilder, RunRecord
from gpuclus.errors import ExitCode

EVENTS = Path(__file__).resolve().parents[2] / "fixtures" / "events" / "reboot_facts.jsonl"


def results() -> list[HostResult]:
    translator = EventTranslator()
    raw = [json.loads(line) for line in EVENTS.read_text().splitlines()]
    return [event for event in map(translator.translate, raw) if isinstance(event, HostResult)]


def record(check: bool = False) -> RunRecord:
    builder = RecordBuilder(
        RunRecord(
            id="20260301T120000Z-rb12",
            spec="/home/admin/lab/cluster.yaml",
            spec_sha256="0" * 64,
            phases_requested=["nvidia"],
            limit=None,
            check=check,
            started_at=1_772_366_400.0,
            gpuclus_version="0.0.0",
        )
    )
    for event in results():
        builder.add(event)
    return builder.finish("successful", 0)


def test_the_facts_become_reboot_words() -> None:
    said = {(result.host, result.task): result.reboot for result in results()}
    assert said[("gpu01", "Say whether a reboot is still pending")] == "pending"
    assert said[("gpu02", "Say whether a reboot is still pending")] == ""
    assert said[("gpu02", "Say that the node was rebooted")] == "done"
    assert said[("gpu03", "Say whether a reboot is still pending")] == ""


def test_the_record_names_the_nodes_and_the_exit_code_says_reboot() -> None:
    run = record()
    assert run.reboot_pending == ["gpu01"]
    assert run.rebooted == ["gpu02"]
    assert run.as_dict()["reboot_pending"] == ["gpu01"]
    assert exit_code(run) is ExitCode.REBOOT_NEEDED
    assert int(ExitCode.REBOOT_NEEDED) == 5


def test_a_check_run_or_a_failed_run_keeps_its_own_exit_code() -> None:
    assert exit_code(record(check=True)) is ExitCode.OK
    failed = record()
    failed.status = "failed"
    assert exit_code(failed) is ExitCode.FAILED


def test_nothing_pending_is_exit_zero() -> None:
    run = record()
    run.reboot_pending = []
    assert exit_code(run) is ExitCode.OK


def test_a_round_trip_through_the_file_keeps_the_lists(tmp_path: Path) -> None:
    run = record()
    run.save(tmp_path)
    loaded = RunRecord.from_dict(json.loads((tmp_path / "record.json").read_text()))
    assert (loaded.reboot_pending, loaded.rebooted) == (["gpu01"], ["gpu02"])


def test_other_results_say_nothing() -> None:
    cases: list[Any] = [None, {}, {"ansible_facts": "x"}, {"ansible_facts": {"nvidia_reboot_pending": False}}]
    assert [reboot_report(case) for case in cases] == ["", "", "", ""]
    assert reboot_report({"ansible_facts": {"nvidia_reboot_pending": "True"}}) == "pending"
