"""`gpuclus validate` through typer: options, exit codes, JSON and JUnit, on a stubbed controller session.

No network: the SSH connection is replaced in gpuclus.slurm.session
(``connect`` returns a dummy client, ``Remote`` wraps it in a
``validate_stubs.StubRemote`` answering with output recorded on the sandbox).
"""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner, Result
from validate_stubs import GPU01, GPU02, HEAD, SANDBOX_SPEC, UNMUNGE_BAD_KEY, StubRemote, healthy_remote, ok

from gpuclus.cli.main import app
from gpuclus.slurm import session as controller_session
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget
from gpuclus.state import StateDir
from gpuclus.validate.checks import accounting
from gpuclus.validate.registry import STAGES, all_checks
from gpuclus.validate.results import Level

cli = CliRunner()

# The checks a default (standard) run selects, in run order.
STANDARD = [check.id for check in all_checks() if check.level <= Level.STANDARD]
# On the healthy sandbox: fake GPUs, Pyxis off, no MPI and no NFS mounts (ganesha) are SKIP; everything else passes.
# doors.job-tmp: the sandbox shares /tmp (slurm.job_tmp: shared).
SANDBOX_SKIPS = {
    "gpu.isolation",
    "gpu.driver",
    "gpu.nvidia-smi",
    "containers.pyxis",
    "launch.mpi",
    "config.mounts",
    "doors.job-tmp",
}


def spec_file(tmp_path: Path, text: str = SANDBOX_SPEC, key: bool = True) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    if key:
        state = StateDir.beside(path)
        state.private_dir(state.ssh_dir)
        state.private_key.write_text("not a key: the connection is stubbed\n")
    return path


def validate(*args: str) -> Result:
    return cli.invoke(app, ["validate", *args])


class Session:
    """What the stubbed connection saw: the target it was asked for, and the stub session it returned."""

    def __init__(self, remote: StubRemote) -> None:
        self.remote = remote
        self.targets: list[SshTarget] = []


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Session:
    """Replace the controller connection with a healthy-sandbox stub (tests may ``prefer`` breakage)."""
    stub = Session(healthy_remote())

    def connect(target: SshTarget, *args: Any, **kwargs: Any) -> object:
        stub.targets.append(target)
        return object()

    monkeypatch.setattr(controller_session, "connect", connect)
    monkeypatch.setattr(controller_session, "Remote", lambda client: stub.remote)
    monkeypatch.setattr(accounting, "WAIT_FOR_ROWS_S", 0.0)
    return stub


@pytest.fixture
def no_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection attempt fails the test: for runs that must stop before connecting."""

    def connect(target: SshTarget, *args: Any, **kwargs: Any) -> object:
        raise AssertionError("validate connected although it should have stopped before")

    monkeypatch.setattr(controller_session, "connect", connect)


# --- --list and options refused before anything connects ----------------------------------


def test_list_shows_every_check(no_connection: None) -> None:
    result = validate("--list")
    assert result.exit_code == 0, result.output
    for check in all_checks():
        assert check.id in result.stdout


def test_list_json(no_connection: None) -> None:
    result = validate("--list", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [entry["id"] for entry in payload["checks"]] == [check.id for check in all_checks()]
    first = payload["checks"][0]
    assert first == {
        "id": "cluster.slurmctld",
        "stage": "cluster",
        "level": "quick",
        "title": "slurmctld answers",
    }
    assert {entry["level"] for entry in payload["checks"]} == {"quick", "standard", "full"}


def test_unknown_level_exits_2(tmp_path: Path, no_connection: None) -> None:
    result = validate(str(spec_file(tmp_path)), "--level", "deep")
    assert result.exit_code == 2, result.output
    assert "unknown level 'deep'" in result.stderr
    assert "quick, standard or full" in result.stderr


def test_only_unknown_check_exits_2_with_a_hint(tmp_path: Path, no_connection: None) -> None:
    result = validate(str(spec_file(tmp_path)), "--only", "cluster.slurmctld,launch.bogus")
    assert result.exit_code == 2, result.output
    assert "unknown check launch.bogus" in result.stderr
    assert "gpuclus validate --list" in result.stderr


def test_only_unknown_check_in_json_mode_is_a_json_error(tmp_path: Path, no_connection: None) -> None:
    result = validate(str(spec_file(tmp_path)), "--only", "bogus", "--json")
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["error"]["exit_code"] == 2
    assert "--list" in payload["error"]["hint"]


@pytest.mark.parametrize(
    ("nodes", "words"),
    [("val-gpu[01-03]", "not in the spec: val-gpu03"), ("val-gpu[01", "--nodes"), ("", "empty entry")],
)
def test_nodes_not_in_the_spec_exit_2(tmp_path: Path, no_connection: None, nodes: str, words: str) -> None:
    result = validate(str(spec_file(tmp_path)), "--nodes", nodes)
    assert result.exit_code == 2, result.output
    assert words in result.stderr


def test_without_gpuclus_ssh_key_exits_2(tmp_path: Path, no_connection: None) -> None:
    result = validate(str(spec_file(tmp_path, key=False)))
    assert result.exit_code == 2, result.output
    assert "no gpuclus SSH key in" in result.stderr
    assert "gpuclus deploy" in result.stderr


def test_invalid_spec_exits_3(tmp_path: Path, no_connection: None) -> None:
    broken = SANDBOX_SPEC.replace("address: 10.213.0.12", "address: 10.213.0.10")  # duplicate address
    result = validate(str(spec_file(tmp_path, broken)))
    assert result.exit_code == 3, result.output
    assert "spec has" in result.stderr


def test_missing_spec_exits_2(tmp_path: Path, no_connection: None) -> None:
    result = validate(str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2, result.output


# --- the controller cannot be reached ------------------------------------------------------


def test_controller_unreachable_exits_4_monkeypatched_connect_raises_ssh_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets: list[SshTarget] = []

    def connect(target: SshTarget, *args: Any, **kwargs: Any) -> object:
        targets.append(target)
        raise SshFailure(f"{target.address}: [Errno 113] No route to host")

    monkeypatch.setattr(controller_session, "connect", connect)
    spec = spec_file(tmp_path)
    result = validate(str(spec))
    assert result.exit_code == 4, result.output
    assert "controller val-head unreachable: 10.213.0.10: [Errno 113] No route to host" in result.stderr
    assert "gpuclus preflight" in result.stderr
    # gpuclus' own key and known_hosts, as the spec's admin user.
    state = StateDir.beside(spec)
    assert targets == [SshTarget("10.213.0.10", "gpuclus", state.private_key, state.known_hosts)]


def test_controller_unreachable_in_json_mode_monkeypatched_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def connect(target: SshTarget, *args: Any, **kwargs: Any) -> object:
        raise SshFailure(f"{target.address}: timed out")

    monkeypatch.setattr(controller_session, "connect", connect)
    result = validate(str(spec_file(tmp_path)), "--json")
    assert result.exit_code == 4
    assert json.loads(result.stdout)["error"]["exit_code"] == 4


# --- whole runs on the stubbed sandbox -----------------------------------------------------


def test_json_run_on_recorded_healthy_sandbox_exits_0(tmp_path: Path, session: Session) -> None:
    result = validate(str(spec_file(tmp_path)), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] is True
    assert payload["exit_code"] == 0
    assert (payload["cluster"], payload["level"]) == ("val", "standard")
    assert [check["id"] for check in payload["checks"]] == STANDARD
    assert payload["failures"] == []
    by_id = {check["id"]: check["status"] for check in payload["checks"]}
    assert {name for name, status in by_id.items() if status == "skip"} == SANDBOX_SKIPS
    assert {status for name, status in by_id.items() if name not in SANDBOX_SKIPS} == {"pass"}
    assert payload["counts"] == {"pass": len(STANDARD) - len(SANDBOX_SKIPS), "warn": 0, "fail": 0, "skip": 7}
    assert set(payload["nodes"]) == {HEAD, GPU01, GPU02}
    assert payload["nodes"][GPU01]["launch.srun"] == "pass"
    assert payload["nodes"][HEAD]["monitoring.targets"] == "pass"
    # One connection; every job carries the run's name and is cancelled at the end; the session is closed.
    assert len(session.targets) == 1
    job = payload["job_name"]
    assert all(f"--job-name={job}" in line for line in session.remote.commands if line.startswith("timeout "))
    assert session.remote.commands[-1].startswith(f"scancel --name={job} ")
    assert session.remote.closed
    assert result.stderr == ""


def test_json_run_on_recorded_replaced_munge_key_exits_1_naming_check_and_node(
    tmp_path: Path, session: Session
) -> None:
    session.remote.prefer(("unmunge", GPU02), UNMUNGE_BAD_KEY)
    result = validate(str(spec_file(tmp_path)), "--json")
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["exit_code"] == 1
    (failure,) = payload["failures"]
    assert failure["check"] == "launch.munge"
    assert failure["node"] == GPU02
    assert failure["message"] == "unmunge: Error: Invalid credential"
    assert "munge.key" in failure["hint"]
    assert payload["nodes"][GPU02]["launch.munge"] == "fail"
    assert payload["nodes"][GPU01]["launch.munge"] == "pass"
    assert payload["counts"]["fail"] == 1


def test_human_run_prints_a_table_failures_with_hints_and_the_verdict(tmp_path: Path, session: Session) -> None:
    session.remote.prefer(("unmunge", GPU02), UNMUNGE_BAD_KEY)
    result = validate(str(spec_file(tmp_path)), "--level", "quick")
    assert result.exit_code == 1, result.output
    out = " ".join(result.stdout.split())
    assert "FAIL launch.munge" in out
    assert "val-gpu02: unmunge: Error: Invalid credential" in out
    assert "hint:" in out
    assert "cluster NOT OK" in out
    assert "SKIP gpu.nvidia-smi" in out
    # Progress lines go to stderr, one per check.
    assert "launch.munge" in result.stderr and "val-gpu02" in result.stderr


def test_human_run_on_recorded_healthy_sandbox_says_ok(tmp_path: Path, session: Session) -> None:
    result = validate(str(spec_file(tmp_path)), "--level", "quick")
    assert result.exit_code == 0, result.output
    assert "cluster OK" in result.stdout
    assert "quick" in result.stdout


def test_only_and_nodes_narrow_the_run(tmp_path: Path, session: Session) -> None:
    result = validate(str(spec_file(tmp_path)), "--only", "cluster,launch.munge", "--nodes", GPU01, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [check["id"] for check in payload["checks"]] == [
        "cluster.slurmctld",
        "cluster.nodes-known",
        "cluster.node-states",
        "cluster.partitions",
        "cluster.gres",
        "launch.munge",
    ]
    assert set(payload["nodes"]) == {GPU01}
    assert len(session.remote.matching("unmunge")) == 1


def test_recorded_slurmctld_down_fails_once_and_skips_what_needs_slurm(tmp_path: Path, session: Session) -> None:
    session.remote.prefer("scontrol ping", CommandResult(1, "Slurmctld(primary) at val-head is DOWN\n", ""))
    result = validate(str(spec_file(tmp_path)), "--json")
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert [failure["check"] for failure in payload["failures"]] == ["cluster.slurmctld"]
    by_id = {check["id"]: check for check in payload["checks"]}
    assert by_id["launch.srun"]["status"] == "skip"
    assert by_id["launch.srun"]["message"] == "slurmctld does not answer (cluster.slurmctld failed)"
    assert by_id["launch.munge"]["status"] == "pass"  # needs no Slurm
    assert session.remote.matching("SLURMD_NODENAME") == []


def test_junit_file_is_valid_xml(tmp_path: Path, session: Session) -> None:
    session.remote.prefer(("unmunge", GPU02), UNMUNGE_BAD_KEY)
    target = tmp_path / "validate.xml"
    result = validate(str(spec_file(tmp_path)), "--junit", str(target))
    assert result.exit_code == 1, result.output
    assert "JUnit XML:" in result.stderr
    root = ET.parse(target).getroot()
    assert root.tag == "testsuites"
    assert int(root.get("tests", "0")) == len(STANDARD)
    assert (root.get("failures"), root.get("skipped")) == ("1", "7")
    assert [suite.get("name") for suite in root.findall("testsuite")] == [
        "cluster",
        "config",
        "launch",
        "storage",
        "gpu",
        "containers",
        "accounting",
        "doors",
        "monitoring",
    ]
    failures = [case.get("name") for case in root.iter("testcase") if case.find("failure") is not None]
    assert failures == ["launch.munge"]


def test_junit_with_json_keeps_stdout_pure_json(tmp_path: Path, session: Session) -> None:
    target = tmp_path / "validate.xml"
    result = validate(str(spec_file(tmp_path)), "--junit", str(target), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True
    ET.parse(target)


def test_ctrl_c_during_a_run_exits_130_and_cancels_the_jobs(tmp_path: Path, session: Session) -> None:
    def interrupted(command: str) -> CommandResult:
        raise KeyboardInterrupt

    session.remote.prefer("SLURMD_NODENAME", interrupted)
    result = validate(str(spec_file(tmp_path)), "--json")
    assert result.exit_code == 130, result.output
    assert json.loads(result.stdout)["error"]["exit_code"] == 130
    assert session.remote.commands[-1].startswith("scancel --name=gpuclus-validate-")
    assert session.remote.closed


PYXIS_ON = "  enroot: true\n  pyxis: true\n  allow_unverified_downloads: true"


def test_container_image_option_reaches_the_pyxis_job(tmp_path: Path, session: Session) -> None:
    text = SANDBOX_SPEC.replace("  enroot: false\n  pyxis: false", PYXIS_ON)
    session.remote.prefer("--container-image=", ok("GPUCLUS_CONTAINER container 0 1000 1\n")).prefer(
        "srun --help", ok("1\n")
    )
    result = validate(
        str(spec_file(tmp_path, text)), "--only", "containers", "--container-image", "/shared/u.sqsh", "--json"
    )
    assert result.exit_code == 0, result.output
    assert len(session.remote.matching("--container-image=/shared/u.sqsh")) == 2


def test_junit_into_a_missing_directory_is_refused_before_anything_runs(tmp_path: Path, session: Session) -> None:
    result = validate(str(spec_file(tmp_path)), "--junit", str(tmp_path / "no-such-dir" / "validate.xml"))
    assert result.exit_code == 2, result.output
    assert "no directory" in result.stderr
    assert session.remote.matching("scontrol") == []


def test_junit_onto_a_fifo_or_a_symlink_is_refused_before_anything_runs(tmp_path: Path, session: Session) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(spec_file(tmp_path))
    for target, words in ((fifo, "FIFO"), (link, "symbolic link")):
        result = validate(str(spec_file(tmp_path)), "--junit", str(target))
        assert result.exit_code == 2, result.output
        assert words in result.stderr
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink()
    assert session.remote.matching("scontrol") == []


# --- shell completion: offline, from the registry and the spec, silent on any problem ------------


def complete(option: str, incomplete: str, *words: str) -> list[str]:
    """What the shell gets for ``gpuclus validate WORDS OPTION INCOMPLETE<TAB>``, through click's own API."""
    validate_command = typer.main.get_group(app).commands["validate"]
    ctx = validate_command.make_context("validate", [*words, option], resilient_parsing=True)
    param = next(param for param in validate_command.params if option in getattr(param, "opts", ()))
    return [item.value for item in param.shell_complete(ctx, incomplete)]


def test_only_completes_stages_and_check_ids_from_the_registry(no_connection: None) -> None:
    assert complete("--only", "") == [*STAGES, *(check.id for check in all_checks())]
    assert complete("--only", "gpu.n") == ["gpu.nvidia-smi", "gpu.nccl"]
    assert complete("--only", "nothing") == []


def test_only_completes_the_item_after_the_last_comma_without_repeating_one(no_connection: None) -> None:
    assert complete("--only", "launch,launch.m") == ["launch,launch.munge", "launch,launch.mpi"]
    assert complete("--only", "cluster,gpu,cl") == ["cluster,gpu,cluster." + name for name in CLUSTER_CHECKS]


CLUSTER_CHECKS = ["slurmctld", "nodes-known", "node-states", "partitions", "gres"]
EXPANDED_NODES = ["val-head", "val-gpu01", "val-gpu02"]


def test_nodes_completes_the_node_names_of_cluster_yaml_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_connection: None
) -> None:
    spec_file(tmp_path, key=False)
    monkeypatch.chdir(tmp_path)
    assert complete("--nodes", "") == EXPANDED_NODES
    assert complete("--nodes", "val-g") == ["val-gpu01", "val-gpu02"]
    assert complete("--nodes", "val-gpu02,val-g") == ["val-gpu02,val-gpu01"]


def test_nodes_completes_from_the_spec_named_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_connection: None
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    named = spec_file(other, SANDBOX_SPEC.replace("val-", "lab-"), key=False)
    monkeypatch.chdir(tmp_path)  # no cluster.yaml here
    assert complete("--nodes", "lab-g", str(named), "--json") == ["lab-gpu01", "lab-gpu02"]


@pytest.mark.parametrize(
    "content",
    [None, "nodes: [unclosed\n", "just a string\n", b"\xff\xfe binary"],
    ids=["no-file", "bad-yaml", "not-a-spec", "not-text"],
)
def test_nodes_completes_nothing_when_the_spec_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_connection: None, content: str | bytes | None
) -> None:
    if isinstance(content, str):
        (tmp_path / "cluster.yaml").write_text(content)
    elif isinstance(content, bytes):
        (tmp_path / "cluster.yaml").write_bytes(content)
    monkeypatch.chdir(tmp_path)
    assert complete("--nodes", "") == []


def test_the_pyxis_job_runs_the_specs_validate_image_by_default(tmp_path: Path, session: Session) -> None:
    text = SANDBOX_SPEC.replace("  enroot: false\n  pyxis: false", PYXIS_ON + "\n  validate_image: /var/img/t.sqsh")
    session.remote.prefer("--container-image=", ok("GPUCLUS_CONTAINER container 0 1000 1\n")).prefer(
        "srun --help", ok("1\n")
    )
    result = validate(str(spec_file(tmp_path, text)), "--only", "containers", "--json")
    assert result.exit_code == 0, result.output
    assert len(session.remote.matching("--container-image=/var/img/t.sqsh")) == 2
    # The option overrides the spec.
    again = validate(str(spec_file(tmp_path, text)), "--only", "containers", "--container-image", "ubuntu:24.04")
    assert again.exit_code == 0, again.output
    assert len(session.remote.matching("--container-image=ubuntu:24.04")) == 2


@pytest.mark.parametrize("image", ["ubuntu.sqsh", "a b", "x'y", ""])
def test_a_container_image_pyxis_would_misread_is_a_usage_error(tmp_path: Path, session: Session, image: str) -> None:
    result = validate(str(spec_file(tmp_path)), "--only", "containers", "--container-image", image)
    assert result.exit_code == 2, result.output
    assert "--container-image" in result.stderr
    assert not session.remote.commands
