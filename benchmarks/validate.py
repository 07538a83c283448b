"""validate timings on a deployed sandbox: each level, several runs, wall clock and the run's own figure.

Prints one line per figure. Target (issue 6): `--level quick` on the 3-node
sandbox <= 60 s. Needs root. Brings up and deploys its own sandbox ("bench")
unless --spec points at an already deployed one (then it is left running).

    sudo .venv/bin/python benchmarks/validate.py [--runs 3] [--spec demo/sandbox.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def gpuclus(*args: str, allow_failure: bool = False) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "gpuclus", *args, "--json"], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0 and not allow_failure:
        raise SystemExit(f"gpuclus {' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    payload: dict[str, object] = json.loads(result.stdout)
    return elapsed, payload


def measure(spec: str, runs: int) -> None:
    for level in ("quick", "standard"):
        walls, own = [], []
        for _ in range(runs):
            wall, report = gpuclus("validate", spec, "--level", level)
            walls.append(wall)
            own.append(float(report["duration_s"]))  # type: ignore[arg-type]
            counts = report["counts"]
        target = " (target <= 60 s)" if level == "quick" else ""
        print(
            f"validate --level {level}: median {statistics.median(walls):.1f} s wall, max {max(walls):.1f} s "
            f"({statistics.median(own):.1f} s in checks; {runs} runs; {counts}){target}"
        )
    load = os.getloadavg()[0]
    print(f"load average during the runs: {load:.1f} on {os.cpu_count()} CPUs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--spec", help="a deployed sandbox's spec (default: bring up and deploy one)")
    options = parser.parse_args()
    if options.spec:
        measure(options.spec, options.runs)
        return
    with tempfile.TemporaryDirectory() as scratch:
        spec = str(Path(scratch) / "sandbox.yaml")
        try:
            gpuclus("sandbox", "up", "--name", "bench", "--nodes", "3", "--gpus-per-node", "2", "--spec", spec)
            seconds, _ = gpuclus("deploy", spec)
            print(f"(deploy before measuring: {seconds:.0f} s)")
            measure(spec, options.runs)
        finally:
            gpuclus("sandbox", "down", "--spec", spec, allow_failure=True)


if __name__ == "__main__":
    main()
