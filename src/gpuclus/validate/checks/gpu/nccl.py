"""gpu.nccl: all-reduce bus bandwidth within each node (all its GPUs) and between pairs of nodes.

nccl-tests' all_reduce_perf runs where a node has it (between two nodes only
when both have it at the same path, built with MPI); elsewhere gpuclus' own
nccl_probe measures the same with torch.distributed. Within a node the figure
must reach a fixed floor; between nodes, bands derived from the spec's network.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from gpuclus.slurm import commands as slurm
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import probes, thresholds
from gpuclus.validate.checks.gpu.hints import join_hints
from gpuclus.validate.checks.gpu.probe_output import CUDA_HINT, parse_probe_output, probe_error
from gpuclus.validate.checks.gpu.scope import SHORT_JOB_S, Scope, all_gpus, on_gpu_nodes
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status, worst

_MEMO_NCCL_TOOLS = "gpu.nccl-tools"
# Slurm's --time for one all-reduce job.
_NCCL_TIME_S = 240


@dataclass(frozen=True)
class NcclTests:
    """The nccl-tests all_reduce_perf on a node, if any, and whether it was built with MPI."""

    path: str | None
    mpi: bool = False


_NCCL_TESTS_PATHS = ("/usr/local/bin/all_reduce_perf", "/opt/nccl-tests/build/all_reduce_perf")
_DETECT_NCCL_TESTS = (
    "T=$(command -v all_reduce_perf 2>/dev/null || true); for p in "
    + " ".join(_NCCL_TESTS_PATHS)
    + '; do [ -z "$T" ] && [ -x "$p" ] && T="$p"; done; echo "NCCL_TESTS=$T"; '
    'if [ -n "$T" ] && ldd "$T" 2>/dev/null | grep -q libmpi; then echo NCCL_TESTS_MPI=1; fi; true'
)


def parse_nccl_tests_detection(text: str) -> NcclTests:
    path = None
    for line in text.splitlines():
        if line.startswith("NCCL_TESTS="):
            path = line.split("=", 1)[1].strip() or None
    return NcclTests(path, path is not None and "NCCL_TESTS_MPI=1" in text)


def _nccl_tools(ctx: Context, nodes: list[Node]) -> dict[str, NcclTests]:
    known: dict[str, NcclTests] = ctx.memo.setdefault(_MEMO_NCCL_TOOLS, {})
    missing = [node for node in nodes if node.name not in known]
    if missing:
        answers = ctx.srun_each(_DETECT_NCCL_TESTS, missing, time_limit_s=SHORT_JOB_S)
        for node in missing:
            known[node.name] = parse_nccl_tests_detection(answers[node.name].stdout)
    return {node.name: known[node.name] for node in nodes}


@dataclass(frozen=True)
class NcclTestsRun:
    """What all_reduce_perf printed: ranks, its average bus bandwidth, wrong elements."""

    ranks: int
    avg_busbw: float | None
    wrong: int
    runs: int  # "Avg bus bandwidth" lines: more than one means separate single-rank runs
    sizes: tuple[int, ...]
    error: str | None


def parse_nccl_tests(text: str) -> NcclTestsRun:
    ranks = 0
    wrong = 0
    averages: list[float] = []
    sizes: list[int] = []
    error: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if re.match(r"#\s*Rank\s+\d+", line):
            ranks += 1
        elif match := re.match(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)", line):
            averages.append(float(match.group(1)))
        elif match := re.match(r"#\s*Out of bounds values\s*:\s*(\d+)", line):
            wrong += int(match.group(1)) if "OK" not in line else 0
        elif line and not line.startswith("#"):
            fields = line.split()
            if len(fields) >= 10 and fields[0].isdigit() and fields[1].isdigit():
                sizes.append(int(fields[0]))
                # From the right: out-of-place time algbw busbw #wrong, in-place time algbw busbw #wrong.
                wrong += _wrong_count(fields[-5]) + _wrong_count(fields[-1])
            elif error is None and re.search(r"fail|error", line, re.IGNORECASE):
                error = line
    average = sum(averages) / len(averages) if averages else None
    return NcclTestsRun(ranks, average, wrong, len(averages), tuple(sizes), error)


def _wrong_count(field: str) -> int:
    """nccl-tests' #wrong column: a count, N/A without checking; older versions print a float error."""
    return int(field) if field.isdigit() else 0


@dataclass(frozen=True)
class _Part:
    """One all-reduce measurement (within a node, or a node pair) as judged."""

    label: str
    status: Status
    message: str
    value: float | None
    expected: str | None
    wrong: bool = False


def judge_all_reduce(result: CommandResult, ranks: int, bands: thresholds.Bands, label: str) -> _Part:
    """Judge one all-reduce job's output, from nccl-tests or from gpuclus' torch probe."""
    if "Avg bus bandwidth" in result.stdout or "# nThread" in result.stdout:
        run = parse_nccl_tests(result.stdout)
        if run.runs > 1 or (run.ranks and run.ranks != ranks):
            message = f"nccl-tests ran {run.runs} separate run(s) of {run.ranks} rank(s), not one of {ranks}"
            return _Part(label, Status.FAIL, message + " (built without MPI?)", None, None)
        if run.wrong:
            return _Part(label, Status.FAIL, f"{run.wrong} wrong element(s) in the all-reduce", None, None, True)
        if run.avg_busbw is None:
            said = run.error or slurm.job_failure(result)
            return _Part(label, Status.FAIL, f"nccl-tests gave no result: {said}", None, None)
        return _graded(label, run.avg_busbw, bands, f"nccl-tests, {ranks} ranks")
    payloads = parse_probe_output(result.stdout)
    problem = probe_error(payloads, result)
    if problem is not None:
        return _Part(label, problem.status, problem.message, None, None)
    payload = next(payload for payload in payloads if "error" not in payload)
    if int(payload.get("wrong", 0)):
        message = f"{payload['wrong']} wrong element(s) in the all-reduce over {payload.get('ranks')} ranks"
        return _Part(label, Status.FAIL, message, None, None, True)
    if payload.get("ranks") != ranks:
        return _Part(label, Status.FAIL, f"the probe ran {payload.get('ranks')} ranks, not {ranks}", None, None)
    return _graded(label, float(payload["busbw_gbs"]), bands, f"torch.distributed, {ranks} ranks")


def _graded(label: str, busbw: float, bands: thresholds.Bands, how: str) -> _Part:
    status = bands.grade(busbw)
    return _Part(label, status, f"{label}: {busbw:g} GB/s busbw ({how})", round(busbw, 2), bands.expected)


def _nccl_tests_command(path: str, gpus_per_process: int) -> str:
    # One size large enough for the bus bandwidth plateau; -c 1 checks every result.
    return shlex.join([path, "-b", "256M", "-e", "256M", "-f", "2", "-g", str(gpus_per_process)]) + (" -w 5 -n 20 -c 1")


def node_pairs(nodes: list[Node]) -> list[tuple[Node, Node]]:
    """Disjoint neighbours (1-2, 3-4, ...); with an odd count the last node pairs with the first."""
    pairs = [(nodes[index], nodes[index + 1]) for index in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2 and len(nodes) > 1:
        pairs.append((nodes[-1], nodes[0]))
    return pairs


_NCCL_INTRA_HINT = (
    "within a node: `nvidia-smi topo -m` shows how the GPUs connect; NVSwitch systems need "
    "`systemctl status nvidia-fabricmanager`; on PCIe systems ACS and the IOMMU can force traffic through the CPU; "
    "`NCCL_DEBUG=INFO` names the transport"
)
_NCCL_INTER_HINT = (
    "between nodes: run with `NCCL_DEBUG=INFO` and look for NET/IB (not NET/Socket); `ibstat` or `ethtool` must show "
    "every NIC up at spec.network.link_gbps; GPUDirect RDMA needs nvidia-peermem (`lsmod | grep peermem`); RoCE "
    "needs lossless settings (PFC/ECN) and the right NCCL_IB_GID_INDEX; check network.fabric/link_gbps in the spec"
)
_NCCL_WRONG_HINT = (
    "wrong all-reduce sums: a GPU, NVLink or NIC corrupts data; `dmesg | grep -i xid`, drain the node "
    "(`scontrol update nodename=NODE state=drain reason=nccl`) and run the vendor's diagnostics"
)


@on_gpu_nodes
def nccl_all_reduce(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    real = scope.nodes
    tools = _nccl_tools(ctx, real)
    parts: dict[str, list[_Part]] = {node.name: [] for node in real}

    # Within each node: all its GPUs.
    multi = [node for node in real if node.gpu_count >= 2]
    for node in real:
        if node.gpu_count < 2:
            parts[node.name].append(
                _Part("within node", Status.SKIP, "one GPU: nothing to all-reduce within", None, None)
            )

    def intra_command(node: Node) -> str:
        path = tools[node.name].path
        if path:
            return _nccl_tests_command(path, node.gpu_count)
        return probes.inline_command("nccl_probe.py")

    def intra_options(node: Node) -> dict[str, Any]:
        tasks = 1 if tools[node.name].path else node.gpu_count
        return {"gres": all_gpus(node), "ntasks_per_node": tasks}

    if multi:
        answers = ctx.srun_each(intra_command, multi, time_limit_s=_NCCL_TIME_S, options=intra_options)
        bands = thresholds.intra_node_busbw_bands()
        for node in multi:
            parts[node.name].append(judge_all_reduce(answers[node.name], node.gpu_count, bands, "within node"))

    # Between nodes: pairs, one task per GPU.
    network = ctx.spec.network
    for first, second in node_pairs(real):
        per_node = min(first.gpu_count, second.gpu_count)
        bands = thresholds.inter_node_busbw_bands(
            network.fabric, network.link_gbps, min(network.nics_per_node, per_node)
        )
        both = (tools[first.name], tools[second.name])
        extra: tuple[str, ...] = ()
        if all(tool.path and tool.mpi for tool in both) and both[0].path == both[1].path:
            command, extra = _nccl_tests_command(str(both[0].path), 1), ("--mpi=pmix",)
        else:
            command = probes.inline_command("nccl_probe.py")
        answer = ctx.srun(
            command,
            [first, second],
            time_limit_s=_NCCL_TIME_S,
            gres=f"gpu:{per_node}",
            ntasks_per_node=per_node,
            extra=extra,
        )
        for node, other in ((first, second), (second, first)):
            part = judge_all_reduce(answer, 2 * per_node, bands, f"with {other.name}")
            parts[node.name].append(part)

    wrong = slow_inter = slow_intra = False
    for node in real:
        node_parts = parts[node.name]
        status = worst([part.status for part in node_parts])
        # The figure shown is the one that decided the status (between nodes first).
        deciding = next(part for part in reversed(node_parts) if part.status is status)
        message = "; ".join(part.message for part in node_parts)
        results.append(NodeResult(node.name, status, message, deciding.value, deciding.expected, "GB/s"))
        wrong |= any(part.wrong for part in node_parts)
        bad = [part for part in node_parts if part.status in (Status.FAIL, Status.WARN) and not part.wrong]
        slow_intra |= any(part.label == "within node" for part in bad)
        slow_inter |= any(part.label != "within node" for part in bad)
    fabric = f"{network.fabric.value} {network.link_gbps}G x {network.nics_per_node}"
    return Outcome(
        results,
        message=f"fabric {fabric}; within a node >= {thresholds.INTRA_NODE_MIN_BUSBW_GBS:g} GB/s",
        hint=join_hints(
            (wrong, _NCCL_WRONG_HINT),
            (slow_intra, _NCCL_INTRA_HINT),
            (slow_inter, _NCCL_INTER_HINT),
            (any(r.message.startswith("PyTorch cannot") for r in results), CUDA_HINT),
        ),
    )
