"""The deploy engine for real: ansible-runner over SSH to sandbox nodes.

These tests swap the project's playbooks for the tiny ones in
tests/fixtures/deploy_playbooks/ (GPUCLUS_PLAYBOOKS_DIR), so they test the
engine — progress events, records, exit codes, unreachable hosts, retries,
Ctrl-C, secrets — and not the roles (tests/integration/test_cluster.py does).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import default_signals
from secret_search import files, leaks, private_key_parts

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.secret_files import Secrets
from gpuclus.ssh.client import SshTarget, run_once
from gpuclus.state import StateDir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CLUSTER = "itdep"
PLAYBOOKS = Path(__file__).resolve().parents[1] / "fixtures" / "deploy_playbooks"
GPUCLUS = [sys.executable, "-m", "gpuclus"]


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "GPUCLUS_PLAYBOOKS_DIR": str(PLAYBOOKS), **extra}


def gpuclus(*args: str, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUCLUS, *args], capture_output=True, text=True, timeout=timeout, check=False, env=environment(**extra)
    )


def deploy_json(spec: Path, *args: str, **extra: str) -> tuple[int, dict[str, Any], str]:
    result = gpuclus("deploy", str(spec), "--json", *args, **extra)
    return result.returncode, json.loads(result.stdout), result.stderr


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("deploy") / "sandbox.yaml"
    up = gpuclus("sandbox", "up", "--name", CLUSTER, "--nodes", "3", "--spec", str(path))
    try:
        assert up.returncode == 0, up.stderr
        yield path
    finally:
        gpuclus("sandbox", "down", "--spec", str(path))


@pytest.fixture(scope="module")
def outputs() -> list[str]:
    """Everything the CLI printed during these tests, for the secret leak check."""
    return []


def test_first_deploy_runs_the_phases_in_order_and_changes_things(spec: Path, outputs: list[str]) -> None:
    code, report, stderr = deploy_json(spec)
    outputs += [json.dumps(report), stderr]
    assert code == 0, report
    assert report["status"] == "successful"
    assert [phase["name"] for phase in report["phases"]] == ["base", "nfs", "slurm", "monitoring"]
    assert report["changed"] >= 6  # two changing tasks on each of three nodes
    assert set(report["hosts"]) == {"localhost", f"{CLUSTER}-head", f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02"}
    assert all(phase["tasks"] >= 1 for phase in report["phases"])


def test_second_deploy_changes_nothing(spec: Path, outputs: list[str]) -> None:
    # --full: every task runs (a plain deploy would find every node as the first left it and run nothing).
    code, report, stderr = deploy_json(spec, "--full")
    outputs += [json.dumps(report), stderr]
    assert code == 0
    assert report["changed"] == 0


def test_human_output_shows_each_phase_and_a_summary(spec: Path, outputs: list[str]) -> None:
    result = gpuclus("deploy", str(spec), "--full")
    outputs += [result.stdout, result.stderr]
    assert result.returncode == 0, result.stderr
    for phase in ("base", "nfs", "slurm", "monitoring"):
        assert f"{phase} (0 changed)" in result.stderr
    assert "skipping phase nvidia: no real GPUs" in result.stderr
    assert "0 changed in" in result.stdout


def test_a_failing_task_names_host_task_and_reason_and_the_rest_finish(spec: Path, outputs: list[str]) -> None:
    code, report, stderr = deploy_json(spec, "--full", GPUCLUS_TEST_FAIL_HOST=f"{CLUSTER}-gpu01")
    outputs += [json.dumps(report), stderr]
    assert code == 1
    assert report["status"] == "failed"
    assert [(f["host"], f["task"], f["phase"], f["unreachable"]) for f in report["failures"]] == [
        (f"{CLUSTER}-gpu01", "Fail where the test asks", "slurm", False)
    ]
    assert "non-zero return code (rc 1)" in report["failures"][0]["message"]
    # The other nodes went on to the monitoring phase.
    assert report["hosts"][f"{CLUSTER}-gpu02"]["failures"] == 0
    assert report["phases"][-1]["name"] == "monitoring"


def test_an_unreachable_node_exits_4_and_retry_failed_finishes_it(spec: Path, outputs: list[str]) -> None:
    subprocess.run(["podman", "stop", "--time", "3", f"{CLUSTER}-gpu02"], check=True, capture_output=True)
    code, report, stderr = deploy_json(spec)
    outputs += [json.dumps(report), stderr]
    assert code == 4, report
    assert report["status"] == "unreachable"
    assert {(f["host"], f["unreachable"]) for f in report["failures"]} == {(f"{CLUSTER}-gpu02", True)}
    assert report["hosts"][f"{CLUSTER}-gpu01"]["ok"] > 0
    assert report["hosts"][f"{CLUSTER}-gpu01"]["dark"] == 0

    up = gpuclus("sandbox", "up", "--name", CLUSTER, "--nodes", "3", "--spec", str(spec))
    assert up.returncode == 0, up.stderr
    code, retried, stderr = deploy_json(spec, "--retry-failed")
    outputs += [json.dumps(retried), stderr]
    assert code == 0, retried
    assert retried["limit"] == f"{CLUSTER}-gpu02"
    assert set(retried["hosts"]) == {"localhost", f"{CLUSTER}-gpu02"}


def test_ctrl_c_stops_the_run_and_the_next_run_is_clean(spec: Path, outputs: list[str]) -> None:
    state = StateDir.beside(spec)
    before = set((state.root / "runs").iterdir())
    process = subprocess.Popen(
        [*GPUCLUS, "deploy", str(spec), "--full", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(GPUCLUS_TEST_SLEEP="60"),
        preexec_fn=default_signals,
    )
    try:
        # Wait until Ansible is inside the slow task of the slurm phase.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            new = set((state.root / "runs").iterdir()) - before
            stdout_log = [run / "artifacts" / run.name / "stdout" for run in new]
            if any(log.exists() and "Sleep a little" in log.read_text(errors="replace") for log in stdout_log):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the slow task never started")
        time.sleep(1)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    outputs += [stdout, stderr]
    assert process.returncode == 130, stderr
    assert time.monotonic() - started < 30, "Ctrl-C should not wait for the 60 s task"
    report = json.loads(stdout)
    assert report["status"] == "interrupted"
    code, again, stderr = deploy_json(spec)
    outputs += [json.dumps(again), stderr]
    assert code == 0
    assert again["status"] == "successful"


def test_preflight_passes_on_the_sandbox_and_calls_fake_gpus_fake(spec: Path, outputs: list[str]) -> None:
    result = gpuclus("preflight", str(spec), "--json")
    outputs.append(result.stdout)
    assert result.returncode == 0, result.stdout
    report = json.loads(result.stdout)
    checks = {
        node["node"]: {c["name"]: (c["status"], c["message"]) for c in node["checks"]} for node in report["nodes"]
    }
    assert set(checks) == {f"{CLUSTER}-head", f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02"}
    for name, node_checks in checks.items():
        assert node_checks["ssh"][0] == "ok" and node_checks["sudo"][0] == "ok" and node_checks["clock"][0] == "ok"
        if name.endswith("head"):
            continue
        assert node_checks["gpus"] == ("skip", "2 fake GPU device(s), no driver (spec: fake)")


def test_plan_diffs_against_the_last_deploy_and_check_mode_changes_nothing(spec: Path, outputs: list[str]) -> None:
    # --local: this module's stub playbooks leave no deploy stamp on the nodes to compare with.
    unchanged = gpuclus("plan", str(spec), "--json", "--local")
    assert unchanged.returncode == 0, unchanged.stderr
    report = json.loads(unchanged.stdout)
    assert {key: report[key] for key in ("ok", "applied_before", "files", "in_sync")} == {
        "ok": True,
        "applied_before": True,
        "files": [],
        "in_sync": None,
    }
    original = spec.read_text()
    try:
        spec.write_text(original.replace("accounting: true", "accounting: false"))
        planned = gpuclus("plan", str(spec), "--json", "--check")
        outputs += [planned.stdout, planned.stderr]
        assert planned.returncode == 0, planned.stderr
        report = json.loads(planned.stdout)
        assert [(f["path"], f["status"]) for f in report["files"]] == [
            ("inventory/group_vars/all/slurm.yml", "changed")
        ]
        assert "-gpuclus_slurm_accounting: true" in report["files"][0]["diff"]
        assert "+gpuclus_slurm_accounting: false" in report["files"][0]["diff"]
        assert report["check"]["status"] == "successful"
        assert [phase["name"] for phase in report["check"]["phases"]] == ["base", "nfs", "slurm", "monitoring"]
    finally:
        spec.write_text(original)


def test_runs_are_listed_and_shown(spec: Path, outputs: list[str]) -> None:
    listed = gpuclus("runs", "list", "--spec", str(spec), "--json")
    runs = json.loads(listed.stdout)["runs"]
    statuses = [run["status"] for run in runs]
    assert {"successful", "failed", "unreachable", "interrupted"} <= set(statuses)
    shown = gpuclus("runs", "show", runs[-1]["id"][:20], "--spec", str(spec))
    outputs += [listed.stdout, shown.stdout, shown.stderr]
    assert shown.returncode == 0
    assert runs[-1]["id"] in shown.stdout


def test_no_secret_reaches_records_artifacts_or_output(spec: Path, outputs: list[str]) -> None:
    # After failed, unreachable, interrupted and retried runs (test_cluster_secrets.py
    # does the same search after a -vvv deploy and a check run of the real roles).
    state = StateDir.beside(spec)
    secrets = Secrets(state.root / "secrets")
    key = secrets.munge_key.read_bytes()
    values = {
        "the MUNGE key": [key],
        "the database password": [secrets.db_password.read_text().strip().encode()],
        "the Grafana admin password": [secrets.grafana_password.read_text().strip().encode()],
        "gpuclus' SSH private key": private_key_parts(state.private_key.read_text()),
    }
    searched = files(spec.parent, leaving_out=[state.root / "secrets", state.private_key])
    assert len(searched) > 10
    assert len(outputs) >= 10
    haystacks = [(str(path), path.read_bytes()) for path in searched]
    haystacks.append(("the CLI's output", "\n".join(outputs).encode()))
    found = leaks(values, haystacks)
    assert found == [], "secrets leaked:\n" + "\n".join(found)
    # ...while it did reach the nodes: the no_log copy ran.
    head = json.loads(gpuclus("sandbox", "status", "--spec", str(spec), "--json").stdout)["nodes"][0]
    target = SshTarget(head["address"], ADMIN_USER, state.private_key, state.known_hosts)
    result = run_once(target, "sudo -n sha256sum /etc/gpuclus-test-secret")
    assert result.stdout.split()[0] == hashlib.sha256(key).hexdigest()
