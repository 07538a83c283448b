"""validate's GPU stage on recorded and synthetic output (no GPU on the CI host).

The Slurm side is a stub Context that answers each job with output recorded
from (or written like) nvidia-smi, nccl-tests' all_reduce_perf and gpuclus'
own probes; the probes' pure helpers run here for real, without torch.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
import sys
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.models import Fabric
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import probes, thresholds
from gpuclus.validate.checks import gpu
from gpuclus.validate.checks.gpu.ddp import ddp_smoke
from gpuclus.validate.checks.gpu.driver_state import (
    DriverFacts,
    StateFile,
    facts_command,
    parse_driver_facts,
    parse_state_file,
    same_version,
)
from gpuclus.validate.checks.gpu.hints import DRIVER_HINT, LAUNCH_HINT, REBOOT_HINT
from gpuclus.validate.checks.gpu.isolation import IsolationView, isolation, parse_isolation
from gpuclus.validate.checks.gpu.nccl import (
    NcclTests,
    judge_all_reduce,
    nccl_all_reduce,
    node_pairs,
    parse_nccl_tests,
    parse_nccl_tests_detection,
)
from gpuclus.validate.checks.gpu.nvidia_smi import (
    FABRIC_MARK,
    FACTS_MARK,
    NO_SMI,
    SMI_QUERY,
    FabricInfo,
    driver_versions,
    interpret_smi,
    majority_version,
    nvidia_smi_inventory,
    parse_fabric,
    parse_nvidia_smi,
    smi_command,
)
from gpuclus.validate.checks.gpu.per_gpu import matmul, memory_bandwidth
from gpuclus.validate.checks.gpu.probe_output import TORCH_HINT, parse_probe_output
from gpuclus.validate.checks.gpu.scope import FAKE_REASON, NO_GPU_NODES
from gpuclus.validate.context import Context
from gpuclus.validate.probes import common, ddp_probe, gpu_probe, nccl_probe
from gpuclus.validate.results import Level, Outcome, Status

HAVE_TORCH = importlib.util.find_spec("torch") is not None

# --- a stub cluster ------------------------------------------------------------------

Reply = CommandResult | dict[str, CommandResult] | Callable[[str, dict[str, Any]], CommandResult]


def ok(stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(0, stdout, stderr)


def spec_text(
    gpus: str = "{count: 2, model: h100}",
    nodes: str = "gpu[01-02]",
    addresses: str = "10.0.0.[11-12]",
    network: str = "{fabric: infiniband, link_gbps: 400, nics_per_node: 8}",
    extra_nodes: str = "",
) -> str:
    return f"""
apiVersion: gpuclus/v1
cluster: {{name: lab, admin_user: ubuntu}}
nodes:
  - {{name: head, address: 10.0.0.1, roles: [controller, login, nfs_server]}}
  - {{name: "{nodes}", address: "{addresses}", roles: [compute], gpus: {gpus}}}
{extra_nodes}
slurm:
  partitions: [{{name: gpu, nodes: "ALL", default: true}}]
nvidia: {{driver: {{install: true, branch: "550"}}}}
network: {network}
"""


class StubContext(Context):
    """A Context whose jobs answer from ``replies`` (keyed by what the command runs) and are recorded."""

    def __init__(self, text: str, replies: dict[str, Reply]) -> None:
        loaded = load_spec_text(text)
        assert loaded.spec is not None and loaded.topology is not None, loaded.findings
        super().__init__(loaded.spec, loaded.topology, remote=None, job_name="gpuclus-validate-t", selected=[])  # type: ignore[arg-type]
        self.selected = list(loaded.topology.nodes)
        self.replies = replies
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def _answer(self, command: str, key: str, options: dict[str, Any]) -> CommandResult:
        kind = classify(command)
        self.calls.append((kind, key, options))
        reply = self.replies[kind]
        if isinstance(reply, CommandResult):
            return reply
        if isinstance(reply, dict):
            return reply[key]
        return reply(key, options)

    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        return self._answer(command, "controller", {})

    def srun(self, command: str, nodes: list[Node], *, time_limit_s: int = 60, **options: Any) -> CommandResult:
        return self._answer(command, ",".join(node.name for node in nodes), options)

    def srun_each(
        self,
        command: str | Callable[[Node], str],
        nodes: list[Node],
        *,
        time_limit_s: int = 60,
        options: Callable[[Node], dict[str, Any]] | None = None,
    ) -> dict[str, CommandResult]:
        results = {}
        for node in nodes:
            text = command(node) if callable(command) else command
            results[node.name] = self._answer(text, node.name, options(node) if options else {})
        return results

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.calls]


def classify(command: str) -> str:
    if SMI_QUERY in command:
        return "smi"
    if "nvidia-smi -L" in command:
        return "isolation"
    if "NCCL_TESTS=" in command:
        return "detect"
    if "all_reduce_perf" in command:
        return "nccl-tests"
    for name, args in (
        ("gpu_probe.py", ["matmul"]),
        ("gpu_probe.py", ["membw"]),
        ("nccl_probe.py", []),
        ("ddp_probe.py", []),
    ):
        if command == probes.inline_command(name, args):
            return " ".join([name.removesuffix(".py"), *args])
    raise AssertionError(f"unexpected command: {command[:120]}")


def by_node(outcome: Outcome) -> dict[str, Any]:
    return {result.node: result for result in outcome.nodes}


def probe_line(payload: dict[str, Any]) -> str:
    return f"{probes.MARKER} {json.dumps(payload)}\n"


# --- recorded nvidia-smi output --------------------------------------------------------

SMI_H100_X2 = (
    "0, NVIDIA H100 80GB HBM3, GPU-5c1f3a52-8e1b-2f0e-9d4c-1a2b3c4d5e6f, 550.54.15, 81559, Enabled\n"
    "1, NVIDIA H100 80GB HBM3, GPU-9a8b7c6d-1e2f-3a4b-5c6d-7e8f9a0b1c2d, 550.54.15, 81559, Enabled\n"
)
SMI_H100_X1 = SMI_H100_X2.splitlines(keepends=True)[0]
SMI_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


def test_parse_nvidia_smi_recorded_query_output() -> None:
    gpus = parse_nvidia_smi(SMI_H100_X2 + "\n")
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].driver == "550.54.15"
    assert gpus[0].memory_mib == 81559
    assert gpus[1].uuid.startswith("GPU-9a8b")
    assert parse_nvidia_smi("No devices were found\n") == []


def test_nvidia_smi_passes_on_recorded_output_matching_the_spec() -> None:
    ctx = StubContext(spec_text(), {"smi": ok(SMI_H100_X2)})
    outcome = nvidia_smi_inventory(ctx)
    assert outcome.overall is Status.PASS
    row = by_node(outcome)["gpu01"]
    assert (row.value, row.expected, row.unit) == (2, "2 x h100", "GPUs")
    assert "driver 550.54.15" in row.message
    # The job asked for all the node's GPUs.
    assert {call[2]["gres"] for call in ctx.calls} == {"gpu:2"}


def test_nvidia_smi_count_mismatch_on_recorded_output_fails() -> None:
    ctx = StubContext(spec_text(), {"smi": {"gpu01": ok(SMI_H100_X2), "gpu02": ok(SMI_H100_X1)}})
    outcome = nvidia_smi_inventory(ctx)
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.PASS
    assert rows["gpu02"].status is Status.FAIL
    assert rows["gpu02"].value == 1
    assert "lists 1 GPU(s)" in rows["gpu02"].message
    assert outcome.hint and "gpus.count" in outcome.hint


def test_nvidia_smi_model_mismatch_on_recorded_output_fails() -> None:
    ctx = StubContext(spec_text(gpus="{count: 2, model: a100-80gb}"), {"smi": ok(SMI_H100_X2)})
    outcome = nvidia_smi_inventory(ctx)
    assert outcome.overall is Status.FAIL
    assert "is not a a100-80gb" in by_node(outcome)["gpu01"].message
    assert outcome.hint and "gpus.model" in outcome.hint


def test_nvidia_smi_missing_fails_with_a_driver_hint() -> None:
    ctx = StubContext(spec_text(), {"smi": ok(NO_SMI + "\n")})
    outcome = nvidia_smi_inventory(ctx)
    assert outcome.overall is Status.FAIL
    assert by_node(outcome)["gpu01"].message == "nvidia-smi not found on the node"
    assert outcome.hint and "driver" in outcome.hint and "gpuclus deploy --only nvidia" in outcome.hint


def test_nvidia_smi_without_a_loaded_driver_fails_with_its_own_words() -> None:
    ctx = StubContext(
        spec_text(), {"smi": CommandResult(9, SMI_FAILED, "srun: error: gpu01: task 0: Exited with exit code 9\n")}
    )
    outcome = nvidia_smi_inventory(ctx)
    assert outcome.overall is Status.FAIL
    assert by_node(outcome)["gpu01"].message.startswith("NVIDIA-SMI has failed")


def test_nvidia_smi_job_refused_reports_srun_error() -> None:
    refused = CommandResult(
        1, "", "srun: error: Unable to allocate resources: Requested node configuration is not available\n"
    )
    ctx = StubContext(spec_text(), {"smi": refused})
    outcome = nvidia_smi_inventory(ctx)
    assert "Requested node configuration is not available" in by_node(outcome)["gpu02"].message
    assert outcome.hint == LAUNCH_HINT


@pytest.mark.parametrize(
    ("wanted", "name", "matches"),
    [
        ("h100", "NVIDIA H100 80GB HBM3", True),
        ("H100", "NVIDIA H100 PCIe", True),
        ("a100-80gb", "NVIDIA A100-SXM4-80GB", True),
        ("a100_80gb", "NVIDIA A100 80GB PCIe", True),
        ("rtx4090", "NVIDIA GeForce RTX 4090", True),
        ("4090", "NVIDIA GeForce RTX 4090", True),
        ("h100nvl", "NVIDIA H100 NVL", True),
        ("a10", "NVIDIA A100-SXM4-40GB", False),
        ("h200", "NVIDIA GH200 480GB", False),
        ("l40", "NVIDIA L40S", False),
        ("a100-80gb", "NVIDIA A100-SXM4-40GB", False),
    ],
)
def test_model_matches_whole_words_ignoring_case_and_dashes(wanted: str, name: str, matches: bool) -> None:
    assert thresholds.model_matches(wanted, name) is matches


# --- fake GPUs, no GPUs ------------------------------------------------------------------


@pytest.mark.parametrize("check", gpu.CHECKS, ids=lambda check: check.id)
def test_fake_gpus_skip_every_gpu_check_without_running_a_job(check: Any) -> None:
    ctx = StubContext(spec_text(gpus="{count: 1, fake: true}"), {})
    outcome = check.run(ctx)
    assert outcome.overall is Status.SKIP
    assert outcome.message == FAKE_REASON
    assert all(row.status is Status.SKIP and row.message == FAKE_REASON for row in outcome.nodes)
    assert ctx.calls == []


@pytest.mark.parametrize("check", gpu.CHECKS, ids=lambda check: check.id)
def test_no_gpu_nodes_skip_every_gpu_check(check: Any) -> None:
    text = spec_text().replace(", gpus: {count: 2, model: h100}", "")
    ctx = StubContext(text, {})
    outcome = check.run(ctx)
    assert outcome.overall is Status.SKIP
    assert outcome.message == NO_GPU_NODES


def test_fake_nodes_beside_real_ones_are_skipped_not_passed() -> None:
    extra = "  - {name: sim01, address: 10.0.0.21, roles: [compute], gpus: {count: 1, fake: true}}"
    ctx = StubContext(spec_text(extra_nodes=extra), {"smi": ok(SMI_H100_X2)})
    outcome = nvidia_smi_inventory(ctx)
    rows = by_node(outcome)
    assert rows["sim01"].status is Status.SKIP
    assert rows["gpu01"].status is Status.PASS
    assert [call[1] for call in ctx.calls] == ["gpu01", "gpu02"]


def test_real_gpu_nodes_are_those_with_gpus_that_are_not_fake() -> None:
    extra = "  - {name: sim01, address: 10.0.0.21, roles: [compute], gpus: {count: 1, fake: true}}"
    topology = StubContext(spec_text(extra_nodes=extra), {}).topology
    by_name = topology.by_name()
    assert [node.name for node in topology.real_gpu_nodes] == ["gpu01", "gpu02"]
    assert by_name["gpu01"].has_real_gpus
    assert not by_name["sim01"].has_real_gpus  # fake GPUs
    assert not by_name["head"].has_real_gpus  # no GPUs at all


def test_check_ids_and_levels_are_stable() -> None:
    assert [(check.id, check.level) for check in gpu.CHECKS] == [
        ("gpu.nvidia-smi", Level.QUICK),
        ("gpu.isolation", Level.STANDARD),
        ("gpu.driver", Level.STANDARD),
        ("gpu.matmul", Level.FULL),
        ("gpu.membw", Level.FULL),
        ("gpu.nccl", Level.FULL),
        ("gpu.ddp", Level.FULL),
    ]


# --- isolation ---------------------------------------------------------------------------

ISOLATED = "CUDA_VISIBLE_DEVICES=0\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1f3a52-8e1b-2f0e-9d4c-1a2b3c4d5e6f)\n"
UNCONSTRAINED = (
    "CUDA_VISIBLE_DEVICES=0\n"
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1f3a52-8e1b-2f0e-9d4c-1a2b3c4d5e6f)\n"
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-9a8b7c6d-1e2f-3a4b-5c6d-7e8f9a0b1c2d)\n"
)
NO_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES=<unset>\n" + UNCONSTRAINED.split("\n", 1)[1]


def test_isolation_on_recorded_output() -> None:
    replies: dict[str, Reply] = {
        "isolation": {"gpu01": ok(ISOLATED), "gpu02": ok(UNCONSTRAINED)},
    }
    ctx = StubContext(spec_text(), replies)
    outcome = isolation(ctx)
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.PASS
    assert rows["gpu02"].status is Status.FAIL
    assert "sees 2 GPUs" in rows["gpu02"].message
    assert outcome.hint and "ConstrainDevices=yes" in outcome.hint
    assert {call[2]["gres"] for call in ctx.calls} == {"gpu:1"}


def test_isolation_without_cuda_visible_devices_fails() -> None:
    ctx = StubContext(spec_text(), {"isolation": ok(NO_VISIBLE_DEVICES)})
    outcome = isolation(ctx)
    assert outcome.overall is Status.FAIL
    assert "CUDA_VISIBLE_DEVICES=unset" in by_node(outcome)["gpu01"].message
    assert outcome.hint and "GresTypes=gpu" in outcome.hint


def test_isolation_without_nvidia_smi_fails_with_driver_hint() -> None:
    ctx = StubContext(spec_text(), {"isolation": ok("CUDA_VISIBLE_DEVICES=0\n" + NO_SMI + "\n")})
    outcome = isolation(ctx)
    assert outcome.overall is Status.FAIL
    assert outcome.hint and "driver" in outcome.hint


def test_parse_isolation_counts_only_gpu_lines() -> None:
    mig = ISOLATED + "  MIG 1g.10gb     Device  0: (UUID: MIG-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d)\n"
    assert parse_isolation(mig) == IsolationView("0", 1)


# --- driver ---------------------------------------------------------------------------------


def test_driver_mismatch_on_recorded_output_fails_the_odd_node_and_reuses_nvidia_smi() -> None:
    older = SMI_H100_X2.replace("550.54.15", "535.161.08")
    three = spec_text(nodes="gpu[01-03]", addresses="10.0.0.[11-13]")
    ctx = StubContext(three, {"smi": {"gpu01": ok(SMI_H100_X2), "gpu02": ok(older), "gpu03": ok(SMI_H100_X2)}})
    assert nvidia_smi_inventory(ctx).overall is Status.PASS
    outcome = driver_versions(ctx)
    rows = by_node(outcome)
    assert rows["gpu02"].status is Status.FAIL
    assert (rows["gpu02"].value, rows["gpu02"].expected) == ("535.161.08", "550.54.15")
    assert rows["gpu01"].status is Status.PASS
    assert outcome.hint and "one driver version" in outcome.hint
    assert ctx.kinds().count("smi") == 3  # once per node, shared through ctx.memo


def test_driver_outside_the_spec_branch_warns() -> None:
    older = SMI_H100_X2.replace("550.54.15", "535.161.08")
    ctx = StubContext(spec_text(), {"smi": ok(older)})
    outcome = driver_versions(ctx)
    assert outcome.overall is Status.WARN
    assert "not from branch 550" in by_node(outcome)["gpu01"].message


def test_driver_check_skips_nodes_whose_job_did_not_run_and_fails_nodes_without_nvidia_smi() -> None:
    refused = CommandResult(1, "", "srun: error: Unable to allocate resources: Requested nodes are busy\n")
    three = spec_text(nodes="gpu[01-03]", addresses="10.0.0.[11-13]")
    replies = {"gpu01": ok(SMI_H100_X2), "gpu02": ok(NO_SMI + "\n"), "gpu03": refused}
    outcome = driver_versions(StubContext(three, {"smi": replies}))
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.PASS
    assert rows["gpu02"].status is Status.FAIL
    assert rows["gpu02"].message == "no NVIDIA driver: nvidia-smi not found on the node"
    assert rows["gpu03"].status is Status.SKIP  # blamed in gpu.nvidia-smi, with the launch hint
    assert outcome.hint and "gpuclus deploy --only nvidia" in outcome.hint and "--reboot" not in outcome.hint


def test_majority_version_prefers_the_most_common_then_the_newest() -> None:
    assert majority_version(["550.54.15", "535.161.08", "550.54.15"]) == "550.54.15"
    assert majority_version(["535.161.08", "550.54.15"]) == "550.54.15"
    assert majority_version([]) is None


# --- driver state: version mismatch, no driver, pending reboot ---------------------------------
#
# The nvidia-smi job prints, after nvidia-smi's answer, the fabric state and the
# driver facts (driver_state.facts_command). Written here like the real files:
# /sys/module/nvidia/version holds the bare version; /proc/driver/nvidia/version
# as in cpnr/computing#109; the state file as the nvidia_driver role writes it
# (to_nice_json, sorted keys); nvidia-smi's mismatch words as in
# tinygrad/open-gpu-kernel-modules#47.

PROC_OPEN_550 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:20:28 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
PROC_PROPRIETARY_535 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:46 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
SMI_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n"
SRUN_EXIT_18 = "srun: error: gpu02: task 0: Exited with exit code 18\n"
FABRIC_NA = "0, N/A, N/A\n1, N/A, N/A\n"
FABRIC_READY = "0, Completed, Success\n1, Completed, Success\n"


def state_file(installed: str | None, loaded: str | None, *, reboot_needed: bool) -> str:
    verdict = "installed, reboot needed to load" if reboot_needed else "installed and loaded"
    state = {
        "branch": "550",
        "initramfs": "update-initramfs -u -k all after each change of the nouveau blacklist",
        "installed_version": installed,
        "kernel_modules": "open",
        "loaded_version": loaded,
        "module_loadable": True,
        "packages": ["cuda-drivers-550", "nvidia-persistenced"],
        "reboot_needed": reboot_needed,
        "source": "cuda_repo",
        "verdict": verdict,
    }
    return json.dumps(state, indent=4, sort_keys=True)


def facts(
    module: str | None = "550.54.15",
    libraries: tuple[str, ...] = ("550.54.15",),
    state: str | None = None,
    proc: str | None = None,
) -> str:
    """What facts_command prints on a node: each source after '== <source>', absent ones left out."""
    parts = []
    if module:
        parts.append(f"== /sys/module/nvidia/version\n{module}\n\n")
        parts.append(f"== /proc/driver/nvidia/version\n{proc or PROC_OPEN_550.replace('550.54.15', module)}\n")
    elif proc:
        parts.append(f"== /proc/driver/nvidia/version\n{proc}\n")
    if state is not None:
        parts.append(f"== /var/lib/gpuclus/nvidia-driver.json\n{state}\n\n")
    if module:
        parts.append("== /dev/nvidiactl\n")
    parts += [f"== lib /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}\n" for version in libraries]
    return "".join(parts)


def job(smi: str = SMI_H100_X2, fabric: str | None = FABRIC_NA, driver: str | None = None) -> str:
    """The nvidia-smi job's whole output; ``fabric`` None when nvidia-smi failed (the job skips that part)."""
    fabric_part = f"{FABRIC_MARK}\n{fabric}" if fabric is not None else ""
    return f"{smi}{fabric_part}{FACTS_MARK}\n{facts() if driver is None else driver}"


def mismatch_job(driver: str) -> CommandResult:
    return CommandResult(18, job(SMI_MISMATCH, None, driver), SRUN_EXIT_18)


def no_driver_job(driver: str = "") -> CommandResult:
    return CommandResult(9, job(SMI_FAILED, None, driver), "srun: error: gpu02: task 0: Exited with exit code 9\n")


def test_parse_driver_facts_reads_module_libraries_device_and_state_file() -> None:
    text = facts(
        module="535.161.08",
        libraries=("535.161.08", "550.54.15"),
        state=state_file("550.54.15", "535.161.08", reboot_needed=True),
    )
    found = parse_driver_facts(text)
    assert found.loaded == "535.161.08"
    assert found.libraries == ("550.54.15", "535.161.08")  # newest first
    assert found.installed == "550.54.15"
    assert found.control_device and not found.no_driver
    assert found.state == StateFile("550.54.15", "535.161.08", "installed, reboot needed to load", True)
    assert found.reboot_pending


@pytest.mark.parametrize(("proc", "version"), [(PROC_OPEN_550, "550.54.15"), (PROC_PROPRIETARY_535, "535.161.08")])
def test_parse_driver_facts_reads_proc_when_sys_module_is_missing(proc: str, version: str) -> None:
    found = parse_driver_facts(facts(module=None, proc=proc, libraries=()))
    assert found.loaded == version


def test_parse_driver_facts_of_a_node_without_driver() -> None:
    found = parse_driver_facts(facts(module=None, libraries=()))
    assert found == DriverFacts()
    assert found.no_driver and found.installed is None and not found.reboot_pending
    assert found.mismatch_text() == "loaded module version unreadable, installed version unknown"


def test_state_file_that_is_not_json_is_ignored() -> None:
    found = parse_driver_facts("== /var/lib/gpuclus/nvidia-driver.json\n{not json\n== /dev/nvidiactl\n")
    assert found.state is None and found.control_device
    assert parse_state_file('["a list"]') is None


def test_installed_version_prefers_library_files_then_the_state_file_unless_nvidia_smi_contradicts_it() -> None:
    state = StateFile(installed_version="550.54.15", reboot_needed=True)
    assert DriverFacts(libraries=("550.90.07",), state=state).installed == "550.90.07"
    assert DriverFacts(state=state, nvml_library="550.54").installed == "550.54.15"
    assert DriverFacts(state=state, nvml_library="560.35").installed == "560.35"  # the state file is stale
    assert DriverFacts(nvml_library="560.35").installed == "560.35"


def test_a_reboot_is_pending_only_while_the_loaded_module_is_not_the_installed_driver() -> None:
    waiting = StateFile(installed_version="550.90.07", reboot_needed=True)
    assert DriverFacts(loaded="550.54.15", state=waiting).reboot_pending
    assert DriverFacts(loaded=None, state=waiting).reboot_pending
    # The file predates the reboot that loaded 550.90.07: nothing is pending any more.
    assert not DriverFacts(loaded="550.90.07", state=waiting).reboot_pending
    assert not DriverFacts(loaded="550.54.15", state=StateFile("550.90.07", reboot_needed=False)).reboot_pending
    assert same_version("570.124", "570.124.06") and not same_version("570.124", "570.86.10")


def test_facts_command_runs_for_real_on_a_tree_of_files(tmp_path: Any) -> None:
    root = str(tmp_path)
    files = {
        "sys/module/nvidia/version": "535.161.08\n",
        "var/lib/gpuclus/nvidia-driver.json": state_file("550.54.15", "535.161.08", reboot_needed=True) + "\n",
        "dev/nvidiactl": "",
        "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15": "",
        "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1": "",  # the soname link: no version in it
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    result = subprocess.run(["sh", "-c", facts_command(root)], capture_output=True, text=True, check=False)
    found = parse_driver_facts(result.stdout)
    assert (found.loaded, found.libraries, found.control_device) == ("535.161.08", ("550.54.15",), True)
    assert found.state is not None and found.state.reboot_needed and found.reboot_pending
    empty = tmp_path / "empty"
    empty.mkdir()
    result = subprocess.run(["sh", "-c", facts_command(str(empty))], capture_output=True, text=True, check=False)
    assert result.stdout == "" and parse_driver_facts(result.stdout).no_driver


STAND_IN_SMI = r"""#!/bin/sh
# A stand-in for nvidia-smi on a driver without the fabric query fields; the
# "Clocks Event Reasons" blocks, made up here, carry State lines that are not the fabric's.
case "$*" in
  *fabric.state*) echo 'Field "fabric.state" is not a valid field to query.'; echo; exit 2 ;;
  -q) printf '%s\n' "GPU 00000000:18:00.0" "    Persistence Mode                      : Enabled" \
        "    Clocks Event Reasons" "        State                             : Active" \
        "    Fabric" "        State                             : In Progress" \
        "        Status                            : N/A" "    Clocks Event Reasons" \
        "        State                             : Idle" \
        "GPU 00000000:2A:00.0" "    Fabric" \
        "        State                             : Completed" "        Status                            : Success" ;;
  *) printf '%s\n' "0, NVIDIA H100 80GB HBM3, GPU-1, 550.54.15, 81559, Enabled" \
        "1, NVIDIA H100 80GB HBM3, GPU-2, 550.54.15, 81559, Disabled" ;;
esac
"""
STAND_IN_MISMATCH = """#!/bin/sh
echo 'Failed to initialize NVML: Driver/library version mismatch'
echo 'NVML library version: 550.54'
exit 18
"""


def run_smi_job(tmp_path: Any, stand_in: str) -> CommandResult:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(stand_in)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    command = smi_command(str(tmp_path / "node"))
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)
    return CommandResult(result.returncode, result.stdout, result.stderr)


def test_smi_job_with_a_stand_in_nvidia_smi_reads_the_fabric_from_the_full_query_on_older_drivers(
    tmp_path: Any,
) -> None:
    result = run_smi_job(tmp_path, STAND_IN_SMI)
    assert result.exit_status == 0
    answer = interpret_smi(result)
    assert [gpu.persistence for gpu in answer.gpus] == ["Enabled", "Disabled"]
    # The "State" of Clocks Event Reasons is not the fabric's: awk keeps only each Fabric block's two lines.
    assert answer.fabric == (FabricInfo(0, "In Progress", "N/A"), FabricInfo(1, "Completed", "Success"))
    fabric_part = result.stdout.split(FABRIC_MARK + "\n")[1].split(FACTS_MARK)[0]
    assert [" ".join(line.split()) for line in fabric_part.splitlines()[2:]] == [
        "GPU 00000000:18:00.0",
        "State : In Progress",
        "Status : N/A",
        "GPU 00000000:2A:00.0",
        "State : Completed",
        "Status : Success",
    ]


def test_smi_job_with_a_stand_in_nvidia_smi_keeps_the_mismatch_exit_code_and_words(tmp_path: Any) -> None:
    result = run_smi_job(tmp_path, STAND_IN_MISMATCH)
    assert result.exit_status == 18
    answer = interpret_smi(result)
    assert answer.mismatch and answer.error is not None
    assert answer.error.startswith("Failed to initialize NVML: Driver/library version mismatch")
    assert answer.facts.nvml_library == "550.54"


def test_version_mismatch_fails_both_checks_with_the_versions_and_the_reboot_hint() -> None:
    old_module = facts(module="535.161.08", libraries=("550.54.15",))
    ctx = StubContext(spec_text(), {"smi": {"gpu01": ok(job()), "gpu02": mismatch_job(old_module)}})
    inventory = nvidia_smi_inventory(ctx)
    row = by_node(inventory)["gpu02"]
    assert row.status is Status.FAIL
    assert row.message == (
        "Failed to initialize NVML: Driver/library version mismatch "
        "(kernel module 535.161.08 loaded, libraries 550.54.15 installed)"
    )
    assert inventory.hint == REBOOT_HINT  # not the install hint: the driver is there, the old module too
    outcome = driver_versions(ctx)
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.PASS
    assert rows["gpu02"].status is Status.FAIL
    assert (rows["gpu02"].value, rows["gpu02"].expected) == ("535.161.08", "550.54.15")
    assert rows["gpu02"].message.startswith("driver/library version mismatch: kernel module 535.161.08 loaded")
    assert outcome.hint and "`gpuclus deploy --reboot`" in outcome.hint and "--only nvidia" not in outcome.hint
    assert ctx.kinds().count("smi") == 2  # the facts came with nvidia-smi's own job


def test_version_mismatch_takes_the_installed_version_from_the_state_file_without_library_files() -> None:
    driver = facts(module="535.161.08", libraries=(), state=state_file("550.54.15", None, reboot_needed=True))
    row = by_node(driver_versions(StubContext(spec_text(), {"smi": mismatch_job(driver)})))["gpu01"]
    assert (row.status, row.value, row.expected) == (Status.FAIL, "535.161.08", "550.54.15")


def test_mismatch_is_told_by_its_words_whatever_the_exit_code() -> None:
    words_only = CommandResult(1, job(SMI_MISMATCH, None, facts(module="535.161.08")), "")
    assert interpret_smi(words_only).mismatch
    code_only = CommandResult(18, job("NVIDIA-SMI has failed for another reason\n", None, facts()), "")
    assert not interpret_smi(code_only).mismatch


def test_no_driver_keeps_the_install_hint() -> None:
    ctx = StubContext(spec_text(), {"smi": no_driver_job()})
    inventory = nvidia_smi_inventory(ctx)
    assert inventory.hint == DRIVER_HINT
    outcome = driver_versions(ctx)
    row = by_node(outcome)["gpu01"]
    assert row.status is Status.FAIL
    assert row.message.startswith("no NVIDIA driver loaded (no kernel module, no /dev/nvidiactl): NVIDIA-SMI has")
    assert outcome.hint == DRIVER_HINT


def test_a_control_device_without_a_loaded_module_is_not_called_no_driver() -> None:
    # /dev/nvidiactl stays after the module is unloaded by hand; gpu.driver leaves that node to gpu.nvidia-smi.
    ctx = StubContext(spec_text(), {"smi": no_driver_job("== /dev/nvidiactl\n")})
    assert by_node(driver_versions(ctx))["gpu01"].status is Status.SKIP
    assert nvidia_smi_inventory(ctx).hint == DRIVER_HINT


def test_driver_installed_but_not_loaded_yet_names_the_reboot_too() -> None:
    waiting = facts(module=None, libraries=("535.183.01",), state=state_file("535.183.01", None, reboot_needed=True))
    ctx = StubContext(spec_text(), {"smi": no_driver_job(waiting)})
    row = by_node(driver_versions(ctx))["gpu01"]
    assert row.status is Status.FAIL
    assert row.message.endswith("(driver 535.183.01 is installed and loads at the next reboot)")
    hint = nvidia_smi_inventory(ctx).hint
    assert hint and DRIVER_HINT in hint and REBOOT_HINT in hint


def test_pending_reboot_while_nvidia_smi_still_works_warns() -> None:
    pending = facts(state=state_file("550.90.07", "550.54.15", reboot_needed=True))
    ctx = StubContext(spec_text(), {"smi": {"gpu01": ok(job(driver=pending)), "gpu02": ok(job())}})
    outcome = driver_versions(ctx)
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.WARN
    assert rows["gpu01"].message == "reboot pending: driver 550.90.07 is installed, module 550.54.15 is loaded"
    assert rows["gpu02"].status is Status.PASS
    assert outcome.hint == REBOOT_HINT
    assert nvidia_smi_inventory(ctx).overall is Status.PASS  # nvidia-smi itself is fine


def test_state_file_from_before_the_reboot_is_not_a_pending_reboot() -> None:
    stale = facts(state=state_file("550.54.15", None, reboot_needed=True))  # written before the reboot
    outcome = driver_versions(StubContext(spec_text(), {"smi": ok(job(driver=stale))}))
    assert outcome.overall is Status.PASS
    assert outcome.hint is None


# --- persistence mode and the NVSwitch fabric --------------------------------------------------


def test_persistence_mode_disabled_warns_with_the_persistenced_hint() -> None:
    disabled = SMI_H100_X2.replace("1c2d, 550.54.15, 81559, Enabled", "1c2d, 550.54.15, 81559, Disabled")
    ctx = StubContext(spec_text(), {"smi": {"gpu01": ok(job(disabled)), "gpu02": ok(job())}})
    outcome = nvidia_smi_inventory(ctx)
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.WARN
    assert rows["gpu01"].message.startswith("persistence mode disabled on GPU 1 (2 x NVIDIA H100")
    assert rows["gpu02"].status is Status.PASS
    assert outcome.hint and "`systemctl enable --now nvidia-persistenced`" in outcome.hint


def test_persistence_mode_not_reported_is_not_judged() -> None:
    unknown = SMI_H100_X2.replace("Enabled", "[N/A]")
    outcome = nvidia_smi_inventory(StubContext(spec_text(), {"smi": ok(job(unknown))}))
    assert outcome.overall is Status.PASS


def test_a_count_failure_outweighs_persistence_mode() -> None:
    one_off = SMI_H100_X1.replace("Enabled", "Disabled")
    row = by_node(nvidia_smi_inventory(StubContext(spec_text(), {"smi": ok(job(one_off))})))["gpu01"]
    assert row.status is Status.FAIL
    assert "lists 1 GPU(s)" in row.message and "persistence mode disabled on GPU 0" in row.message


@pytest.mark.parametrize(
    ("fabric", "said"),
    [
        ("0, Completed, Success\n1, In Progress, N/A\n", "NVSwitch fabric not ready on GPU 1 (In Progress, N/A)"),
        ("0, Not Started, N/A\n1, Not Started, N/A\n", "GPU 0 (Not Started, N/A), GPU 1 (Not Started, N/A)"),
        ("0, Completed, Success\n1, Completed, Insufficient Resources\n", "GPU 1 (Completed, Insufficient Resources)"),
    ],
)
def test_nvswitch_fabric_not_completed_fails_with_the_fabricmanager_hint(fabric: str, said: str) -> None:
    outcome = nvidia_smi_inventory(StubContext(spec_text(), {"smi": ok(job(fabric=fabric))}))
    row = by_node(outcome)["gpu01"]
    assert row.status is Status.FAIL
    assert said in row.message
    assert outcome.hint and "`systemctl status nvidia-fabricmanager`" in outcome.hint
    assert "exactly the driver's version" in outcome.hint


def test_nvswitch_fabric_completed_passes_and_no_fabric_is_not_judged() -> None:
    ready = by_node(nvidia_smi_inventory(StubContext(spec_text(), {"smi": ok(job(fabric=FABRIC_READY))})))
    assert ready["gpu01"].status is Status.PASS
    assert ready["gpu01"].message.endswith(", NVSwitch fabric ready")
    for no_fabric in (FABRIC_NA, "0, [N/A], [N/A]\n1, [N/A], [N/A]\n", ""):
        rows = by_node(nvidia_smi_inventory(StubContext(spec_text(), {"smi": ok(job(fabric=no_fabric))})))
        assert rows["gpu01"].status is Status.PASS
        assert "fabric" not in rows["gpu01"].message


def test_parse_fabric_query_and_full_query_blocks() -> None:
    assert parse_fabric("0, Completed, Success\n1, In Progress, N/A\n") == [
        FabricInfo(0, "Completed", "Success"),
        FabricInfo(1, "In Progress", "N/A"),
    ]
    full = (
        'Field "fabric.state" is not a valid field to query.\n\n'
        "GPU 00000000:18:00.0\n"
        "        State                             : Completed\n"
        "        Status                            : Success\n"
        "GPU 00000000:2A:00.0\n"
        "        State                             : N/A\n"
        "        Status                            : N/A\n"
    )
    fabric = parse_fabric(full)
    assert fabric == [FabricInfo(0, "Completed", "Success"), FabricInfo(1, "N/A", "N/A")]
    assert fabric[0].ready and fabric[0].reported and not fabric[1].reported
    assert parse_fabric("") == []


# --- thresholds ---------------------------------------------------------------------------


@pytest.mark.parametrize(("gbps", "expected"), [(100, 10.0), (200, 20.0), (400, 40.0)])
def test_infiniband_threshold_is_about_80_percent_of_line_rate_per_nic(gbps: int, expected: float) -> None:
    assert thresholds.inter_node_busbw_bands(Fabric.INFINIBAND, gbps, 1).pass_min == expected
    assert thresholds.inter_node_busbw_bands("infiniband", gbps, 8).pass_min == expected * 8


@pytest.mark.parametrize("fabric", [Fabric.ETHERNET, Fabric.ROCE])
def test_ethernet_and_roce_warn_under_70_and_fail_under_50_percent(fabric: Fabric) -> None:
    bands = thresholds.inter_node_busbw_bands(fabric, 100, 2)  # 25 GB/s line rate
    assert (bands.pass_min, bands.fail_below) == (17.5, 12.5)
    assert bands.grade(18.0) is Status.PASS
    assert bands.grade(17.4) is Status.WARN
    assert bands.grade(12.5) is Status.WARN
    assert bands.grade(12.4) is Status.FAIL
    assert bands.expected == ">= 17.5"


def test_ten_gigabit_ethernet_bands() -> None:
    bands = thresholds.inter_node_busbw_bands(Fabric.ETHERNET, 10, 1)
    assert thresholds.line_rate_gbs(10, 1) == 1.25
    assert (bands.pass_min, bands.fail_below) == (0.88, 0.62)


def test_bus_bandwidth_formula() -> None:
    assert thresholds.bus_bandwidth(100.0, 8) == pytest.approx(175.0)
    assert thresholds.bus_bandwidth(100.0, 2) == pytest.approx(100.0)
    assert thresholds.bus_bandwidth(100.0, 1) == 0.0
    with pytest.raises(ValueError):
        thresholds.bus_bandwidth(1.0, 0)
    # The probe's own copy agrees (it ships without gpuclus).
    for ranks in (1, 2, 3, 8, 16):
        assert nccl_probe.bus_bandwidth(42.0, ranks) == pytest.approx(thresholds.bus_bandwidth(42.0, ranks))


@pytest.mark.parametrize(
    ("name", "tflops", "gbs"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0, 3350.0),
        ("NVIDIA H100 PCIe", 756.0, 2000.0),
        ("NVIDIA H100 NVL", 835.0, 3900.0),
        ("NVIDIA H200", 989.0, 4800.0),
        ("NVIDIA GH200 480GB", 989.0, 4000.0),
        ("NVIDIA A100-SXM4-80GB", 312.0, 2039.0),
        ("NVIDIA A100 80GB PCIe", 312.0, 1935.0),
        ("NVIDIA A100-PCIE-40GB", 312.0, 1555.0),
        ("NVIDIA L40S", 362.0, 864.0),
        ("NVIDIA L40", 181.0, 864.0),
        ("NVIDIA A10", 125.0, 600.0),
        ("NVIDIA GeForce RTX 4090", 165.2, 1008.0),
        ("NVIDIA RTX 6000 Ada Generation", 364.2, 960.0),
        ("NVIDIA RTX A6000", 154.8, 768.0),
        ("Tesla V100-SXM2-32GB", 125.0, 900.0),
    ],
)
def test_ceiling_tables(name: str, tflops: float, gbs: float) -> None:
    assert thresholds.matmul_peak_tflops(name) == tflops
    assert thresholds.memory_peak_gbs(name) == gbs


def test_unknown_gpu_has_no_ceiling_and_passes_when_finite() -> None:
    assert thresholds.matmul_peak_tflops("NVIDIA Future GPU X1") is None
    assert thresholds.grade_against_peak(1.0, None) is Status.PASS


def test_grade_against_peak_ratios() -> None:
    assert thresholds.PEAK_PASS_RATIO == 0.5 and thresholds.PEAK_FAIL_RATIO == 0.2
    assert thresholds.grade_against_peak(500.0, 1000.0) is Status.PASS
    assert thresholds.grade_against_peak(499.0, 1000.0) is Status.WARN
    assert thresholds.grade_against_peak(200.0, 1000.0) is Status.WARN
    assert thresholds.grade_against_peak(199.0, 1000.0) is Status.FAIL


def test_scaling_efficiency() -> None:
    assert thresholds.scaling_efficiency(1800.0, 100.0, 20) == pytest.approx(0.9)
    assert thresholds.grade_scaling(0.5) is Status.PASS
    assert thresholds.grade_scaling(0.49) is Status.WARN
    assert ddp_probe.efficiency(1800.0, 100.0, 20) == pytest.approx(0.9)


# --- nccl-tests output (written like all_reduce_perf 2.13 prints it) -----------------------

NCCL_TESTS_8_GPUS = (
    (
        "# nThread 1 nGpus 8 minBytes 268435456 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0\n"
    )
    + """\
#
# Using devices
#  Rank  0 Group  0 Pid 412233 on      gpu01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid 412233 on      gpu01 device  1 [0x2a] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid 412233 on      gpu01 device  2 [0x3a] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid 412233 on      gpu01 device  3 [0x5d] NVIDIA H100 80GB HBM3
#  Rank  4 Group  0 Pid 412233 on      gpu01 device  4 [0x9a] NVIDIA H100 80GB HBM3
#  Rank  5 Group  0 Pid 412233 on      gpu01 device  5 [0xab] NVIDIA H100 80GB HBM3
#  Rank  6 Group  0 Pid 412233 on      gpu01 device  6 [0xba] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid 412233 on      gpu01 device  7 [0xdb] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   268435456      67108864     float     sum      -1   1156.2  232.17  406.30      0   1151.8  233.06  407.86      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 407.08
#
# Collective test concluded: all_reduce_perf
#
"""
)


def test_parse_nccl_tests_recorded_output() -> None:
    run = parse_nccl_tests(NCCL_TESTS_8_GPUS)
    assert run.ranks == 8
    assert run.avg_busbw == pytest.approx(407.08)
    assert run.wrong == 0
    assert run.runs == 1
    assert run.sizes == (268435456,)
    # The busbw column is algbw x 2(n-1)/n.
    assert thresholds.bus_bandwidth(232.17, 8) == pytest.approx(406.30, abs=0.01)


def test_parse_nccl_tests_counts_wrong_elements_and_out_of_bounds() -> None:
    broken = NCCL_TESTS_8_GPUS.replace("406.30      0", "406.30     12").replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED"
    )
    assert parse_nccl_tests(broken).wrong == 15


def test_parse_nccl_tests_old_float_error_column() -> None:
    old = (
        "#  Rank  0 Group  0 Pid  1234 on gpu01 device  0 [0x18] Tesla V100-SXM2-32GB\n"
        "#  Rank  1 Group  0 Pid  1234 on gpu01 device  1 [0x19] Tesla V100-SXM2-32GB\n"
        "   268435456      67108864   float     sum   2793.1   96.11   96.11  0e+00   2790.0   96.21   96.21  0e+00\n"
        "# Out of bounds values : 0 OK\n"
        "# Avg bus bandwidth    : 96.16\n"
    )
    run = parse_nccl_tests(old)
    assert (run.ranks, run.wrong, run.avg_busbw) == (2, 0, pytest.approx(96.16))


def test_nccl_tests_failure_line_is_kept() -> None:
    text = (
        "# nThread 1 nGpus 2 minBytes 268435456 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20\n"
        "gpu01: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO for details)'\n"
        " .. gpu01 pid 5012: Test failure common.cu:891\n"
    )
    ranks_2 = thresholds.intra_node_busbw_bands()
    part = judge_all_reduce(CommandResult(3, text, ""), 2, ranks_2, "within node")
    assert part.status is Status.FAIL
    assert "unhandled system error" in part.message


# --- probe JSON --------------------------------------------------------------------------


def test_parse_probe_output_finds_marked_json_lines_only() -> None:
    text = (
        "some warning from torch\n"
        + probe_line({"probe": "matmul", "gpus": []})
        + f"0: {probes.MARKER} {{not json\n"
        + f"1: {probes.MARKER} {json.dumps({'probe': 'nccl', 'error': 'no-torch', 'rank': 1})}\n"
    )
    payloads = parse_probe_output(text)
    assert payloads == [{"probe": "matmul", "gpus": []}, {"probe": "nccl", "error": "no-torch", "rank": 1}]


def matmul_payload(*figures: float, name: str = "NVIDIA H100 80GB HBM3", ok_result: bool = True) -> dict[str, Any]:
    return {
        "probe": "matmul",
        "gpus": [
            {
                "index": i,
                "name": name,
                "dtype": "bfloat16",
                "tflops": value,
                "rel_error": 0.0021,
                "finite": True,
                "ok": ok_result,
            }
            for i, value in enumerate(figures)
        ],
    }


def test_matmul_on_recorded_probe_output_passes_at_half_the_peak() -> None:
    ctx = StubContext(spec_text(), {"gpu_probe matmul": ok(probe_line(matmul_payload(702.4, 689.9)))})
    outcome = matmul(ctx)
    assert outcome.overall is Status.PASS
    row = by_node(outcome)["gpu01"]
    assert (row.value, row.unit) == (689.9, "TFLOP/s")
    assert row.expected == ">= 494 (50% of 989)"
    assert "70% of the 989 peak" in row.message


def test_matmul_slow_gpu_warns_and_very_slow_fails_naming_the_gpu() -> None:
    replies: dict[str, Reply] = {
        "gpu_probe matmul": {
            "gpu01": ok(probe_line(matmul_payload(702.4, 301.0))),
            "gpu02": ok(probe_line(matmul_payload(150.0, 700.0))),
        }
    }
    outcome = matmul(StubContext(spec_text(), replies))
    rows = by_node(outcome)
    assert rows["gpu01"].status is Status.WARN and "GPU 1: 301 TFLOP/s (30% of 989)" in rows["gpu01"].message
    assert rows["gpu02"].status is Status.FAIL and "GPU 0" in rows["gpu02"].message
    assert outcome.hint and "nvidia-smi -q -d PERFORMANCE" in outcome.hint


def test_matmul_wrong_result_fails_however_fast() -> None:
    payload = matmul_payload(900.0, 900.0, ok_result=False)
    outcome = matmul(StubContext(spec_text(), {"gpu_probe matmul": ok(probe_line(payload))}))
    assert outcome.overall is Status.FAIL
    assert "wrong result (relative error 0.0021)" in by_node(outcome)["gpu01"].message


def test_matmul_unknown_model_passes_with_no_ceiling() -> None:
    payload = matmul_payload(12.5, 12.0, name="NVIDIA Future GPU X1")
    outcome = matmul(StubContext(spec_text(gpus="{count: 2}"), {"gpu_probe matmul": ok(probe_line(payload))}))
    row = by_node(outcome)["gpu01"]
    assert row.status is Status.PASS
    assert row.expected == "no ceiling known"


def test_matmul_probe_seeing_fewer_gpus_fails() -> None:
    outcome = matmul(StubContext(spec_text(), {"gpu_probe matmul": ok(probe_line(matmul_payload(700.0)))}))
    assert "saw 1 GPU(s)" in by_node(outcome)["gpu01"].message


@pytest.mark.parametrize("code", ["no-torch", "no-torch-cuda", "no-python"])
def test_missing_pytorch_skips_with_a_hint(code: str) -> None:
    reply = ok(probe_line({"probe": "matmul", "error": code}))
    outcome = matmul(StubContext(spec_text(), {"gpu_probe matmul": reply}))
    assert outcome.overall is Status.SKIP
    assert TORCH_HINT in outcome.message
    assert all(TORCH_HINT in row.message for row in outcome.nodes)


def test_cuda_unavailable_in_pytorch_fails() -> None:
    reply = ok(probe_line({"probe": "membw", "error": "cuda-unavailable", "torch": "2.3.1"}))
    outcome = memory_bandwidth(StubContext(spec_text(), {"gpu_probe membw": reply}))
    assert outcome.overall is Status.FAIL
    assert outcome.hint and "torch.version.cuda" in outcome.hint


def test_probe_that_printed_nothing_fails_with_the_error_line() -> None:
    crashed = CommandResult(
        1,
        "",
        "Traceback ...\nRuntimeError: CUDA error: an illegal memory access\n"
        "srun: error: gpu01: task 0: Exited with exit code 1\n",
    )
    outcome = matmul(StubContext(spec_text(), {"gpu_probe matmul": crashed}))
    assert outcome.overall is Status.FAIL
    assert "CUDA error" in by_node(outcome)["gpu01"].message
    timed_out = matmul(StubContext(spec_text(), {"gpu_probe matmul": CommandResult(TIMED_OUT, "", "")}))
    assert "time limit" in timed_out.nodes[0].message


def test_membw_on_recorded_probe_output() -> None:
    payload = {
        "probe": "membw",
        "gpus": [
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "gbs": 2905.3, "finite": True, "ok": True},
            {"index": 1, "name": "NVIDIA H100 80GB HBM3", "gbs": 2890.7, "finite": True, "ok": True},
        ],
    }
    outcome = memory_bandwidth(StubContext(spec_text(), {"gpu_probe membw": ok(probe_line(payload))}))
    row = by_node(outcome)["gpu02"]
    assert row.status is Status.PASS
    assert (row.value, row.unit, row.expected) == (2890.7, "GB/s", ">= 1675 (50% of 3350)")


# --- NCCL --------------------------------------------------------------------------------


def nccl_payload(busbw: float, ranks: int, wrong: int = 0) -> dict[str, Any]:
    return {
        "probe": "nccl",
        "tool": "torch",
        "ranks": ranks,
        "busbw_gbs": busbw,
        "algbw_gbs": busbw / 2,
        "wrong": wrong,
    }


def nccl_replies(intra: CommandResult, inter: CommandResult, detect: str = "NCCL_TESTS=\n") -> dict[str, Reply]:
    def nccl(key: str, options: dict[str, Any]) -> CommandResult:
        return inter if "," in key else intra

    return {"detect": ok(detect), "nccl_probe": nccl}


def test_nccl_torch_probe_within_and_between_nodes_on_infiniband() -> None:
    replies = nccl_replies(ok(probe_line(nccl_payload(365.2, 2))), ok(probe_line(nccl_payload(41.5, 4))))
    ctx = StubContext(spec_text(network="{fabric: infiniband, link_gbps: 200, nics_per_node: 4}"), replies)
    outcome = nccl_all_reduce(ctx)
    row = by_node(outcome)["gpu01"]
    # Two GPUs per node can drive two of the four NICs: 2 x 200G x 80 % = 40 GB/s.
    assert row.status is Status.PASS
    assert (row.value, row.expected) == (41.5, ">= 40")
    assert "within node: 365.2 GB/s" in row.message and "with gpu02: 41.5 GB/s" in row.message
    pair = [call for call in ctx.calls if call[1] == "gpu01,gpu02"]
    assert pair and pair[0][2]["ntasks_per_node"] == 2 and pair[0][2]["gres"] == "gpu:2"
    intra = [call for call in ctx.calls if call[0] == "nccl_probe" and call[1] == "gpu01"]
    assert intra[0][2] == {"gres": "gpu:2", "ntasks_per_node": 2}


def test_nccl_slow_ethernet_between_nodes_warns_then_fails() -> None:
    network = "{fabric: ethernet, link_gbps: 100, nics_per_node: 1}"  # 12.5 GB/s line rate
    warn = nccl_all_reduce(
        StubContext(
            spec_text(network=network),
            nccl_replies(ok(probe_line(nccl_payload(20.0, 2))), ok(probe_line(nccl_payload(7.0, 4)))),
        )
    )
    assert warn.overall is Status.WARN
    assert warn.hint and "NCCL_DEBUG=INFO" in warn.hint
    fail = nccl_all_reduce(
        StubContext(
            spec_text(network=network),
            nccl_replies(ok(probe_line(nccl_payload(20.0, 2))), ok(probe_line(nccl_payload(3.1, 4)))),
        )
    )
    assert fail.overall is Status.FAIL
    assert by_node(fail)["gpu02"].value == 3.1


def test_nccl_wrong_all_reduce_result_fails() -> None:
    replies = nccl_replies(ok(probe_line(nccl_payload(365.2, 2, wrong=1024))), ok(probe_line(nccl_payload(41.5, 4))))
    outcome = nccl_all_reduce(StubContext(spec_text(), replies))
    assert outcome.overall is Status.FAIL
    assert "1024 wrong element(s)" in by_node(outcome)["gpu01"].message
    assert outcome.hint and "corrupts data" in outcome.hint


def test_nccl_uses_nccl_tests_within_a_node_when_present() -> None:
    two_gpus = NCCL_TESTS_8_GPUS.replace("nGpus 8", "nGpus 2")
    two_gpus = "\n".join(line for line in two_gpus.splitlines() if not any(f"Rank  {r} " in line for r in range(2, 8)))
    replies: dict[str, Reply] = {
        "detect": ok("NCCL_TESTS=/usr/local/bin/all_reduce_perf\n"),
        "nccl-tests": ok(two_gpus),
        "nccl_probe": ok(probe_line(nccl_payload(85.0, 4))),  # no MPI build: the pair uses the torch probe
    }
    ctx = StubContext(spec_text(), replies)
    outcome = nccl_all_reduce(ctx)
    assert outcome.overall is Status.PASS
    intra = [call for call in ctx.calls if call[0] == "nccl-tests"]
    assert [call[2] for call in intra] == [{"gres": "gpu:2", "ntasks_per_node": 1}] * 2
    assert "nccl-tests, 2 ranks" in by_node(outcome)["gpu01"].message


def test_nccl_tests_with_mpi_runs_between_nodes_under_pmix() -> None:
    replies: dict[str, Reply] = {
        "detect": ok("NCCL_TESTS=/opt/nccl-tests/build/all_reduce_perf\nNCCL_TESTS_MPI=1\n"),
        "nccl-tests": lambda key, options: ok(
            NCCL_TESTS_8_GPUS
            if "," not in key
            else NCCL_TESTS_8_GPUS.replace("nGpus 8", "nGpus 1").replace("407.08", "38.2")
        ),
    }
    ctx = StubContext(
        spec_text(gpus="{count: 8, model: h100}", network="{fabric: infiniband, link_gbps: 400, nics_per_node: 8}"),
        replies,
    )
    outcome = nccl_all_reduce(ctx)
    pair = next(call for call in ctx.calls if call[1] == "gpu01,gpu02")
    assert pair[2]["extra"] == ("--mpi=pmix",) and pair[2]["ntasks_per_node"] == 8
    # 8 rank lines, but the pair has 16 ranks: counted as a mismatch, not a pass.
    assert by_node(outcome)["gpu01"].status is Status.FAIL


def test_nccl_one_gpu_nodes_skip_within_and_measure_between() -> None:
    replies = nccl_replies(ok(""), ok(probe_line(nccl_payload(11.0, 2))))
    ctx = StubContext(
        spec_text(gpus="{count: 1}", network="{fabric: infiniband, link_gbps: 100, nics_per_node: 4}"), replies
    )
    outcome = nccl_all_reduce(ctx)
    row = by_node(outcome)["gpu02"]
    assert row.status is Status.PASS and row.expected == ">= 10"  # one GPU drives one NIC
    assert "one GPU" in row.message


def test_nccl_no_torch_skips() -> None:
    no_torch = ok(
        probe_line({"probe": "nccl", "error": "no-torch", "rank": 0})
        + probe_line({"probe": "nccl", "error": "no-torch", "rank": 1})
    )
    outcome = nccl_all_reduce(StubContext(spec_text(), nccl_replies(no_torch, no_torch)))
    assert outcome.overall is Status.SKIP
    assert TORCH_HINT in by_node(outcome)["gpu01"].message


def test_node_pairs_cover_every_node() -> None:
    ctx = StubContext(spec_text(nodes="gpu[01-05]", addresses="10.0.0.[11-15]"), {})
    names = [(a.name, b.name) for a, b in node_pairs(ctx.gpu_nodes)]
    assert names == [("gpu01", "gpu02"), ("gpu03", "gpu04"), ("gpu05", "gpu01")]
    assert node_pairs(ctx.gpu_nodes[:1]) == []


def test_parse_nccl_tests_detection() -> None:
    assert parse_nccl_tests_detection("NCCL_TESTS=\n") == NcclTests(None, False)
    found = parse_nccl_tests_detection("NCCL_TESTS=/usr/local/bin/all_reduce_perf\nNCCL_TESTS_MPI=1\n")
    assert found == NcclTests("/usr/local/bin/all_reduce_perf", True)


# --- DDP ------------------------------------------------------------------------------------


def ddp_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "probe": "ddp",
        "ranks": 4,
        "nodes": 2,
        "single_sps": 250000.0,
        "ddp_sps": 910000.0,
        "efficiency": 0.91,
        "losses": [0.2412, 0.2398, 0.2301, 0.2254],
        "finite": True,
        "decreasing": True,
        "replica_spread": 0.0,
        "replicas_agree": True,
    }
    payload.update(changes)
    return payload


def test_ddp_on_recorded_probe_output_reports_scaling_efficiency() -> None:
    ctx = StubContext(spec_text(), {"ddp_probe": ok(probe_line(ddp_payload()))})
    outcome = ddp_smoke(ctx)
    assert outcome.overall is Status.PASS
    assert (outcome.value, outcome.expected, outcome.unit) == (91.0, ">= 50", "%")
    assert "loss 0.2412 -> 0.2254" in outcome.message
    assert ctx.calls[0][1] == "gpu01,gpu02" and ctx.calls[0][2] == {"gres": "gpu:2", "ntasks_per_node": 2}


def test_ddp_poor_scaling_warns() -> None:
    outcome = ddp_smoke(StubContext(spec_text(), {"ddp_probe": ok(probe_line(ddp_payload(efficiency=0.12)))}))
    assert outcome.overall is Status.WARN
    assert outcome.hint and "gpu.nccl" in outcome.hint


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"replicas_agree": False, "replica_spread": 0.03}, "different weights"),
        ({"finite": False, "losses": [0.24, "nan"]}, "not finite"),
    ],
)
def test_ddp_broken_training_fails(changes: dict[str, Any], words: str) -> None:
    outcome = ddp_smoke(StubContext(spec_text(), {"ddp_probe": ok(probe_line(ddp_payload(**changes)))}))
    assert outcome.overall is Status.FAIL
    assert words in outcome.message


def test_ddp_loss_not_decreasing_is_noted_but_finite_is_enough() -> None:
    payload = ddp_payload(decreasing=False, losses=[0.24, 0.25])
    outcome = ddp_smoke(StubContext(spec_text(), {"ddp_probe": ok(probe_line(payload))}))
    assert outcome.overall is Status.PASS
    assert "did not decrease" in outcome.message


def test_ddp_no_torch_skips_and_rank_errors_fail() -> None:
    skip = ddp_smoke(
        StubContext(spec_text(), {"ddp_probe": ok(probe_line({"probe": "ddp", "error": "no-torch", "rank": 0}))})
    )
    assert skip.overall is Status.SKIP and TORCH_HINT in skip.message
    error = probe_line({"probe": "ddp", "error": "DistNetworkError: Connection refused", "rank": 3})
    fail = ddp_smoke(
        StubContext(
            spec_text(), {"ddp_probe": CommandResult(1, error, "srun: error: gpu02: task 3: Exited with exit code 1\n")}
        )
    )
    assert fail.overall is Status.FAIL
    assert fail.message == "probe failed (rank 3): DistNetworkError: Connection refused"


# --- the probes themselves, without torch ---------------------------------------------------


def test_probe_helpers_without_torch() -> None:
    assert gpu_probe.tflops(8192, 100, 0.2) == pytest.approx(2 * 8192**3 * 100 / 0.2 / 1e12)
    assert gpu_probe.copy_gbs(2**30, 1000, 1.0) == pytest.approx(2 * 2**30 * 1000 / 1e9)
    assert gpu_probe.relative_error(0.0, 0.0) == 0.0
    assert gpu_probe.relative_error(1.0, 0.0) == float("inf")
    assert gpu_probe.result_ok(700.0, True, 0.002, gpu_probe.MATMUL_MAX_REL_ERROR)
    assert not gpu_probe.result_ok(700.0, True, 0.5, gpu_probe.MATMUL_MAX_REL_ERROR)
    assert not gpu_probe.result_ok(700.0, False, 0.0, gpu_probe.MATMUL_MAX_REL_ERROR)
    assert not gpu_probe.result_ok(float("nan"), True, None, 0.0)
    assert ddp_probe.losses_decreasing([1.0, 0.9]) and not ddp_probe.losses_decreasing([1.0])
    assert not ddp_probe.all_finite([1.0, float("nan")])
    assert ddp_probe.spread(2.0, 2.0) == 0.0
    assert ddp_probe.spread(1.0, 1.1) == pytest.approx(0.1 / 1.1)


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [("gpu[01-04,07]", "gpu01"), ("gpu01,gpu02", "gpu01"), ("node7", "node7"), ("rack[2-3]-gpu", "rack2-gpu")],
)
def test_probe_first_host_of_a_slurm_nodelist(nodelist: str, first: str) -> None:
    assert common.first_host(nodelist) == first


def test_probe_rendezvous_from_slurm_variables() -> None:
    env = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "16",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_ID": "123456",
        "SLURM_JOB_NODELIST": "gpu[03-04]",
    }
    where = common.rendezvous(env)
    assert where == {"rank": 5, "world": 16, "local": 1, "address": "gpu03", "port": 20000 + 123456 % 20000}
    assert common.rendezvous({**env, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"})["port"] == 29500


def test_probe_all_reduce_check_pattern_sums() -> None:
    """The values the NCCL probe checks are what a correct sum over the ranks gives (simulated here)."""
    for world in (1, 2, 8, 64):
        for position in range(20):
            simulated = sum(float(rank + 1 + position % nccl_probe.PATTERN_PERIOD) for rank in range(world))
            assert simulated == nccl_probe.expected_sum(world, position)


@pytest.mark.parametrize(
    ("module", "argv"), [(gpu_probe, ["matmul"]), (gpu_probe, ["membw"]), (nccl_probe, []), (ddp_probe, [])]
)
def test_probe_without_torch_prints_the_marker_and_exits_0(
    module: Any, argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A node without PyTorch, here too where the dev venv has it: None in sys.modules makes the import fail.
    monkeypatch.setitem(sys.modules, "torch", None)
    assert module.main(argv) == 0
    payloads = parse_probe_output(capsys.readouterr().out)
    assert len(payloads) == 1 and payloads[0]["error"] == "no-torch"


def test_probes_ship_inside_the_package_and_run_inline() -> None:
    for name in probes.PROBES:
        text = probes.shipped(name)
        assert "GPUCLUS_PROBE" in text and "import torch" not in text  # torch only through importlib
        own = probes.source(name).replace("from __future__ import annotations\n", "", 1)
        assert text == probes.source("common.py") + "\n" + own
        compile(text, name, "exec")  # one __future__ import, at the top
        command = probes.inline_command(name)
        packed = command.split('b64decode("', 1)[1].split('"', 1)[0]
        assert zlib.decompress(base64.b64decode(packed)).decode() == text
    with pytest.raises(ValueError):
        probes.source("../context.py")


def test_inline_command_runs_under_sh_with_this_python() -> None:
    """The exact shell text a node runs, with python3 pointing at an interpreter without torch.

    -S leaves out site-packages, so gpuclus itself cannot be imported: the
    probe must run on the shipped common.py text alone, as on a node.
    """
    command = probes.inline_command("gpu_probe.py", ["matmul"]).replace("python3 -c", f"{sys.executable} -S -c", 1)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert parse_probe_output(done.stdout) == [{"error": "no-torch", "probe": "matmul"}]


def test_inline_command_without_python_prints_no_python() -> None:
    command = probes.inline_command("nccl_probe.py")
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/nonexistent"},
    )
    assert parse_probe_output(done.stdout) == [{"error": "no-python"}]


# --- CPU-only checks of the probe maths, when torch happens to be installed ----------------


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (CPU-only maths checks need it)")
def test_matmul_reference_error_is_small_for_bf16_on_cpu() -> None:
    torch = importlib.import_module("torch")
    a = torch.randn(256, 1024, dtype=torch.bfloat16)
    b = torch.randn(1024, 256, dtype=torch.bfloat16)
    reference = a.float() @ b.float()
    got = (a @ b).float()
    error = gpu_probe.relative_error(float(torch.linalg.norm(got - reference)), float(torch.linalg.norm(reference)))
    assert error < gpu_probe.MATMUL_MAX_REL_ERROR


def test_isolation_job_refused_by_slurm_points_at_slurm_not_the_driver() -> None:
    refused = CommandResult(
        1,
        "CUDA_VISIBLE_DEVICES=<unset>\n",
        "srun: error: Unable to create step for job 42: Invalid generic resource (gres) specification\n",
    )
    outcome = isolation(StubContext(spec_text(), {"isolation": refused}))
    assert outcome.overall is Status.FAIL
    assert "Invalid generic resource" in outcome.nodes[0].message
    assert outcome.hint == LAUNCH_HINT


def test_nodes_launch_found_dead_are_skipped_not_queued_for() -> None:
    ctx = StubContext(spec_text(), {"smi": ok(SMI_H100_X2)})
    ctx.memo["launch_failed"] = {"gpu02"}
    outcome = nvidia_smi_inventory(ctx)
    rows = by_node(outcome)
    assert rows["gpu02"].status is Status.SKIP and rows["gpu01"].status is Status.PASS
    assert [call[1] for call in ctx.calls] == ["gpu01"]
    ctx.memo["launch_failed"] = {"gpu01", "gpu02"}
    assert ddp_smoke(ctx).overall is Status.SKIP
