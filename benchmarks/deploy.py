"""Deploy timings on the sandbox: fresh deploy and no-change re-deploy, per phase, for N nodes.

Prints one line per figure. Targets (issue 4, 2-core CI host): fresh deploy of
3 nodes <= 120 s, the slurm phase <= 45 s, no-change re-deploy changed=0 in
<= 20 s, and (with --compare 12) 12-node / 3-node time <= 1.6. Needs root.

    sudo .venv/bin/python benchmarks/deploy.py [--nodes 3] [--compare 12]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def gpuclus(*args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "gpuclus", *args, "--json"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(
            f"gpuclus {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


def load() -> str:
    """The 1-minute load average: on a shared 2-core host the figures mean little without it."""
    return f"{os.getloadavg()[0]:.1f}"


def measure(nodes: int) -> tuple[float, dict[str, Any], float, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as scratch:
        spec = str(Path(scratch) / "sandbox.yaml")
        gpuclus("sandbox", "up", "--name", f"bench{nodes}", "--nodes", str(nodes), "--spec", spec)
        try:
            before = load()
            started = time.perf_counter()
            fresh = gpuclus("deploy", spec)
            fresh_seconds = time.perf_counter() - started
            fresh["load"] = f"{before} -> {load()}"
            started = time.perf_counter()
            again = gpuclus("deploy", spec)
            again_seconds = time.perf_counter() - started
            again["load"] = f"{fresh['load'].split(' -> ')[1]} -> {load()}"
        finally:
            subprocess.run(
                [sys.executable, "-m", "gpuclus", "sandbox", "down", "--spec", spec], capture_output=True, check=False
            )
    return fresh_seconds, fresh, again_seconds, again


def report(
    nodes: int, fresh_seconds: float, fresh: dict[str, Any], again_seconds: float, again: dict[str, Any]
) -> None:
    phases = ", ".join(f"{phase['name']} {phase['seconds']:.0f} s" for phase in fresh["phases"])
    print(f"{nodes} nodes: fresh deploy {fresh_seconds:.0f} s ({phases}; load {fresh['load']}) (target <= 120 s for 3)")
    phases = ", ".join(f"{phase['name']} {phase['seconds']:.1f} s" for phase in again["phases"])
    print(
        f"{nodes} nodes: no-change deploy {again_seconds:.1f} s, changed={again['changed']}"
        f" ({phases}; load {again['load']}) (target <= 20 s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--compare", type=int, default=0, help="also measure this many nodes and print the ratio")
    options = parser.parse_args()
    base = measure(options.nodes)
    report(options.nodes, *base)
    if options.compare:
        other = measure(options.compare)
        report(options.compare, *other)
        print(f"fresh deploy {options.compare} / {options.nodes} nodes: {other[0] / base[0]:.2f} (target <= 1.6)")


if __name__ == "__main__":
    main()
