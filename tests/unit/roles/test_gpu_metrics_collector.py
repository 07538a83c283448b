"""The nvidia-smi collector of role gpu_metrics (roles/gpu_metrics/files/gpu_metrics.py).

No GPU exists on the CI host, so nvidia-smi's output is a sample written by
hand in its documented CSV format (tests/unit/data/gpu_metrics/README.md says
which file stands in for what), and so is the kernel log with the XID lines.
Everything else is real: the job mapping files are files in tmp_path, the
collector runs as a program (with a stand-in nvidia-smi program printing the
sample), gpu.prom is written to disk, and Debian's promtool parses it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from prometheus_tools import require

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "gpu_metrics" / "files" / "gpu_metrics.py"
DATA = Path(__file__).resolve().parents[1] / "data" / "gpu_metrics"
H100 = (DATA / "query-2x-h100.csv").read_text()
NOT_AVAILABLE = (DATA / "query-not-available.csv").read_text()
KERNEL_LOG = (DATA / "kernel.log").read_text()
UUID0 = "GPU-5c1f8d2e-0b7a-4f3e-9d41-2a6c3e8f7b10"
UUID1 = "GPU-a93e0c47-6d25-48b1-b3f9-7e02d5c4a1e6"


@pytest.fixture(scope="module")
def collector() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_metrics", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_metrics"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(metric, labels) -> value of every sample line of a textfile."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', rest)
        found[(name, frozenset(pairs))] = float(value)
    return found


def gpu_labels(
    index: int, uuid: str, *, model: str = "NVIDIA H100 80GB HBM3", **more: str
) -> frozenset[tuple[str, str]]:
    base = {"gpu": str(index), "UUID": uuid, "device": f"nvidia{index}", "modelName": model, "Hostname": "gpu01"}
    return frozenset({**base, **more}.items())


def contract_metrics() -> list[str]:
    """Every DCGM metric docs/monitoring.md's GPU section names."""
    section = (REPO / "docs" / "monitoring.md").read_text().split("## GPU metrics", 1)[1].split("\n## ", 1)[0]
    return sorted(set(re.findall(r"`(DCGM_FI_[A-Z0-9_]+)`", section)))


# --- nvidia-smi's CSV -------------------------------------------------------------------------------------


def test_two_gpus_are_read_with_every_reading(collector: ModuleType) -> None:
    gpus = collector.parse_query(H100)
    assert [(gpu.index, gpu.uuid, gpu.name, gpu.bus_id) for gpu in gpus] == [
        (0, UUID0, "NVIDIA H100 80GB HBM3", "00000000:18:00.0"),
        (1, UUID1, "NVIDIA H100 80GB HBM3", "00000000:1A:00.0"),
    ]
    assert gpus[0].values == {
        "utilization.gpu": 97,
        "utilization.memory": 41,
        "memory.used": 61234,
        "memory.free": 19845,
        "temperature.gpu": 67,
        "power.draw": 612.48,
        "ecc.errors.uncorrected.volatile.total": 0,
        "ecc.errors.corrected.volatile.total": 0,
    }
    assert gpus[1].pci == (0, 0x1A, 0)


def test_readings_nvidia_smi_cannot_give_are_left_out(collector: ModuleType) -> None:
    gpus = collector.parse_query(NOT_AVAILABLE)
    assert [gpu.index for gpu in gpus] == [0, 1]
    assert set(gpus[0].values) == {
        "utilization.gpu",
        "utilization.memory",
        "memory.used",
        "memory.free",
        "temperature.gpu",
    }
    assert set(gpus[1].values) == {"memory.used", "memory.free", "temperature.gpu", "power.draw"}


def test_lines_that_are_not_gpus_are_skipped(collector: ModuleType) -> None:
    text = "No devices were found\n\n" + H100.splitlines()[1] + "\n0, GPU-x, too, few\n"
    assert [gpu.index for gpu in collector.parse_query(text)] == [1]


@pytest.mark.parametrize("text", ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "nan", "inf", ""])
def test_a_non_reading_is_none(collector: ModuleType, text: str) -> None:
    assert collector.number(text) is None


# --- the kernel log -----------------------------------------------------------------------------------------


def test_the_last_xid_per_pci_address_counts(collector: ModuleType) -> None:
    assert collector.last_xids(KERNEL_LOG) == {(0, 0x1A, 0): 48, (0, 0x3B, 0): 79}


def test_xid_lines_of_older_drivers_and_with_timestamps_are_read(collector: ModuleType) -> None:
    log = (
        "[ 1234.567890] NVRM: Xid (0000:65:00): 31, Ch 00000010, engmask 00000101\n"
        "NVRM: Xid (PCI:0001:b1:00.0): 94, x\n"
    )
    assert collector.last_xids(log) == {(0, 0x65, 0): 31, (1, 0xB1, 0): 94}


# --- the job mapping --------------------------------------------------------------------------------------


def test_job_mapping_files_name_the_jobs_per_gpu(collector: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "1").write_text("4242\n")
    (tmp_path / "3").write_text("17\n18\n\n")  # a shared GPU: one line per job, as dcgm-exporter reads them
    (tmp_path / "0").write_text("")  # emptied: no job
    (tmp_path / ".2.99.tmp").write_text("99\n")  # the prolog's temporary file
    (tmp_path / "notes").write_text("5\n")
    assert collector.read_jobs(str(tmp_path)) == {1: ["4242"], 3: ["17", "18"]}
    assert collector.read_jobs(str(tmp_path / "missing")) == {}


# --- the textfile -------------------------------------------------------------------------------------------


def test_every_reading_is_written_in_dcgms_names_with_the_job_label(collector: ModuleType) -> None:
    text = collector.render(
        collector.parse_query(H100), hostname="gpu01", jobs={1: ["4242"]}, xids=collector.last_xids(KERNEL_LOG)
    )
    found = series(text)
    job = gpu_labels(1, UUID1, hpc_job="4242")
    assert found[("DCGM_FI_DEV_GPU_UTIL", gpu_labels(0, UUID0))] == 97
    assert found[("DCGM_FI_DEV_MEM_COPY_UTIL", gpu_labels(0, UUID0))] == 41
    assert found[("DCGM_FI_DEV_FB_USED", gpu_labels(0, UUID0))] == 61234
    assert found[("DCGM_FI_DEV_FB_FREE", job)] == 81075
    assert found[("DCGM_FI_DEV_GPU_TEMP", job)] == 31
    assert found[("DCGM_FI_DEV_POWER_USAGE", gpu_labels(0, UUID0))] == 612.48
    assert found[("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", job)] == 3
    assert found[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", job)] == 1
    assert found[("DCGM_FI_DEV_XID_ERRORS", job)] == 48
    assert found[("DCGM_FI_DEV_XID_ERRORS", gpu_labels(0, UUID0))] == 0
    assert found[("gpuclus_gpu_metrics_info", frozenset({("source", "nvidia-smi")}))] == 1
    assert len(found) == 9 * 2 + 1
    # Prometheus' text format: each family's HELP and TYPE, then its samples, together.
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in text
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP gauge" in text


def test_the_fallback_writes_every_metric_the_contract_names(collector: ModuleType) -> None:
    text = collector.render(collector.parse_query(H100), hostname="gpu01", jobs={}, xids={})
    written = {name for name, _ in series(text)}
    assert contract_metrics(), "docs/monitoring.md names no DCGM metric"
    assert set(contract_metrics()) <= written


def test_missing_readings_write_no_series(collector: ModuleType) -> None:
    text = collector.render(collector.parse_query(NOT_AVAILABLE), hostname="gpu01", jobs={}, xids={})
    found = series(text)
    names = {name for name, _ in found}
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in names
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" not in names
    assert "# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in text  # no empty family either
    model = "NVIDIA GeForce RTX 4090"
    uuid0, uuid1 = "GPU-0f4b2d6a-91c8-4e37-8a5d-c2e71b09f3a4", "GPU-7d3a9e15-2c4f-4b68-b0e1-95f8a6c2d7b3"
    assert [labels for name, labels in found if name == "DCGM_FI_DEV_POWER_USAGE"] == [
        gpu_labels(1, uuid1, model=model)
    ]
    assert [labels for name, labels in found if name == "DCGM_FI_DEV_GPU_UTIL"] == [gpu_labels(0, uuid0, model=model)]


def test_an_unreadable_kernel_log_leaves_the_xid_series_out(collector: ModuleType) -> None:
    text = collector.render(collector.parse_query(H100), hostname="gpu01", jobs={}, xids=None)
    assert "DCGM_FI_DEV_XID_ERRORS" not in text
    assert "DCGM_FI_DEV_GPU_UTIL{" in text


def test_a_failed_nvidia_smi_writes_only_the_reason(collector: ModuleType) -> None:
    text = collector.render([], hostname="gpu01", jobs={0: ["1"]}, xids=None, error='nvidia-smi failed: "NVML" \\ x')
    assert series(text) == {
        (
            "gpuclus_gpu_metrics_info",
            frozenset({("source", "nvidia-smi"), ("reason", 'nvidia-smi failed: \\"NVML\\" \\\\ x')}),
        ): 1
    }


def test_label_values_are_escaped(collector: ModuleType) -> None:
    gpu = collector.Gpu(0, "GPU-1", 'Odd "GPU" \\ name\nnext', "00000000:01:00.0", {"temperature.gpu": 40.0})
    text = collector.render([gpu], hostname="gpu01", jobs={}, xids={})
    assert 'modelName="Odd \\"GPU\\" \\\\ name\\nnext"' in text
    assert text.count("\n") == len(text.splitlines())  # the newline in the value did not break a line


def test_promtool_parses_the_textfile(collector: ModuleType, tmp_path: Path) -> None:
    promtool = require("promtool")
    text = collector.render(
        collector.parse_query(H100),
        hostname="gpu01",
        jobs={1: ["4242"], 0: ["7", "8"]},
        xids=collector.last_xids(KERNEL_LOG),
    )
    done = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    said = done.stdout + done.stderr
    # 3: lint findings only. DCGM's names are what they are (camelCase labels, counters without _total).
    assert done.returncode in (0, 3), said
    assert "pars" not in said.lower(), said
    problems = {line.split(" ", 1)[1] for line in said.splitlines() if line.strip()}
    assert problems <= {
        "label names should be written in 'snake_case' not 'camelCase'",
        'counter metrics should have "_total" suffix',
    }, said


def test_the_file_is_replaced_atomically(collector: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "gpu.prom"
    target.write_text("old\n")
    collector.write_atomically(str(tmp_path), "gpu.prom", "new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu.prom"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(collector: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "gpu.prom"
    target.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        collector.write_atomically(str(tmp_path), "gpu.prom", "bad \udcff\n")
    assert target.read_text() == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu.prom"]


# --- the program, as the timer runs it ----------------------------------------------------------------------


def stand_in_nvidia_smi(tmp_path: Path, body: str) -> Path:
    """A program in nvidia-smi's place (no GPU here): it prints the sample, or fails as told."""
    program = tmp_path / "nvidia-smi"
    program.write_text("#!/bin/sh\n" + body)
    program.chmod(0o755)
    return program


def run(tmp_path: Path, nvidia_smi: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "textfile"
    out.mkdir(exist_ok=True)
    argv = [sys.executable, str(SCRIPT), "--textfile-dir", str(out), "--job-dir", str(tmp_path / "jobs")]
    argv += ["--nvidia-smi", str(nvidia_smi), *extra]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60, env={**os.environ})


def test_a_run_writes_gpu_prom_from_nvidia_smi_the_kernel_log_and_the_jobs(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "0").write_text("31337\n")
    nvidia_smi = stand_in_nvidia_smi(tmp_path, f"cat '{DATA / 'query-2x-h100.csv'}'\n")
    done = run(tmp_path, nvidia_smi, "--kernel-log", str(DATA / "kernel.log"))
    assert (done.returncode, done.stderr) == (0, "")
    text = (tmp_path / "textfile" / "gpu.prom").read_text()
    found = series(text)
    xid = {labels: value for (name, labels), value in found.items() if name == "DCGM_FI_DEV_XID_ERRORS"}
    assert sorted(xid.values()) == [0, 48]
    assert any(("hpc_job", "31337") in labels for labels in xid)
    assert found[("gpuclus_gpu_metrics_info", frozenset({("source", "nvidia-smi")}))] == 1


def test_a_failing_nvidia_smi_is_recorded_and_the_run_fails(tmp_path: Path) -> None:
    nvidia_smi = stand_in_nvidia_smi(
        tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
    )
    done = run(tmp_path, nvidia_smi)
    assert done.returncode == 1
    assert "could not communicate" in done.stderr
    (info,) = series((tmp_path / "textfile" / "gpu.prom").read_text()).items()
    (name, labels), value = info
    reason = dict(labels)["reason"]
    assert (name, dict(labels)["source"], value) == ("gpuclus_gpu_metrics_info", "nvidia-smi", 1)
    assert reason.startswith(f"{nvidia_smi} failed (exit 9): NVIDIA-SMI has failed")


def test_no_nvidia_smi_is_recorded_and_the_run_fails(tmp_path: Path) -> None:
    done = run(tmp_path, tmp_path / "absent-nvidia-smi")
    assert done.returncode == 1
    text = (tmp_path / "textfile" / "gpu.prom").read_text()
    assert "not found (is the NVIDIA driver installed?)" in text
    assert "DCGM_FI" not in text
