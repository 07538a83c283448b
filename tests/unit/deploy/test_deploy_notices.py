"""What roles say they left undone on purpose: facts named <role>_notice, repeated by the deploy.

notices.jsonl was recorded like the other streams (see test_deploy_events.py):
ansible-runner ran a playbook on local-connection hosts head and gpu01 whose
set_fact tasks say what the grafana role (skip path) and the gpu_metrics role
(fake GPUs) say, plus a fact that is no notice. Only the playbook's path was
renamed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuclus.cli import deploy_view
from gpuclus.deploy.events import NOTICE_CHARS, EventTranslator, HostResult, notice_text
from gpuclus.deploy.records import Notice, RecordBuilder, RunRecord
from gpuclus.output import Output

STREAM = Path(__file__).resolve().parents[2] / "fixtures" / "events" / "notices.jsonl"
GRAFANA = "Grafana SKIPPED: the nodes cannot reach https://apt.grafana.com (Connection refused)."
FAKE = "no GPU exporter: fake GPUs: device nodes without a driver (sandbox)"


def events() -> list[Any]:
    translator = EventTranslator()
    raw = [json.loads(line) for line in STREAM.read_text().splitlines()]
    return [event for line in raw if (event := translator.translate(line)) is not None]


def test_recorded_set_facts_become_notices_on_their_hosts_only() -> None:
    said = {(e.host, e.task): e.notice for e in events() if isinstance(e, HostResult) and e.status != "skipped"}
    assert said[("head", "Say that Grafana is skipped")] == GRAFANA
    assert said[("gpu01", "Say that this node gets no GPU exporter")] == FAKE
    assert said[("head", "An unrelated fact")] == ""
    assert said[("gpu01", "An unrelated fact")] == ""


def test_the_record_keeps_each_notice_once_with_its_phase() -> None:
    record = RunRecord("r1", "cluster.yaml", "0" * 64, ["monitoring"], None, False, 0.0, "0")
    builder = RecordBuilder(record)
    for event in events() * 2:  # a second pass (say, a retry in the same run) adds nothing
        builder.add(event)
    assert record.notices == [Notice("head", "monitoring", GRAFANA), Notice("gpu01", "monitoring", FAKE)]
    again = RunRecord.from_dict(json.loads(json.dumps(record.as_dict())))
    assert again.notices == record.notices


def test_a_long_notice_is_cut_and_whitespace_folded() -> None:
    text = notice_text({"ansible_facts": {"x_notice": "word\n  " * 200}})
    assert len(text) == NOTICE_CHARS and text.endswith("…") and "\n" not in text
    assert notice_text({"ansible_facts": {"x_notice": ""}}) == ""
    assert notice_text({"censored": "hidden"}) == ""


def test_the_deploy_summary_prints_notices_with_their_hosts() -> None:
    record = RunRecord("r1", "cluster.yaml", "0" * 64, ["monitoring"], None, False, 0.0, "0", status="successful")
    record.notices = [Notice("gpu01", "monitoring", FAKE), Notice("gpu02", "monitoring", FAKE)]
    out = Output(json_mode=False)
    with out.out.capture() as captured:
        deploy_view._print_notices(out, record)
    assert "gpu[01-02]" in captured.get() and FAKE in captured.get()
