"""Hints that point the right way (issue 12 item 6).

- validate with a compute node gone names the node unreachable, and blames
  neither its munge key nor gres/gpus.count;
- validate on a controller without Slurm stops with "run gpuclus deploy first" (exit 1);
- a refused SSH login is not "is sshd running?": wrong admin_user, a key the nodes
  do not know (a spec copied to a directory with a new key), a sandbox;
- every gpuclus command a hint prints names the spec when it is not ./cluster.yaml;
- `runs list` says which hosts `deploy --retry-failed` re-runs, read the same way.

The validate cases run the real checks over validate_stubs' recorded sandbox output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from validate_stubs import (
    COMPUTE,
    GPU01,
    GPU02,
    HEAD,
    SANDBOX_SPEC,
    SRUN_NODES_BUSY,
    SSH_TIMED_OUT,
    UNMUNGE_BAD_KEY,
    StubRemote,
    context,
    fail,
    healthy_remote,
    load,
    ok,
    with_state,
)

from gpuclus.cli.main import app
from gpuclus.deploy.records import Failure, RunRecord, runs_dir
from gpuclus.errors import ExitCode
from gpuclus.hints import gpuclus_command, with_spec
from gpuclus.preflight import runner as preflight_runner
from gpuclus.preflight.runner import SshAdvice, ssh_hint
from gpuclus.slurm import commands as slurm
from gpuclus.slurm import session as controller_session
from gpuclus.slurm.session import controller_hint, require_slurm
from gpuclus.ssh.client import SshFailure, SshTarget
from gpuclus.state import StateDir
from gpuclus.validate.checks import accounting, cluster, launch, monitoring, storage
from gpuclus.validate.registry import all_checks
from gpuclus.validate.results import Level, Status
from gpuclus.validate.runner import run_checks

cli = CliRunner()

# What the sandbox answered with val-gpu02 stopped (podman stop): ssh from the
# controller times out, Slurm marks it down and not responding.
STOPPED = with_state(GPU02, "DOWN+NOT_RESPONDING", reason="Not responding [slurm@2026-11-21T09:03:11]")
AUTH_FAILED = "10.213.0.10: Authentication failed."
TIMED_OUT = "10.213.0.10:22: timed out"


def gpu02_stopped() -> StubRemote:
    remote = healthy_remote()
    remote.prefer("scontrol --oneliner", ok(STOPPED))
    remote.prefer(("ssh -o BatchMode", f" {GPU02} "), SSH_TIMED_OUT)
    remote.prefer(("%{http_code}", "10.213.0.12:9100"), ok("000"))  # its node exporter is gone with it
    return remote


def by_node(outcome: Any) -> dict[str, Any]:
    return {result.node: result for result in outcome.nodes}


# =====================================================================================
# gpuclus_command / with_spec: one way of writing a command for a spec
# =====================================================================================


def test_gpuclus_command_names_the_spec_unless_it_is_cluster_yaml_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert gpuclus_command("deploy", Path("cluster.yaml"), "--retry-failed") == "gpuclus deploy --retry-failed"
    assert gpuclus_command("deploy", tmp_path / "cluster.yaml") == "gpuclus deploy"
    assert gpuclus_command("deploy", Path("sandbox.yaml"), "--retry-failed") == (
        "gpuclus deploy sandbox.yaml --retry-failed"
    )
    assert gpuclus_command("preflight", Path("lab/cluster.yaml"), "--password") == (
        "gpuclus preflight lab/cluster.yaml --password"
    )
    assert gpuclus_command("runs list", Path("sandbox.yaml")) == "gpuclus runs list --spec sandbox.yaml"
    # `gpuclus sandbox` reads sandbox.yaml unless told otherwise.
    assert gpuclus_command("sandbox up", Path("sandbox.yaml")) == "gpuclus sandbox up"
    assert gpuclus_command("sandbox up", Path("other.yaml")) == "gpuclus sandbox up --spec other.yaml"
    assert gpuclus_command("validate", Path("my lab.yaml")) == "gpuclus validate 'my lab.yaml'"


def test_with_spec_puts_the_spec_into_every_command_a_hint_names_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = Path("sandbox.yaml")
    hint = "fix, then `gpuclus deploy --retry-failed`; `gpuclus preflight` checks; see `gpuclus runs show ID`"
    assert with_spec(hint, spec) == (
        "fix, then `gpuclus deploy sandbox.yaml --retry-failed`; `gpuclus preflight sandbox.yaml` checks; "
        "see `gpuclus runs show --spec sandbox.yaml ID`"
    )
    # Already named, a sandbox command (it may be about another directory), spec check: left alone.
    for kept in (
        "`gpuclus deploy sandbox.yaml --only slurm`",
        "run `gpuclus sandbox down` in /srv/a",
        "`gpuclus spec check x.yaml`",
    ):
        assert with_spec(kept, spec) == kept
    assert with_spec(hint, Path("cluster.yaml")) == hint
    assert with_spec(None, spec) is None


def test_an_error_hint_from_deploy_names_the_spec_retry_failed_without_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpuclus deploy sandbox.yaml --retry-failed` with no run: the hint must not send the user to cluster.yaml."""
    monkeypatch.chdir(tmp_path)
    Path("sandbox.yaml").write_text(SANDBOX_SPEC)
    result = cli.invoke(app, ["deploy", "sandbox.yaml", "--retry-failed", "--json"])
    assert result.exit_code == ExitCode.USAGE, result.output
    error = json.loads(result.stdout)["error"]
    assert error["message"] == "--retry-failed: there is no earlier run"
    assert error["hint"] == "run `gpuclus deploy sandbox.yaml` first"


# =====================================================================================
# validate: a node that cannot be reached is named as such
# =====================================================================================


def test_munge_names_an_unreachable_node_and_does_not_blame_its_key() -> None:
    ctx = context(gpu02_stopped())
    outcome = launch.munge_decodes(ctx)
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == (
        "val-gpu02 unreachable: ssh: connect to host val-gpu02 port 22: Connection timed out"
    )
    for hint in (outcome.hint, rows[GPU02].hint):
        assert hint and "munge.key" not in hint
        assert "val-gpu02 cannot be reached from val-head" in hint and "gpuclus preflight" in hint
    assert ctx.unreachable == {GPU02: "ssh: connect to host val-gpu02 port 22: Connection timed out"}


def test_munge_keeps_the_key_hint_for_a_bad_key_beside_an_unreachable_node() -> None:
    remote = gpu02_stopped().prefer(("unmunge", GPU01), UNMUNGE_BAD_KEY)
    outcome = launch.munge_decodes(context(remote))
    rows = by_node(outcome)
    assert outcome.hint and "munge.key" in outcome.hint
    assert rows[GPU01].hint is None  # the check's hint is its hint
    assert rows[GPU02].hint and "munge.key" not in rows[GPU02].hint


def test_gres_devices_skips_a_node_ssh_could_not_reach_and_does_not_probe_it_again() -> None:
    remote = gpu02_stopped()
    ctx = context(remote)
    launch.munge_decodes(ctx)
    ctx.memo["launch_failed"] = {GPU02}
    outcome = launch.gres_devices_exist(ctx)
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].status is Status.SKIP
    assert rows[GPU02].message.startswith("val-gpu02 unreachable, GRES not checked: ssh: connect to host")
    assert outcome.overall is Status.PASS
    assert remote.matching("slurmd -G", "StrictHostKeyChecking") == []


def test_gres_devices_on_a_dead_node_whose_ssh_probe_times_out_is_skipped_not_blamed_on_gpus_count() -> None:
    remote = healthy_remote().prefer(("slurmd -G", "StrictHostKeyChecking"), SSH_TIMED_OUT)
    ctx = context(remote)
    ctx.memo["launch_failed"] = {GPU02}
    outcome = launch.gres_devices_exist(ctx)
    assert by_node(outcome)[GPU02].status is Status.SKIP
    assert "unreachable" in by_node(outcome)[GPU02].message
    assert outcome.overall is Status.PASS


def test_cluster_gres_mismatch_on_a_down_node_points_at_its_state_first() -> None:
    text = STOPPED.replace(
        next(line for line in STOPPED.splitlines() if line.startswith(f"NodeName={GPU02} ")),
        next(line for line in STOPPED.splitlines() if line.startswith(f"NodeName={GPU02} ")).replace(
            "Gres=gpu:2", "Gres=(null)"
        ),
    )
    outcome = cluster.gres_matches_spec(context(healthy_remote().prefer("scontrol --oneliner", ok(text))))
    row = by_node(outcome)[GPU02]
    assert row.status is Status.FAIL
    assert row.message == "Slurm has gpu:0, the spec says 2; Slurm reports the node down+not_responding"
    assert row.hint and row.hint.startswith("val-gpu02 is down+not_responding in Slurm (see cluster.node-states)")


def test_a_quick_run_with_a_stopped_compute_node_names_it_unreachable_and_blames_neither_munge_nor_gres() -> None:
    loaded = load()
    assert loaded.spec is not None and loaded.topology is not None
    quick = [check for check in all_checks() if check.level <= Level.QUICK]
    report = run_checks(
        gpu02_stopped(), loaded.spec, loaded.topology, quick, level=Level.QUICK, selected=list(loaded.topology.nodes)
    )
    failures = report.failures()
    assert {failure["node"] for failure in failures} == {GPU02}
    assert {failure["check"] for failure in failures} == {
        "cluster.node-states",
        "config.files",  # the config stage's first check names it; the stage's later ones SKIP it
        "launch.munge",
        "launch.srun",
        "doors.compute-ssh",  # its door cannot be asked: named unreachable, not open
        "monitoring.targets",
    }
    for failure in failures:
        assert "munge.key" not in failure["hint"] and "gpus.count" not in failure["hint"], failure
        assert "prometheus-node-exporter" not in failure["hint"], failure
        assert "gpuclus deploy`" not in failure["hint"], failure  # a node that is down is not drift
    by_check = {failure["check"]: failure for failure in failures}
    assert by_check["config.files"]["message"].startswith("val-gpu02 unreachable: ssh: connect to host")
    assert by_check["launch.munge"]["message"].startswith("val-gpu02 unreachable: ssh: connect to host")
    assert "unreachable" in by_check["launch.srun"]["message"]
    assert "val-gpu02 unreachable: ssh: connect to host" in by_check["doors.compute-ssh"]["message"]
    assert "lets in" not in by_check["doors.compute-ssh"]["message"]
    assert "down+not_responding" in by_check["launch.srun"]["message"]
    gres = next(result for result in report.results if result.id == "launch.gres-devices")
    assert {row.node: row.status for row in gres.outcome.nodes} == {GPU01: Status.PASS, GPU02: Status.SKIP}


def test_monitoring_blames_a_stopped_exporter_only_on_nodes_that_answer() -> None:
    remote = gpu02_stopped().prefer(("%{http_code}", "10.213.0.11:9100"), ok("000"))
    ctx = context(remote)
    launch.munge_decodes(ctx)
    outcome = monitoring.targets_up(ctx)
    rows = by_node(outcome)
    assert rows[GPU01].hint is None and outcome.hint and "prometheus-node-exporter" in outcome.hint
    assert rows[GPU02].message.endswith(
        "; val-gpu02 unreachable: ssh: connect to host val-gpu02 port 22: Connection timed out"
    )
    assert rows[GPU02].hint and "prometheus-node-exporter" not in rows[GPU02].hint


def test_storage_names_a_reader_ssh_could_not_reach_instead_of_blaming_nfs() -> None:
    remote = gpu02_stopped()
    ctx = context(remote)
    launch.munge_decodes(ctx)
    # Slurm has not noticed yet: the read job is tried there, and cannot start.
    remote.prefer(("nfs-cat", "--nodelist=val-gpu02"), SRUN_NODES_BUSY)
    outcome = storage.shared_file_visible(ctx)
    row = by_node(outcome)[GPU02]
    assert row.status is Status.FAIL
    assert row.message.endswith("; val-gpu02 unreachable: ssh: connect to host val-gpu02 port 22: Connection timed out")
    assert outcome.hint and "nfs-ganesha" not in outcome.hint
    assert by_node(outcome)[GPU01].status is Status.PASS


def test_validate_json_hints_name_the_spec_it_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "sandbox.yaml"
    spec.write_text(SANDBOX_SPEC)
    state = StateDir.beside(spec)
    state.private_dir(state.ssh_dir)
    state.private_key.write_text("not a key: the connection is stubbed\n")
    remote = healthy_remote().prefer(("unmunge", GPU02), UNMUNGE_BAD_KEY)
    monkeypatch.setattr(controller_session, "connect", lambda target, *a, **k: object())
    monkeypatch.setattr(controller_session, "Remote", lambda client: remote)
    monkeypatch.setattr(accounting, "WAIT_FOR_ROWS_S", 0.0)
    result = cli.invoke(app, ["validate", str(spec), "--only", "launch.munge", "--json"])
    assert result.exit_code == 1, result.output
    (failure,) = json.loads(result.stdout)["failures"]
    assert f"`gpuclus deploy {spec} --only slurm`" in failure["hint"]


# =====================================================================================
# validate: Slurm not deployed at all
# =====================================================================================

NO_SCONTROL = fail(127, "", "bash: line 1: scontrol: command not found\n")
NO_SLURM_CONF = fail(
    1,
    "",
    'scontrol: error: s_p_parse_file: unable to stat "/etc/slurm/slurm.conf": No such file or directory\n'
    "scontrol: fatal: something wrong with opening/reading /etc/slurm/slurm.conf file\n",
)


@pytest.mark.parametrize(
    ("answer", "detail"), [(NO_SCONTROL, "scontrol: command not found"), (NO_SLURM_CONF, "no /etc/slurm/slurm.conf")]
)
def test_require_slurm_stops_on_a_controller_without_slurm(answer: Any, detail: str) -> None:
    with pytest.raises(slurm.SlurmNotDeployed) as raised:
        require_slurm(StubRemote([("scontrol ping", answer)]), HEAD, Path("sandbox.yaml"))
    assert raised.value.message == f"Slurm is not deployed on {HEAD} ({detail})"
    assert raised.value.hint == "run `gpuclus deploy sandbox.yaml` first, then validate"
    assert raised.value.exit_code == ExitCode.FAILED


def test_require_slurm_lets_a_deployed_controller_with_slurmctld_down_through() -> None:
    require_slurm(StubRemote([("scontrol ping", fail(1, "Slurmctld(primary) at val-head is DOWN\n"))]), HEAD)


def test_validate_on_an_undeployed_cluster_is_one_error_saying_deploy_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "sandbox.yaml"
    spec.write_text(SANDBOX_SPEC)
    state = StateDir.beside(spec)
    state.private_dir(state.ssh_dir)
    state.private_key.write_text("stub\n")
    remote = StubRemote([("scontrol ping", NO_SCONTROL), ("scancel", NO_SCONTROL)])
    monkeypatch.setattr(controller_session, "connect", lambda target, *a, **k: object())
    monkeypatch.setattr(controller_session, "Remote", lambda client: remote)
    result = cli.invoke(app, ["validate", str(spec), "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["message"] == "Slurm is not deployed on val-head (scontrol: command not found)"
    assert error["hint"] == f"run `gpuclus deploy {spec}` first, then validate"
    assert remote.commands == ["scontrol ping"]  # no check ran


def test_slurmctld_check_itself_stops_the_run_when_slurm_is_missing() -> None:
    """With --only launch the runner's look already stopped it; cluster.slurmctld alone says the same."""
    loaded = load()
    assert loaded.spec is not None and loaded.topology is not None
    check = next(check for check in all_checks() if check.id == "cluster.slurmctld")
    remote = StubRemote([("scontrol ping", NO_SCONTROL), ("scancel", ok())])
    with pytest.raises(slurm.SlurmNotDeployed):
        run_checks(remote, loaded.spec, loaded.topology, [check], level=Level.QUICK, selected=[])


# =====================================================================================
# SSH login refused vs host down (preflight and validate's controller)
# =====================================================================================


def test_a_refused_login_says_so_and_is_not_called_a_host_that_is_down() -> None:
    spec = Path("lab.yaml")
    down = ssh_hint(TIMED_OUT, "ubuntu", SshAdvice(spec))
    refused = ssh_hint(AUTH_FAILED, "ubuntu", SshAdvice(spec))
    assert down == "check the address, that sshd runs, and the firewall"
    assert refused == (
        "authentication failed as ubuntu: check cluster.admin_user in lab.yaml, or install gpuclus' key "
        "with `gpuclus preflight lab.yaml --password`"
    )


def test_a_refused_login_on_a_sandbox_points_at_sandbox_up_not_password() -> None:
    hint = ssh_hint(AUTH_FAILED, "admin", SshAdvice(Path("sandbox.yaml"), sandbox=True))
    assert "authentication failed as admin: check cluster.admin_user in sandbox.yaml" in hint
    assert "`gpuclus sandbox up`" in hint
    assert "`gpuclus preflight" not in hint


def test_a_refused_login_with_a_key_made_here_says_the_nodes_do_not_know_it() -> None:
    hint = ssh_hint(AUTH_FAILED, "admin", SshAdvice(Path("copy.yaml"), new_key=True))
    assert hint.startswith(
        "this directory has its own new SSH key (.gpuclus/ssh/) that the nodes do not know: run gpuclus from "
        "the directory where the cluster was set up, or copy its .gpuclus/ here"
    )


def test_controller_hint_for_validate_tells_a_refused_login_from_a_host_that_is_down() -> None:
    assert controller_hint(TIMED_OUT, "ubuntu").startswith("is it up and is sshd running?")
    refused = controller_hint(AUTH_FAILED, "ubuntu")
    assert "is sshd running" not in refused
    assert "refused gpuclus' key as ubuntu: check cluster.admin_user" in refused


def refuse_logins(monkeypatch: pytest.MonkeyPatch, message: str = AUTH_FAILED) -> list[SshTarget]:
    tried: list[SshTarget] = []

    def connect(target: SshTarget, *args: Any, **kwargs: Any) -> object:
        tried.append(target)
        raise SshFailure(message)

    monkeypatch.setattr(preflight_runner, "connect", connect)
    return tried


def preflight_hints(spec: Path) -> set[str]:
    result = cli.invoke(app, ["preflight", str(spec), "--json"])
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    nodes = json.loads(result.stdout)["nodes"]
    return {check["hint"] for node in nodes for check in node["checks"] if check["name"] == "ssh"}


def test_preflight_in_a_copy_of_the_spec_makes_a_new_key_and_says_the_nodes_do_not_know_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "copy" / "sandbox.yaml"
    spec.parent.mkdir()
    spec.write_text(SANDBOX_SPEC)
    refuse_logins(monkeypatch)
    (hint,) = preflight_hints(spec)
    assert hint.startswith("this directory has its own new SSH key (.gpuclus/ssh/) that the nodes do not know")
    assert f"`gpuclus preflight {spec} --password`" in hint
    # Still so on the next run: the key is still one no node was given.
    (again,) = preflight_hints(spec)
    assert again == hint


def test_preflight_of_a_sandbox_with_a_wrong_admin_user_points_at_the_spec_and_sandbox_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "sandbox.yaml"
    wrong = SANDBOX_SPEC.replace("admin_user: gpuclus", "admin_user: root")
    assert wrong != SANDBOX_SPEC
    spec.write_text(wrong)
    state = StateDir.beside(spec)
    state.ensure_ssh_key()
    state.sandbox_record.write_text("{}\n")
    refuse_logins(monkeypatch)
    (hint,) = preflight_hints(spec)
    assert hint.startswith(f"authentication failed as root: check cluster.admin_user in {spec}")
    assert f"`gpuclus sandbox up --spec {spec}`" in hint
    assert "--password" in hint and "`gpuclus preflight" not in hint


def test_preflight_of_a_node_that_is_down_keeps_the_connection_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SANDBOX_SPEC)
    refuse_logins(monkeypatch, TIMED_OUT)
    assert preflight_hints(spec) == {"check the address, that sshd runs, and the firewall"}


# =====================================================================================
# runs list and --retry-failed read the failed hosts the same way
# =====================================================================================


def record(run_id: str, status: str, failures: list[Failure]) -> RunRecord:
    return RunRecord(
        id=run_id,
        spec="sandbox.yaml",
        spec_sha256="5" * 64,
        phases_requested=["base"],
        limit=None,
        check=False,
        started_at=1_772_366_400.0,
        gpuclus_version="0.1.0",
        status=status,
        finished_at=1_772_366_460.0,
        failures=failures,
    )


def test_runs_list_names_the_hosts_retry_failed_re_runs_with_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = Path("sandbox.yaml")
    state = StateDir.beside(spec)
    # A rescued task still leaves a failure in the record: --retry-failed re-runs that host
    # although the run says successful, and runs list must say so, not hide it.
    rescued = Failure(GPU01, "Probe", "base", "rescued by the block", unreachable=False)
    gone = Failure(GPU02, "Gathering Facts", None, "preflight: timed out", unreachable=True)
    for made in (
        record("20260301T120000Z-aa11", "failed", [gone]),
        record("20260302T120000Z-bb22", "successful", [rescued, gone]),
    ):
        made.save(runs_dir(state) / made.id)
    result = cli.invoke(app, ["runs", "list", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert (
        "hint: `gpuclus deploy sandbox.yaml --retry-failed` re-runs val-gpu[01-02], "
        "the hosts that failed or were unreachable in 20260302T120000Z-bb22"
    ) in said
    assert COMPUTE == [GPU01, GPU02]
