"""validate's workloads stage on synthetic GPUCLUS_RESULT output, through a real Context over a stub session.

The job templates' output is written here the way the templates print it
(rank 0's ``GPUCLUS_RESULT {json}`` line); ``validate_stubs.StubRemote``
answers each srun/sbatch/ssh line, so the lines the checks build are the
ones asserted on. The judging functions are also tested on their own.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
from validate_stubs import COMPUTE, GPU01, GPU02, HEAD, SANDBOX_SPEC, StubRemote, context, fail, ok, target

from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.spec.load import load_spec_text
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import thresholds
from gpuclus.validate.checks.workloads import CHECKS
from gpuclus.validate.checks.workloads.batch import OUTPUT_PATTERN, mpi_job, sbatch_job
from gpuclus.validate.checks.workloads.env import pytorch_env
from gpuclus.validate.checks.workloads.job_output import (
    Expect,
    container_lacks_torch,
    crash_line,
    describe,
    judge_job,
    judge_mpi,
    judge_training,
    mpi_missing,
    parse_marked,
    same_release,
)
from gpuclus.validate.checks.workloads.placement import ENV_FAILED, PYTORCH_OFF, Plan, workload_plan
from gpuclus.validate.checks.workloads.scaling import CPU_CAUSE, ONE_NODE, judge_scaling, scaling, scaling_hint
from gpuclus.validate.checks.workloads.training import container, ddp, fsdp
from gpuclus.validate.context import Options
from gpuclus.validate.registry import all_checks, select
from gpuclus.validate.results import Level, Outcome, Status

# The sandbox with the node-local CPU env the sandbox's wheelhouse gives it.
NODE_LOCAL = SANDBOX_SPEC + "pytorch:\n  install: true\n  location: node-local\n  flavour: cpu\n"
# The same on kernel NFS, where the env and the templates live in the export (/shared).
SHARED = (
    SANDBOX_SPEC.replace("server_impl: ganesha", "server_impl: kernel") + "pytorch:\n  install: true\n  flavour: cpu\n"
)
PYXIS = NODE_LOCAL.replace(
    "  enroot: false\n  pyxis: false", "  enroot: true\n  pyxis: true\n  allow_unverified_downloads: true"
)
ENV = "/opt/gpuclus/software/pytorch-2.13.0-cpu"
EXAMPLES = "/opt/gpuclus/examples"
JOB = "gpuclus-validate-t"

# A spec with real GPUs: two nodes of 4 H100 on InfiniBand, PyTorch shared on NFS.
GPU_SPEC = """
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.1, roles: [controller, login, nfs_server]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 4, model: h100}}
nfs: {exports: [{path: /srv/nfs/shared, mount: /shared}]}
nvidia: {driver: {install: true, branch: "550"}}
network: {fabric: infiniband, link_gbps: 400, nics_per_node: 4}
pytorch: {install: true}
"""


def result(**changes: Any) -> dict[str, Any]:
    """A good DDP result from 2 CPU nodes, one rank each, with ``changes``."""
    payload: dict[str, Any] = {
        "template": "ddp",
        "backend": "gloo",
        "device": "cpu",
        "world_size": 2,
        "nodes": 2,
        "steps": 30,
        "batch_size": 32,
        "losses": [1.02, 0.8, 0.55, 0.31],
        "loss_first": 1.02,
        "loss_last": 0.31,
        "decreased": True,
        "replicas_agree": True,
        "samples_per_s": 410.2,
        "torch": "2.13.0+cpu",
    }
    payload.update(changes)
    return payload


def line(payload: dict[str, Any]) -> str:
    return f"GPUCLUS_RESULT {json.dumps(payload)}\n"


def job(payload: dict[str, Any], status: int = 0) -> CommandResult:
    """A job's answer: torchrun's chatter, then rank 0's result line."""
    return CommandResult(status, f"[W socket.cpp:464] gloo: using 127.0.0.1\n{line(payload)}", "")


CRASH = CommandResult(
    1,
    "",
    "Traceback (most recent call last):\n"
    '  File "/opt/gpuclus/examples/common/train_ddp.py", line 80, in <module>\n'
    "    dist.init_process_group(backend)\n"
    "torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying to "
    "connect to (val-gpu01, 29500).\n"
    "srun: error: val-gpu02: task 1: Exited with exit code 1\n",
)


# Recorded: roles/job_templates' train_ddp.py through gpuclus_launch.py with GPUCLUS_NPROC_PER_NODE=2 on one
# CPU host (torch 2.13.0+cpu, --steps 30 --batch-size 32 --hidden 256), the losses list shortened.
RECORDED_DDP = (
    "ddp-single-node: step 30/30  loss 0.0239\n"
    "ddp-single-node: 2 ranks on 1 node(s), gloo on cpu: loss 0.2739 -> 0.0239, 9729 samples/s\n"
    'GPUCLUS_RESULT {"template": "ddp-single-node", "backend": "gloo", "device": "cpu", "world_size": 2, '
    '"nodes": 1, "steps": 30, "batch_size": 32, "losses": [0.27389917, 0.41739729, 0.042227954, 0.023939239], '
    '"loss_first": 0.27389917, "loss_last": 0.023939239, "decreased": true, "replicas_agree": true, '
    '"samples_per_s": 9728.6161, "torch": "2.13.0+cpu"}\n'
)
# Recorded: the same with --hidden -5: argparse refuses it in both ranks, torchrun reports ChildFailedError.
RECORDED_TORCHRUN_CRASH = """\
usage: train_ddp.py [-h] [--steps STEPS] [--batch-size BATCH_SIZE]
                    [--hidden HIDDEN] [--lr LR] [--template TEMPLATE]
train_ddp.py: error: --batch-size and --hidden must be positive
E1124 18:44:29.850000 7501 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0
Traceback (most recent call last):
  File "/opt/gpuclus/software/pytorch-2.13.0-cpu/lib/python3.11/site-packages/torch/distributed/run.py", line 1032
    main()
  File ".../torch/distributed/elastic/multiprocessing/errors/__init__.py", line 367, in wrapper
    return f(*args, **kwargs)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/opt/gpuclus/examples/common/train_ddp.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_18:44:29
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 7562)
  error_file: <N/A>
============================================================
srun: error: val-gpu01: task 0: Exited with exit code 1
"""


def env_line(**changes: Any) -> CommandResult:
    payload: dict[str, Any] = {
        "python": "3.11.2",
        "torch": "2.13.0+cpu",
        "numpy": "2.3.1",
        "cuda": False,
        "cuda_version": None,
        "gpus": 0,
        "templates": True,
    }
    payload.update(changes)
    return ok(f"GPUCLUS_ENV {json.dumps(payload)}\n")


def nodes_in(command: str) -> int:
    return len(target(command).split(","))


def remote(*rules: tuple[Any, Any]) -> StubRemote:
    """A session answering the given rules first, then the workloads' own plumbing."""
    stub = StubRemote(list(rules))
    stub.rules += [
        ("GPUCLUS_ENV", env_line()),
        ("mkdir -p -m 0700", ok()),
        ("sudo -n install -d", ok()),
        ("rm -rf", ok()),
        ("scancel", ok()),
    ]
    return stub


def words(command: str) -> list[str]:
    return shlex.split(command)


# =====================================================================================
# the stage and its SKIP rules
# =====================================================================================


def test_the_stage_runs_after_containers_and_before_accounting_all_at_level_full() -> None:
    ids = [check.id for check in all_checks()]
    stage = [check.id for check in CHECKS]
    assert stage == [
        "workloads.env",
        "workloads.ddp",
        "workloads.sbatch",
        "workloads.fsdp",
        "workloads.mpi",
        "workloads.container",
        "workloads.scaling",
    ]
    assert ids.index("containers.pyxis") < ids.index("workloads.env")
    assert ids.index("workloads.scaling") < ids.index("accounting.sacct")
    assert {check.level for check in CHECKS} == {Level.FULL}
    assert [check.id for check in select(all_checks(), Level.QUICK, ["workloads"])] == stage
    assert not [check for check in select(all_checks(), Level.STANDARD, None) if check.stage == "workloads"]


def test_every_check_skips_without_a_job_when_pytorch_is_off() -> None:
    stub = StubRemote()  # any command would fail the test
    ctx = context(stub)  # the sandbox as `gpuclus sandbox up` writes it without a wheelhouse
    for check in CHECKS:
        outcome = check.run(ctx)
        assert (outcome.overall, outcome.message) == (Status.SKIP, PYTORCH_OFF), check.id
    assert stub.commands == []


def test_template_checks_skip_without_examples_but_env_still_runs() -> None:
    ctx = context(remote(), NODE_LOCAL.replace("flavour: cpu", "flavour: cpu\n  examples: false"))
    assert ddp(ctx).message == "pytorch.examples is off in the spec: no job templates on the nodes"
    assert pytorch_env(ctx).overall is Status.PASS


def test_container_skips_when_pyxis_is_off() -> None:
    outcome = container(context(StubRemote(), NODE_LOCAL))
    assert (outcome.overall, outcome.message) == (Status.SKIP, "Pyxis is off in the spec (containers.pyxis: false)")


def test_nodes_launch_srun_or_workloads_env_failed_are_skip_rows() -> None:
    ctx = context(remote(), NODE_LOCAL)
    ctx.memo["launch_failed"] = {GPU02}
    plan = workload_plan(ctx)
    assert isinstance(plan, Plan)
    assert [node.name for node in plan.nodes] == [GPU01]
    assert [(row.node, row.status) for row in plan.skipped] == [(GPU02, Status.SKIP)]
    ctx.memo["workloads_env_failed"] = {GPU01}
    none_left = workload_plan(ctx)
    assert isinstance(none_left, Outcome) and none_left.overall is Status.SKIP
    assert {row.node: row.message for row in none_left.nodes}[GPU01] == ENV_FAILED


def test_plan_trains_on_cpu_on_fake_gpus_and_on_the_gpus_where_they_are_real() -> None:
    cpu = workload_plan(context(remote(), NODE_LOCAL))
    assert isinstance(cpu, Plan)
    assert (cpu.on_gpu, cpu.device, cpu.ranks_per_node, cpu.why_cpu) == (False, "cpu", 1, "fake GPUs, no driver")
    assert cpu.gpu_options() == {}
    gpu = workload_plan(context(remote(), GPU_SPEC))
    assert isinstance(gpu, Plan)
    assert (gpu.on_gpu, gpu.device, gpu.ranks_per_node, gpu.gpu_options()) == (True, "cuda", 4, {"gres": "gpu:4"})
    assert gpu.layout.examples_dir == "/shared/examples"


# =====================================================================================
# results: GPUCLUS_RESULT lines judged
# =====================================================================================

CPU_2 = Expect(nodes=2, world_size=2, device="cpu")


def test_parse_marked_finds_the_last_result_even_behind_a_rank_prefix() -> None:
    text = f"noise\nGPUCLUS_RESULT {{not json\n[rank0]: {line(result(world_size=2))}"
    assert parse_marked(text) == result()
    assert parse_marked("Epoch 1\nloss 0.3\n") is None
    assert parse_marked('GPUCLUS_RESULT ["a list"]\n') is None


def test_a_good_result_passes_with_backend_device_shape_trend_and_speed() -> None:
    verdict = judge_training(result(), CPU_2)
    assert verdict.status is Status.PASS
    assert verdict.message == "gloo on CPU, 2 nodes x 1 rank: loss 1.02 -> 0.31, 410 samples/s"
    assert verdict.value == 410.2


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"decreased": False, "loss_first": 0.9, "loss_last": 1.7}, "the loss did not decrease"),
        ({"replicas_agree": False}, "the replicas hold different weights"),
        ({"world_size": 1}, "world size 1, expected 2"),
        ({"nodes": 1, "world_size": 2}, "ran on 1 node(s) of the 2"),
        ({"device": "cuda", "backend": "nccl"}, "trained on cuda, not on the CPU"),
    ],
)
def test_bad_results_fail_with_the_reason_and_the_loss_trend(changes: dict[str, Any], said: str) -> None:
    verdict = judge_training(result(**changes), CPU_2)
    assert verdict.status is Status.FAIL
    assert said in verdict.message
    assert "loss " in verdict.message


def test_loss_up_names_the_trend() -> None:
    verdict = judge_training(result(decreased=False, loss_first=0.9, loss_last=1.7), CPU_2)
    assert "loss 0.9 -> 1.7" in verdict.message


def test_on_gpus_a_cpu_run_fails() -> None:
    verdict = judge_training(result(world_size=8), Expect(nodes=2, world_size=8, device="cuda"))
    assert (verdict.status, verdict.message.split(" (")[0]) == (Status.FAIL, "trained on cpu, not on the GPUs")


def test_a_template_chosen_world_size_must_give_every_node_the_same_ranks() -> None:
    any_size = Expect(nodes=2, world_size=None, device="cpu")
    assert judge_training(result(world_size=4), any_size).status is Status.PASS
    assert judge_training(result(world_size=3), any_size).status is Status.FAIL


def test_describe_uses_the_losses_when_first_and_last_are_missing() -> None:
    payload = result(loss_first=None, loss_last=None, losses=[2.0, 1.5], nodes=1, world_size=4)
    assert describe(payload) == "gloo on CPU, 1 node x 4 ranks: loss 2 -> 1.5, 410 samples/s"


def test_a_job_without_a_result_line_fails_with_the_python_exception() -> None:
    verdict = judge_job(CRASH, CPU_2)
    assert verdict.status is Status.FAIL
    assert verdict.message.startswith("torch.distributed.DistNetworkError: The client socket has timed out")


def test_recorded_template_output_passes() -> None:
    verdict = judge_job(ok(RECORDED_DDP), Expect(nodes=1, world_size=2, device="cpu"))
    assert (verdict.status, verdict.value) == (Status.PASS, 9728.6161)
    assert verdict.message == "gloo on CPU, 1 node x 2 ranks: loss 0.274 -> 0.0239, 9729 samples/s"


def test_recorded_torchrun_crash_names_the_scripts_own_error() -> None:
    crashed = fail(1, "", RECORDED_TORCHRUN_CRASH)
    assert crash_line(crashed) == "train_ddp.py: error: --batch-size and --hidden must be positive"
    killed = RECORDED_TORCHRUN_CRASH.replace("train_ddp.py: error: --batch-size and --hidden must be positive\n", "")
    killed = killed.replace("exitcode  : 2", "exitcode  : -9")
    assert crash_line(fail(1, "", killed)) == (
        "torchrun: a training process failed with exit code -9 and printed no error"
    )


def test_the_ranks_exception_is_named_not_torchruns_child_failed_error() -> None:
    torchrun = fail(
        1,
        "",
        "[rank1]: RuntimeError: Gloo connectFullMesh failed with ... no error\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train_ddp.py FAILED\n",
    )
    assert crash_line(torchrun) == "RuntimeError: Gloo connectFullMesh failed with ... no error"


def test_crash_text_falls_back_to_srun_then_to_the_exit_status() -> None:
    refused = fail(1, "", "srun: error: Unable to allocate resources: Requested nodes are busy\n")
    assert crash_line(refused) == "srun: error: Unable to allocate resources: Requested nodes are busy"
    assert crash_line(fail(3)) == "exit 3, no GPUCLUS_RESULT line"
    assert "time limit" in crash_line(fail(TIMED_OUT))


def test_a_good_result_from_a_job_that_then_failed_is_a_fail() -> None:
    verdict = judge_job(job(result(), status=1), CPU_2)
    assert verdict.status is Status.FAIL
    assert verdict.message.endswith("but the job exited 1")


def test_mpi_missing_mpicc_is_recognised_only_from_exit_2_with_the_words() -> None:
    said = "mpi-allreduce: mpicc not found; install an MPI (libopenmpi-dev openmpi-bin) on the compute nodes\n"
    assert mpi_missing(2, said) == said.strip()
    assert mpi_missing(1, said) is None
    assert mpi_missing(2, "python: not found\n") is None


def test_judge_mpi() -> None:
    good = {"template": "mpi-allreduce", "ranks": 2, "nodes": 2, "correct": True, "busbw_gbps": 1.25}
    verdict = judge_mpi(ok(line(good)), 2)
    assert (verdict.status, verdict.value) == (Status.PASS, 1.25)
    assert verdict.message == "2 rank(s) on 2 node(s), busbw 1.25 Gbit/s, all-reduce correct"
    assert judge_mpi(ok(line({**good, "correct": False})), 2).status is Status.FAIL
    assert "expected every one of the 2" in judge_mpi(ok(line({**good, "nodes": 1, "ranks": 1})), 2).message
    assert judge_mpi(fail(1, "", "mpirun: error: orted died\n"), 2).message == "mpirun: error: orted died"


@pytest.mark.parametrize(
    ("answer", "lacks"),
    [
        (fail(1, "", "ModuleNotFoundError: No module named 'torch'\n"), True),
        (fail(127, "", "sh: 1: exec: python: not found\n"), True),
        (fail(1, "", "pyxis: failed to import docker image\n"), False),
        (ok("ModuleNotFoundError: No module named 'torch'\n"), False),
        (fail(TIMED_OUT, "", ""), False),
    ],
)
def test_container_lacks_torch(answer: CommandResult, lacks: bool) -> None:
    assert container_lacks_torch(answer) is lacks


@pytest.mark.parametrize(
    ("found", "wanted", "same"),
    [("2.13.0+cpu", "2.13.0", True), ("2.13.0+cu124", "2.13", True), ("2.5.1", "2.13.0", False)],
)
def test_same_release(found: str, wanted: str, same: bool) -> None:
    assert same_release(found, wanted) is same


# =====================================================================================
# workloads.scaling: the judgement and the hint
# =====================================================================================


def test_scaling_good_passes_with_the_figures() -> None:
    judged = judge_scaling(500.0, 900.0, 2, on_gpu=True)
    assert (judged.status, judged.efficiency_pct, judged.slower) == (Status.PASS, 90.0, False)
    assert judged.message == "1 node 500 samples/s; 2 nodes 900 samples/s (90% efficiency)"


def test_scaling_below_the_gpu_bar_warns_but_the_cpu_bar_is_lower() -> None:
    judged = judge_scaling(500.0, 600.0, 2, on_gpu=True)
    assert (judged.status, judged.efficiency_pct) == (Status.WARN, 60.0)
    on_cpu = judge_scaling(500.0, 600.0, 2, on_gpu=False)
    assert on_cpu.status is Status.PASS
    assert "CPU training with gloo: the bar is 50%, not the GPUs' 70%" in on_cpu.message
    assert thresholds.grade_workload_scaling(0.49, on_gpu=False) is Status.WARN


def test_scaling_slower_on_all_nodes_than_on_one_warns_and_says_so() -> None:
    judged = judge_scaling(520.0, 305.0, 2, on_gpu=False)
    assert (judged.status, judged.slower, judged.efficiency_pct) == (Status.WARN, True, 29.3)
    assert judged.message == (
        "1 node 520 samples/s; 2 nodes 305 samples/s (29.3% efficiency); 2 nodes are slower than one"
    )


def test_scaling_hint_names_the_likely_cause_from_the_spec() -> None:
    ethernet = load_spec_text(GPU_SPEC.replace("fabric: infiniband, link_gbps: 400, nics_per_node: 4", "link_gbps: 1"))
    assert ethernet.spec is not None
    hint = scaling_hint(ethernet.spec, True, 4, 2)
    assert hint.startswith("1 Gbit/s ethernet (network.link_gbps) cannot feed 8 GPUs")
    no_ib = load_spec_text(GPU_SPEC.replace("{install: true}", "{install: true, nccl_env: {NCCL_IB_DISABLE: '1'}}"))
    assert no_ib.spec is not None
    assert "NCCL_IB_DISABLE=1: NCCL falls back to TCP sockets" in scaling_hint(no_ib.spec, True, 4, 2)
    infiniband = load_spec_text(GPU_SPEC)
    assert infiniband.spec is not None
    assert "NET/IB, not NET/Socket" in scaling_hint(infiniband.spec, True, 4, 2)
    assert scaling_hint(infiniband.spec, False, 0, 2).startswith(CPU_CAUSE)


def sps_by_nodes(one: float, every: float) -> Any:
    def answer(command: str) -> CommandResult:
        count = nodes_in(command)
        return job(result(nodes=count, world_size=count, samples_per_s=one if count == 1 else every))

    return answer


def test_scaling_runs_one_node_then_all_with_the_same_batch_and_steps() -> None:
    stub = remote(("train_ddp.py", sps_by_nodes(520.0, 610.0)))
    outcome = scaling(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.PASS
    assert (outcome.value, outcome.expected, outcome.unit) == (58.7, ">= 50", "%")
    assert outcome.message.startswith("1 node 520 samples/s; 2 nodes 610 samples/s (58.7% efficiency)")
    assert outcome.message.endswith("(on CPU: fake GPUs, no driver)")
    runs = stub.matching("train_ddp.py")
    assert [target(command) for command in runs] == [GPU01, f"{GPU01},{GPU02}"]
    assert len({words(command)[-1] for command in runs}) == 1  # the same training both times


def test_scaling_slower_than_one_node_warns_with_the_sandbox_cause() -> None:
    outcome = scaling(context(remote(("train_ddp.py", sps_by_nodes(520.0, 300.0))), NODE_LOCAL))
    assert outcome.overall is Status.WARN
    assert "2 nodes are slower than one" in outcome.message
    assert outcome.hint is not None and "every node shares one host's CPUs" in outcome.hint


def test_scaling_fails_only_when_a_run_fails() -> None:
    def answer(command: str) -> CommandResult:
        return CRASH if nodes_in(command) == 2 else job(result(nodes=1, world_size=1))

    outcome = scaling(context(remote(("train_ddp.py", answer)), NODE_LOCAL))
    assert outcome.overall is Status.FAIL
    assert outcome.message.startswith("the run on 2 nodes failed: torch.distributed.DistNetworkError")


def test_scaling_without_a_throughput_figure_fails() -> None:
    outcome = scaling(
        context(remote(("train_ddp.py", job(result(nodes=1, world_size=1, samples_per_s=None)))), NODE_LOCAL)
    )
    assert (outcome.overall, outcome.message) == (Status.FAIL, "the run on 1 node failed: it reported no samples_per_s")


def test_scaling_skips_on_one_compute_node() -> None:
    stub = remote()
    outcome = scaling(context(stub, NODE_LOCAL, nodes=[HEAD, GPU01]))
    assert (outcome.overall, outcome.message) == (Status.SKIP, ONE_NODE)
    assert stub.matching("srun") == []


# =====================================================================================
# workloads.env
# =====================================================================================


def test_env_passes_per_node_with_the_versions() -> None:
    stub = remote()
    outcome = pytorch_env(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.PASS
    rows = {row.node: row for row in outcome.nodes}
    assert set(rows) == set(COMPUTE)
    assert rows[GPU01].message == "torch 2.13.0+cpu, numpy 2.3.1, Python 3.11.2, no CUDA"
    assert (rows[GPU01].value, rows[GPU01].expected) == ("2.13.0+cpu", "2.13.0")
    assert outcome.message == f"{ENV}/bin/python (node-local, pytorch/2.13.0-cpu)"
    lines = stub.matching("GPUCLUS_ENV")
    assert len(lines) == 2 and all("--gres" not in command for command in lines)  # fake GPUs: nothing to ask for
    script = words(lines[0])[-1]
    assert script.startswith(f"test -x {ENV}/bin/python ||")
    assert script.endswith(f"{EXAMPLES}/common/gpuclus_launch.py")


def test_env_missing_interpreter_or_import_failure_fails_with_the_deploy_hint() -> None:
    missing = ok('GPUCLUS_ENV {"error": "no-python"}\n')
    broken = fail(3, 'GPUCLUS_ENV {"error": "ImportError: libgomp.so.1: cannot open shared object file"}\n')
    stub = remote(("GPUCLUS_ENV", lambda command: missing if target(command) == GPU01 else broken))
    ctx = context(stub, NODE_LOCAL)
    outcome = pytorch_env(ctx)
    rows = {row.node: row for row in outcome.nodes}
    assert rows[GPU01].message == f"no PyTorch env here: {ENV}/bin/python does not exist"
    assert rows[GPU02].message == (
        f"{ENV}/bin/python cannot import torch and numpy: ImportError: libgomp.so.1: cannot open shared object file"
    )
    assert outcome.overall is Status.FAIL
    assert outcome.hint is not None and "`gpuclus deploy --only pytorch`" in outcome.hint
    # The later checks leave those nodes out instead of failing on them again.
    assert ctx.memo["workloads_env_failed"] == {GPU01, GPU02}
    assert ddp(ctx).overall is Status.SKIP


def test_env_wrong_version_warns_and_missing_templates_fail() -> None:
    stub = remote(
        (
            "GPUCLUS_ENV",
            lambda command: env_line(torch="2.5.1+cpu") if target(command) == GPU01 else env_line(templates=False),
        )
    )
    rows = {row.node: row for row in pytorch_env(context(stub, NODE_LOCAL)).nodes}
    assert rows[GPU01].status is Status.WARN and "the spec asks for torch 2.13.0" in rows[GPU01].message
    assert rows[GPU02].status is Status.FAIL and rows[GPU02].message.startswith(f"no job templates in {EXAMPLES}")


def test_env_on_real_gpus_asks_for_them_and_fails_when_cuda_is_unusable() -> None:
    stub = remote(("GPUCLUS_ENV", env_line(torch="2.13.0+cu124")))
    outcome = pytorch_env(context(stub, GPU_SPEC))
    assert outcome.overall is Status.FAIL
    assert "torch.cuda.is_available() is false" in outcome.nodes[0].message
    assert outcome.nodes[0].hint is not None and "CUDA" in outcome.nodes[0].hint
    assert all("--gres=gpu:4" in command for command in stub.matching("GPUCLUS_ENV"))


# =====================================================================================
# workloads.ddp and workloads.fsdp
# =====================================================================================


def test_ddp_srun_line_and_pass_message_on_cpu() -> None:
    stub = remote(("train_ddp.py", job(result())))
    outcome = ddp(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.PASS
    assert outcome.message == (
        "gloo on CPU, 2 nodes x 1 rank: loss 1.02 -> 0.31, 410 samples/s (on CPU: fake GPUs, no driver)"
    )
    assert (outcome.value, outcome.unit, outcome.expected) == (410.2, "samples/s", "world size 2")
    [command] = stub.matching("train_ddp.py")
    said = words(command)
    assert said[said.index("srun") :][:2] == ["srun", f"--job-name={JOB}"]
    assert f"--nodelist={GPU01},{GPU02}" in said and "--ntasks-per-node=1" in said
    assert not [word for word in said if word.startswith("--gres")]
    assert said[-1] == (
        ". /etc/gpuclus/pytorch-env.sh && export GPUCLUS_NPROC_PER_NODE=1 && "
        f"exec {ENV}/bin/python {EXAMPLES}/common/gpuclus_launch.py {EXAMPLES}/common/train_ddp.py "
        "--steps 30 --batch-size 32 --hidden 256"
    )


def test_ddp_crash_fails_with_the_exception_and_a_hint() -> None:
    outcome = ddp(context(remote(("train_ddp.py", CRASH)), NODE_LOCAL))
    assert outcome.overall is Status.FAIL
    assert outcome.message.startswith("torch.distributed.DistNetworkError")
    assert outcome.hint is not None and "NCCL_DEBUG=INFO" in outcome.hint


def test_ddp_on_real_gpus_asks_for_every_gpu_and_expects_cuda() -> None:
    gpu_result = result(backend="nccl", device="cuda", world_size=8)
    stub = remote(("train_ddp.py", job(gpu_result)))
    outcome = ddp(context(stub, GPU_SPEC))
    assert outcome.overall is Status.PASS
    assert outcome.message == "nccl on GPU, 2 nodes x 4 ranks: loss 1.02 -> 0.31, 410 samples/s"
    [command] = stub.matching("train_ddp.py")
    assert "--gres=gpu:4" in words(command)
    assert "export GPUCLUS_NPROC_PER_NODE=4" in words(command)[-1]
    assert "--batch-size 256 --hidden 2048" in words(command)[-1]
    assert "/shared/software/pytorch-2.13.0-cu124/bin/python" in words(command)[-1]


def test_fsdp_runs_two_ranks_on_one_node_on_cpu() -> None:
    stub = remote(("train_fsdp.py", job(result(template="fsdp", nodes=1, world_size=2))))
    outcome = fsdp(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.PASS
    assert outcome.message.startswith("gloo on CPU, 1 node x 2 ranks")
    [command] = stub.matching("train_fsdp.py")
    assert target(command) == GPU01
    assert "export GPUCLUS_NPROC_PER_NODE=2" in words(command)[-1]
    assert f"{EXAMPLES}/fsdp/train_fsdp.py" in words(command)[-1]


def test_fsdp_with_the_wrong_world_fails() -> None:
    outcome = fsdp(context(remote(("train_fsdp.py", job(result(nodes=1, world_size=1)))), NODE_LOCAL))
    assert outcome.overall is Status.FAIL
    assert outcome.message.startswith("world size 1, expected 2")


# =====================================================================================
# workloads.sbatch and workloads.mpi: sbatch --wait, the working directory, the output file
# =====================================================================================


def test_sbatch_command_waits_is_parsable_and_bounded() -> None:
    command = slurm.sbatch_command(
        "/x/job.sbatch",
        job_name=JOB,
        time_limit_s=300,
        workdir="/tmp/gpuclus-validate-t",
        nodes=["a", "b"],
        partition="gpu",
        queue_wait_s=30,
        gpus_per_node=4,
    )
    assert words(command) == [
        "timeout",
        "--kill-after=10",
        "360",
        "sbatch",
        "--wait",
        "--parsable",
        f"--job-name={JOB}",
        "--time=5",
        "--chdir=/tmp/gpuclus-validate-t",
        "--partition=gpu",
        "--nodes=2",
        "--nodelist=a,b",
        "--ntasks-per-node=1",
        "--gpus-per-node=4",
        "/x/job.sbatch",
    ]
    from_stdin = slurm.sbatch_command(None, job_name=JOB, time_limit_s=60, workdir="/w")
    assert words(from_stdin)[-1] == "--ntasks-per-node=1"


def test_parse_job_id() -> None:
    assert slurm.parse_job_id("4242\n") == "4242"
    assert slurm.parse_job_id("4242;lab\n") == "4242"
    assert slurm.parse_job_id("sbatch: error: Batch job submission failed\n") is None


def test_context_sbatch_reads_a_node_local_script_on_a_node_when_the_controller_lacks_it() -> None:
    stub = StubRemote([("sbatch --wait", ok("77\n"))])
    ctx = context(stub, NODE_LOCAL)
    nodes = ctx.compute
    ctx.sbatch("/opt/t/job.sbatch", nodes, workdir="/w", script_host=nodes[0])
    ctx.sbatch("/opt/t/job.sbatch", nodes, workdir="/w")
    piped, direct = stub.commands
    assert piped.startswith(f"ssh -o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=yes {GPU01} ")
    assert "'cat /opt/t/job.sbatch' | timeout" in piped and not piped.endswith("job.sbatch")
    assert direct.startswith("timeout") and direct.endswith(" /opt/t/job.sbatch")
    assert ctx.jobs_succeeded == 2


def batch_output(payload: dict[str, Any]) -> CommandResult:
    return ok(f"+ srun python gpuclus_launch.py\n{line(payload)}")


def test_sbatch_node_local_runs_in_var_tmp_and_reads_the_output_on_the_batch_host() -> None:
    # /var/tmp, not /tmp: a job's /tmp is its own (slurm.job_tmp: private), where the admin's mkdir never shows.
    output = f"/var/tmp/{JOB}/{OUTPUT_PATTERN.format(name=JOB, job_id='4242')}"
    stub = remote(
        ("sbatch --wait", ok("4242\n")),
        ("for try in", lambda command: batch_output(result()) if target(command) == GPU01 else fail(1)),
    )
    outcome = sbatch_job(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.PASS, outcome.message
    assert outcome.message == (
        "job 4242: gloo on CPU, 2 nodes x 1 rank: loss 1.02 -> 0.31, 410 samples/s (on CPU: fake GPUs, no driver); "
        f"output at {GPU01}:{output} (node-local, not shared)"
    )
    [submit] = stub.matching("sbatch --wait")
    said = words(submit)
    # The sandbox's head is a login node: it has the templates and reads the script itself.
    assert said[-1] == f"{EXAMPLES}/ddp-multi-node/job.sbatch"
    assert f"--job-name={JOB}" in said and f"--chdir=/var/tmp/{JOB}" in said and "--wait" in said
    assert f"--nodelist={GPU01},{GPU02}" in said
    assert [target(command) for command in stub.matching("mkdir -p -m 0700 /var/tmp/")] == COMPUTE
    assert all(output in command for command in stub.matching("for try in"))
    assert sorted(target(command) for command in stub.matching(f"rm -rf /var/tmp/{JOB}")) == COMPUTE
    # Made before sbatch, removed after the output was read.
    order = [stub.commands.index(command) for command in (*stub.matching("mkdir"), submit, *stub.matching("rm -rf"))]
    assert order == sorted(order)


def test_sbatch_shared_makes_the_run_dir_on_the_nfs_server_and_reads_it_on_the_controller() -> None:
    stub = remote(("sbatch --wait", ok("4243;val\n")), ("for try in", batch_output(result())))
    outcome = sbatch_job(context(stub, SHARED))
    assert outcome.overall is Status.PASS
    run_dir = f"/shared/.gpuclus-validate/{JOB}"
    assert outcome.message.endswith(f"output at {HEAD}:{run_dir}/{JOB}-4243.out (shared storage)")
    [make] = stub.matching("sudo -n install -d")
    assert make == (
        "sudo -n install -d -m 0755 /srv/nfs/shared/.gpuclus-validate && "
        f"sudo -n install -d -m 0700 -o gpuclus /srv/nfs/shared/.gpuclus-validate/{JOB}"
    )  # val-head is the NFS server and the controller: no ssh hop
    [read] = stub.matching("for try in")
    assert f"cat {run_dir}/{JOB}-4243.out" in read and not read.startswith("ssh")
    assert stub.matching(f"sudo -n rm -rf /srv/nfs/shared/.gpuclus-validate/{JOB}")
    assert f"--chdir={run_dir}" in words(stub.matching("sbatch --wait")[0])


def test_sbatch_on_gpus_asks_for_them_but_the_mpi_job_does_not() -> None:
    good_mpi = {"template": "mpi-allreduce", "ranks": 2, "nodes": 2, "correct": True, "busbw_gbps": 9.5}
    gpu_run = result(backend="nccl", device="cuda", world_size=8)
    stub = remote(
        (("sbatch --wait", "ddp-multi-node"), ok("51\n")),
        (("sbatch --wait", "mpi-allreduce"), ok("52\n")),
        (("for try in", "-51.out"), batch_output(gpu_run)),
        (("for try in", "-52.out"), ok(line(good_mpi))),
    )
    ctx = context(stub, GPU_SPEC)
    assert sbatch_job(ctx).overall is Status.PASS
    assert mpi_job(ctx).overall is Status.PASS
    ddp_submit, mpi_submit = stub.matching("sbatch --wait")
    assert "--gpus-per-node=4" in words(ddp_submit)
    assert not [word for word in words(mpi_submit) if word.startswith("--gpus")]


def test_sbatch_from_a_controller_without_the_node_local_templates_reads_them_on_the_first_node() -> None:
    plain_head = NODE_LOCAL.replace(
        "roles: [controller, nfs_server, monitoring, login]", "roles: [controller, nfs_server]"
    )
    stub = remote(("sbatch --wait", ok("53\n")), ("for try in", batch_output(result())))
    assert sbatch_job(context(stub, plain_head)).overall is Status.PASS
    [submit] = stub.matching("sbatch --wait")
    assert submit.startswith(f"ssh -o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=yes {GPU01} ")
    assert f"'cat {EXAMPLES}/ddp-multi-node/job.sbatch' | timeout" in submit


def test_sbatch_failures_name_the_cause_and_still_clean_up() -> None:
    refused = fail(1, "", "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    stub = remote(("sbatch --wait", refused))
    outcome = sbatch_job(context(stub, NODE_LOCAL))
    assert (outcome.overall, outcome.message) == (
        Status.FAIL,
        "sbatch did not submit the job: sbatch: error: Batch job submission failed: Invalid partition name specified",
    )
    assert len(stub.matching("rm -rf")) == 2
    crashed = remote(("sbatch --wait", fail(1, "4244\n")), ("for try in", fail(1)))
    outcome = sbatch_job(context(crashed, NODE_LOCAL))
    assert outcome.overall is Status.FAIL
    assert outcome.message.startswith(f"job 4244: no output file at {GPU01}:/var/tmp/{JOB}/{JOB}-4244.out")


def test_sbatch_that_timed_out_cancels_its_job() -> None:
    stub = remote(("sbatch --wait", fail(TIMED_OUT, "4245\n")), ("for try in", fail(1)))
    outcome = sbatch_job(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.FAIL
    assert stub.matching("scancel 4245")


def test_sbatch_cannot_make_its_directory() -> None:
    stub = remote(("mkdir -p -m 0700", fail(1, "", "mkdir: cannot create directory: No space left on device\n")))
    outcome = sbatch_job(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.FAIL
    assert outcome.message.startswith(f"could not make /var/tmp/{JOB} on {GPU01}: mkdir: cannot create directory")
    assert stub.matching("sbatch") == []


def test_mpi_without_mpicc_skips_with_the_packages() -> None:
    said = "mpi-allreduce: mpicc not found: install MPI on the compute nodes\n"
    stub = remote(("sbatch --wait", fail(2, "4246\n")), ("for try in", ok(said)))
    outcome = mpi_job(context(stub, NODE_LOCAL))
    assert outcome.overall is Status.SKIP
    assert outcome.message.startswith("no MPI on the compute nodes (mpi-allreduce: mpicc not found")
    assert "libopenmpi-dev openmpi-bin" in outcome.message
    assert words(stub.matching("sbatch --wait")[0])[-1] == f"{EXAMPLES}/mpi-allreduce/job.sbatch"


def test_mpi_correct_on_all_ranks_passes_and_wrong_fails() -> None:
    good = {"template": "mpi-allreduce", "ranks": 2, "nodes": 2, "correct": True, "busbw_gbps": 0.8}
    stub = remote(("sbatch --wait", ok("4247\n")), ("for try in", ok(line(good))))
    outcome = mpi_job(context(stub, NODE_LOCAL))
    assert (outcome.overall, outcome.value, outcome.unit) == (Status.PASS, 0.8, "Gbit/s")
    wrong = remote(("sbatch --wait", fail(1, "4248\n")), ("for try in", ok(line({**good, "correct": False}))))
    assert mpi_job(context(wrong, NODE_LOCAL)).overall is Status.FAIL


# =====================================================================================
# workloads.container
# =====================================================================================


def test_container_runs_the_ddp_path_in_the_image_with_the_examples_mounted() -> None:
    stub = remote(("train_ddp.py", job(result())))
    outcome = container(context(stub, PYXIS, options=Options(container_image="/shared/pytorch.sqsh")))
    assert outcome.overall is Status.PASS
    assert outcome.message.startswith("/shared/pytorch.sqsh: gloo on CPU, 2 nodes x 1 rank")
    said = words(stub.matching("train_ddp.py")[0])
    assert "--container-image=/shared/pytorch.sqsh" in said
    assert f"--container-mounts={EXAMPLES}:{EXAMPLES}:ro" in said
    assert said[-1].startswith("export GPUCLUS_NPROC_PER_NODE=1 && exec python ")  # the image's python


def test_container_image_without_torch_skips_with_the_advice() -> None:
    no_torch = fail(1, "", "ModuleNotFoundError: No module named 'torch'\nsrun: error: val-gpu01: task 0: Exited\n")
    outcome = container(context(remote(("train_ddp.py", no_torch)), PYXIS))
    assert outcome.overall is Status.SKIP
    assert outcome.message == (
        "the image ubuntu:22.04 has no PyTorch; pass --container-image with an image that has it "
        "(NGC PyTorch on GPU clusters)"
    )


def test_container_training_failure_fails() -> None:
    outcome = container(context(remote(("train_ddp.py", CRASH)), PYXIS))
    assert outcome.overall is Status.FAIL
    assert "DistNetworkError" in outcome.message
