"""Deploy timings on the sandbox: fresh deploy, no-change re-deploy and in-sync deploy, per phase, for N nodes.

Prints one line per figure. Targets (issue 4, 2-core CI host): fresh deploy of
3 nodes <= 120 s, the slurm phase <= 45 s, no-change re-deploy changed=0 in
<= 20 s, and (with --compare 12) 12-node / 3-node time <= 1.6. Needs root.

The no-change re-deploy runs every task (`deploy --full`: what every re-deploy
cost before deploy/in_sync.py, and still the idempotence measure); the in-sync
deploy after it is a plain `deploy`, which finds every node as the last full
deploy left it and runs nothing (issue 39's per-node cost).

For each deploy it also prints where the CPU went: host-wide CPU-seconds (from
/proc/stat), the node containers' share (their cgroups' cpuacct.usage, cgroup
v1 or cpu.stat on v2) and the rest (Ansible and SSH on the control machine),
per phase (phases laid back to back from the end of the run), and the
CPU-bound floor: CPU-seconds / cores, the shortest wall time the work could
take if every core were busy all the time.

    sudo .venv/bin/python benchmarks/deploy.py [--nodes 3] [--compare 12] [--fresh-only] [--artifacts DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def gpuclus(*args: str) -> dict[str, Any]:
    """Run gpuclus with --json; the payload gets "tree_cpu": the CPU-seconds of its whole process tree.

    The tree's figure (wait4's rusage: gpuclus, ansible-runner, ansible-playbook
    and its workers, ssh clients; not the detached ControlPersist masters) is
    the control machine's own cost, unlike the host-wide figure it holds
    whatever else the host runs at the same time.
    """
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "gpuclus", *args, "--json"], stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    if process.returncode != 0:
        raise SystemExit(f"gpuclus {' '.join(args)} failed ({process.returncode}):\n{out[-3000:]}{err[-3000:]}")
    payload: dict[str, Any] = json.loads(out)
    payload["tree_cpu"] = usage.ru_utime + usage.ru_stime
    return payload


def load() -> str:
    """The 1-minute load average: on a shared 2-core host the figures mean little without it."""
    return f"{os.getloadavg()[0]:.1f}"


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def host_cpu_seconds() -> float:
    """CPU-seconds spent on the whole host since boot (every state but idle and iowait)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    busy = sum(int(value) for index, value in enumerate(fields[:8]) if index not in (3, 4))
    return busy / CLOCK_TICKS


def cgroup_usage_file(name: str) -> Path | None:
    """The file holding a container's CPU time in nanoseconds (v1) or microseconds (v2 cpu.stat)."""
    found = subprocess.run(
        ["podman", "inspect", "--format", "{{.State.CgroupPath}}|{{.Id}}", name],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    path, _, container_id = found.partition("|")
    roots = [Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/cpu,cpuacct")]
    for root in roots:
        if path and (root / path.lstrip("/") / "cpuacct.usage").exists():
            return root / path.lstrip("/") / "cpuacct.usage"
        if container_id:
            for candidate in root.glob(f"**/*{container_id}*/cpuacct.usage"):
                return candidate
    unified = Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat"
    return unified if path and unified.exists() else None


def read_usage(path: Path) -> float:
    """CPU-seconds in one container's cgroup."""
    text = path.read_text()
    if path.name == "cpu.stat":
        return int(text.split("usage_usec")[1].split()[0]) / 1e6
    return int(text) / 1e9


class CpuMeter:
    """Samples host and node-container CPU-seconds once a second while a deploy runs."""

    def __init__(self, cluster: str) -> None:
        names = subprocess.run(
            ["podman", "ps", "--filter", f"label=gpuclus.sandbox={cluster}", "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        self.files = {name: cgroup_usage_file(name) for name in names}
        self.samples: list[tuple[float, float, float]] = []  # (monotonic, host CPU-s, nodes CPU-s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        nodes = sum(read_usage(path) for path in self.files.values() if path is not None)
        self.samples.append((time.monotonic(), host_cpu_seconds(), nodes))

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def __enter__(self) -> CpuMeter:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def between(self, start: float, end: float) -> tuple[float, float]:
        """(host, nodes) CPU-seconds between two monotonic times (nearest samples)."""

        def at(moment: float) -> tuple[float, float]:
            nearest = min(self.samples, key=lambda sample: abs(sample[0] - moment))
            return nearest[1], nearest[2]

        first, last = at(start), at(end)
        return last[0] - first[0], last[1] - first[1]

    def summary(self, payload: dict[str, Any]) -> dict[str, Any]:
        start, end = self.samples[0][0], self.samples[-1][0]
        host, nodes = self.between(start, end)
        missing = sorted(name for name, path in self.files.items() if path is None)
        phases = []
        # The record gives each phase's duration; lay them back to back ending
        # where the run ended (render and preflight come before the first one).
        moment = end
        for phase in reversed(payload.get("phases", [])):
            phase_host, phase_nodes = self.between(moment - phase["seconds"], moment)
            phases.append({"name": phase["name"], "host": phase_host, "nodes": phase_nodes})
            moment -= phase["seconds"]
        return {
            "host": host,
            "nodes": nodes,
            "controller": host - nodes,
            "cores": os.cpu_count() or 1,
            "missing": missing,
            "phases": list(reversed(phases)),
        }


def deploy(spec: str, cluster: str, *options: str) -> tuple[float, dict[str, Any]]:
    before = load()
    with CpuMeter(cluster) as meter:
        started = time.perf_counter()
        payload = gpuclus("deploy", spec, *options)
        seconds = time.perf_counter() - started
    payload["load"] = f"{before} -> {load()}"
    payload["cpu"] = meter.summary(payload)
    return seconds, payload


def measure(
    nodes: int,
    fresh_only: bool = False,
    keep_runs: Path | None = None,
    repeat: int = 1,
    artifacts: Path | None = None,
) -> tuple[float, dict[str, Any], float, dict[str, Any]]:
    cluster = f"bench{nodes}"
    with tempfile.TemporaryDirectory() as scratch:
        spec = str(Path(scratch) / "sandbox.yaml")
        # --artifacts: the sandbox's spec turns the containers phase on (Enroot and Pyxis from those sources).
        containers = ("--artifacts", str(artifacts.resolve())) if artifacts is not None else ()
        gpuclus("sandbox", "up", "--name", cluster, "--nodes", str(nodes), *containers, "--spec", spec)
        try:
            # Let the fresh nodes finish booting before the clock starts.
            time.sleep(5)
            fresh_seconds, fresh = deploy(spec, cluster)
            again_seconds, again = 0.0, dict[str, Any]()
            for _ in range(0 if fresh_only else repeat):
                # The fastest of the no-change runs: the least disturbed by the rest of the host.
                seconds, payload = deploy(spec, cluster, "--full")
                if not again or seconds < again_seconds:
                    again_seconds, again = seconds, payload
            if again:
                in_sync_seconds, in_sync = deploy(spec, cluster)
                if not in_sync.get("in_sync_with"):
                    raise SystemExit(f"the plain deploy after the full one ran ({in_sync['changed']} changed)")
                again["in_sync"] = {"seconds": in_sync_seconds, "payload": in_sync}
        finally:
            if keep_runs is not None:
                # The run records (Ansible's log with profile_tasks timings) for a closer look.
                shutil.copytree(Path(scratch) / ".gpuclus" / "runs", keep_runs / cluster, dirs_exist_ok=True)
            subprocess.run(
                [sys.executable, "-m", "gpuclus", "sandbox", "down", "--spec", spec], capture_output=True, check=False
            )
    return fresh_seconds, fresh, again_seconds, again


def cpu_line(nodes: int, what: str, seconds: float, payload: dict[str, Any]) -> str:
    cpu = payload["cpu"]
    floor = cpu["host"] / cpu["cores"]
    phases = ", ".join(
        f"{phase['name']} {phase['nodes']:.0f}+{phase['host'] - phase['nodes']:.0f}" for phase in cpu["phases"]
    )
    line = (
        f"{nodes} nodes: {what} CPU {cpu['host']:.0f} CPU-s (nodes {cpu['nodes']:.0f}, controller and rest"
        f" {cpu['controller']:.0f}; gpuclus' own process tree {payload['tree_cpu']:.1f} ="
        f" {payload['tree_cpu'] / nodes:.1f} per node); CPU-bound floor {floor:.0f} s on {cpu['cores']} cores"
        f" = {floor / seconds:.0%} of the {seconds:.0f} s wall; per phase nodes+controller CPU-s: {phases}"
    )
    if cpu["missing"]:
        line += f" (no cgroup found for {', '.join(cpu['missing'])})"
    return line


def report(
    nodes: int, fresh_seconds: float, fresh: dict[str, Any], again_seconds: float, again: dict[str, Any]
) -> None:
    phases = ", ".join(f"{phase['name']} {phase['seconds']:.0f} s" for phase in fresh["phases"])
    print(f"{nodes} nodes: fresh deploy {fresh_seconds:.0f} s ({phases}; load {fresh['load']}) (target <= 120 s for 3)")
    print(cpu_line(nodes, "fresh deploy", fresh_seconds, fresh))
    if not again:
        return
    phases = ", ".join(f"{phase['name']} {phase['seconds']:.1f} s" for phase in again["phases"])
    print(
        f"{nodes} nodes: no-change deploy (--full) {again_seconds:.1f} s, changed={again['changed']}"
        f" ({phases}; load {again['load']}) (target <= 20 s)"
    )
    print(cpu_line(nodes, "no-change deploy", again_seconds, again))
    in_sync = again["in_sync"]
    print(f"{nodes} nodes: in-sync deploy (nothing ran) {in_sync['seconds']:.1f} s")
    print(cpu_line(nodes, "in-sync deploy", in_sync["seconds"], in_sync["payload"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--compare", type=int, default=0, help="also measure this many nodes and print the ratio")
    parser.add_argument("--fresh-only", action="store_true", help="skip the no-change re-deploys")
    parser.add_argument("--repeat", type=int, default=1, help="no-change re-deploys; the fastest is reported")
    parser.add_argument("--keep-runs", type=Path, help="copy the run records (Ansible logs) into this directory")
    parser.add_argument(
        "--artifacts", type=Path, help="Enroot/Pyxis release sources: measure with the containers phase on"
    )
    options = parser.parse_args()
    base = measure(options.nodes, options.fresh_only, options.keep_runs, options.repeat, options.artifacts)
    report(options.nodes, *base)
    if options.compare:
        other = measure(options.compare, options.fresh_only, options.keep_runs, options.repeat, options.artifacts)
        report(options.compare, *other)
        print(f"fresh deploy {options.compare} / {options.nodes} nodes: {other[0] / base[0]:.2f} (target <= 1.6)")


if __name__ == "__main__":
    main()
