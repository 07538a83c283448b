"""Sandbox timings: cold image build, warm `up` of N nodes, no-op `up`, `down`.

Prints one line per figure. Target (issue 3): warm up of 3 nodes <= 30 s.
Needs root. --cold removes the cached node image first, so the first figure
includes debootstrap (about a minute); without it the image is reused.

    sudo .venv/bin/python benchmarks/sandbox.py [--nodes 3] [--cold]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def gpuclus(*args: str) -> tuple[float, dict[str, object]]:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "gpuclus", *args, "--json"], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"gpuclus {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    payload: dict[str, object] = json.loads(result.stdout)
    return elapsed, payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="remove the cached node image first")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        spec = str(Path(scratch) / "sandbox.yaml")
        base = ["--spec", spec]
        up = ["sandbox", "up", "--name", "bench", "--nodes", str(options.nodes), *base]
        if options.cold:
            gpuclus("sandbox", "down", "--purge", *base)
            seconds, report = gpuclus(*up)
            built = report["image_built"]
            print(f"cold up (image build + {options.nodes} nodes): {seconds:.1f} s (image built: {built})")
            gpuclus("sandbox", "down", *base)
        seconds, report = gpuclus(*up)
        print(f"warm up of {options.nodes} nodes (image cached): {seconds:.1f} s (target <= 30 s)")
        seconds, report = gpuclus(*up)
        print(f"second up (no-op, changed={report['changed']}): {seconds:.1f} s")
        seconds, _ = gpuclus("sandbox", "status", *base)
        print(f"status with SSH checks: {seconds:.1f} s")
        seconds, _ = gpuclus("sandbox", "down", *base)
        print(f"down: {seconds:.1f} s")


if __name__ == "__main__":
    main()
