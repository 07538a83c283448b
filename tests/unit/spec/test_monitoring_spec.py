"""The monitoring section: Grafana's source, Alertmanager and where alerts go.

Every value that lands in alertmanager.yml (webhook URL, addresses, the SMTP
relay) is checked against that file's grammar before anything is rendered;
the Grafana package file is looked up on this machine, relative to the spec.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclus.render.context import build_context
from gpuclus.spec.load import LoadedSpec, load_spec

BASE = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, monitoring, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
monitoring:
"""
FIRST_LINE = BASE.count("\n") + 1


def _load(tmp_path: Path, body: str) -> LoadedSpec:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(BASE + body, encoding="utf-8")
    return load_spec(spec)


def _codes(loaded: LoadedSpec) -> list[tuple[str, int | None, str]]:
    return [(f.code, f.line, ".".join(str(part) for part in f.loc)) for f in loaded.findings]


def test_defaults_are_prometheus_only(tmp_path: Path) -> None:
    loaded = _load(tmp_path, "  prometheus: true\n")
    assert loaded.ok and loaded.spec is not None
    monitoring = loaded.spec.monitoring
    assert (monitoring.grafana, monitoring.alertmanager, monitoring.alert_receiver) == (False, False, None)
    assert monitoring.grafana_unavailable == "fail"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('  alert_receiver: {webhook_url: "ftp://example.com/x"}\n', "webhook_url"),
        ('  alert_receiver: {webhook_url: "https://example.com/a b"}\n', "webhook_url"),
        ('  alert_receiver: {webhook_url: "https://example.com/\\"x"}\n', "webhook_url"),
        ('  alert_receiver: {webhook_url: "https://example.com/\\nx"}\n', "webhook_url"),
        ('  alert_receiver: {email_to: "ops at example.com", email_from: a@b.org, smarthost: "mx:25"}\n', "email_to"),
        ('  alert_receiver: {email_to: a@b.org, email_from: a@b.org, smarthost: "mx"}\n', "smarthost"),
        ('  grafana_package: "grafana.tar.gz"\n', "grafana_package"),
        ('  grafana_package: "~/grafana.deb"\n', "grafana_package"),
        ("  grafana_unavailable: ignore\n", "grafana_unavailable"),
    ],
)
def test_values_outside_the_files_grammar_are_refused_with_their_line(tmp_path: Path, body: str, field: str) -> None:
    loaded = _load(tmp_path, body)
    assert not loaded.ok
    (code, line, path), *_ = _codes(loaded)
    assert code in ("invalid-format", "invalid-value", "invalid-choice")
    assert line == FIRST_LINE
    assert path.endswith(field)


def test_email_alerts_need_all_three_fields(tmp_path: Path) -> None:
    loaded = _load(tmp_path, "  alertmanager: true\n  alert_receiver: {email_to: ops@example.com}\n")
    assert not loaded.ok
    message = loaded.findings[0].message
    assert "email_from" in message and "smarthost" in message


def test_a_missing_grafana_package_names_where_it_resolved(tmp_path: Path) -> None:
    loaded = _load(tmp_path, "  grafana: true\n  grafana_package: dl/grafana_11.2.0_amd64.deb\n")
    assert _codes(loaded) == [("grafana-package-missing", FIRST_LINE + 1, "monitoring.grafana_package")]
    assert str(tmp_path / "dl" / "grafana_11.2.0_amd64.deb") in (loaded.findings[0].hint or "")


def test_rendered_receiver_and_package_path(tmp_path: Path) -> None:
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "grafana_11.2.0_amd64.deb").write_bytes(b"!<arch>\n")
    loaded = _load(
        tmp_path,
        "  grafana: true\n  grafana_package: dl/grafana_11.2.0_amd64.deb\n  alertmanager: true\n"
        "  alert_receiver:\n    webhook_url: https://chat.example.com:8443/hooks/gpu?room=ops\n",
    )
    assert loaded.ok and loaded.spec is not None and loaded.topology is not None, loaded.findings
    context = build_context(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus")
    values = context["group_vars"]["monitoring"]
    assert values["gpuclus_grafana_package"] == "../dl/grafana_11.2.0_amd64.deb"
    assert values["gpuclus_alertmanager_install"] is True
    # The URL may carry a token: only the path of the 0600 file deploy keeps it in is rendered.
    assert values["gpuclus_alertmanager_receiver"] == {
        "webhook_url_file": "../.gpuclus/secrets/alertmanager_webhook_url",
        "email_to": None,
        "email_from": None,
        "smarthost": None,
    }


def test_the_dcgm_exporter_package_is_rendered_relative_and_warned_about_without_dcgm(tmp_path: Path) -> None:
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / "exporter.deb").write_bytes(b"!<arch>\n")
    loaded = _load(tmp_path, "  dcgm_exporter_package: dl/exporter.deb\n")
    assert _codes(loaded) == [("monitoring-setting-unused", FIRST_LINE, "monitoring.dcgm_exporter_package")]
    assert loaded.spec is not None and loaded.topology is not None
    context = build_context(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../.gpuclus")
    assert context["group_vars"]["monitoring"]["gpuclus_dcgm_exporter_package"] == "../dl/exporter.deb"
