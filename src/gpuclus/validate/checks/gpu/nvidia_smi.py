"""gpu.nvidia-smi and gpu.driver: both judge what nvidia-smi reports on each GPU node.

nvidia-smi runs once per node and run (a job given all the node's GPUs); the
answers are kept in ``ctx.memo`` so the second check asks nothing again. The
same job reads the NVSwitch fabric state and the driver facts of
``driver_state`` (loaded module, installed libraries, gpuclus' state file), so
a failing nvidia-smi is told apart without a second round trip: a
module/library version mismatch (reboot) from no driver at all (install).

nvidia-smi formats this relies on, checked against public sources (searched
while writing this, not run here: no NVIDIA GPU on the CI host):

- ``--query-gpu=persistence_mode`` prints Enabled or Disabled (NVIDIA's
  "Driver Persistence" guide, docs.nvidia.com/deploy/driver-persistence; the
  field in use in Cornelis' CN5000 GPU tuning guide); supported by every driver.
- ``--query-gpu=fabric.state,fabric.status`` prints "Completed, Success" per
  GPU on a healthy NVSwitch system, "Not Started" / "In Progress" while the
  fabric manager has not registered the GPU, a state of Completed with another
  status on a fabric error, and N/A where the GPU has no NVSwitch fabric
  (NVIDIA/NVSentinel's fabric_state_check.py and PR #1382, NVIDIA's NVML
  nvmlGpuFabricInfo_t: "status ... must be checked only if state returns
  complete"). On an A100 HGX (AWS p4d) the fields read N/A even with the
  fabric manager running (bottlerocket-os/bottlerocket#3873): there this
  check cannot see the fabric manager.
- A field the driver does not know fails the whole query with exit 2 and
  'Field "x" is not a valid field to query.' (CoHDI/composable-resource-operator#37),
  so the fabric fields get their own query, and where it fails the "Fabric"
  block of ``nvidia-smi -q`` ("    Fabric" / "        State : Completed" /
  "        Status : Success", Azure/azhpc-images#506) is read instead.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from gpuclus.slurm import commands as slurm
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import thresholds
from gpuclus.validate.checks.gpu.driver_state import (
    MISMATCH_TEXT,
    DriverFacts,
    facts_command,
    parse_driver_facts,
    version_key,
)
from gpuclus.validate.checks.gpu.hints import DRIVER_HINT, LAUNCH_HINT, REBOOT_HINT, join_hints
from gpuclus.validate.checks.gpu.scope import SHORT_JOB_S, Scope, all_gpus, on_gpu_nodes
from gpuclus.validate.context import Context
from gpuclus.validate.results import NodeResult, Outcome, Status

# Printed instead of nvidia-smi's output when the node has no nvidia-smi at all.
NO_SMI = "GPUCLUS_NO_NVIDIA_SMI"
# Lines that start the fabric part and the driver facts part of the job's output.
FABRIC_MARK = "GPUCLUS_FABRIC"
FACTS_MARK = "GPUCLUS_DRIVER_FACTS"
SMI_QUERY = (
    "nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,persistence_mode --format=csv,noheader,nounits"
)
FABRIC_QUERY = "nvidia-smi --query-gpu=index,fabric.state,fabric.status --format=csv,noheader"
# For drivers without the fabric query fields: each GPU's header line and the
# State/Status lines of its "Fabric" block in `nvidia-smi -q`.
FABRIC_FROM_FULL_QUERY = (
    "nvidia-smi -q 2>/dev/null | "
    "awk '/^GPU /{print} /^    [^ ]/{f=/^    Fabric *$/} f && /^        (State|Status) /{print}'"
)


def smi_command(root: str = "") -> str:
    """The job's shell command: nvidia-smi, the fabric state, the driver facts (``root``: see facts_command)."""
    return (
        f"if command -v nvidia-smi >/dev/null 2>&1; then {SMI_QUERY}; rc=$?; "
        f'if [ "$rc" -eq 0 ]; then echo {FABRIC_MARK}; '
        f"{FABRIC_QUERY} 2>/dev/null || {FABRIC_FROM_FULL_QUERY}; fi; "
        f"else echo {NO_SMI}; rc=0; fi; "
        f'echo {FACTS_MARK}; {facts_command(root)}; exit "$rc"'
    )


_MEMO_SMI = "gpu.nvidia-smi"

# nvidia-smi's words for a value the GPU or driver does not report.
_NOT_REPORTED = frozenset({"", "n/a", "not supported", "unknown error"})

PERSISTENCE_HINT = (
    "persistence mode keeps the driver initialised between jobs (without it every job pays the GPU "
    "initialisation and loses clock and ECC settings): nvidia-persistenced should run on every GPU node, "
    "`systemctl enable --now nvidia-persistenced`, which `gpuclus deploy --only nvidia` does"
)
FABRIC_HINT = (
    "on an NVSwitch system (HGX/DGX) the GPUs join the NVLink fabric only through nvidia-fabricmanager, which "
    "must run at exactly the driver's version: `systemctl status nvidia-fabricmanager` and "
    "`journalctl -u nvidia-fabricmanager` on the node say why it did not finish (a version other than the "
    "driver's is the usual cause); fix it, restart the service, then run this check again"
)


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    driver: str
    memory_mib: int | None
    persistence: str | None = None  # "Enabled" / "Disabled"; None where not reported


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's NVSwitch fabric registration, as nvidia-smi reports it."""

    index: int
    state: str
    status: str

    @property
    def reported(self) -> bool:
        """False on GPUs without an NVSwitch fabric (N/A) or drivers that cannot tell."""
        return self.state.strip("[]").lower() not in _NOT_REPORTED

    @property
    def ready(self) -> bool:
        return self.state == "Completed" and self.status == "Success"


@dataclass(frozen=True)
class SmiAnswer:
    """What nvidia-smi said on one node: GPUs, or why there are none."""

    gpus: tuple[GpuInfo, ...] = ()
    error: str | None = None
    missing: bool = False  # no nvidia-smi on the node
    launch_failed: bool = False  # the job itself did not run (Slurm refused it, timed out)
    mismatch: bool = False  # "Driver/library version mismatch": the loaded module is not the installed driver
    facts: DriverFacts = field(default_factory=DriverFacts)
    fabric: tuple[FabricInfo, ...] = ()

    @property
    def drivers(self) -> list[str]:
        return sorted({gpu.driver for gpu in self.gpus})

    @property
    def no_driver(self) -> bool:
        """No nvidia-smi, or it failed on a node with no module loaded and no /dev/nvidiactl."""
        if self.missing:
            return True
        return self.error is not None and not self.launch_failed and not self.mismatch and self.facts.no_driver


def _reported(value: str) -> str | None:
    return None if value.strip("[]").lower() in _NOT_REPORTED else value


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,persistence_mode --format=csv,...`."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 6 or not fields[0].isdigit():
            continue
        index, name, uuid, driver, memory, persistence = fields
        memory_mib = int(memory) if memory.isdigit() else None
        gpus.append(GpuInfo(int(index), name, uuid, driver, memory_mib, _reported(persistence)))
    return gpus


_FULL_QUERY_FIELD = re.compile(r"^\s+(State|Status)\s*:\s*(.*?)\s*$")


def parse_fabric(text: str) -> list[FabricInfo]:
    """The fabric query's "0, Completed, Success" lines, or the filtered `nvidia-smi -q` Fabric blocks."""
    fabric = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            fabric.append(FabricInfo(int(fields[0]), fields[1], fields[2]))
    if fabric:
        return fabric
    # `nvidia-smi -q`: GPUs in index order, each "GPU 00000000:18:00.0" followed by its State and Status.
    found: dict[int, dict[str, str]] = {}
    index = -1
    for line in text.splitlines():
        if line.startswith("GPU "):
            index += 1
            continue
        match = _FULL_QUERY_FIELD.match(line)
        if match and index >= 0:
            found.setdefault(index, {}).setdefault(match.group(1), match.group(2))
    return [FabricInfo(i, values.get("State", ""), values.get("Status", "")) for i, values in sorted(found.items())]


def _parts(stdout: str) -> tuple[str, str, str]:
    """The job's output → (nvidia-smi's answer, the fabric part, the driver facts part)."""
    head, _, facts = stdout.partition(FACTS_MARK)
    smi, _, fabric = head.partition(FABRIC_MARK)
    return smi, fabric, facts


def _said(smi: str) -> str:
    """nvidia-smi's own complaint: "NVIDIA-SMI has failed because ...", "Failed to initialize NVML: ..."."""
    for line in smi.splitlines():
        if "NVIDIA-SMI" in line or line.strip().startswith("Failed to initialize NVML"):
            return line.strip()
    return ""


def interpret_smi(result: CommandResult) -> SmiAnswer:
    smi, fabric_text, facts_text = _parts(result.stdout)
    # nvidia-smi prints its errors on stdout; srun or a wrapper may move them to stderr.
    facts = parse_driver_facts(facts_text, smi + "\n" + result.stderr)
    if NO_SMI in smi:
        return SmiAnswer(missing=True, error="nvidia-smi not found on the node", facts=facts)
    if MISMATCH_TEXT in smi or MISMATCH_TEXT in result.stderr:
        said = _said(smi) or f"Failed to initialize NVML: {MISMATCH_TEXT}"
        return SmiAnswer(error=f"{said} ({facts.mismatch_text()})", mismatch=True, facts=facts)
    gpus = parse_nvidia_smi(smi)
    if result.exit_status != 0:
        said = _said(smi)
        if said:
            if facts.loaded is None and facts.reboot_pending and facts.state and facts.state.installed_version:
                said += f" (driver {facts.state.installed_version} is installed and loads at the next reboot)"
            return SmiAnswer(error=said, facts=facts)
        return SmiAnswer(error=slurm.job_failure(result), launch_failed=not result.stdout.strip(), facts=facts)
    if not gpus:
        first = smi.strip().splitlines()[0] if smi.strip() else "no output"
        return SmiAnswer(error=f"nvidia-smi listed no GPUs ({first})", facts=facts)
    return SmiAnswer(tuple(gpus), facts=facts, fabric=tuple(parse_fabric(fabric_text)))


def _smi_answers(ctx: Context, nodes: list[Node]) -> dict[str, SmiAnswer]:
    """nvidia-smi on each node (a job with all its GPUs), asked once per run and kept in ctx.memo."""
    known: dict[str, SmiAnswer] = ctx.memo.setdefault(_MEMO_SMI, {})
    missing = [node for node in nodes if node.name not in known]
    if missing:
        results = ctx.srun_each(
            smi_command(), missing, time_limit_s=SHORT_JOB_S, options=lambda node: {"gres": all_gpus(node)}
        )
        for node in missing:
            known[node.name] = interpret_smi(results[node.name])
    return {node.name: known[node.name] for node in nodes}


# --- gpu.nvidia-smi: the spec's GPUs, as many and of the model it names ------------------


def _fabric_problem(fabric: tuple[FabricInfo, ...]) -> str | None:
    """'NVSwitch fabric not ready on GPU 3 (In Progress, N/A)' for GPUs that report a fabric and are not ready."""
    bad = [gpu for gpu in fabric if gpu.reported and not gpu.ready]
    if not bad:
        return None
    each = ", ".join(f"GPU {gpu.index} ({gpu.state}, {gpu.status})" for gpu in bad)
    return f"NVSwitch fabric not ready on {each}"


def _persistence_problem(gpus: tuple[GpuInfo, ...]) -> str | None:
    off = [str(gpu.index) for gpu in gpus if gpu.persistence == "Disabled"]
    return f"persistence mode disabled on GPU {', '.join(off)}" if off else None


@on_gpu_nodes
def nvidia_smi_inventory(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    answers = _smi_answers(ctx, scope.nodes)
    no_driver = launch = reboot = wrong_count = wrong_model = fabric_bad = persistence_off = False
    for node in scope.nodes:
        answer = answers[node.name]
        want = node.gpu_count
        model = node.gpus.model if node.gpus else None
        expected = f"{want}" + (f" x {model}" if model else "")
        if answer.error is not None:
            launch |= answer.launch_failed
            # Any other failure of nvidia-smi is the driver's (missing, not loaded, GPU lost): DRIVER_HINT.
            no_driver |= not answer.launch_failed and not answer.mismatch
            reboot |= answer.mismatch or (answer.no_driver and answer.facts.reboot_pending)
            results.append(NodeResult(node.name, Status.FAIL, answer.error, 0, expected, "GPUs"))
            continue
        names = sorted({gpu.name for gpu in answer.gpus})
        problems, warnings = [], []
        if len(answer.gpus) != want:
            wrong_count = True
            problems.append(f"nvidia-smi lists {len(answer.gpus)} GPU(s) in a job given gpu:{want}")
        if model and not all(thresholds.model_matches(model, name) for name in names):
            wrong_model = True
            problems.append(f"{', '.join(names)} is not a {model}")
        fabric = _fabric_problem(answer.fabric)
        if fabric:
            fabric_bad = True
            problems.append(fabric)
        persistence = _persistence_problem(answer.gpus)
        if persistence:
            persistence_off = True
            warnings.append(persistence)
        summary = f"{len(answer.gpus)} x {', '.join(names)}, driver {', '.join(answer.drivers)}"
        if any(gpu.reported for gpu in answer.fabric) and not fabric:
            summary += ", NVSwitch fabric ready"
        status = Status.FAIL if problems else Status.WARN if warnings else Status.PASS
        notes = problems + warnings
        message = "; ".join(notes) + f" ({summary})" if notes else summary
        results.append(NodeResult(node.name, status, message, len(answer.gpus), expected, "GPUs"))
    return Outcome(
        results,
        hint=join_hints(
            (no_driver, DRIVER_HINT),
            (reboot, REBOOT_HINT),
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
            (fabric_bad, FABRIC_HINT),
            (persistence_off, PERSISTENCE_HINT),
        ),
    )


# --- gpu.driver: one driver version everywhere, from the spec's branch, and loaded -------


def majority_version(versions: list[str]) -> str | None:
    """The version most nodes run; on a tie the newest of them."""
    if not versions:
        return None
    counts = Counter(versions)
    return max(counts, key=lambda version: (counts[version], version_key(version)))


def _not_running(node: Node, answer: SmiAnswer) -> NodeResult | None:
    """The FAIL row of a node whose driver does not answer: a version mismatch, or no driver; else None."""
    facts = answer.facts
    if answer.mismatch:
        message = f"driver/library version mismatch: {facts.mismatch_text()}, a reboot loads the installed one"
        return NodeResult(node.name, Status.FAIL, message, facts.loaded, facts.installed)
    if not answer.no_driver:
        return None
    if answer.missing:
        message = "no NVIDIA driver: nvidia-smi not found on the node"
    else:
        message = f"no NVIDIA driver loaded (no kernel module, no /dev/nvidiactl): {answer.error}"
    return NodeResult(node.name, Status.FAIL, message, None, facts.installed)


@on_gpu_nodes
def driver_versions(ctx: Context, scope: Scope) -> Outcome:
    results = list(scope.skipped)
    answers = _smi_answers(ctx, scope.nodes)
    versions = {name: answer.drivers for name, answer in answers.items() if answer.error is None and answer.drivers}
    majority = majority_version([found[0] for found in versions.values() if len(found) == 1])
    driver = ctx.spec.nvidia.driver
    branch = driver.branch if driver.install else None
    differs = off_branch = mismatch = no_driver = pending = False
    for node in scope.nodes:
        answer = answers[node.name]
        found = versions.get(node.name)
        if found is None:
            failed = _not_running(node, answer)
            if failed is None:
                results.append(NodeResult(node.name, Status.SKIP, "no nvidia-smi answer (see gpu.nvidia-smi)"))
                continue
            mismatch |= answer.mismatch
            no_driver |= answer.no_driver
            pending |= answer.no_driver and answer.facts.reboot_pending
            results.append(failed)
            continue
        version = ", ".join(found)
        facts = answer.facts
        # The state file says reboot_needed; the loaded module, read now, says whether that reboot happened.
        waiting = ""
        if facts.reboot_pending and facts.state is not None:
            pending = True
            waiting = (
                f"reboot pending: driver {facts.state.installed_version or '(version unknown)'} is installed, "
                f"module {facts.loaded or version} is loaded"
            )
        if len(found) > 1 or version != majority:
            differs = True
            message = "; ".join(filter(None, [f"driver {version}, most GPU nodes run {majority}", waiting]))
            results.append(NodeResult(node.name, Status.FAIL, message, version, majority))
        elif waiting:
            results.append(NodeResult(node.name, Status.WARN, waiting, version, majority))
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
            (mismatch or pending, REBOOT_HINT),
            (no_driver, DRIVER_HINT),
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
