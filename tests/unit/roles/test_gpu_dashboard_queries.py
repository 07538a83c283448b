"""Every query of the GPUs dashboard, and every GPU alert rule, returns data on DCGM-shaped series.

The sandbox's GPUs are fake, so no GPU exporter runs there and the
integration test cannot give these panels data. Here a throwaway Prometheus
2.42 (Debian's binary) holds synthetic series in dcgm-exporter's own names and
labels (docs/monitoring.md): 2 nodes x 2 GPUs, sampled every 15 s for 30
minutes, three GPUs held by Slurm jobs (hpc_job), one of them idle and shared
by two jobs (one series per job, as both exporters write it), and the faults
the alert rules look for (a hot GPU, an XID, ECC errors). They are
written as OpenMetrics and turned into TSDB blocks with
`promtool tsdb create-blocks-from openmetrics`.

Backfilling caveats: promtool cuts blocks on 2-hour boundaries and a block
must not overlap Prometheus' head. The Prometheus here scrapes nothing, so its
head stays empty, and the samples end a minute before the blocks are made; all
queries are asked at a fixed time inside the data (instant queries at its last
sample, range queries over its last 20 minutes), never at "now".
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import prometheus_tools
import promql_queries
import throwaway_prometheus
from promql_queries import Query

STEP = 15  # seconds between samples, as Prometheus scrapes
SAMPLES = 121  # 30 minutes, both ends included
RANGE_STEP = 60

# (node, gpu index) -> the Slurm jobs holding the GPU (none: free)
GPUS: dict[tuple[str, int], tuple[str, ...]] = {
    ("gpu01", 0): ("101",),
    ("gpu01", 1): (),
    ("gpu02", 0): ("102",),
    ("gpu02", 1): ("102", "103"),
}
MODEL = "NVIDIA H100 80GB HBM3"
MEMORY_MIB = 81559


def value(metric: str, node: str, gpu: int, step: int) -> float:
    """A plausible value of `metric` for one GPU at sample `step` (0 .. SAMPLES-1)."""
    key = (node, gpu)
    busy = {("gpu01", 0): 92.0, ("gpu01", 1): 0.0, ("gpu02", 0): 78.0, ("gpu02", 1): 3.0}[key]
    wobble = (step % 4) - 1.5
    if metric == "DCGM_FI_DEV_GPU_UTIL":
        return max(0.0, busy + wobble) if busy else 0.0
    if metric == "DCGM_FI_DEV_MEM_COPY_UTIL":
        return round(busy * 0.4, 1)
    if metric == "DCGM_FI_DEV_FB_USED":
        return {("gpu01", 0): 61234.0, ("gpu01", 1): 0.0, ("gpu02", 0): 40210.0, ("gpu02", 1): 1024.0}[key]
    if metric == "DCGM_FI_DEV_FB_FREE":
        return MEMORY_MIB - value("DCGM_FI_DEV_FB_USED", node, gpu, step)
    if metric == "DCGM_FI_DEV_GPU_TEMP":  # gpu01/0 runs hot: GpuTemperatureHigh
        return 91.0 if key == ("gpu01", 0) else 38.0 + busy / 4
    if metric == "DCGM_FI_DEV_POWER_USAGE":
        return round(70.0 + busy * 6.2 + wobble, 2)
    if metric == "DCGM_FI_DEV_XID_ERRORS":  # gpu02/1 reported XID 79 halfway: GpuXidError
        return 79.0 if key == ("gpu02", 1) and step >= SAMPLES // 2 else 0.0
    if metric == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL":  # gpu01/1 corrects 2 errors a sample: 480 an hour
        return 2.0 * step if key == ("gpu01", 1) else 0.0
    if metric == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":  # gpu02/0 has an uncorrectable error: GpuEccErrors
        return 1.0 if key == ("gpu02", 0) and step >= 10 else 0.0
    raise KeyError(metric)


GPU_METRICS = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
]


def label_sets(node: str, gpu: int) -> list[str]:
    """dcgm-exporter's labels (gpu01, scraped as job dcgm) or the nvidia-smi fallback's (gpu02, job node):
    one set per job holding the GPU, with hpc_job, or one without."""
    pairs = {
        "gpu": str(gpu),
        "UUID": f"GPU-{list(GPUS).index((node, gpu)):08x}-5a1e-4c0d-9e57-{int(node[-2:]):012x}",
        "device": f"nvidia{gpu}",
        "modelName": MODEL,
        "Hostname": node,
        "instance": node,
        "job": "dcgm" if node == "gpu01" else "node",
    }
    sets = [{**pairs, "hpc_job": job} for job in GPUS[(node, gpu)]] or [pairs]
    return [",".join(f'{name}="{text}"' for name, text in labels.items()) for labels in sets]


def openmetrics(end: int) -> str:
    """The synthetic series as OpenMetrics text: one family at a time, each series' samples in time order."""
    times = [end - STEP * (SAMPLES - 1 - step) for step in range(SAMPLES)]
    lines = []
    for metric in GPU_METRICS:
        lines.append(f"# TYPE {metric} gauge")
        for node, gpu in GPUS:
            for labels in label_sets(node, gpu):
                for step, at in enumerate(times):
                    lines.append(f"{metric}{{{labels}}} {value(metric, node, gpu, step):g} {at}")
    lines.append("# TYPE gpuclus_gpu_metrics_info gauge")
    for node, source, job in (("gpu01", "dcgm", "dcgm"), ("gpu02", "nvidia-smi", "node")):
        for at in times:
            lines.append(f'gpuclus_gpu_metrics_info{{source="{source}",instance="{node}",job="{job}"}} 1 {at}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@dataclass
class Synthetic:
    prometheus: throwaway_prometheus.Prometheus
    end: float  # the last sample's time: instant queries are asked here

    def instant(self, expr: str) -> list[dict[str, object]]:
        answer = self.prometheus.query(expr, at=self.end)
        assert answer.get("status") == "success", f"{expr}: {answer}"
        result = answer["data"]["result"]
        return result if answer["data"]["resultType"] in ("vector", "matrix") else [result]

    def over_range(self, expr: str) -> list[dict[str, object]]:
        answer = self.prometheus.query_range(expr, self.end - 20 * 60, self.end, RANGE_STEP)
        assert answer.get("status") == "success", f"{expr}: {answer}"
        result: list[dict[str, object]] = answer["data"]["result"]
        return result


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthetic]:
    promtool = prometheus_tools.require("promtool")
    binary = prometheus_tools.require("prometheus")
    work = tmp_path_factory.mktemp("gpu-series")
    end = int(time.time()) - 60  # older than anything the head could hold
    source = work / "gpus.om"
    source.write_text(openmetrics(end))
    storage = work / "data"
    made = subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(source), str(storage)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    with throwaway_prometheus.running(storage, binary) as prometheus:
        yield Synthetic(prometheus, float(end))


def gpu_dashboard_queries() -> list[Query]:
    path = next(path for path in promql_queries.dashboard_files() if path.stem == "gpuclus-gpus")
    return promql_queries.dashboard_queries(path)


def gpu_rule_queries() -> list[Query]:
    return [
        query
        for path in promql_queries.rule_files()
        for query in promql_queries.rule_queries(path)
        if query.kind == "gpu"
    ]


def test_the_synthetic_series_are_what_dcgm_exporter_writes(synthetic: Synthetic) -> None:
    names = {row["metric"]["__name__"] for row in synthetic.instant('{__name__=~"DCGM_.*|gpuclus_gpu_.*"}')}  # type: ignore[index]
    contract = promql_queries.contract_metrics()
    assert names == {name for name in contract if name.startswith(("DCGM_", "gpuclus_gpu_"))}
    assert len(synthetic.instant("DCGM_FI_DEV_GPU_UTIL")) == 5, "4 GPUs, one of them in two jobs"


def test_every_gpu_dashboard_query_returns_data(synthetic: Synthetic) -> None:
    queries = gpu_dashboard_queries()
    assert len(queries) >= 20
    empty = []
    for query in queries:
        expr = promql_queries.expand(query.expr)
        if not synthetic.instant(expr):
            empty.append(f"{query.where} (instant): {expr}")
        if not query.instant and not synthetic.over_range(expr):
            empty.append(f"{query.where} (range): {expr}")
    assert not empty, "\n".join(empty)


def test_every_gpu_alert_rule_fires_on_the_synthetic_faults(synthetic: Synthetic) -> None:
    """Picked up by glob (promql_queries.RULE_GLOBS): every rule reading GPU series, in any rules file."""
    queries = gpu_rule_queries()
    if not queries:
        pytest.fail("no GPU alert rule found under roles/prometheus (promql_queries.RULE_GLOBS)")
    silent = [f"{query.where}: {query.expr}" for query in queries if not synthetic.instant(query.expr)]
    assert not silent, "\n".join(silent)


def test_the_gpu_alerts_name_the_faulty_gpus(synthetic: Synthetic) -> None:
    fired: dict[str, set[tuple[str, str]]] = {}
    for query in gpu_rule_queries():
        for row in synthetic.instant(query.expr):
            metric = row["metric"]
            assert isinstance(metric, dict)
            fired.setdefault(query.title, set()).add((metric["instance"], metric["gpu"]))
    assert fired.get("GpuTemperatureHigh") == {("gpu01", "0")}
    assert fired.get("GpuXidError") == {("gpu02", "1")}
    assert fired.get("GpuEccErrors") == {("gpu02", "0"), ("gpu01", "1")}


def numbers(rows: list[dict[str, object]], label: str) -> dict[str, float]:
    found = {}
    for row in rows:
        metric, sample = row["metric"], row["value"]
        assert isinstance(metric, dict) and isinstance(sample, list)
        found[str(metric.get(label, ""))] = float(sample[1])
    return found


def panel(title: str, ref: str = "A") -> str:
    query = next(query for query in gpu_dashboard_queries() if query.title == title and query.ref == ref)
    return promql_queries.expand(query.expr)


def test_the_panels_show_the_right_figures(synthetic: Synthetic) -> None:
    # Each GPU once, also the one two jobs share.
    assert numbers(synthetic.instant(panel("GPUs reporting")), "") == {"": 4.0}
    assert numbers(synthetic.instant(panel("GPUs in Slurm jobs")), "") == {"": 3.0}
    assert numbers(synthetic.instant(panel("GPUs with an XID error")), "") == {"": 1.0}
    assert numbers(synthetic.instant(panel("Hottest GPU")), "") == {"": 91.0}
    power = sum(value("DCGM_FI_DEV_POWER_USAGE", node, gpu, SAMPLES - 1) for node, gpu in GPUS)
    assert numbers(synthetic.instant(panel("Power draw")), "") == {"": pytest.approx(power)}
    for title in ("GPU utilization", "GPU memory used (share)", "Temperature", "XID errors"):
        assert len(synthetic.instant(panel(title))) == 4, f"{title}: one line per GPU"
    per_job = numbers(synthetic.instant(panel("GPU memory used by job")), "hpc_job")
    assert per_job == {"101": 61234.0, "102": 41234.0, "103": 1024.0}
    idle = synthetic.instant(panel("Idle GPUs in jobs"))
    seen = sorted((row["metric"]["instance"], row["metric"]["gpu"], row["metric"]["hpc_job"]) for row in idle)  # type: ignore[index]
    assert seen == [("gpu02", "1", "102"), ("gpu02", "1", "103")]
    sources = numbers(synthetic.instant(panel("GPU metric sources")), "source")
    assert sources == {"dcgm": 1.0, "nvidia-smi": 1.0}
    used = numbers(synthetic.instant(panel("GPU memory used (share)")), "gpu")
    assert all(0.0 <= share <= 1.0 for share in used.values())
