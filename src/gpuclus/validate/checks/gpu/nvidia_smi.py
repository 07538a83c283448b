"""gpu.nvidia-smi and gpu.driver: both judge what nvidia-smi reports on each GPU node.

nvidia-smi runs once per node and run (a job given all the node's GPUs); the
answers are kept in ``ctx.memo`` so the second check asks nothing again.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import slurm, thresholds
from gpuclus.validate.checks.gpu.hints import DRIVER_HINT, LAUNCH_HINT, join_hints
from gpuclus.validate.checks.gpu.scope import SHORT_JOB_S, Scope, all_gpus, on_gpu_nodes
from gpuclus.validate.context import Context
from gpuclus.validate.model import NodeResult, Outcome, Status

# Printed instead of nvidia-smi's output when the node has no nvidia-smi at all.
NO_SMI = "GPUCLUS_NO_NVIDIA_SMI"
SMI_QUERY = "nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader,nounits"
_SMI_COMMAND = f"if command -v nvidia-smi >/dev/null 2>&1; then {SMI_QUERY}; else echo {NO_SMI}; fi"
_MEMO_SMI = "gpu.nvidia-smi"


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
            _SMI_COMMAND, missing, time_limit_s=SHORT_JOB_S, options=lambda node: {"gres": all_gpus(node)}
        )
        for node in missing:
            known[node.name] = interpret_smi(results[node.name])
    return {node.name: known[node.name] for node in nodes}


# --- gpu.nvidia-smi: the spec's GPUs, as many and of the model it names ------------------


@on_gpu_nodes
def nvidia_smi_inventory(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    answers = _smi_answers(ctx, scope.nodes)
    no_driver = launch = wrong_count = wrong_model = False
    for node in scope.nodes:
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
        hint=join_hints(
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


# --- gpu.driver: one driver version everywhere, from the spec's branch -------------------


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def majority_version(versions: list[str]) -> str | None:
    """The version most nodes run; on a tie the newest of them."""
    if not versions:
        return None
    counts = Counter(versions)
    return max(counts, key=lambda version: (counts[version], _version_key(version)))


@on_gpu_nodes
def driver_versions(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    answers = _smi_answers(ctx, scope.nodes)
    versions = {name: answer.drivers for name, answer in answers.items() if answer.error is None and answer.drivers}
    majority = majority_version([found[0] for found in versions.values() if len(found) == 1])
    driver = ctx.spec.nvidia.driver
    branch = driver.branch if driver.install else None
    differs = off_branch = False
    for node in scope.nodes:
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
        hint=join_hints(
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
