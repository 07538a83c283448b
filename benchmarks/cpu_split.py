"""Where a command's CPU goes: inside the sandbox's node containers, per cluster, or on the host.

The test suite is CPU-bound on two cores (benchmarks/README.md), so shortening it means doing less work, and this
says which work. It runs the command and every few seconds reads the host's CPU time (/proc/stat) and each
running container's cgroup CPU counter (cgroup v1 cpuacct or v2 cpu.stat, found by the container's full id). A
container's last reading is its total, so up to one interval of a container removed between readings is missed
(the output says how many readings there were); one already running when the command starts counts from there.
Containers are grouped by their name less its last dash-separated part (`itd13-gpu01` -> `itd13`: one sandbox
cluster, or one molecule scenario).

    .venv/bin/python benchmarks/cpu_split.py [--interval 20] -- bash .ci/run
    .venv/bin/python benchmarks/cpu_split.py -- pytest tests/integration/test_cluster_nodes.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def host_cpu_seconds() -> float:
    """user + nice + system + irq + softirq of every CPU since boot (idle and iowait left out)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[1:8])
    return (user + nice + system + irq + softirq) / TICKS_PER_SECOND


def container_counter(full_id: str) -> Path | None:
    """The file holding the container's CPU time (v2 cpu.stat or v1 cpuacct.usage), None where none is found."""
    for cgroup in CGROUP_ROOT.glob(f"**/*{full_id}*"):
        for counter in (cgroup / "cpu.stat", cgroup / "cpuacct.usage"):
            if counter.is_file():
                return counter
    return None


def read_counter(counter: Path) -> float | None:
    """Its CPU seconds; None once the container (and its cgroup) is gone."""
    try:
        text = counter.read_text()
    except OSError:
        return None
    if counter.name == "cpuacct.usage":
        return int(text) / 1e9
    usage = next(line for line in text.splitlines() if line.startswith("usage_usec"))
    return int(usage.split()[1]) / 1e6


def running_containers(engine: str) -> dict[str, str]:
    """Name -> full id of every running container the engine lists."""
    listed = subprocess.run(
        [engine, "ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    pairs = (line.split(maxsplit=1) for line in listed.stdout.splitlines() if line.strip())
    return {name: full_id for full_id, name in pairs}


def group_of(name: str) -> str:
    return name.rsplit("-", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=20.0, help="seconds between readings (default 20)")
    parser.add_argument("--engine", default="podman", help="the container engine to ask (default podman)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    if shutil.which(args.engine) is None:
        parser.error(f"{args.engine} is not installed")

    counters: dict[str, Path | None] = {}  # full id -> its counter, looked up once

    def read_all() -> dict[str, float]:
        seconds: dict[str, float] = {}
        for name, full_id in running_containers(args.engine).items():
            if full_id not in counters:
                counters[full_id] = container_counter(full_id)
            counter = counters[full_id]
            reading = read_counter(counter) if counter is not None else None
            if reading is not None:
                seconds[name] = reading
        return seconds

    # What the containers already running had used counts against them; the command's own start from zero.
    before = read_all()
    last_reading: dict[str, float] = {}
    readings = 0
    started, host_before = time.monotonic(), host_cpu_seconds()
    process = subprocess.Popen(command)
    while True:
        last_reading.update(read_all())
        readings += 1
        try:
            process.wait(timeout=args.interval)
            break
        except subprocess.TimeoutExpired:
            continue
    last_reading.update(read_all())
    wall, host = time.monotonic() - started, host_cpu_seconds() - host_before

    per_group: defaultdict[str, float] = defaultdict(float)
    for name, seconds in last_reading.items():
        per_group[group_of(name)] += seconds - before.get(name, 0.0)
    inside = sum(per_group.values())
    print(f"command exit {process.returncode}; wall {wall:.0f} s; {readings} readings every {args.interval:g} s")
    print(f"host CPU {host:.0f} s; inside the containers {inside:.0f} s ({100 * inside / max(host, 1e-9):.0f} %)")
    for group, seconds in sorted(per_group.items(), key=lambda item: -item[1]):
        print(f"  {group:<28} {seconds:8.0f} s")
    print(f"outside the containers (tests, gpuclus, Ansible, the engine) {host - inside:.0f} s")
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
