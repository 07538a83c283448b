"""Render at scale: load + check + render of a big spec, its peak memory, and CLI start-up.

Prints one line per figure. Targets, on the 2-core CI host:
- issue 2, 1000 compute nodes (the default): load + check + render <= 1 s; `gpuclus --help` <= 0.3 s.
- issue 11, 10,000 compute nodes: load + check + render <= 3 s, and a whole
  `gpuclus render` <= 300 MB peak memory (max RSS). Check it with `--nodes 10000`.

    .venv/bin/python benchmarks/render_scale.py [--nodes 1000] [--repeat 5]
    .venv/bin/python benchmarks/render_scale.py --nodes 10000 --repeat 3

Any --nodes from 2 to 99,999 works (65500 for the size issue 11 started from):
the compute nodes take addresses 10.1.0.1 onwards, 250 to a /24 and 64,000
to a /16, in as many spec entries as that needs.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC_TEMPLATE = """\
apiVersion: gpuclus/v1
cluster: {{name: scale, admin_user: ubuntu}}
nodes:
  - {{name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}}
{compute_entries}\
slurm:
  partitions:
    - {{name: gpu, nodes: "gpu[0001-{half:04d}]", default: true}}
    - {{name: long, nodes: "gpu[{half_plus_one:04d}-{last:04d}]", max_time: "7-00:00:00"}}
nfs: {{exports: [/shared, /home]}}
network: {{fabric: infiniband, link_gbps: 400, nics_per_node: 8}}
"""

COMPUTE_ENTRY = """\
  - name: "gpu[{first:04d}-{last:04d}]"
    address: "{address}"
    roles: [compute]
    gpus: {{count: 8, model: H100}}
"""

PER_SUBNET = 250  # hosts .1 to .250 of each /24
PER_NETWORK = 256 * PER_SUBNET  # the /24s of one 10.N.0.0/16
MAX_NODES = 99_999  # the head node makes 100,000, hostlist's ceiling


def compute_entries(compute_nodes: int) -> str:
    """Node entries for gpu0001..: one per /16 of whole /24s, and one for a last partial /24.

    Up to 64,000 nodes in whole /24s that is a single entry,
    `gpu[0001-N]` at `10.1.[0-B].[1-250]`.
    """
    entries = []
    first = 1
    for network, start in enumerate(range(0, compute_nodes, PER_NETWORK), start=1):
        count = min(PER_NETWORK, compute_nodes - start)
        subnets, rest = divmod(count, PER_SUBNET)
        if subnets:
            address = f"10.{network}.[0-{subnets - 1}].[1-{PER_SUBNET}]"
            entries.append(COMPUTE_ENTRY.format(first=first, last=first + subnets * PER_SUBNET - 1, address=address))
            first += subnets * PER_SUBNET
        if rest:
            address = f"10.{network}.{subnets}.[1-{rest}]"
            entries.append(COMPUTE_ENTRY.format(first=first, last=first + rest - 1, address=address))
            first += rest
    return "".join(entries)


def write_spec(directory: Path, compute_nodes: int) -> Path:
    if not 2 <= compute_nodes <= MAX_NODES:
        raise SystemExit(f"--nodes must be from 2 to {MAX_NODES}")
    path = directory / "cluster.yaml"
    path.write_text(
        SPEC_TEMPLATE.format(
            compute_entries=compute_entries(compute_nodes),
            last=compute_nodes,
            half=compute_nodes // 2,
            half_plus_one=compute_nodes // 2 + 1,
        )
    )
    return path


def time_in_process(spec_path: Path, out_dir: Path, repeat: int) -> tuple[float, float, int]:
    """Median seconds of load + check + render (files written), excluding imports."""
    from gpuclus.render import render_files, write_rendered
    from gpuclus.spec.load import load_spec

    samples: list[float] = []
    render_only: list[float] = []
    files = 0
    for _ in range(repeat):
        shutil.rmtree(out_dir, ignore_errors=True)
        start = time.perf_counter()
        loaded = load_spec(spec_path)
        assert loaded.ok and loaded.spec is not None and loaded.topology is not None, loaded.findings
        rendered_at = time.perf_counter()
        rendered = render_files(
            loaded.spec,
            loaded.topology,
            source_name=spec_path.name,
            state_dir="../.gpuclus",
            known_hosts=str(spec_path.resolve().parent / ".gpuclus" / "ssh" / "known_hosts"),
        )
        write_rendered(out_dir, rendered, force=False)
        end = time.perf_counter()
        samples.append(end - start)
        render_only.append(end - rendered_at)
        files = len(rendered)
    return statistics.median(samples), statistics.median(render_only), files


def time_command(args: list[str], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


# Runs a command as its only child and prints the child's peak resident memory
# in bytes: the figure belongs to that one command, not to this benchmark.
PEAK_MEMORY = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(peak if sys.platform == "darwin" else peak * 1024)
"""


def peak_memory(args: list[str], repeat: int) -> int:
    """Largest max RSS, in bytes, of ``repeat`` fresh runs of a command."""
    peaks = []
    for _ in range(repeat):
        result = subprocess.run([sys.executable, "-c", PEAK_MEMORY, *args], check=True, capture_output=True, text=True)
        peaks.append(int(result.stdout))
    return max(peaks)


# Targets by compute-node count: (load + check + render ms, peak memory MB, issue).
TARGETS: dict[int, tuple[int, int | None, int]] = {1000: (1000, None, 2), 10_000: (3000, 300, 11)}


def target_note(nodes: int, index: int, unit: str) -> str:
    target = TARGETS.get(nodes)
    if target is None or target[index] is None:
        known = ", ".join(
            f"<= {figures[index]} {unit} at {count:,} nodes"
            for count, figures in TARGETS.items()
            if figures[index] is not None
        )
        return f" (targets: {known})"
    return f" (target <= {target[index]} {unit}, issue {target[2]})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help=f"compute nodes, 2 to {MAX_NODES}")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is printed")
    options = parser.parse_args()

    gpuclus = str(Path(sys.executable).with_name("gpuclus"))
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        spec_path = write_spec(directory, options.nodes)
        total, render_part, files = time_in_process(spec_path, directory / "rendered", options.repeat)
        render_command = [gpuclus, "render", str(spec_path), "-o", str(directory / "cli"), "--force"]
        cli_render = time_command(render_command, options.repeat)
        cli_peak = peak_memory(render_command, options.repeat)
        cli_help = time_command([gpuclus, "--help"], options.repeat)

    nodes = options.nodes
    machine = f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}"
    print(f"machine: {machine}, {len(os.sched_getaffinity(0))} cores")
    print(f"spec: {nodes + 1} nodes, {nodes * 8} GPUs, {files} files rendered")
    print(
        f"load+check+render (in process, median of {options.repeat}): {total * 1000:.0f} ms"
        + target_note(nodes, 0, "ms")
    )
    print(f"  of which render+write: {render_part * 1000:.0f} ms")
    print(f"gpuclus render (whole command, median of {options.repeat}): {cli_render * 1000:.0f} ms")
    print(
        f"gpuclus render peak memory (max RSS, largest of {options.repeat}): {cli_peak / 1e6:.0f} MB"
        + target_note(nodes, 1, "MB")
    )
    print(f"gpuclus --help start-up (median of {options.repeat}): {cli_help * 1000:.0f} ms (target <= 300 ms)")


if __name__ == "__main__":
    main()
