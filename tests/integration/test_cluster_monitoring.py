"""The monitoring phase for real: Slurm metrics, alert rules, Alertmanager, the Grafana skip, every query.

On the shared sandbox cluster (conftest.deployed), whose spec turns on
Prometheus, Alertmanager and Grafana with `grafana_unavailable: skip` (the
nodes reach no Grafana repository). Everything is asked of the live
services: Prometheus' HTTP API on the monitoring node (through curl there),
the node exporters' pages, systemd. Every PromQL expression of every shipped
dashboard panel and alert rule is evaluated against that Prometheus: each must
parse, and the node and Slurm panels must return data. GPU panels cannot have
data here (the sandbox's GPUs are fake, so no GPU exporter runs);
tests/unit/test_gpu_dashboard_queries.py evaluates them on synthetic series
in the exporter's names.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import GPU1, GPU2, HEAD, REPO_ROOT, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

PROMETHEUS = "http://127.0.0.1:9090"
ALERTS = (
    "NodeDown",
    "SlurmctldDown",
    "SlurmdDown",
    "SlurmNodeUnavailable",
    "GpuXidError",
    "GpuTemperatureHigh",
    "GpuEccErrors",
    "DiskNearlyFull",
    "SharedStorageNearlyFull",
    "TargetDown",
)


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def api(cluster: Cluster, path: str, **params: str) -> Any:
    """GET Prometheus' HTTP API on the monitoring node; the `data` of a success."""
    query = " ".join(f"--data-urlencode {shlex.quote(f'{key}={value}')}" for key, value in params.items())
    result = cluster.on(HEAD, f"curl -sS -G --max-time 20 {query} {PROMETHEUS}{path}", check=False)
    try:
        answer = json.loads(result.stdout)
    except ValueError:
        pytest.fail(f"{path} {params}: not JSON: {result.stdout[-500:]} {result.stderr[-500:]}")
    assert answer.get("status") == "success", f"{path} {params}: {answer}"
    return answer["data"]


def instant(cluster: Cluster, expr: str) -> list[dict[str, Any]]:
    data = api(cluster, "/api/v1/query", query=expr)
    return data["result"] if data["resultType"] == "vector" else [data["result"]]


def wait_for(cluster: Cluster, expr: str, seconds: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + seconds
    while True:
        result = instant(cluster, expr)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(3)


def test_the_monitoring_phase_ran_and_the_second_deploy_changed_nothing_there(cluster: Cluster) -> None:
    assert "monitoring" in [phase["name"] for phase in cluster.second["phases"]]
    changed = {host: stats["changed"] for host, stats in cluster.second["hosts"].items() if stats["changed"]}
    assert changed == {}


def test_every_target_is_up(cluster: Cluster) -> None:
    targets = api(cluster, "/api/v1/targets", state="active")["activeTargets"]
    health = {(t["labels"]["job"], t["labels"]["instance"]): t["health"] for t in targets}
    for node in (HEAD, GPU1, GPU2):
        assert health.get(("node", node)) == "up", health
    assert health.get(("prometheus", HEAD)) == "up", health
    assert all(state == "up" for state in health.values()), health


def test_slurm_metrics_reach_prometheus_with_the_clusters_shape(cluster: Cluster) -> None:
    assert [float(s["value"][1]) for s in wait_for(cluster, "slurm_up == 1")] == [1.0]
    states = wait_for(cluster, "slurm_node_state == 1")
    assert sorted(s["metric"]["node"] for s in states) == [GPU1, GPU2]
    gpus = {s["metric"]["node"]: float(s["value"][1]) for s in instant(cluster, 'slurm_node_gpus{status="total"}')}
    assert gpus == {GPU1: 2.0, GPU2: 2.0}
    total = instant(cluster, 'sum(slurm_partition_gpus{status="total"})')
    assert float(total[0]["value"][1]) == 4.0
    assert instant(cluster, 'slurm_jobs{state="pending"}'), "pending jobs are written as 0 per partition"
    assert instant(cluster, "slurm_scheduler_threads"), "sdiag's figures are missing"


def test_slurmd_and_slurmctld_unit_states_come_from_the_node_exporters(cluster: Cluster) -> None:
    active = instant(cluster, 'node_systemd_unit_state{state="active", name=~"slurmd.service|slurmctld.service"} == 1')
    seen = sorted((s["metric"]["instance"], s["metric"]["name"]) for s in active)
    # gpu01 is the sandbox's backup controller: its slurmctld runs too, in standby.
    expected = [(GPU1, "slurmctld.service"), (GPU1, "slurmd.service"), (GPU2, "slurmd.service")]
    assert seen == [*expected, (HEAD, "slurmctld.service")]


def test_fake_gpus_get_no_exporter_and_say_why(cluster: Cluster) -> None:
    info = wait_for(cluster, 'gpuclus_gpu_metrics_info{source="none"}')
    assert sorted(s["metric"]["instance"] for s in info) == [GPU1, GPU2]
    assert all("fake" in s["metric"]["reason"] for s in info)
    for node in (GPU1, GPU2):
        for unit in ("nvidia-dcgm-exporter.service", "gpuclus-gpu-metrics.timer"):
            assert cluster.on(node, f"systemctl cat {unit}", check=False).exit_status != 0, f"{unit} on {node}"
    # The job mapping's Slurm hooks run on every compute node without breaking jobs.
    ran = cluster.on(HEAD, f"srun --nodes=2 --gres=gpu:1 --nodelist={GPU1},{GPU2} hostname", timeout=120)
    assert sorted(ran.stdout.split()) == [GPU1, GPU2]


def test_the_alert_rules_are_loaded_and_promtool_accepts_them(cluster: Cluster) -> None:
    groups = api(cluster, "/api/v1/rules")["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"] if rule["type"] == "alerting"}
    assert set(ALERTS) <= loaded, sorted(set(ALERTS) - loaded)
    assert all(rule.get("health") != "err" for group in groups for rule in group["rules"]), groups
    files = cluster.on(HEAD, "ls /etc/prometheus/rules/").stdout.split()
    assert files
    check = cluster.on(HEAD, "cd /etc/prometheus/rules && promtool check rules " + " ".join(files))
    assert "SUCCESS" in check.stdout + check.stderr


def test_alertmanager_runs_and_prometheus_sends_to_it(cluster: Cluster) -> None:
    cluster.on(HEAD, "curl -fsS --max-time 10 http://127.0.0.1:9093/-/ready")
    managers = api(cluster, "/api/v1/alertmanagers")["activeAlertmanagers"]
    assert [m["url"] for m in managers] and all(":9093/" in m["url"] for m in managers), managers


def test_grafana_is_skipped_plainly_on_the_sandbox(cluster: Cluster) -> None:
    record = cluster.on(HEAD, "cat /var/lib/gpuclus/grafana.skipped").stdout
    assert "grafana" in record.lower() or "repository" in record.lower(), record
    assert cluster.on(HEAD, "systemctl cat grafana-server", check=False).exit_status != 0


def test_every_dashboard_and_rule_query_runs_on_the_live_prometheus(cluster: Cluster) -> None:
    import promql_queries  # tests/promql_queries.py, on sys.path through rootdir conftest

    wait_for(cluster, "slurm_up == 1")
    wait_for(cluster, 'node_systemd_unit_state{name="slurmd.service"}')
    problems = []
    empty = []
    for query in promql_queries.all_queries(REPO_ROOT):
        expr = promql_queries.expand(query.expr)
        try:
            result = instant(cluster, expr)
        except BaseException as exc:  # pytest.fail inside api(): collect them all, then fail once
            problems.append(f"{query.where}: {expr}: {exc}")
            continue
        if query.kind in ("node", "slurm") and query.source == "dashboard" and not query.may_be_empty and not result:
            empty.append(f"{query.where}: {expr}")
    assert not problems, "\n".join(problems)
    assert not empty, "node/Slurm panels without data on the sandbox:\n" + "\n".join(empty)


def test_status_reports_a_healthy_cluster(cluster: Cluster) -> None:
    result = gpuclus("status", str(cluster.spec), "--json", timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert {node["name"]: node["reachable"] for node in report["nodes"]} == {HEAD: True, GPU1: True, GPU2: True}
    slurm = {node["name"]: node["slurm"] for node in report["nodes"] if node["slurm"]}
    assert {name: (s["gpus"]["total"], s["healthy"]) for name, s in slurm.items()} == {GPU1: (2, True), GPU2: (2, True)}
    states = {(service["node"], service["unit"]): service["state"] for service in report["services"]}
    for unit in ("slurmctld", "slurmdbd", "munge", "prometheus", "prometheus-alertmanager"):
        assert states.get((HEAD, unit)) == "active", states
    for node in (GPU1, GPU2):
        assert states.get((node, "slurmd")) == "active" and states.get((node, "munge")) == "active", states
    assert states.get((GPU1, "slurmctld")) == "active", states  # the backup controller
    # Grafana is on in the spec and was skipped by the deploy: said so, not counted as down.
    assert states.get((HEAD, "grafana-server")) == "skipped", states
    targets = report["monitoring"]["targets"]
    assert targets and all(target["health"] == "up" for target in targets), targets
    urls = report["urls"]
    assert urls["prometheus"].endswith(":9090/") and urls["alertmanager"].endswith(":9093/")
    password_file = urls["grafana_password_file"]
    password = Path(password_file).read_text(encoding="utf-8").strip()
    assert password and password not in result.stdout + result.stderr
    human = gpuclus("status", str(cluster.spec), timeout=120)
    assert human.returncode == 0 and GPU2 in human.stdout and password not in human.stdout + human.stderr
