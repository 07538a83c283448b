"""Hints on the real deployed sandbox point the right way (issue 12 item 6).

A wrong admin_user is an authentication failure, not "is sshd running?"; a
spec copied to another directory (its own new SSH key) says so; validate on a
controller without Slurm says "deploy first". Each test leaves the cluster as
it found it (the scontrol binary is put back in a finally).

Integration only (`.ci/run`, as root): it uses the session's deployed sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import HEAD, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]


@pytest.fixture
def cluster(deployed: Cluster) -> Cluster:
    return deployed


def ssh_hints(result: Any) -> set[str]:
    nodes = json.loads(result.stdout)["nodes"]
    return {check["hint"] for node in nodes for check in node["checks"] if check["name"] == "ssh"}


def test_a_wrong_admin_user_is_an_authentication_failure_naming_the_spec(cluster: Cluster) -> None:
    # Beside the real spec: same .gpuclus/ (key, known_hosts, sandbox record), only the user differs.
    wrong = cluster.spec.with_name("wrong-user.yaml")
    text = cluster.spec.read_text()
    wrong.write_text(text.replace("admin_user: gpuclus", "admin_user: nosuchuser"))
    assert wrong.read_text() != text
    try:
        result = gpuclus("preflight", str(wrong), "--json", timeout=300)
        assert result.returncode == 4, result.stdout + result.stderr
        (hint,) = ssh_hints(result)
        assert hint.startswith(f"authentication failed as nosuchuser: check cluster.admin_user in {wrong}"), hint
        assert "is sshd running" not in hint and "sshd runs" not in hint
        assert f"`gpuclus sandbox up --spec {wrong}`" in hint  # a sandbox: not --password
    finally:
        wrong.unlink()


def test_a_spec_copied_to_another_directory_says_its_new_key_is_unknown(cluster: Cluster, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / cluster.spec.name
    copy.parent.mkdir()
    shutil.copy(cluster.spec, copy)
    # validate first: no key here at all.
    validate = gpuclus("validate", str(copy), "--json", timeout=300)
    assert validate.returncode == 2, validate.stdout + validate.stderr
    error = json.loads(validate.stdout)["error"]
    assert "run validate from the directory the cluster was deployed from" in error["hint"]
    # preflight makes a key of its own here, which no node knows.
    result = gpuclus("preflight", str(copy), "--json", timeout=300)
    assert result.returncode == 4, result.stdout + result.stderr
    (hint,) = ssh_hints(result)
    assert hint.startswith("this directory has its own new SSH key (.gpuclus/ssh/) that the nodes do not know"), hint
    # And validate there now names the refused login, not a controller that is down.
    validate = gpuclus("validate", str(copy), "--json", timeout=300)
    assert validate.returncode == 4
    error = json.loads(validate.stdout)["error"]
    assert "is it up and is sshd running" not in error["hint"], error


def test_validate_on_a_controller_without_slurm_says_deploy_first(cluster: Cluster) -> None:
    cluster.on(HEAD, "sudo mv /usr/bin/scontrol /usr/bin/scontrol.gpuclus-test")
    try:
        result = gpuclus("validate", str(cluster.spec), "--json", timeout=300)
        assert result.returncode == 1, result.stdout + result.stderr
        error = json.loads(result.stdout)["error"]
        assert error["message"] == f"Slurm is not deployed on {HEAD} (scontrol: command not found)"
        assert error["hint"] == f"run `gpuclus deploy {cluster.spec}` first, then validate"
    finally:
        cluster.on(HEAD, "sudo mv /usr/bin/scontrol.gpuclus-test /usr/bin/scontrol")
        # The Slurm metrics collector may have run meanwhile and written slurm_up 0: collect again now
        # rather than wait for its timer (monitoring.slurm_metrics reads the last collection).
        cluster.on(HEAD, "sudo systemctl start gpuclus-slurm-metrics.service")
    code = gpuclus("validate", str(cluster.spec), "--level", "quick", "--json", timeout=900).returncode
    assert code == 0
