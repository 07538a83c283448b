"""Stage "gpu": the GPUs answer, are isolated per job, run one driver, and reach their numbers.

Every figure comes from a Slurm job on the GPU nodes: nvidia-smi for the
inventory, the probe scripts in gpuclus.validate.probes (shipped inline,
run with the node's python3 and PyTorch) or nccl-tests' all_reduce_perf for
the performance checks. The figures are judged here, against the thresholds
in gpuclus.validate.thresholds; docs/validate-gpu.md explains each rule.

Fake GPUs (the sandbox's device nodes, ``gpus.fake: true``) have no driver:
every check reports them as SKIP, never PASS.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import probes, slurm, thresholds
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.model import Level, NodeResult, Outcome, Status, skipped, worst
from gpuclus.validate.remote import TIMED_OUT

FAKE_REASON = "fake GPUs (gpus.fake: true): no driver, nothing to measure"
NO_GPU_NODES = "no GPU nodes selected"
TORCH_HINT = "install python3-torch or PyTorch with CUDA for the performance probes"
DRIVER_HINT = (
    "the NVIDIA driver is missing or not loaded: `gpuclus deploy --only nvidia` installs it "
    "(reboot after a kernel or driver upgrade); on the node `nvidia-smi` must list every GPU, "
    "`dmesg | grep -i -e nvrm -e xid` says why it does not"
)

LAUNCH_HINT = (
    "the job did not run: `sinfo -R` and the node's /var/log/slurm/slurmd.log say why; "
    "cluster.gres and launch.gres-devices show GRES problems"
)

# Printed instead of nvidia-smi's output when the node has no nvidia-smi at all.
NO_SMI = "GPUCLUS_NO_NVIDIA_SMI"
SMI_QUERY = "nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader,nounits"
_SMI_COMMAND = f"if command -v nvidia-smi >/dev/null 2>&1; then {SMI_QUERY}; else echo {NO_SMI}; fi"
_ISOLATION_COMMAND = (
    'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>}"; '
    f"if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L; else echo {NO_SMI}; fi"
)

# Memo keys shared between the checks of this stage.
_MEMO_SMI = "gpu.nvidia-smi"
_MEMO_NCCL_TOOLS = "gpu.nccl-tools"

# Time limits (Slurm's --time; srun gets a `timeout` on top).
_SMI_TIME_S = 60
_PROBE_TIME_S = 240  # torch import from NFS + 2-4 s per GPU for up to 8 GPUs
_NCCL_TIME_S = 240
_DDP_TIME_S = 300


# --- shared helpers ------------------------------------------------------------


def _scope(ctx: Context) -> tuple[list[Node], list[NodeResult]] | Outcome:
    """(nodes with real GPUs that can start a job, SKIP rows for the others), or an Outcome when none is left."""
    nodes = ctx.gpu_nodes
    if not nodes:
        return skipped(NO_GPU_NODES)
    real = [node for node in nodes if node.has_real_gpus]
    fake = [NodeResult(node.name, Status.SKIP, FAKE_REASON) for node in nodes if node not in real]
    if not real:
        return Outcome(fake, message=FAKE_REASON, status=Status.SKIP)
    usable, dead = ctx.launchable(real)
    if not usable:
        return Outcome(fake + dead, message="no GPU node can start a job (see launch.srun)", status=Status.SKIP)
    return usable, fake + dead


def _gres(node: Node) -> str:
    return f"gpu:{node.gpu_count}"


def _hints(*pairs: tuple[bool, str]) -> str | None:
    chosen = [hint for wanted, hint in pairs if wanted]
    return "; ".join(dict.fromkeys(chosen)) or None


# --- nvidia-smi ------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    driver: str
    memory_mib: int | None


@dataclass(frozen=True)
class SmiAnswer:
    """What nvidia-smi said on one node: GPUs, or why there are none."""

    gpus: tuple[GpuInfo, ...] = ()
    error: str | None = None
    missing: bool = False  # no nvidia-smi on the node
    launch_failed: bool = False  # the job itself did not run (Slurm refused it, timed out)

    @property
    def drivers(self) -> list[str]:
        return sorted({gpu.driver for gpu in self.gpus})


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 5 or not fields[0].isdigit():
            continue
        index, name, uuid, driver, memory = fields
        gpus.append(GpuInfo(int(index), name, uuid, driver, int(memory) if memory.isdigit() else None))
    return gpus


def interpret_smi(result: CommandResult) -> SmiAnswer:
    if NO_SMI in result.stdout:
        return SmiAnswer(missing=True, error="nvidia-smi not found on the node")
    gpus = parse_nvidia_smi(result.stdout)
    if result.exit_status != 0:
        # nvidia-smi's own complaint ("NVIDIA-SMI has failed because ...") is on stdout.
        said = next((line.strip() for line in result.stdout.splitlines() if "NVIDIA-SMI" in line), "")
        if said:
            return SmiAnswer(error=said)
        return SmiAnswer(error=slurm.job_failure(result), launch_failed=not result.stdout.strip())
    if not gpus:
        first = result.stdout.strip().splitlines()[0] if result.stdout.strip() else "no output"
        return SmiAnswer(error=f"nvidia-smi listed no GPUs ({first})")
    return SmiAnswer(tuple(gpus))


def _smi_answers(ctx: Context, nodes: list[Node]) -> dict[str, SmiAnswer]:
    """nvidia-smi on each node (a job with all its GPUs), asked once per run and kept in ctx.memo."""
    known: dict[str, SmiAnswer] = ctx.memo.setdefault(_MEMO_SMI, {})
    missing = [node for node in nodes if node.name not in known]
    if missing:
        results = ctx.srun_each(
            _SMI_COMMAND, missing, time_limit_s=_SMI_TIME_S, options=lambda node: {"gres": _gres(node)}
        )
        for node in missing:
            known[node.name] = interpret_smi(results[node.name])
    return {node.name: known[node.name] for node in nodes}


def nvidia_smi_inventory(ctx: Context) -> Outcome:
    scope = _scope(ctx)
    if isinstance(scope, Outcome):
        return scope
    real, results = scope
    answers = _smi_answers(ctx, real)
    no_driver = launch = wrong_count = wrong_model = False
    for node in real:
        answer = answers[node.name]
        want = node.gpu_count
        model = node.gpus.model if node.gpus else None
        expected = f"{want}" + (f" x {model}" if model else "")
        if answer.error is not None:
            launch |= answer.launch_failed
            no_driver |= not answer.launch_failed
            results.append(NodeResult(node.name, Status.FAIL, answer.error, 0, expected, "GPUs"))
            continue
        names = sorted({gpu.name for gpu in answer.gpus})
        problems = []
        if len(answer.gpus) != want:
            wrong_count = True
            problems.append(f"nvidia-smi lists {len(answer.gpus)} GPU(s) in a job given gpu:{want}")
        if model and not all(thresholds.model_matches(model, name) for name in names):
            wrong_model = True
            problems.append(f"{', '.join(names)} is not a {model}")
        summary = f"{len(answer.gpus)} x {', '.join(names)}, driver {', '.join(answer.drivers)}"
        status = Status.FAIL if problems else Status.PASS
        message = "; ".join(problems) + f" ({summary})" if problems else summary
        results.append(NodeResult(node.name, status, message, len(answer.gpus), expected, "GPUs"))
    return Outcome(
        results,
        hint=_hints(
            (no_driver, DRIVER_HINT),
            (launch, LAUNCH_HINT),
            (
                wrong_count,
                "a GPU missing from nvidia-smi is lost to the driver or the PCIe bus (`dmesg | grep -i xid`, "
                "`lspci | grep -i nvidia`); if the node really has another number, correct gpus.count in the "
                "spec and run `gpuclus deploy --only slurm`",
            ),
            (
                wrong_model,
                "gpus.model must name what nvidia-smi reports (e.g. h100 for 'NVIDIA H100 80GB HBM3'): correct "
                "the spec (and `gpuclus deploy --only slurm` for the GRES type) or the node",
            ),
        ),
    )


# --- isolation --------------------------------------------------------------------


@dataclass(frozen=True)
class IsolationView:
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES, None when unset
    smi_gpus: int | None  # `nvidia-smi -L` GPU lines; None without nvidia-smi


def parse_isolation(text: str) -> IsolationView:
    visible: str | None = None
    for line in text.splitlines():
        if line.startswith("CUDA_VISIBLE_DEVICES="):
            value = line.split("=", 1)[1].strip()
            visible = None if value in ("", "<unset>") else value
    if NO_SMI in text:
        return IsolationView(visible, None)
    gpus = sum(1 for line in text.splitlines() if re.match(r"GPU \d+:", line.strip()))
    return IsolationView(visible, gpus)


def isolation(ctx: Context) -> Outcome:
    scope = _scope(ctx)
    if isinstance(scope, Outcome):
        return scope
    real, results = scope
    answers = ctx.srun_each(_ISOLATION_COMMAND, real, time_limit_s=_SMI_TIME_S, options=lambda node: {"gres": "gpu:1"})
    no_driver = launch = unset = unconstrained = False
    for node in real:
        answer = answers[node.name]
        view = parse_isolation(answer.stdout)
        devices = [item for item in (view.visible_devices or "").split(",") if item.strip()]
        if view.smi_gpus is None:
            no_driver = True
            results.append(NodeResult(node.name, Status.FAIL, "nvidia-smi not found on the node", None, "1", "GPUs"))
        elif answer.exit_status != 0:
            launch = True
            message = "a job given gpu:1 failed: " + slurm.job_failure(answer)
            results.append(NodeResult(node.name, Status.FAIL, message, None, "1", "GPUs"))
        elif len(devices) != 1:
            unset = True
            shown = view.visible_devices or "unset"
            message = f"CUDA_VISIBLE_DEVICES={shown} in a job given gpu:1: the job is not limited to its GPU"
            results.append(NodeResult(node.name, Status.FAIL, message, len(devices), "1", "GPUs"))
        elif view.smi_gpus != 1:
            unconstrained = True
            message = f"a job given gpu:1 sees {view.smi_gpus} GPUs with nvidia-smi -L: devices are not constrained"
            results.append(NodeResult(node.name, Status.FAIL, message, view.smi_gpus, "1", "GPUs"))
        else:
            message = f"one GPU visible (CUDA_VISIBLE_DEVICES={devices[0]})"
            results.append(NodeResult(node.name, Status.PASS, message, 1, "1", "GPUs"))
    return Outcome(
        results,
        hint=_hints(
            (no_driver, DRIVER_HINT),
            (launch, LAUNCH_HINT),
            (
                unset,
                "Slurm sets CUDA_VISIBLE_DEVICES only for GPUs it hands out through GRES: slurm.conf needs "
                "GresTypes=gpu and gres.conf must list the devices; `gpuclus deploy --only slurm`",
            ),
            (
                unconstrained,
                "cgroup.conf needs ConstrainDevices=yes (and TaskPlugin=task/cgroup) so a job cannot open other "
                "jobs' GPUs; `gpuclus deploy --only slurm`, then restart slurmd",
            ),
        ),
    )


# --- driver -----------------------------------------------------------------------


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def majority_version(versions: list[str]) -> str | None:
    """The version most nodes run; on a tie the newest of them."""
    if not versions:
        return None
    counts = Counter(versions)
    return max(counts, key=lambda version: (counts[version], _version_key(version)))


def driver_versions(ctx: Context) -> Outcome:
    scope = _scope(ctx)
    if isinstance(scope, Outcome):
        return scope
    real, results = scope
    answers = _smi_answers(ctx, real)
    versions = {name: answer.drivers for name, answer in answers.items() if answer.error is None and answer.drivers}
    majority = majority_version([found[0] for found in versions.values() if len(found) == 1])
    driver = ctx.spec.nvidia.driver
    branch = driver.branch if driver.install else None
    differs = off_branch = False
    for node in real:
        found = versions.get(node.name)
        if found is None:
            results.append(NodeResult(node.name, Status.SKIP, "no nvidia-smi answer (see gpu.nvidia-smi)"))
            continue
        version = ", ".join(found)
        if len(found) > 1 or version != majority:
            differs = True
            message = f"driver {version}, most GPU nodes run {majority}"
            results.append(NodeResult(node.name, Status.FAIL, message, version, majority))
        elif branch and not version.startswith(f"{branch}."):
            off_branch = True
            message = f"driver {version} is not from branch {branch}, which the spec installs"
            results.append(NodeResult(node.name, Status.WARN, message, version, majority))
        else:
            results.append(NodeResult(node.name, Status.PASS, f"driver {version}", version, majority))
    compared = len(versions)
    return Outcome(
        results,
        message=f"{compared} node(s) compared" + (", one driver" if compared and not differs else ""),
        hint=_hints(
            (
                differs,
                "run one driver version everywhere (CUDA programs and NCCL across nodes expect it): "
                "`gpuclus deploy --only nvidia` installs the spec's branch; reboot the nodes after an upgrade",
            ),
            (
                off_branch,
                "nvidia.driver.branch in the spec differs from the installed driver: change the spec or run "
                "`gpuclus deploy --only nvidia`",
            ),
        ),
    )


# --- probe output ------------------------------------------------------------------


def parse_probe_output(text: str) -> list[dict[str, Any]]:
    """Every ``GPUCLUS_PROBE {json}`` payload in a job's output, in order (bad JSON is left out)."""
    payloads = []
    for line in text.splitlines():
        at = line.find(probes.MARKER + " ")
        if at < 0:
            continue
        try:
            payload = json.loads(line[at + len(probes.MARKER) + 1 :])
        except json.JSONDecodeError:
            continue
        if isinstance(payload, dict):
            payloads.append(payload)
    return payloads


# A probe's "error" codes that mean "nothing to measure with here", not "broken".
_SKIP_ERRORS = {
    "no-torch": "PyTorch is not installed on the node (python3 cannot import torch)",
    "no-torch-cuda": "PyTorch on the node is a CPU-only build",
    "no-python": "python3 is not installed on the node",
}
_CUDA_UNAVAILABLE = "PyTorch cannot use the GPUs (torch.cuda.is_available() is false)"
CUDA_HINT = (
    "PyTorch's CUDA build must suit the driver (`nvidia-smi` shows the newest CUDA it supports, "
    "`python3 -c 'import torch; print(torch.version.cuda)'` the one PyTorch needs)"
)


@dataclass(frozen=True)
class ProbeError:
    status: Status
    message: str


def probe_error(payloads: list[dict[str, Any]], result: CommandResult) -> ProbeError | None:
    """Why a probe gave no figures (SKIP for a missing PyTorch, FAIL otherwise), or None when it did."""
    errors = [payload for payload in payloads if "error" in payload]
    if payloads and not errors:
        return None
    if not payloads:
        said = slurm.first_error_line(result.stderr, "") or (result.stdout.strip().splitlines() or [""])[-1]
        if result.exit_status == TIMED_OUT:
            return ProbeError(Status.FAIL, "the probe did not finish within its time limit")
        return ProbeError(Status.FAIL, f"the probe printed no result (exit {result.exit_status}): {said}".rstrip(": "))
    code = str(errors[0]["error"])
    if code in _SKIP_ERRORS:
        return ProbeError(Status.SKIP, f"{_SKIP_ERRORS[code]}: {TORCH_HINT}")
    if code == "cuda-unavailable":
        return ProbeError(Status.FAIL, _CUDA_UNAVAILABLE)
    rank = f" (rank {errors[0]['rank']})" if "rank" in errors[0] else ""
    return ProbeError(Status.FAIL, f"probe failed{rank}: {code}")


# --- matmul and memory bandwidth -----------------------------------------------------


@dataclass(frozen=True)
class _Metric:
    probe: str  # gpu_probe subcommand
    key: str  # figure in each GPU's result
    unit: str
    label: str
    peak: Callable[[str], float | None]


_MATMUL = _Metric("matmul", "tflops", "TFLOP/s", "bf16 matmul", thresholds.matmul_peak_tflops)
_MEMBW = _Metric("membw", "gbs", "GB/s", "device copy", thresholds.memory_peak_gbs)


def expected_text(peak: float | None) -> str:
    if peak is None:
        return "no ceiling known"
    return f">= {peak * thresholds.PEAK_PASS_RATIO:.0f} ({thresholds.PEAK_PASS_RATIO:.0%} of {peak:g})"


def judge_gpus(node: Node, payload: dict[str, Any], metric: _Metric) -> NodeResult:
    """One node's per-GPU figures → one row: the worst GPU decides, every slow or wrong GPU is named."""
    gpus = [gpu for gpu in payload.get("gpus", []) if isinstance(gpu, dict)]
    if len(gpus) != node.gpu_count:
        message = f"the probe saw {len(gpus)} GPU(s) in a job given gpu:{node.gpu_count}"
        return NodeResult(node.name, Status.FAIL, message, None, str(node.gpu_count), "GPUs")
    statuses, notes, figures = [], [], []
    peak: float | None = None
    for gpu in gpus:
        index = gpu.get("index", "?")
        value = gpu.get(metric.key)
        if gpu.get("error") or not isinstance(value, int | float):
            statuses.append(Status.FAIL)
            notes.append(f"GPU {index}: {gpu.get('error') or 'no figure'}")
            continue
        figures.append(float(value))
        peak = metric.peak(str(gpu.get("name", "")))
        if not gpu.get("ok", False):
            statuses.append(Status.FAIL)
            error = gpu.get("rel_error")
            detail = f"relative error {error}" if error is not None else "not finite or not equal"
            notes.append(f"GPU {index}: wrong result ({detail})")
            continue
        status = thresholds.grade_against_peak(float(value), peak)
        statuses.append(status)
        if status is not Status.PASS and peak:
            notes.append(f"GPU {index}: {value:g} {metric.unit} ({float(value) / peak:.0%} of {peak:g})")
    lowest = min(figures) if figures else None
    name = str(gpus[0].get("name", "")) if gpus else ""
    if lowest is None:
        summary = "no figures"
    else:
        of_peak = f", {lowest / peak:.0%} of the {peak:g} peak" if peak else ", no ceiling known for " + name
        summary = f"{len(figures)} GPU(s), lowest {lowest:g} {metric.unit}{of_peak}"
    message = "; ".join([*notes, summary]) if notes else summary
    shown = round(lowest, 1) if lowest is not None else None
    return NodeResult(node.name, worst(statuses), message, shown, expected_text(peak), metric.unit)


def _per_gpu_probe(ctx: Context, metric: _Metric, hint: str) -> Outcome:
    scope = _scope(ctx)
    if isinstance(scope, Outcome):
        return scope
    real, results = scope
    command = probes.inline_command("gpu_probe.py", [metric.probe])
    answers = ctx.srun_each(command, real, time_limit_s=_PROBE_TIME_S, options=lambda node: {"gres": _gres(node)})
    skipped_reason = ""
    for node in real:
        answer = answers[node.name]
        payloads = parse_probe_output(answer.stdout)
        problem = probe_error(payloads, answer)
        if problem is not None:
            if problem.status is Status.SKIP:
                skipped_reason = problem.message
            results.append(NodeResult(node.name, problem.status, problem.message, None, None, metric.unit))
            continue
        results.append(judge_gpus(node, payloads[0], metric))
    cuda_broken = any(result.message == _CUDA_UNAVAILABLE for result in results)
    all_skipped = all(result.status is Status.SKIP for result in results)
    return Outcome(
        results,
        message=skipped_reason if all_skipped else "",
        hint=_hints((cuda_broken, CUDA_HINT), (True, hint)),
    )


_PERF_HINT = (
    "a GPU below its figures: check clocks and throttling with `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE` "
    "(power cap, HW slowdown, thermal), that no other process uses it (`nvidia-smi`), and persistence mode "
    "(`nvidia-smi -pm 1`); wrong results: `dmesg | grep -i xid`, drain the node and run the vendor's diagnostics "
    "(`dcgmi diag -r 3`)"
)


def matmul(ctx: Context) -> Outcome:
    return _per_gpu_probe(ctx, _MATMUL, _PERF_HINT)


def memory_bandwidth(ctx: Context) -> Outcome:
    return _per_gpu_probe(ctx, _MEMBW, _PERF_HINT + "; memory: `nvidia-smi -q -d ECC,ROW_REMAPPER` for ECC errors")


# --- NCCL ----------------------------------------------------------------------------


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
        answers = ctx.srun_each(_DETECT_NCCL_TESTS, missing, time_limit_s=_SMI_TIME_S)
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


def nccl_all_reduce(ctx: Context) -> Outcome:
    scope = _scope(ctx)
    if isinstance(scope, Outcome):
        return scope
    real, results = scope
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
        return {"gres": _gres(node), "ntasks_per_node": tasks}

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
        hint=_hints(
            (wrong, _NCCL_WRONG_HINT),
            (slow_intra, _NCCL_INTRA_HINT),
            (slow_inter, _NCCL_INTER_HINT),
            (any(r.message.startswith("PyTorch cannot") for r in results), CUDA_HINT),
        ),
    )


# --- DDP ------------------------------------------------------------------------------


def judge_ddp(payload: dict[str, Any]) -> tuple[Status, str, float | None]:
    """(status, message, efficiency in %) from the DDP probe's result."""
    ranks = payload.get("ranks")
    losses = [value for value in payload.get("losses", []) if isinstance(value, int | float)]
    trend = f"loss {losses[0]:.4g} -> {losses[-1]:.4g}" if losses else "no loss values"
    if not payload.get("replicas_agree", False):
        spread = payload.get("replica_spread")
        return Status.FAIL, f"the {ranks} replicas hold different weights after training (spread {spread})", None
    if not payload.get("finite", False):
        return Status.FAIL, f"the loss is not finite ({trend})", None
    efficiency = float(payload.get("efficiency", 0.0))
    status = thresholds.grade_scaling(efficiency)
    message = (
        f"{ranks} GPU(s) on {payload.get('nodes')} node(s): {float(payload.get('ddp_sps', 0)):.0f} samples/s, "
        f"one GPU alone {float(payload.get('single_sps', 0)):.0f}; {trend}"
    )
    if not payload.get("decreasing", False):
        message += " (did not decrease)"
    return status, message, round(efficiency * 100, 1)


_DDP_FAIL_HINT = (
    "the probe's error names the cause; rerun it by hand with NCCL_DEBUG=INFO (docs/validate-gpu.md) and check "
    "gpu.nccl first: DDP needs a working NCCL between every pair of nodes"
)


def ddp_smoke(ctx: Context) -> Outcome:
    scope = _scope(ctx)
    if isinstance(scope, Outcome):
        return scope
    real, results = scope
    per_node = min(node.gpu_count for node in real)
    answer = ctx.srun(
        probes.inline_command("ddp_probe.py"),
        real,
        time_limit_s=_DDP_TIME_S,
        gres=f"gpu:{per_node}",
        ntasks_per_node=per_node,
    )
    expected = f">= {thresholds.DDP_MIN_SCALING_EFFICIENCY * 100:g}"
    payloads = parse_probe_output(answer.stdout)
    problem = probe_error(payloads, answer)
    if problem is not None:
        return Outcome(
            results,
            status=problem.status,
            message=problem.message,
            expected=expected,
            unit="%",
            hint=CUDA_HINT if problem.message == _CUDA_UNAVAILABLE else _DDP_FAIL_HINT,
        )
    status, message, value = judge_ddp(next(payload for payload in payloads if "error" not in payload))
    return Outcome(
        results,
        status=status,
        message=message,
        value=value,
        expected=expected,
        unit="%",
        hint="scaling efficiency below "
        f"{thresholds.DDP_MIN_SCALING_EFFICIENCY:.0%}: the gradient all-reduce does not keep up; see gpu.nccl "
        "(a 10-25 GbE fabric is expected to land here); replicas disagreeing or a non-finite loss point at a "
        "faulty GPU or NCCL: `dmesg | grep -i xid`, NCCL_DEBUG=INFO",
    )


CHECKS = [
    Check("gpu.nvidia-smi", Level.QUICK, "nvidia-smi lists the spec's GPUs on every GPU node", nvidia_smi_inventory),
    Check("gpu.isolation", Level.STANDARD, "a job given one GPU sees exactly one", isolation),
    Check("gpu.driver", Level.STANDARD, "one NVIDIA driver version on all GPU nodes", driver_versions),
    Check("gpu.matmul", Level.FULL, "bf16 matmul TFLOP/s per GPU against the chip's peak", matmul),
    Check("gpu.membw", Level.FULL, "device memory bandwidth per GPU against the chip's peak", memory_bandwidth),
    Check("gpu.nccl", Level.FULL, "NCCL all-reduce bus bandwidth within nodes and between pairs", nccl_all_reduce),
    Check("gpu.ddp", Level.FULL, "PyTorch DDP training steps across all GPU nodes", ddp_smoke),
]
