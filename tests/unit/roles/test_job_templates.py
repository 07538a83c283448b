"""The job templates gpuclus installs on the nodes (roles/job_templates/files/examples).

- common/gpuclus_launch.py, imported from its file: Slurm host lists, the
  rendezvous node and port, processes per node, torchrun's arguments; its
  main() in a child process, as the nodes run it.
- Every job.sbatch: bash syntax, the #SBATCH lines other code relies on, the
  environment file it sources, the files it names; run with a stand-in srun
  (tests/unit/job_templates_fake_srun.py) where that takes no GPU.
- Real training with the CPU build of PyTorch (gloo): DDP and FSDP on two
  processes, and ddp-multi-node/job.sbatch as two "nodes" on this machine
  meeting through the c10d rendezvous. Skipped where torch is not installed.
- allreduce.c compiled with mpicc and run with mpirun, where MPI is installed.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "roles" / "job_templates" / "files" / "examples"
TEMPLATES = ["ddp-single-node", "ddp-multi-node", "ddp-container", "fsdp", "mpi-allreduce"]
FAKE_SRUN = Path(__file__).resolve().parents[1] / "job_templates_fake_srun.py"
ENV_FILE = "/etc/gpuclus/pytorch-env.sh"
RESULT_KEYS = [
    "template",
    "backend",
    "device",
    "world_size",
    "nodes",
    "steps",
    "batch_size",
    "losses",
    "loss_first",
    "loss_last",
    "decreased",
    "replicas_agree",
    "samples_per_s",
    "torch",
]
NO_TORCH = "PyTorch is not installed in this Python (scripts/test.sh installs the CPU wheel from /opt/wheels)"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason=NO_TORCH)


def _load_launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuclus_launch", EXAMPLES / "common" / "gpuclus_launch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the role
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


launch = _load_launcher()


# -- host lists -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("head", ["head"]),
        ("gpu[01-03,07],head", ["gpu01", "gpu02", "gpu03", "gpu07", "head"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("n[008-011]", ["n008", "n009", "n010", "n011"]),
        ("a[1-2]b", ["a1b", "a2b"]),
        ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
        ("dgx-a[1,3],dgx-b[2]", ["dgx-a1", "dgx-a3", "dgx-b2"]),
        ("10.0.0.[1-2],login.example.org", ["10.0.0.1", "10.0.0.2", "login.example.org"]),
        ("a,b,,c", ["a", "b", "c"]),
        ("", []),
    ],
)
def test_expand_hostlist_follows_slurm(text: str, hosts: list[str]) -> None:
    assert launch.expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[1-", "gpu]1", "gpu[3-1]", "gpu[a-b]", "gpu[[1]]", "gpu[]", "gpu[1-2-3]"])
def test_expand_hostlist_refuses_malformed_lists_in_one_line(text: str) -> None:
    with pytest.raises(launch.LaunchError) as error:
        launch.expand_hostlist(text)
    assert text in str(error.value)
    assert "\n" not in error.value.line()


def test_expand_hostlist_refuses_an_absurd_range() -> None:
    with pytest.raises(launch.LaunchError, match="too long"):
        launch.expand_hostlist("n[0-99999999]")


# -- the job, from Slurm's variables --------------------------------------------


def test_first_node_is_the_allocations_first() -> None:
    assert launch.first_node({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[02-04]"}) == "gpu02"


def test_first_node_inside_srun_is_the_steps_first() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_STEP_NODELIST": "gpu[03-04]"}
    assert launch.first_node(env) == "gpu03"
    assert launch.num_nodes(env) == 2


def test_node_list_outside_slurm_says_so() -> None:
    with pytest.raises(launch.LaunchError, match="not inside a Slurm allocation"):
        launch.first_node({})


def test_rendezvous_port_comes_from_the_job_id() -> None:
    assert launch.rendezvous_port({"SLURM_JOB_ID": "123456"}) == 29500 + 456
    assert launch.rendezvous_port({"SLURM_JOB_ID": "1000"}) == 29500
    ports = {launch.rendezvous_port({"SLURM_JOB_ID": str(job)}) for job in range(5000, 6000)}
    assert len(ports) == 1000
    assert min(ports) == 29500 and max(ports) == 30499  # below Linux's ephemeral ports (32768-)


def test_rendezvous_port_two_jobs_on_a_node_differ() -> None:
    assert launch.rendezvous_port({"SLURM_JOB_ID": "41"}) != launch.rendezvous_port({"SLURM_JOB_ID": "42"})


def test_rendezvous_port_override_and_its_check() -> None:
    assert launch.rendezvous_port({"SLURM_JOB_ID": "41", "GPUCLUS_RDZV_PORT": "40000"}) == 40000
    with pytest.raises(launch.LaunchError, match="GPUCLUS_RDZV_PORT"):
        launch.rendezvous_port({"SLURM_JOB_ID": "41", "GPUCLUS_RDZV_PORT": "70000"})


@pytest.mark.parametrize(
    ("env", "nproc"),
    [
        ({}, 1),
        ({"SLURM_GPUS_ON_NODE": "8"}, 8),
        ({"SLURM_GPUS_ON_NODE": "0"}, 1),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 3),
        ({"CUDA_VISIBLE_DEVICES": ""}, 1),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, 1),
        ({"CUDA_VISIBLE_DEVICES": "0,1,-1,3"}, 2),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 1),
        ({"SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}, 4),
        ({"SLURM_GPUS_ON_NODE": "8", "GPUCLUS_NPROC_PER_NODE": "2"}, 2),
    ],
)
def test_nproc_per_node_gpus_slurm_gave_the_node_else_one(env: dict[str, str], nproc: int) -> None:
    assert launch.nproc_per_node(env) == nproc


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_nproc_per_node_override_must_be_positive(value: str) -> None:
    with pytest.raises(launch.LaunchError, match="GPUCLUS_NPROC_PER_NODE"):
        launch.nproc_per_node({"GPUCLUS_NPROC_PER_NODE": value})


def test_world_size_is_nodes_times_gpus() -> None:
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "gpu[1-3]", "SLURM_GPUS_ON_NODE": "4"}
    assert launch.world_size(env) == 12
    assert launch.world_size({"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "cpu1"}) == 1


def test_torchrun_args_one_node_is_standalone() -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu07", "SLURM_GPUS_ON_NODE": "4"}
    assert launch.torchrun_args(env, "/x/train.py", ["--steps", "5"]) == [
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=4",
        "/x/train.py",
        "--steps",
        "5",
    ]


def test_torchrun_args_several_nodes_meet_at_the_first() -> None:
    env = {
        "SLURM_JOB_ID": "31337",
        "SLURM_JOB_NODELIST": "gpu[01-03]",
        "SLURM_STEP_NODELIST": "gpu[01-03]",
        "SLURM_GPUS_ON_NODE": "8",
    }
    assert launch.torchrun_args(env, "train.py", []) == [
        "--nnodes=3",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=gpu01:29837",
        "--rdzv-id=31337",
        "train.py",
    ]


def test_several_launchers_on_one_node_are_refused() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_NUM_TASKS": "4"}
    with pytest.raises(launch.LaunchError, match="srun started 4 tasks on 2 node") as error:
        launch.torchrun_command(env, "train.py", [])
    assert "srun --ntasks-per-node=1" in error.value.line()


def test_resolve_script_finds_a_bare_name_next_to_the_launcher(tmp_path: Path) -> None:
    assert launch.resolve_script("train_ddp.py", {}) == str(EXAMPLES / "common" / "train_ddp.py")
    examples = {"GPUCLUS_EXAMPLES_DIR": str(EXAMPLES)}
    assert launch.resolve_script("fsdp/train_fsdp.py", examples) == str(EXAMPLES / "fsdp" / "train_fsdp.py")
    with pytest.raises(launch.LaunchError, match="not found"):
        launch.resolve_script("nope.py", examples)


# -- main(), in a child process as on a node --------------------------------------


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without Slurm's, CUDA's, NCCL's or gpuclus' variables."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLURM_", "GPUCLUS_", "NCCL_", "CUDA_", "TORCHELASTIC_", "MASTER_"))
    }
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def _launcher(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(EXAMPLES / "common" / "gpuclus_launch.py"), *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=30, check=False)


def test_main_outside_slurm_is_one_line_with_a_hint(tmp_path: Path) -> None:
    done = _launcher("train_ddp.py", "--steps", "5", env=_clean_env(), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("gpuclus_launch: error: not inside a Slurm allocation (SLURM_JOB_ID is not set)")
    assert "hint: submit a job script with sbatch" in lines[0]
    assert "Traceback" not in done.stderr


def test_main_without_a_script_prints_usage(tmp_path: Path) -> None:
    done = _launcher(env=_clean_env(SLURM_JOB_ID="3", SLURM_JOB_NODELIST="n1"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: python gpuclus_launch.py")


def test_main_dry_run_prints_the_torchrun_command(tmp_path: Path) -> None:
    env = _clean_env(SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="gpu[1-2]", SLURM_GPUS_ON_NODE="2")
    done = _launcher("--dry-run", "train_ddp.py", "--steps", "5", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    script = EXAMPLES / "common" / "train_ddp.py"
    assert done.stdout.split() == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=gpu1:29742",
        "--rdzv-id=4242",
        str(script),
        "--steps",
        "5",
    ]


def test_main_missing_script_is_one_line(tmp_path: Path) -> None:
    done = _launcher("missing.py", env=_clean_env(SLURM_JOB_ID="3", SLURM_JOB_NODELIST="n1"), cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "training script 'missing.py' not found" in done.stderr


def test_launcher_is_stdlib_only_and_python39_syntax() -> None:
    source = (EXAMPLES / "common" / "gpuclus_launch.py").read_text()
    tree = ast.parse(source, feature_version=(3, 9))
    imported = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= sys.stdlib_module_names


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.py")), ids=lambda path: path.name)
def test_every_template_script_parses_as_python39(path: Path) -> None:
    ast.parse(path.read_text(), feature_version=(3, 9))


# -- the job scripts ----------------------------------------------------------------


def _sbatch_options(text: str) -> dict[str, str]:
    """The #SBATCH options of a script; sbatch reads them only before the first command."""
    options: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        if not line.strip() or (line.startswith("#") and not line.startswith("#SBATCH")):
            continue
        if not line.startswith("#SBATCH"):
            break
        name, _, value = line.removeprefix("#SBATCH").strip().partition("=")
        options[name] = value
    later = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert len(later) == len(options), "an #SBATCH line after the first command is ignored by sbatch"
    return options


def _minutes(limit: str) -> float:
    hours, minutes, seconds = (int(part) for part in limit.split(":"))
    return hours * 60 + minutes + seconds / 60


def test_every_template_has_a_script_and_a_readme() -> None:
    dirs = sorted(path.name for path in EXAMPLES.iterdir() if path.is_dir() and path.name != "__pycache__")
    assert dirs == sorted([*TEMPLATES, "common"])
    for template in TEMPLATES:
        assert (EXAMPLES / template / "job.sbatch").is_file()
        assert (EXAMPLES / template / "README.md").is_file()


@pytest.mark.parametrize("template", TEMPLATES)
def test_job_script_is_valid_bash(template: str) -> None:
    script = EXAMPLES / template / "job.sbatch"
    assert script.read_text().startswith("#!/bin/bash\n")
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("template", TEMPLATES)
def test_job_script_has_the_contracts_sbatch_lines(template: str) -> None:
    options = _sbatch_options((EXAMPLES / template / "job.sbatch").read_text())
    assert options["--job-name"] == template
    assert options["--output"] == "%x-%j.out"
    assert 0 < _minutes(options["--time"]) <= 60
    assert int(options["--nodes"]) >= 1
    assert options["--ntasks-per-node"] == "1"


@pytest.mark.parametrize("template", TEMPLATES)
def test_job_script_is_strict_then_sources_the_env_file(template: str) -> None:
    lines = (EXAMPLES / template / "job.sbatch").read_text().splitlines()
    strict = lines.index("set -euo pipefail")
    env_file = lines.index(f'env_file="${{GPUCLUS_ENV_FILE:-{ENV_FILE}}}"')
    assert strict < env_file < lines.index('source "$env_file"')
    commands = [line for line in lines[1:strict] if line.strip() and not line.startswith("#")]
    assert commands == []


@pytest.mark.parametrize("template", TEMPLATES)
def test_job_script_finds_files_through_the_examples_dir(template: str) -> None:
    text = (EXAMPLES / template / "job.sbatch").read_text()
    # sbatch runs a copy of the script from its spool directory: its own path means nothing.
    assert "$0" not in text and "BASH_SOURCE" not in text and "dirname" not in text
    named = re.findall(r"\$GPUCLUS_EXAMPLES_DIR/([\w./-]+\w)", text)
    named += [f"common/{name}" for name in re.findall(r"\$common/([\w./-]+\w)", text)]
    assert named
    for relative in named:
        assert (EXAMPLES / relative).exists(), relative


@pytest.mark.parametrize("template", TEMPLATES)
def test_readme_tells_how_to_submit(template: str) -> None:
    readme = (EXAMPLES / template / "README.md").read_text()
    assert f"sbatch $GPUCLUS_EXAMPLES_DIR/{template}/job.sbatch" in readme
    assert f"{template}-<jobid>.out" in readme or f"{template}-%j.out" in readme
    index = (EXAMPLES / "README.md").read_text()
    assert f"]({template}/README.md)" in index


def _fake_cluster(tmp_path: Path, nodes: list[str], **extra: str) -> dict[str, str]:
    """An environment file like gpuclus writes, a stand-in srun, and a job's Slurm variables."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_SRUN} "$@"\n')
    srun.chmod(0o755)
    env_file = tmp_path / "pytorch-env.sh"
    env_file.write_text(
        f"export GPUCLUS_PYTORCH_ENV={sys.prefix}\n"
        f"export GPUCLUS_EXAMPLES_DIR={EXAMPLES}\n"
        f'export PATH={bin_dir}:{Path(sys.executable).parent}:"$PATH"\n'
        "export NCCL_IB_DISABLE=1\n"
    )
    job = {
        "GPUCLUS_ENV_FILE": str(env_file),
        "FAKE_SRUN_LOG": str(tmp_path / "srun.log"),
        "SLURM_JOB_ID": "5150",
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_SUBMIT_DIR": str(tmp_path),
    }
    return _clean_env(**{**job, **extra})


def _sbatch(
    template: str, *args: str, env: dict[str, str], cwd: Path, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run a job script as the batch step would (the children in their own session, killed on timeout)."""
    command = ["bash", str(EXAMPLES / template / "job.sbatch"), *args]
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{template}/job.sbatch ran past {timeout} s\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _srun_calls(tmp_path: Path) -> list[dict[str, list[str]]]:
    log = tmp_path / "srun.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("template", TEMPLATES)
def test_job_script_without_the_env_file_stops_with_a_message(template: str, tmp_path: Path) -> None:
    env = _fake_cluster(tmp_path, ["n1"], GPUCLUS_ENV_FILE=str(tmp_path / "missing.sh"))
    done = _sbatch(template, env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert f"{template}: {tmp_path / 'missing.sh'} is missing" in done.stderr
    assert _srun_calls(tmp_path) == []


def test_container_job_runs_the_launcher_in_the_ngc_image(tmp_path: Path) -> None:
    env = _fake_cluster(
        tmp_path, ["gpu1", "gpu2"], FAKE_SRUN_PYXIS="1", FAKE_SRUN_RUN="0", SLURM_JOB_CPUS_PER_NODE="64(x2)"
    )
    done = _sbatch("ddp-container", "--steps", "5", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [call] = _srun_calls(tmp_path)
    assert call["options"] == [
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=64",
        "--kill-on-bad-exit=1",
        "--container-image=nvcr.io#nvidia/pytorch:24.01-py3",
        f"--container-mounts={EXAMPLES}:{EXAMPLES}:ro",
    ]
    common = EXAMPLES / "common"
    assert call["command"] == ["python", f"{common}/gpuclus_launch.py", f"{common}/train_ddp.py", "--steps", "5"]


def test_container_job_image_override(tmp_path: Path) -> None:
    env = _fake_cluster(
        tmp_path,
        ["gpu1"],
        FAKE_SRUN_PYXIS="1",
        FAKE_SRUN_RUN="0",
        GPUCLUS_CONTAINER_IMAGE="nvcr.io#nvidia/pytorch:24.05-py3",
    )
    assert _sbatch("ddp-container", env=env, cwd=tmp_path).returncode == 0
    [call] = _srun_calls(tmp_path)
    assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in call["options"]


def test_container_job_without_pyxis_says_so(tmp_path: Path) -> None:
    done = _sbatch("ddp-container", env=_fake_cluster(tmp_path, ["gpu1"]), cwd=tmp_path)
    assert done.returncode == 2
    assert "Pyxis is not installed" in done.stderr
    assert _srun_calls(tmp_path) == []


def test_multi_node_job_gives_each_node_the_fewest_cpus(tmp_path: Path) -> None:
    env = _fake_cluster(tmp_path, ["n1", "n2", "n3"], FAKE_SRUN_RUN="0", SLURM_JOB_CPUS_PER_NODE="32(x2),16")
    assert _sbatch("ddp-multi-node", env=env, cwd=tmp_path).returncode == 0
    [call] = _srun_calls(tmp_path)
    assert call["options"] == ["--nodes=3", "--ntasks-per-node=1", "--cpus-per-task=16", "--kill-on-bad-exit=1"]


def test_mpi_job_without_mpicc_names_the_packages(tmp_path: Path) -> None:
    env = _fake_cluster(tmp_path, ["n1", "n2"], MPICC="gpuclus-no-such-mpicc")
    done = _sbatch("mpi-allreduce", env=env, cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "no mpicc" in line
    assert "openmpi-bin libopenmpi-dev (Debian, Ubuntu)" in line
    assert "openmpi openmpi-devel (Rocky, RHEL)" in line
    assert _srun_calls(tmp_path) == []


# -- MPI, where it is installed ------------------------------------------------------

needs_mpi = pytest.mark.skipif(
    shutil.which("mpicc") is None or shutil.which("mpirun") is None,
    reason="MPI is not installed here (no mpicc/mpirun; Debian: apt-get install openmpi-bin libopenmpi-dev)",
)


@needs_mpi
def test_mpi_job_compiles_and_broadcasts_the_binary(tmp_path: Path) -> None:
    env = _fake_cluster(tmp_path, ["n1", "n2"], FAKE_SRUN_RUN="0")
    done = _sbatch("mpi-allreduce", "4096", "3", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    main_call, cleanup = _srun_calls(tmp_path)
    assert main_call["options"] == ["--mpi=pmix", "--bcast=/tmp/gpuclus-mpi-allreduce-5150"]
    assert main_call["command"][0].endswith("/allreduce") and main_call["command"][1:] == ["4096", "3"]
    assert cleanup["command"] == ["rm", "-f", "/tmp/gpuclus-mpi-allreduce-5150"]
    assert not Path(main_call["command"][0]).exists()  # the job's build directory is gone


@needs_mpi
def test_allreduce_sums_are_right_on_two_ranks(tmp_path: Path) -> None:
    binary = tmp_path / "allreduce"
    compiled = subprocess.run(
        ["mpicc", "-O2", "-Wall", "-Werror", "-o", str(binary), str(EXAMPLES / "mpi-allreduce" / "allreduce.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True, check=False).stdout
    open_mpi = "Open MPI" in version or "OpenRTE" in version
    launcher = ["mpirun", "--oversubscribe", "-np", "2"] if open_mpi else ["mpirun", "-n", "2"]
    env = _clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader,tcp")
    done = subprocess.run(
        [*launcher, str(binary), "65536", "3"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("GPUCLUS_RESULT ")]
    result = json.loads(line.removeprefix("GPUCLUS_RESULT "))
    assert list(result) == ["template", "ranks", "nodes", "correct", "busbw_gbps"]
    assert result["template"] == "mpi-allreduce"
    assert result["ranks"] == 2 and result["nodes"] == 1 and result["correct"] is True
    assert result["busbw_gbps"] > 0


# -- real training on CPU -----------------------------------------------------------


def _training_result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    output = f"{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, output
    lines = [line for line in done.stdout.splitlines() if line.startswith("GPUCLUS_RESULT ")]
    assert len(lines) == 1, output
    result: dict[str, Any] = json.loads(lines[0].removeprefix("GPUCLUS_RESULT "))
    return result


def _assert_trained(result: dict[str, Any], template: str, world_size: int, steps: int) -> None:
    assert list(result) == RESULT_KEYS
    assert result["template"] == template
    assert (result["backend"], result["device"]) == ("gloo", "cpu")
    assert result["world_size"] == world_size
    assert result["nodes"] == 1  # every "node" is this machine
    assert result["steps"] == steps and len(result["losses"]) == steps
    assert result["loss_first"] == result["losses"][0] and result["loss_last"] == result["losses"][-1]
    assert result["decreased"] is True and result["loss_last"] < result["loss_first"]
    assert result["replicas_agree"] is True
    assert math.isfinite(result["samples_per_s"]) and result["samples_per_s"] > 0
    assert result["torch"].startswith("2.")


def _torchrun_standalone(script: Path, tmp_path: Path, steps: int) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(script),
        "--steps",
        str(steps),
    ]
    return subprocess.run(
        command, env=_clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False
    )


@needs_torch
def test_ddp_trains_on_two_cpu_processes(tmp_path: Path) -> None:
    done = _torchrun_standalone(EXAMPLES / "common" / "train_ddp.py", tmp_path, 20)
    result = _training_result(done)
    _assert_trained(result, "ddp-single-node", world_size=2, steps=20)
    assert "ddp-single-node: step 10/20" in done.stdout


@needs_torch
def test_fsdp_trains_on_two_cpu_processes(tmp_path: Path) -> None:
    done = _torchrun_standalone(EXAMPLES / "fsdp" / "train_fsdp.py", tmp_path, 20)
    _assert_trained(_training_result(done), "fsdp", world_size=2, steps=20)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@needs_torch
def test_multi_node_job_meets_at_the_first_node(tmp_path: Path) -> None:
    """Two "nodes" on this machine: srun starts a launcher for each, their torchruns meet through c10d."""
    env = _fake_cluster(
        tmp_path,
        ["localhost", "127.0.0.1"],
        SLURM_JOB_CPUS_PER_NODE="2(x2)",
        GPUCLUS_NPROC_PER_NODE="1",
        GPUCLUS_RDZV_PORT=str(_free_port()),
    )
    done = _sbatch("ddp-multi-node", "--steps", "10", env=env, cwd=tmp_path, timeout=90)
    _assert_trained(_training_result(done), "ddp-multi-node", world_size=2, steps=10)
    assert "--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=localhost:" in done.stderr


@needs_torch
def test_single_node_job_runs_torchrun_standalone_in_the_batch_step(tmp_path: Path) -> None:
    env = _fake_cluster(tmp_path, ["localhost"], GPUCLUS_NPROC_PER_NODE="2")
    done = _sbatch("ddp-single-node", "--steps", "10", "--hidden", "64", env=env, cwd=tmp_path, timeout=90)
    _assert_trained(_training_result(done), "ddp-single-node", world_size=2, steps=10)
    assert "--standalone --nnodes=1 --nproc-per-node=2" in done.stderr
    assert _srun_calls(tmp_path) == []  # one node: no srun


def _mode(path: Path) -> str:
    """A path's permission bits as the role writes them: "0755"."""
    return f"{path.stat().st_mode & 0o777:04o}"


@pytest.mark.skipif(os.geteuid() != 0, reason="the role unpacks the templates as root-owned files: needs root")
def test_the_roles_archive_writes_each_file_as_its_probe_wants_it(tmp_path: Path) -> None:
    # The role skips its configure step when node_probe finds nothing stale; a
    # probe that wanted another mode than the unpacked archive gives made every
    # deploy send the templates again. So the role's own tasks run here, by
    # ansible-playbook on this machine: probe (all stale), configure.yml (pack
    # on the "control machine", unpack on the "node", both this one), probe
    # again (nothing stale), and every mode is the one the role ships.
    import yaml

    role = EXAMPLES.parents[1]
    write_dir = tmp_path / "examples"
    probe = {"node_probe": {"files": "{{ __job_templates_probe_files }}"}}
    playbook = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(role / "vars" / "main.yml")],
            "vars": {
                "role_path": str(role),
                "job_templates_write_dir": str(write_dir),
                # This Python has what the modules need; interpreter discovery might pick another.
                "ansible_python_interpreter": sys.executable,
            },
            "tasks": [
                {**probe, "register": "__job_templates_probe"},
                {"ansible.builtin.include_tasks": str(role / "tasks" / "configure.yml")},
                {**probe, "register": "after"},
                {"ansible.builtin.debug": {"msg": "{{ [__job_templates_probe.stale.files, after.stale.files] }}"}},
            ],
        }
    ]
    (tmp_path / "configure.yml").write_text(yaml.safe_dump(playbook))
    ansible = Path(sys.executable).with_name("ansible-playbook")
    environment = {
        **os.environ,
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_LIBRARY": str(role.parent / "node_probe" / "library"),
    }
    done = subprocess.run(
        [str(ansible), "-i", "localhost,", "-c", "local", str(tmp_path / "configure.yml")],
        capture_output=True, text=True, env=environment, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    results = [task["hosts"]["localhost"] for task in json.loads(done.stdout)["plays"][0]["tasks"]]
    stale_before, stale_after = results[-1]["msg"]
    shipped = {
        str(path.relative_to(EXAMPLES)): "0755" if os.access(path, os.X_OK) else "0644"
        for path in EXAMPLES.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert len(stale_before) == len(shipped) + 1 + len({Path(name).parent for name in shipped} - {Path()})
    assert stale_after == []
    written = {str(path.relative_to(write_dir)): _mode(path) for path in write_dir.rglob("*") if path.is_file()}
    assert written == shipped
    directories = {_mode(path) for path in write_dir.rglob("*") if path.is_dir()}
    assert directories == {"0755"}
    # The archive was made in a temporary directory, which is gone again.
    archive_dirs = {task["path"] for task in results if str(task.get("path", "")).endswith(".gpuclus-job-templates")}
    assert len(archive_dirs) == 1 and not Path(archive_dirs.pop()).exists()
