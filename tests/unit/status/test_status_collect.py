"""What status asks where (expected), the one script per node (collect), run here by sh against stub commands."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest
from status_fake_ssh import GPU01, HEAD, HEAD_UNITS, SPEC, FakeSsh

from gpuclus.spec.load import load_spec, load_spec_text
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget
from gpuclus.status import collect, expected
from gpuclus.status.expected import NodePlan
from gpuclus.status.parse import Section, parse_sections


def sandbox_plans() -> dict[str, NodePlan]:
    loaded = load_spec(SPEC)
    assert loaded.spec is not None and loaded.topology is not None
    return {plan.name: plan for plan in expected.plan(loaded.spec, loaded.topology)}


def test_sandbox_plan() -> None:
    plans = sandbox_plans()
    head, gpu = plans[HEAD], plans[GPU01]
    assert head.units == HEAD_UNITS
    assert head.controller and head.grafana_marker
    assert head.targets_url == "http://10.213.1.10:9090/api/v1/targets?state=active"
    assert gpu.units == ("slurmd", "munge", "prometheus-node-exporter")
    assert not gpu.controller and gpu.targets_url is None and not gpu.grafana_marker


SPLIT = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: mon, address: 10.0.0.9, roles: [monitoring]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
slurm: {accounting: false}
nvidia: {driver: {install: false}, cuda: {install: false}}
monitoring: {prometheus: true, grafana: false}
"""


def test_plan_follows_the_spec() -> None:
    loaded = load_spec_text(SPLIT)
    assert loaded.spec is not None and loaded.topology is not None and loaded.ok, loaded.findings
    plans = {plan.name: plan for plan in expected.plan(loaded.spec, loaded.topology)}
    # No accounting: no slurmdbd. The monitoring node runs no Slurm daemon, hence no munge.
    assert plans["head"].units == ("slurmctld", "munge", "prometheus-node-exporter")
    assert plans["mon"].units == ("prometheus-node-exporter", "prometheus")
    assert plans["mon"].targets_url == "http://10.0.0.9:9090/api/v1/targets?state=active"
    assert not plans["mon"].grafana_marker and plans["head"].controller and not plans["mon"].controller
    urls = expected.urls(loaded.spec, loaded.topology, Path("/x/.gpuclus/secrets/grafana_admin_password"))
    assert urls.as_dict() == {
        "prometheus": "http://10.0.0.9:9090/",
        "grafana": None,
        "grafana_password_file": None,
        "alertmanager": None,
    }


def test_urls_name_the_password_file_never_the_password() -> None:
    loaded = load_spec(SPEC)
    assert loaded.spec is not None and loaded.topology is not None
    urls = expected.urls(loaded.spec, loaded.topology, Path("/c/.gpuclus/secrets/grafana_admin_password"))
    assert urls.prometheus == "http://10.213.1.10:9090/"
    assert urls.grafana == "http://10.213.1.10:3000/"
    assert urls.grafana_password_file == "/c/.gpuclus/secrets/grafana_admin_password"
    assert urls.alertmanager == "http://10.213.1.10:9093/"


# --- the script, run by a real shell ----------------------------------------------------------------------


def stub_bin(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """A directory of executables standing in for systemctl, scontrol, squeue, curl, timeout."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name, body in scripts.items():
        path = directory / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return directory


def run_here(script: str, bin_dir: Path) -> str:
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


STUBS = {
    "timeout": 'shift; exec "$@"\n',
    "systemctl": 'shift; for u in "$@"; do [ "$u" = slurmdbd ] && echo failed || echo active; done\n',
    "curl": 'printf \'%s\' \'{"status":"success","data":{"activeTargets":[]}}\'\n',
    "squeue": "echo '12|gpu|RUNNING'\n",
}


def test_script_answers_every_section_when_slurmctld_is_up(tmp_path: Path) -> None:
    bin_dir = stub_bin(
        tmp_path,
        {
            **STUBS,
            "scontrol": 'case "$1" in ping) echo "Slurmctld(primary) at h is UP";; '
            'show) echo "${2}Name=x State=IDLE";; esac\n',
        },
    )
    sections = parse_sections(run_here(collect.script(sandbox_plans()[HEAD]), bin_dir))
    assert list(sections) == ["units", "ping", "nodes", "partitions", "jobs", "targets", "grafana_skipped"]
    assert sections["units"].text.splitlines() == ["active", "failed", "active", "active", "active", "active", "active"]
    assert sections["nodes"] == Section(0, "nodesName=x State=IDLE")
    assert sections["jobs"] == Section(0, "12|gpu|RUNNING")
    assert sections["targets"] == Section(0, '{"status":"success","data":{"activeTargets":[]}}')
    assert sections["grafana_skipped"].exit_status == 1  # no marker file here


def test_script_asks_nothing_more_of_a_slurmctld_that_is_down(tmp_path: Path) -> None:
    bin_dir = stub_bin(
        tmp_path,
        {
            **STUBS,
            "scontrol": 'case "$1" in ping) echo "Slurmctld(primary) at h is DOWN"; exit 1;; *) sleep 30;; esac\n',
        },
    )
    started = time.monotonic()
    sections = parse_sections(run_here(collect.script(sandbox_plans()[HEAD]), bin_dir))
    assert time.monotonic() - started < 10
    assert sections["ping"] == Section(1, "Slurmctld(primary) at h is DOWN")
    assert "nodes" not in sections and "jobs" not in sections
    assert sections["targets"].ok  # the rest of the script still runs


def test_script_of_a_compute_node_asks_only_its_units() -> None:
    script = collect.script(sandbox_plans()[GPU01])
    assert script.count("@@gpuclus-status:") == 1
    assert "systemctl is-active slurmd munge prometheus-node-exporter" in script


# --- collect: every node at once, a failure is an answer -------------------------------------------------


def test_collect_asks_each_node_with_gpuclus_key(tmp_path: Path) -> None:
    fake = FakeSsh("healthy")
    plans = list(sandbox_plans().values())
    answers = collect.collect(plans, "gpuclus", tmp_path / "key", tmp_path / "known_hosts", runner=fake)
    assert list(answers) == [HEAD, GPU01]
    assert all(answer.reachable for answer in answers.values())
    assert {(t.address, t.user, t.key_file) for t in fake.targets} == {
        ("10.213.1.10", "gpuclus", tmp_path / "key"),
        ("10.213.1.11", "gpuclus", tmp_path / "key"),
    }
    assert answers[HEAD].sections["ping"].ok


def test_collect_turns_ssh_failures_and_bugs_into_answers(tmp_path: Path) -> None:
    plans = list(sandbox_plans().values())

    def runner(target: SshTarget, script: str) -> CommandResult:
        if target.address == "10.213.1.11":
            raise SshFailure("10.213.1.11:22: timed out")
        raise RuntimeError("a bug")

    answers = collect.collect(
        plans, "u", tmp_path / "k", tmp_path / "kh", runner=runner, hint_for=lambda message: f"hint for {message}"
    )
    assert not answers[GPU01].reachable
    assert answers[GPU01].error == "10.213.1.11:22: timed out"
    assert answers[GPU01].hint == "hint for 10.213.1.11:22: timed out"
    assert answers[HEAD].error == "RuntimeError: a bug"


def test_collect_runs_nodes_in_parallel(tmp_path: Path) -> None:
    plans = [NodePlan(f"n{index}", f"10.0.0.{index}", ("compute",), ("munge",)) for index in range(20)]

    def slow(target: SshTarget, script: str) -> CommandResult:
        time.sleep(0.3)
        return CommandResult(0, "", "")

    started = time.monotonic()
    answers = collect.collect(plans, "u", tmp_path / "k", tmp_path / "kh", runner=slow)
    assert len(answers) == 20
    assert time.monotonic() - started < 3  # 20 x 0.3 s one after the other would be 6 s


@pytest.mark.parametrize("scenario", ["healthy", "draining", "drained", "slurmd_stopped", "slurmctld_down"])
def test_recordings_answer_the_current_script(scenario: str, tmp_path: Path) -> None:
    # FakeSsh asserts that the recorded sections are ones this script asks for.
    plans = list(sandbox_plans().values())
    answers = collect.collect(plans, "u", tmp_path / "k", tmp_path / "kh", runner=FakeSsh(scenario))
    assert all(answer.reachable for answer in answers.values())
