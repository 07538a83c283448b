"""gpuclus' Grafana dashboards: well-formed, on gpuclus' datasource, every query valid PromQL on the metric contract.

The dashboards are roles/grafana/files/dashboards/*.json (provisioned by the
grafana role). Every panel target and template variable query is expanded
(tests/promql_queries.expand: Grafana's variables on "All") and sent to a
throwaway Prometheus 2.42 (Debian's, the version the cluster runs): a parse
error fails here, before any Grafana sees it. Data is the integration test's
business (node and Slurm panels on the sandbox) and
test_gpu_dashboard_queries' (GPU panels on synthetic DCGM series).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import prometheus_tools
import promql_queries
import throwaway_prometheus
from promql_queries import DATASOURCE_UID, Query

BOARDS = {path.stem: path for path in promql_queries.dashboard_files()}
EXPECTED = {"gpuclus-cluster", "gpuclus-slurm", "gpuclus-gpus"}

# Node exporter 1.5 (Debian 12's) series the dashboards read, beyond the ones
# docs/monitoring.md names: each must exist in that version, by this name.
NODE_EXPORTER_METRICS = {
    "node_boot_time_seconds",
    "node_cpu_seconds_total",
    "node_disk_io_time_seconds_total",
    "node_disk_read_bytes_total",
    "node_disk_written_bytes_total",
    "node_filesystem_avail_bytes",
    "node_filesystem_size_bytes",
    "node_load1",
    "node_memory_MemAvailable_bytes",
    "node_memory_MemTotal_bytes",
    "node_network_receive_bytes_total",
    "node_network_receive_drop_total",
    "node_network_receive_errs_total",
    "node_network_transmit_bytes_total",
    "node_network_transmit_drop_total",
    "node_network_transmit_errs_total",
    "node_nfs_requests_total",
    "node_uname_info",
}
# What Prometheus itself records for every target.
PROMETHEUS_METRICS = {"up"}


def board(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(BOARDS[name].read_text(encoding="utf-8"))
    return loaded


def dashboard_queries() -> list[Query]:
    return [query for path in BOARDS.values() for query in promql_queries.dashboard_queries(path)]


def test_the_three_dashboards_ship_with_the_role() -> None:
    assert set(BOARDS) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_dashboard_is_provisionable_json_with_a_fixed_uid(name: str) -> None:
    dashboard = board(name)
    assert dashboard["uid"] == name, "the uid is the file's name (the grafana role's verify step looks for it)"
    assert len(dashboard["uid"]) <= 40
    assert dashboard["title"].startswith("gpuclus / ")
    assert "gpuclus" in dashboard["tags"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["editable"] is False, "provisioned read-only"
    assert "id" not in dashboard or dashboard["id"] is None, "an id would clash with Grafana's own"
    assert BOARDS[name].read_text(encoding="utf-8").isascii()


def test_uids_and_titles_are_unique() -> None:
    dashboards = [board(name) for name in BOARDS]
    assert len({d["uid"] for d in dashboards}) == len(dashboards)
    assert len({d["title"] for d in dashboards}) == len(dashboards)


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(promql_queries.panels(dashboard))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_panels_have_places_ids_and_the_gpuclus_datasource(name: str) -> None:
    panels = all_panels(board(name))
    assert panels
    ids = [panel["id"] for panel in panels]
    assert len(set(ids)) == len(ids)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        where = f"{name}: {panel.get('title')}"
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid), where
        assert all(isinstance(grid[key], int) and grid[key] >= 0 for key in "hwxy"), where
        assert grid["w"] >= 1 and grid["h"] >= 1 and grid["x"] + grid["w"] <= 24, where
        taken = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{where} overlaps another panel"
        cells |= taken
        assert panel.get("title"), where
        if panel["type"] == "row":
            continue
        assert panel.get("description"), f"{where} says what it shows"
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, where
        assert panel["targets"], where
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), where
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, where
            assert target["expr"].strip(), where


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_template_variables_ask_the_gpuclus_datasource(name: str) -> None:
    variables = board(name)["templating"]["list"]
    assert variables, "each dashboard can be narrowed down"
    for variable in variables:
        assert variable["type"] == "query"
        assert variable["datasource"]["uid"] == DATASOURCE_UID
        assert variable["query"]["query"].startswith("label_values(")
        if variable.get("includeAll"):
            assert variable["allValue"] == ".*", "expand() and the queries assume .* for All"
    names = {variable["name"] for variable in variables}
    used = set()
    for query in promql_queries.dashboard_queries(BOARDS[name]):
        used |= set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", query.expr))
    assert used - {"__rate_interval", "__interval", "__range"} <= names, "a query uses an undefined variable"
    assert names <= used, "a variable no query uses"


def test_every_rate_uses_grafanas_rate_interval() -> None:
    for query in dashboard_queries():
        for function in re.finditer(r"\b(rate|irate|increase|delta|idelta|deriv)\s*\(", query.expr):
            window = re.match(r"[^\[]*\[([^\]]*)\]", query.expr[function.end() :])
            assert window is not None and window.group(1) == "$__rate_interval", query.where


def test_every_metric_is_in_the_contract_or_a_known_exporter_name() -> None:
    allowed = promql_queries.contract_metrics() | NODE_EXPORTER_METRICS | PROMETHEUS_METRICS
    unknown = {(query.where, name) for query in dashboard_queries() for name in query.metrics if name not in allowed}
    assert not unknown, sorted(unknown)


def test_the_node_exporter_allowlist_holds_only_names_in_use() -> None:
    used = {name for query in dashboard_queries() for name in query.metrics}
    assert used >= NODE_EXPORTER_METRICS


def test_the_contract_lists_the_slurm_and_gpu_names() -> None:
    names = promql_queries.contract_metrics()
    assert {"slurm_up", "slurm_node_state", "slurm_scheduler_jobs_total", "DCGM_FI_DEV_GPU_UTIL"} <= names
    assert {"DCGM_FI_DEV_FB_FREE", "gpuclus_gpu_metrics_info", "node_systemd_unit_state"} <= names


def test_each_dashboard_reads_its_own_kind_of_series() -> None:
    kinds: dict[str, set[str]] = {}
    for query in dashboard_queries():
        kinds.setdefault(Path(query.file).stem, set()).add(query.kind)
    assert kinds == {"gpuclus-cluster": {"node"}, "gpuclus-slurm": {"slurm", "node"}, "gpuclus-gpus": {"gpu"}}


def test_queries_that_may_be_empty_say_why() -> None:
    empty = {query.title for query in dashboard_queries() if query.may_be_empty}
    assert {"NFS client operations", "Drain and down reasons", "Running jobs per user", "Idle GPUs in jobs"} <= empty
    assert not {"Node exporters up", "CPU busy", "Memory used", "slurmctld", "Jobs by partition and state"} & empty


# ---------------------------------------------------------------- the library itself


@pytest.mark.parametrize(
    ("expr", "expanded"),
    [
        ('rate(x_total{instance=~"$instance"}[$__rate_interval])', 'rate(x_total{instance=~".*"}[1m])'),
        ('x{instance="$instance", mode="idle"}', 'x{instance=~".*", mode="idle"}'),
        ('x{node=~"${node:regex}"}', 'x{node=~".*"}'),
        ('x{node=~"[[node]]"}', 'x{node=~".*"}'),
        ('x{hpc_job!~"$job"}', 'x{hpc_job!="__gpuclus_no_such_value__"}'),
        ("increase(x[$__range]) / $__range_s", "increase(x[1h]) / 3600"),
        ("avg_over_time(x[${__interval}])", "avg_over_time(x[15s])"),
    ],
)
def test_expand_gives_prometheus_what_grafana_would_send_on_all(expr: str, expanded: str) -> None:
    assert promql_queries.expand(expr) == expanded


def test_expand_takes_given_values_and_refuses_what_it_cannot_place() -> None:
    assert promql_queries.expand("topk($n, x)", {"n": "3"}) == "topk(3, x)"
    assert promql_queries.expand("x[$__rate_interval]", rate_interval="2m") == "x[2m]"
    with pytest.raises(ValueError, match="left"):
        promql_queries.expand("topk($n, x)")


@pytest.mark.parametrize(
    ("text", "expr"),
    [
        ("label_values(node_uname_info, instance)", "count by (instance) (node_uname_info)"),
        ('label_values(x{a="b", c=~"d"}, hpc_job)', 'count by (hpc_job) (x{a="b", c=~"d"})'),
        ("label_values(partition)", 'count by (partition) ({partition!=""})'),
        ("query_result(topk(3, up))", "topk(3, up)"),
        ("metrics(slurm_.*)", 'count by (__name__) ({__name__=~"slurm_.*"})'),
    ],
)
def test_variable_queries_become_promql(text: str, expr: str) -> None:
    assert promql_queries.variable_expr(text) == expr


def test_metric_names_skip_functions_keywords_labels_and_durations() -> None:
    expr = (
        'sum without (mode) (rate(a_total{mode="idle"}[5m] offset 1h)) / on(instance) group_left(name) b'
        ' or vector(0) > bool 3 unless count by (x) (c{__name__!="z"}) and {__name__="d"}'
    )
    assert promql_queries.metric_names(expr) == {"a_total", "b", "c", "d"}


def test_classify_by_metric_names() -> None:
    assert promql_queries.classify({"DCGM_FI_DEV_GPU_UTIL", "slurm_up"}) == "gpu"
    assert promql_queries.classify({"slurm_up", "up"}) == "slurm"
    assert promql_queries.classify({"node_load1"}) == "node"
    assert promql_queries.classify(set(), "slurm") == "slurm"


def test_all_queries_holds_dashboards_variables_and_rules_with_their_origin() -> None:
    queries = promql_queries.all_queries()
    sources = {query.source for query in queries}
    assert {"dashboard", "variable"} <= sources
    if promql_queries.rule_files():
        assert "rule" in sources
        rule = next(query for query in queries if query.source == "rule")
        assert rule.ref in ("alert", "record") and rule.title and rule.instant
    panel = next(query for query in queries if query.title == "GPU utilization by job")
    assert panel.where == "roles/grafana/files/dashboards/gpuclus-gpus.json: panel 'GPU utilization by job' (A)"
    assert panel.kind == "gpu" and not panel.instant and panel.metrics == {"DCGM_FI_DEV_GPU_UTIL"}


# ---------------------------------------------------------------- every query parses


@pytest.fixture(scope="module")
def empty_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[throwaway_prometheus.Prometheus]:
    binary = prometheus_tools.require("prometheus")
    with throwaway_prometheus.running(tmp_path_factory.mktemp("prometheus") / "data", binary) as prometheus:
        yield prometheus


def test_every_dashboard_and_rule_query_parses_in_prometheus(empty_prometheus: throwaway_prometheus.Prometheus) -> None:
    queries = promql_queries.all_queries()
    assert len(queries) > 50
    refused = []
    for query in queries:
        answer = empty_prometheus.query(promql_queries.expand(query.expr))
        if answer.get("status") != "success":
            refused.append(f"{query.where}: {answer.get('errorType')}: {answer.get('error')}")
    assert not refused, "\n".join(refused)


def test_the_parse_check_does_catch_errors(empty_prometheus: throwaway_prometheus.Prometheus) -> None:
    answer = empty_prometheus.query(promql_queries.expand('sum by (instance (up{instance=~"$instance"})'))
    assert answer["status"] == "error" and answer["errorType"] == "bad_data"
