"""The run's copy of the spec masks the webhook URL however it is written, and changes nothing else."""

from __future__ import annotations

import pytest
import yaml
from spec_samples import SPEC

from gpuclus.spec.load import load_spec_text
from gpuclus.spec.record import MASK, WEBHOOK_URL_LOC, inline_secret_locs, masked_spec_text

URL = "https://hooks.example.org/services/T0K3N"
# The grammar tests' spec as a file would hold it, a comment and all.
BASE = "# the lab's cluster\n" + yaml.safe_dump(SPEC, sort_keys=False)


@pytest.mark.parametrize(
    "receiver",
    [
        f"monitoring:\n  alertmanager: true\n  alert_receiver:\n    webhook_url: {URL}  # the team's channel\n",
        # The same URL kept in a comment.
        f"monitoring:\n  alertmanager: true\n  alert_receiver:\n    # was {URL}\n    webhook_url: {URL}\n",
        f"monitoring:\n  alertmanager: true\n  alert_receiver: {{webhook_url: '{URL}'}}\n",
        # Escapes: the URL is nowhere in the text as it is written, the scalar's span still is.
        'monitoring:\n  alertmanager: true\n  alert_receiver:\n    webhook_url: "https://hooks.example.org/'
        'services/T0\\x4b3N"\n',
        f"monitoring:\n  alertmanager: true\n  alert_receiver:\n    webhook_url: >-\n      {URL}\n",
    ],
    ids=["plain-with-comment", "again-in-a-comment", "flow-single-quoted", "double-quoted-escape", "folded-block"],
)
def test_the_inline_webhook_url_is_masked_wherever_and_however_it_is_written(receiver: str) -> None:
    text = BASE + receiver
    loaded = load_spec_text(text, "cluster.yaml")
    assert loaded.ok and loaded.spec is not None, loaded.findings
    assert inline_secret_locs(loaded.spec) == [WEBHOOK_URL_LOC]
    masked = masked_spec_text(text, inline_secret_locs(loaded.spec))
    assert "T0K3N" not in masked and "T0\\x4b3N" not in masked
    assert masked.startswith(BASE)
    data = yaml.safe_load(masked)
    assert data["monitoring"]["alert_receiver"]["webhook_url"] == yaml.safe_load(MASK)
    original = yaml.safe_load(text)
    original["monitoring"]["alert_receiver"]["webhook_url"] = yaml.safe_load(MASK)
    assert data == original  # nothing else changed
    if "# the team's channel" in receiver:
        assert "# the team's channel" in masked


def test_a_spec_without_an_inline_secret_is_recorded_as_written() -> None:
    with_file = BASE + "monitoring:\n  alertmanager: true\n  alert_receiver: {webhook_url_file: hook.url}\n"
    for text in (BASE, with_file):
        loaded = load_spec_text(text, "cluster.yaml")
        assert loaded.spec is not None
        assert inline_secret_locs(loaded.spec) == []
        assert masked_spec_text(text, []) == text
