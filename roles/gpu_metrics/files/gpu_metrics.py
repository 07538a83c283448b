#!/usr/bin/python3
# managed by gpuclus — edits are overwritten (role gpu_metrics)
"""GPU metrics from nvidia-smi, in DCGM's names, for the node exporter's textfile collector.

The fallback for GPU nodes without dcgm-exporter (docs/monitoring.md, "GPU
metrics"). One run: ask nvidia-smi once for every GPU, read the last XID
error per GPU from the kernel log and the Slurm job holding each GPU from the
job mapping directory (written by gpuclus' Slurm prolog), then replace
<textfile dir>/gpu.prom atomically. A systemd timer runs it every few seconds.

Standard library only (Python 3.9+); the functions are importable so the
parsing and the output can be tested without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# The nvidia-smi fields asked for, in this order (nvidia-smi --help-query-gpu).
QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "power.draw",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.volatile.total",
)

# (nvidia-smi field, DCGM metric, Prometheus type, help). The units are
# nvidia-smi's with nounits, which are DCGM's: %, MiB, degrees C, W, counts.
METRICS = (
    ("utilization.gpu", "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (%), from nvidia-smi."),
    ("utilization.memory", "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory copy utilization (%), from nvidia-smi."),
    ("memory.used", "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (MiB), from nvidia-smi."),
    ("memory.free", "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (MiB), from nvidia-smi."),
    ("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (degrees C), from nvidia-smi."),
    ("power.draw", "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W), from nvidia-smi."),
    (
        "ecc.errors.corrected.volatile.total",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Single-bit (corrected) volatile ECC errors, from nvidia-smi.",
    ),
    (
        "ecc.errors.uncorrected.volatile.total",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Double-bit (uncorrected) volatile ECC errors, from nvidia-smi.",
    ),
)
XID_METRIC = ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Code of the last XID error in this boot's kernel log (0: none).")
INFO_METRIC = "gpuclus_gpu_metrics_info"
OUTPUT_NAME = "gpu.prom"

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." Older
# drivers leave out "PCI:"; the domain may have 4 or 8 digits.
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{1,2}):(?P<device>[0-9A-Fa-f]{1,2})"
    r"(?:\.[0-7])?\): (?P<code>\d+)"
)
BUS_ID = re.compile(
    r"^(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{1,2}):(?P<device>[0-9A-Fa-f]{1,2})(?:\.[0-7])?$"
)

PciAddress = tuple[int, int, int]


class CollectError(Exception):
    """nvidia-smi could not be run or gave nothing usable; the message says why."""


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    bus_id: str
    values: dict[str, float] = field(default_factory=dict)

    @property
    def pci(self) -> PciAddress | None:
        return pci_address(self.bus_id)


def pci_address(text: str) -> PciAddress | None:
    """(domain, bus, device) of a PCI address such as 00000000:3B:00.0 or 0000:3b:00."""
    found = BUS_ID.match(text.strip())
    if found is None:
        return None
    return int(found["domain"], 16), int(found["bus"], 16), int(found["device"], 16)


def number(text: str) -> float | None:
    """A reading, or None for what nvidia-smi prints instead of one ("[N/A]", "[Not Supported]", ...)."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_query(text: str) -> list[Gpu]:
    """The GPUs in `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits` output.

    A reading nvidia-smi cannot give is left out, so its series is not
    written. A line that does not have every field, or whose index is not a
    number, is not a GPU and is skipped.
    """
    gpus = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) != len(QUERY_FIELDS):
            continue
        fields = {name: row[position].strip() for position, name in enumerate(QUERY_FIELDS)}
        if not fields["index"].isdigit():
            continue
        values = {name: value for name in QUERY_FIELDS[4:] if (value := number(fields[name])) is not None}
        gpus.append(Gpu(int(fields["index"]), fields["uuid"], fields["name"], fields["pci.bus_id"], values))
    return sorted(gpus, key=lambda gpu: gpu.index)


def last_xids(kernel_log: str) -> dict[PciAddress, int]:
    """The last XID code per PCI address, from kernel messages in time order."""
    last: dict[PciAddress, int] = {}
    for line in kernel_log.splitlines():
        found = XID_LINE.search(line)
        if found is not None:
            address = (int(found["domain"], 16), int(found["bus"], 16), int(found["device"], 16))
            last[address] = int(found["code"])
    return last


def read_jobs(job_dir: str) -> dict[int, list[str]]:
    """GPU index -> the Slurm job ids in <job_dir>/<index> (one per line), as dcgm-exporter reads them."""
    jobs: dict[int, list[str]] = {}
    try:
        paths = list(Path(job_dir).iterdir())
    except OSError:
        return jobs
    for path in paths:
        if not path.name.isdigit():
            continue  # the prolog's temporary files, anything else
        try:
            held = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
        except OSError:
            continue
        if any(held):
            jobs[int(path.name)] = [job for job in held if job]
    return jobs


def escape(value: str) -> str:
    """A label value in Prometheus' text format."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{name}="{escape(value)}"' for name, value in pairs) + "}"


def sample(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def render(
    gpus: list[Gpu],
    *,
    hostname: str,
    jobs: dict[int, list[str]],
    xids: dict[PciAddress, int] | None,
    error: str | None = None,
) -> str:
    """The textfile: every reading in DCGM's names, then gpuclus_gpu_metrics_info.

    Each GPU's series carry gpu, UUID, device, modelName and Hostname, and one
    series per job in its mapping file with hpc_job. ``xids`` None means the
    kernel log could not be read: no XID series then (0 would claim "none").
    ``error`` set means nvidia-smi failed: no GPU series, and the info series
    says why.
    """
    lines: list[str] = []

    def series_labels(gpu: Gpu) -> list[list[tuple[str, str]]]:
        base = [
            ("gpu", str(gpu.index)),
            ("UUID", gpu.uuid),
            ("device", f"nvidia{gpu.index}"),
            ("modelName", gpu.name),
            ("Hostname", hostname),
        ]
        held = jobs.get(gpu.index)
        return [[*base, ("hpc_job", job)] for job in held] if held else [base]

    def family(metric: str, kind: str, help_text: str, readings: list[tuple[Gpu, float]]) -> None:
        if not readings:
            return
        lines.append(f"# HELP {metric} {help_text}")
        lines.append(f"# TYPE {metric} {kind}")
        for gpu, value in readings:
            lines.extend(f"{metric}{labels(pairs)} {sample(value)}" for pairs in series_labels(gpu))

    if error is None:
        for source, metric, kind, help_text in METRICS:
            family(metric, kind, help_text, [(gpu, gpu.values[source]) for gpu in gpus if source in gpu.values])
        if xids is not None:
            metric, kind, help_text = XID_METRIC
            readings = [(gpu, float(xids.get(pci, 0))) for gpu in gpus if (pci := gpu.pci) is not None]
            family(metric, kind, help_text, readings)

    info = [("source", "nvidia-smi")] + ([("reason", error)] if error is not None else [])
    lines.append(f"# HELP {INFO_METRIC} Where this node's GPU metrics come from (role gpu_metrics).")
    lines.append(f"# TYPE {INFO_METRIC} gauge")
    lines.append(f"{INFO_METRIC}{labels(info)} 1")
    return "\n".join(lines) + "\n"


def write_atomically(directory: str, name: str, text: str) -> None:
    """Replace directory/name with text: a temporary file in the same directory, fsync, rename.

    The node exporter reads *.prom files only, so it never sees the
    temporary one, and a reader sees either the old file or the new one.
    """
    handle, name_of_temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    temporary = Path(name_of_temporary)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        temporary.chmod(0o644)
        temporary.replace(Path(directory) / name)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    # The rename itself, on disk.
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def query_gpus(nvidia_smi: str, timeout: float) -> list[Gpu]:
    argv = [nvidia_smi, "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise CollectError(f"{nvidia_smi} not found (is the NVIDIA driver installed?)") from None
    except (OSError, subprocess.TimeoutExpired) as problem:
        raise CollectError(f"{nvidia_smi} did not run: {problem}") from None
    if done.returncode != 0:
        said = " ".join((done.stdout + " " + done.stderr).split())[:200]
        raise CollectError(f"{nvidia_smi} failed (exit {done.returncode}): {said}")
    gpus = parse_query(done.stdout)
    if not gpus:
        raise CollectError(f"{nvidia_smi} listed no GPU")
    return gpus


def read_kernel_log(path: str | None, timeout: float) -> str | None:
    """This boot's kernel messages (journalctl -k), or the file given; None when they cannot be read."""
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    argv = ["journalctl", "-k", "-o", "cat", "--no-pager", "--quiet"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write nvidia-smi's GPU readings, in DCGM's names, to gpu.prom.")
    parser.add_argument("--textfile-dir", default="/var/lib/prometheus/node-exporter", help="where gpu.prom goes")
    parser.add_argument("--job-dir", default="/run/gpuclus/gpu-jobs", help="the Slurm job mapping directory")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to run")
    parser.add_argument("--kernel-log", default=None, help="read kernel messages from this file, not journalctl -k")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds each command may take")
    options = parser.parse_args(argv)

    error = None
    gpus: list[Gpu] = []
    try:
        gpus = query_gpus(options.nvidia_smi, options.timeout)
    except CollectError as problem:
        error = str(problem)
    kernel_log = read_kernel_log(options.kernel_log, options.timeout) if error is None else None
    xids = last_xids(kernel_log) if kernel_log is not None else None
    text = render(gpus, hostname=socket.gethostname(), jobs=read_jobs(options.job_dir), xids=xids, error=error)
    write_atomically(options.textfile_dir, OUTPUT_NAME, text)
    if error is not None:
        print(f"gpu-metrics: {error}", file=sys.stderr)
        return 1
    if xids is None:
        print("gpu-metrics: could not read the kernel log; DCGM_FI_DEV_XID_ERRORS left out", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
