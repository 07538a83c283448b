"""Monitoring: where Prometheus and Grafana run, the package files named, and settings that do nothing."""

from __future__ import annotations

from gpuclus.spec.checks.control_files import read_secret_file, shown
from gpuclus.spec.checks.view import MONITORING, NODES, RegisteredCheck, SpecView, node_loc, registrar
from gpuclus.spec.models import WEBHOOK_URL_PATTERN, Role
from gpuclus.yamldoc.findings import Finding, Loc, error, info, warning
from gpuclus.yamldoc.grammar import full_match, host_problem

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


@_check(MONITORING, NODES)
def monitoring_on_controller(view: SpecView) -> list[Finding]:
    monitoring = view.spec.monitoring
    wanted = [name for name in ("prometheus", "grafana") if getattr(monitoring, name)]
    controller = view.topology.controller
    if not wanted or view.topology.with_role(Role.MONITORING) or controller is None:
        return []
    return [
        info(
            "monitoring-on-controller",
            f"no node has the monitoring role; {' and '.join(wanted)} will run on the controller {controller.name!r}",
            ("nodes",),
            hint="add 'monitoring' to another node's roles to move it there",
        )
    ]


@_check()
def monitoring_nodes_multiple(view: SpecView) -> list[Finding]:
    nodes = view.topology.with_role(Role.MONITORING)
    if len(nodes) < 2:
        return []
    return [
        error(
            "monitoring-node-multiple",
            f"{len(nodes)} nodes have the monitoring role; gpuclus v1 runs one Prometheus and Grafana",
            node_loc(nodes[1].entry, "roles"),
            hint="keep 'monitoring' on one node",
        )
    ]


@_check(("monitoring", "grafana_package"))
def grafana_package_missing(view: SpecView) -> list[Finding]:
    return _package_file_missing(
        view, "grafana_package", "grafana-package-missing", "Grafana's .deb or .rpm from grafana.com/grafana/download"
    )


@_check(("monitoring", "dcgm_exporter_package"))
def dcgm_exporter_package_missing(view: SpecView) -> list[Finding]:
    return _package_file_missing(
        view,
        "dcgm_exporter_package",
        "dcgm-exporter-package-missing",
        "NVIDIA's datacenter-gpu-manager-exporter package",
    )


def _package_file_missing(view: SpecView, field: str, code: str, what: str) -> list[Finding]:
    value = getattr(view.spec.monitoring, field)
    if value is None:
        return []
    path = view.control_path(value)
    if path.is_file():
        return []
    state = "does not exist" if not path.exists() else "is not a file"
    return [
        error(
            code,
            f"monitoring.{field} {value!r} {state}",
            ("monitoring", field),
            hint=f"it resolves to {shown(path)} (a relative path is relative to the spec's directory); "
            f"put {what} there, or fix the path",
        )
    ]


@_check(("monitoring",), ("nvidia", "dcgm"))
def monitoring_parts_unused(view: SpecView) -> list[Finding]:
    """Settings that do nothing with the rest of the section as it is."""
    monitoring = view.spec.monitoring
    findings = []
    if monitoring.grafana_package is not None and not monitoring.grafana:
        findings.append(
            warning(
                "monitoring-setting-unused",
                "monitoring.grafana_package is set but grafana is false",
                ("monitoring", "grafana_package"),
                hint="set grafana: true to install it, or remove grafana_package",
            )
        )
    if monitoring.dcgm_exporter_package is not None and not view.spec.nvidia.dcgm:
        findings.append(
            warning(
                "monitoring-setting-unused",
                "monitoring.dcgm_exporter_package is set but nvidia.dcgm is false: the GPU nodes use nvidia-smi",
                ("monitoring", "dcgm_exporter_package"),
                hint="set nvidia.dcgm: true to run dcgm-exporter, or remove dcgm_exporter_package",
            )
        )
    if monitoring.alert_receiver is not None and not monitoring.alertmanager:
        findings.append(
            warning(
                "monitoring-setting-unused",
                "monitoring.alert_receiver is set but alertmanager is false: no alert is sent",
                ("monitoring", "alert_receiver"),
                hint="set alertmanager: true",
            )
        )
    for name in ("grafana", "alertmanager"):
        if getattr(monitoring, name) and not monitoring.prometheus:
            findings.append(
                error(
                    "monitoring-needs-prometheus",
                    f"monitoring.{name} needs monitoring.prometheus (it reads Prometheus on the monitoring node)",
                    ("monitoring", name),
                    hint=f"set prometheus: true, or {name}: false",
                )
            )
    return findings


# A URL is at most 2048 characters (the field's own limit); the file may end in a line break.
WEBHOOK_URL_FILE_MAX_BYTES = 2049


@_check(MONITORING)
def webhook_url_file(view: SpecView) -> list[Finding]:
    """The webhook URL's file: there, 0600, one http(s) URL. Its content is never shown: it may carry a token."""
    receiver = view.spec.monitoring.alert_receiver
    if receiver is None or receiver.webhook_url_file is None:
        return []
    loc: Loc = ("monitoring", "alert_receiver", "webhook_url_file")
    data, findings = read_secret_file(
        view,
        receiver.webhook_url_file,
        loc,
        code="webhook-url-file",
        max_bytes=WEBHOOK_URL_FILE_MAX_BYTES,
        too_large=f"holds more than {WEBHOOK_URL_FILE_MAX_BYTES} bytes, more than one URL",
        what="the file holding the webhook URL",
        wanted="a file holding only the webhook URL, on one line",
        holds="the Alertmanager webhook URL, which often carries a token",
    )
    if data is not None and not _is_webhook_url(data):
        findings.append(
            error(
                "webhook-url-file-grammar",
                "monitoring.alert_receiver.webhook_url_file does not hold one http(s) URL (not shown: it may carry "
                "a token)",
                loc,
                hint="write the URL alone on the file's first line, as https://host[:port]/path (no spaces or "
                "quotes; the host a DNS name or IPv4 address)",
            )
        )
    return findings


def _is_webhook_url(data: bytes) -> bool:
    text = data[:-1] if data.endswith(b"\n") else data
    try:
        url = text.decode("ascii")
    except UnicodeDecodeError:
        return False
    return full_match(WEBHOOK_URL_PATTERN, url) and host_problem(url) is None
