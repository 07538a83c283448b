"""Render at scale: load + check + render of a 1000-node spec, and CLI start-up.

Prints one line per figure. Targets (issue 2, on the 2-core CI host):
load + check + render <= 1 s; `gpuclus --help` <= 0.3 s.

    .venv/bin/python benchmarks/render_scale.py [--nodes 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
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
  - name: "gpu[0001-{last:04d}]"
    address: "10.1.[0-{blocks_minus_one}].[1-250]"
    roles: [compute]
    gpus: {{count: 8, model: H100}}
slurm:
  partitions:
    - {{name: gpu, nodes: "gpu[0001-{half:04d}]", default: true}}
    - {{name: long, nodes: "gpu[{half_plus_one:04d}-{last:04d}]", max_time: "7-00:00:00"}}
nfs: {{exports: [/shared, /home]}}
network: {{fabric: infiniband, link_gbps: 400, nics_per_node: 8}}
"""


def write_spec(directory: Path, compute_nodes: int) -> Path:
    if compute_nodes % 250:
        raise SystemExit("--nodes must be a multiple of 250 (addresses come in blocks of 250)")
    path = directory / "cluster.yaml"
    path.write_text(
        SPEC_TEMPLATE.format(
            last=compute_nodes,
            blocks_minus_one=compute_nodes // 250 - 1,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="compute nodes (multiple of 250)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is printed")
    options = parser.parse_args()

    gpuclus = str(Path(sys.executable).with_name("gpuclus"))
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        spec_path = write_spec(directory, options.nodes)
        total, render_part, files = time_in_process(spec_path, directory / "rendered", options.repeat)
        cli_render = time_command(
            [gpuclus, "render", str(spec_path), "-o", str(directory / "cli"), "--force"], options.repeat
        )
        cli_help = time_command([gpuclus, "--help"], options.repeat)

    machine = f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}"
    print(f"machine: {machine}, {len(__import__('os').sched_getaffinity(0))} cores")
    print(f"spec: {options.nodes + 1} nodes, {options.nodes * 8} GPUs, {files} files rendered")
    print(f"load+check+render (in process, median of {options.repeat}): {total * 1000:.0f} ms (target <= 1000 ms)")
    print(f"  of which render+write: {render_part * 1000:.0f} ms")
    print(f"gpuclus render (whole command, median of {options.repeat}): {cli_render * 1000:.0f} ms")
    print(f"gpuclus --help start-up (median of {options.repeat}): {cli_help * 1000:.0f} ms (target <= 300 ms)")


if __name__ == "__main__":
    main()
