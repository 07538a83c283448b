"""Monitoring: where Prometheus and Grafana run, the package files named, and settings that do nothing."""

from __future__ import annotations

from gpuclus.spec.checks.control_files import shown
from gpuclus.spec.checks.view import MONITORING, NODES, RegisteredCheck, SpecView, node_loc, registrar
from gpuclus.spec.models import Role
from gpuclus.yamldoc.findings import Finding, error, info, warning

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
