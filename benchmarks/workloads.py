"""The deep-learning layer's figures on a deployed sandbox with the pytorch phase.

Prints one line per figure: the pytorch phase's no-change re-deploy, and from
`gpuclus validate --level full --only workloads` (several runs) each check's
time, DDP samples/s and the scaling from one node to all. Needs root and a
sandbox brought up with `--wheelhouse` and deployed:

    bash scripts/wheelhouse.sh .cache/wheelhouse
    gpuclus sandbox up --wheelhouse "$PWD/.cache/wheelhouse" --spec demo/sandbox.yaml
    gpuclus deploy demo/sandbox.yaml
    sudo .venv/bin/python benchmarks/workloads.py --spec demo/sandbox.yaml [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics

# benchmarks/ is the script's own directory, so its sibling is importable: one way to run gpuclus --json.
from sandbox import gpuclus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="a deployed sandbox's spec, pytorch phase on")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()

    wall, record = gpuclus("deploy", options.spec, "--only", "pytorch")
    print(f"pytorch phase, no-change re-deploy: {wall:.1f} s wall, changed={record.get('changed')}")

    durations: dict[str, list[float]] = {}
    values: dict[str, list[float]] = {}
    messages: dict[str, str] = {}
    walls = []
    for _ in range(options.runs):
        wall, report = gpuclus("validate", options.spec, "--level", "full", "--only", "workloads")
        walls.append(wall)
        for check in report["checks"]:  # type: ignore[attr-defined]
            durations.setdefault(check["id"], []).append(float(check["duration_s"]))
            if check["value"] is not None:
                values.setdefault(check["id"], []).append(float(check["value"]))
            messages[check["id"]] = f"{check['status']}: {check['message']}"
    print(f"validate --only workloads: median {statistics.median(walls):.1f} s wall ({options.runs} runs)")
    for check, seconds in durations.items():
        figure = ""
        if check in values:
            unit = "%" if check == "workloads.scaling" else ""
            figure = f", value median {statistics.median(values[check]):.1f}{unit} (min {min(values[check]):.1f})"
        print(f"  {check}: {statistics.median(seconds):.1f} s{figure}; last: {messages[check]}")
    print(f"load average during the runs: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
