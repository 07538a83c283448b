"""`gpuclus status` through typer: exit codes, the view, --json, --watch, errors.

No network: gpuclus.status.collect.run_script is replaced by FakeSsh, which
answers each node's script with what the sandbox really printed
(status_fake_ssh.py). The real SSH path runs in the lead's integration test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from status_fake_ssh import GPU01, HEAD, SPEC, FakeSsh
from typer.testing import CliRunner, Result

from gpuclus.cli import status as status_cli
from gpuclus.cli.main import app
from gpuclus.state import StateDir
from gpuclus.status import collect

cli = CliRunner()

TOP_KEYS = {
    "schema",
    "ok",
    "exit_code",
    "cluster",
    "collected_at",
    "duration_s",
    "slurm",
    "nodes",
    "partitions",
    "jobs",
    "services",
    "monitoring",
    "urls",
    "problems",
}
PASSWORD = "s3cretGrafanaPassw0rdThatMustNeverShow"


def spec_dir(tmp_path: Path, key: bool = True) -> Path:
    """The recorded sandbox's spec in a directory of its own, with a stand-in key and Grafana password."""
    path = tmp_path / "sandbox.yaml"
    path.write_text(SPEC.read_text())
    if key:
        state = StateDir.beside(path)
        state.private_dir(state.ssh_dir)
        state.private_key.write_text("not a key: SSH is faked\n")
        secrets = state.private_dir(state.root / "secrets")
        (secrets / "grafana_admin_password").write_text(PASSWORD + "\n")
    return path


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeSsh:
    """The healthy sandbox; tests change its scenarios or unreachable nodes."""
    ssh = FakeSsh("healthy")
    monkeypatch.setattr(collect, "run_script", ssh)
    return ssh


def status(*args: str) -> Result:
    return cli.invoke(app, ["status", *args])


def test_healthy_cluster(tmp_path: Path, fake: FakeSsh) -> None:
    result = status(str(spec_dir(tmp_path)))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "cluster sts" in out
    assert "cluster OK: 2 nodes reachable, 9 services active (1 skipped), 3 targets up" in out
    assert "allocated" in out and "2/2" in out
    assert "2 running, 1 pending" in out
    assert "3/3 up" in out
    assert "http://10.213.1.10:9090/" in out and "http://10.213.1.10:9093/" in out
    assert "skipped: Grafana is not installed on sts-head" in " ".join(out.split())
    assert PASSWORD not in result.output


def test_each_node_asked_once_with_the_spec_user(tmp_path: Path, fake: FakeSsh) -> None:
    path = spec_dir(tmp_path)
    status(str(path))
    assert sorted(target.address for target in fake.targets) == ["10.213.1.10", "10.213.1.11"]
    assert {target.user for target in fake.targets} == {"gpuclus"}
    assert {target.key_file for target in fake.targets} == {StateDir.beside(path).private_key}


def test_json_document(tmp_path: Path, fake: FakeSsh) -> None:
    path = spec_dir(tmp_path)
    result = status(str(path), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == TOP_KEYS
    assert (document["schema"], document["ok"], document["exit_code"], document["cluster"]) == (1, True, 0, "sts")
    assert document["slurm"] == {"controller": HEAD, "answered": True, "error": None}
    gpu = document["nodes"][1]
    assert set(gpu) == {"name", "address", "roles", "reachable", "ssh_error", "slurm"}
    assert gpu["name"] == GPU01 and gpu["reachable"] is True and gpu["roles"] == ["compute"]
    assert gpu["slurm"] == {
        "state": "allocated",
        "flags": [],
        "reason": None,
        "cpus": {"alloc": 2, "total": 2},
        "gpus": {"alloc": 2, "total": 2},
        "partitions": ["gpu"],
        "summary": "allocated",
        "healthy": True,
    }
    assert document["nodes"][0]["slurm"] is None
    assert document["partitions"] == [
        {
            "name": "gpu",
            "state": "up",
            "default": True,
            "nodes": [GPU01],
            "node_states": {"allocated": 1},
            "cpus": {"alloc": 2, "total": 2},
            "gpus": {"alloc": 2, "total": 2},
            "jobs": {"pending": 1, "running": 2},
        }
    ]
    assert document["jobs"] == {"pending": 1, "running": 2}
    assert {"node": HEAD, "unit": "slurmctld", "state": "active", "detail": ""} in document["services"]
    assert document["services"][-1]["unit"] == "prometheus-node-exporter"
    grafana = next(service for service in document["services"] if service["unit"] == "grafana-server")
    assert grafana["state"] == "skipped" and grafana["detail"].startswith("Grafana is not installed on sts-head")
    assert document["monitoring"]["node"] == HEAD and document["monitoring"]["error"] is None
    assert set(document["monitoring"]["targets"][0]) == {"job", "instance", "url", "health", "last_error"}
    assert document["urls"] == {
        "prometheus": "http://10.213.1.10:9090/",
        "grafana": "http://10.213.1.10:3000/",
        "grafana_password_file": str(StateDir.beside(path).root / "secrets" / "grafana_admin_password"),
        "alertmanager": "http://10.213.1.10:9093/",
    }
    assert document["problems"] == []
    assert PASSWORD not in result.output


def test_json_lists_the_problems(tmp_path: Path, fake: FakeSsh) -> None:
    fake.scenarios = dict.fromkeys(fake.scenarios, "drained")
    result = status(str(spec_dir(tmp_path)), "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["ok"], document["exit_code"]) == (False, 1)
    [problem] = document["problems"]
    assert set(problem) == {"kind", "subject", "message", "hint"}
    assert (problem["kind"], problem["subject"]) == ("node_state", GPU01)


def test_drained_node_exits_one_and_says_why(tmp_path: Path, fake: FakeSsh) -> None:
    fake.scenarios = dict.fromkeys(fake.scenarios, "drained")
    result = status(str(spec_dir(tmp_path)))
    assert result.exit_code == 1
    assert "cluster NOT OK: 1 problem" in result.stdout
    assert f"{GPU01} is idle+drain in Slurm (fan replaced, testing" in result.stdout


def test_stopped_node_is_named_unreachable(tmp_path: Path, fake: FakeSsh) -> None:
    fake.unreachable = {GPU01}
    path = spec_dir(tmp_path)
    result = status(str(path))
    assert result.exit_code == 1
    assert f"{GPU01} (10.213.1.11) unreachable over SSH: 10.213.1.11:22: No route to host" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith(GPU01))  # the node table's
    assert row.split()[1] == "unreachable"
    assert "slurmd? munge? node-exporter?" in result.stdout


def test_host_key_never_seen_hints_preflight(tmp_path: Path, fake: FakeSsh) -> None:
    fake.unreachable = {GPU01}
    fake.error = "10.213.1.11: Server '10.213.1.11' not found in known_hosts"
    result = status(str(spec_dir(tmp_path)), "--json")
    [problem] = json.loads(result.stdout)["problems"]
    assert problem["hint"].startswith("gpuclus has not seen this node's host key yet: run `gpuclus preflight ")


def test_slurmctld_down_still_shows_the_nodes(tmp_path: Path, fake: FakeSsh) -> None:
    fake.scenarios[HEAD] = "slurmctld_down"
    result = status(str(spec_dir(tmp_path)))
    assert result.exit_code == 1
    assert f"Slurm: slurmctld on {HEAD} does not answer: Slurmctld(primary) at {HEAD} is DOWN" in result.stdout
    assert GPU01 in result.stdout and "slurmctld:inactive" in result.stdout


def test_no_state_directory(tmp_path: Path, fake: FakeSsh) -> None:
    path = spec_dir(tmp_path, key=False)
    result = status(str(path))
    assert result.exit_code == 2
    assert f"error: no .gpuclus/ directory beside {path}" in result.stderr
    assert "hint: run status from the directory the cluster was deployed from" in result.stderr
    assert f"`gpuclus deploy {path}`" in result.stderr
    assert fake.targets == []


def test_no_state_directory_json(tmp_path: Path, fake: FakeSsh) -> None:
    result = status(str(spec_dir(tmp_path, key=False)), "--json")
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["ok"] is False and document["error"]["exit_code"] == 2


def test_invalid_spec_exits_three(tmp_path: Path, fake: FakeSsh) -> None:
    path = spec_dir(tmp_path)
    path.write_text(path.read_text().replace("roles: [compute]", "roles: [compute, bogus]"))
    result = status(str(path))
    assert result.exit_code == 3
    assert "spec has 1 error" in result.stderr
    assert fake.targets == []


def test_missing_spec_exits_two(tmp_path: Path, fake: FakeSsh) -> None:
    assert status(str(tmp_path / "nowhere.yaml")).exit_code == 2


@pytest.mark.parametrize("args", [["--interval", "3"], ["--watch", "--interval", "0.2"]])
def test_bad_interval(tmp_path: Path, fake: FakeSsh, args: list[str]) -> None:
    result = status(str(spec_dir(tmp_path)), *args)
    assert result.exit_code == 2
    assert "--interval" in result.stderr


class Rounds:
    """Stands in for the pause between rounds: Ctrl-C after ``count`` rounds."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.pauses: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)
        if len(self.pauses) >= self.count:
            raise KeyboardInterrupt


def test_watch_json_prints_one_document_per_line(
    tmp_path: Path, fake: FakeSsh, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds = Rounds(3)
    monkeypatch.setattr(status_cli, "_pause", rounds)
    result = status(str(spec_dir(tmp_path)), "--watch", "--json", "--interval", "2")
    assert result.exit_code == 130
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert all(set(json.loads(line)) == TOP_KEYS for line in lines)
    assert all(0 < pause <= 2 for pause in rounds.pauses)
    assert result.stderr == ""


def test_watch_redraws_until_ctrl_c(tmp_path: Path, fake: FakeSsh, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_cli, "_pause", Rounds(2))
    result = status(str(spec_dir(tmp_path)), "--watch")
    assert result.exit_code == 130
    assert result.stdout.count("cluster OK") == 2
    assert "every 5 s" in result.stdout and "Ctrl-C stops" in result.stdout
    # Quiet: Ctrl-C is how a watch ends, not an error.
    assert result.stderr == ""


def test_watch_keeps_going_while_the_cluster_changes(
    tmp_path: Path, fake: FakeSsh, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pause(seconds: float) -> None:
        if fake.unreachable:
            raise KeyboardInterrupt
        fake.unreachable = {GPU01}

    monkeypatch.setattr(status_cli, "_pause", pause)
    result = status(str(spec_dir(tmp_path)), "--watch", "--json")
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert (first["exit_code"], second["exit_code"]) == (0, 1)
    assert result.exit_code == 130


def test_help_documents_the_command() -> None:
    result = cli.invoke(app, ["status", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for words in ("--watch", "--interval", "--json", "Exit 0 when everything is healthy", "130"):
        assert words in text
