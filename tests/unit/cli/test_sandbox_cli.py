"""`gpuclus sandbox`: options, exit codes, --json, and a whole up/status/down against a fake engine.

No container engine, root or network is used: every way to a real engine is
replaced by a failing stand-in (see ``no_real_engine``), and the tests that need
an engine get a small fake one (sandbox_fake.py: a script in tmp_path that
keeps its state in a JSON file and logs every call).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from sandbox_fake import RECIPE, FakeEngine, block_real_engines, refuse, wire
from typer.testing import CliRunner, Result

from gpuclus.cli.main import app
from gpuclus.sandbox import hostprep, image, lifecycle
from gpuclus.sandbox.image import ImageRecipe
from gpuclus.sandbox.layout import sandbox_layout
from gpuclus.sandbox.record import SandboxRecord
from gpuclus.spec.load import load_spec
from gpuclus.state import StateDir

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every road to a real engine, apt, debootstrap, the host's routes or SSH fails the test at once."""
    block_real_engines(monkeypatch)


@pytest.fixture
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostprep, "require_root", lambda: None)


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    """The fake engine, wired in where gpuclus picks engines, and SSH checks that pass."""
    engine = FakeEngine(tmp_path / "engine")
    wire(monkeypatch, engine)
    return engine


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["sandbox", *args])


def stdout_json(result: Result) -> dict[str, Any]:
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


# Help -----------------------------------------------------------------------------------------


def test_sandbox_help() -> None:
    result = invoke("-h")
    assert result.exit_code == 0, result.output
    for command in ("up", "down", "status", "ssh"):
        assert command in result.stdout


@pytest.mark.parametrize("command", ["up", "down", "status", "ssh"])
def test_subcommand_help(command: str) -> None:
    result = invoke(command, "-h")
    assert result.exit_code == 0, result.output
    assert "--spec" in result.stdout


def test_up_help_documents_root_and_exit_codes() -> None:
    text = invoke("up", "--help").stdout
    for option in ("--nodes", "--gpus-per-node", "--engine", "--subnet", "--no-install", "--mirror", "--json"):
        assert option in text
    assert "root" in text
    assert "GPUCLUS_SANDBOX_MIRROR" in text


# Option errors ----------------------------------------------------------------------------------


def test_up_bogus_engine(tmp_path: Path, as_root: None) -> None:
    result = invoke("up", "--engine", "bogus", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    assert "--engine 'bogus'" in result.stderr


def test_up_bogus_engine_json(tmp_path: Path, as_root: None) -> None:
    result = invoke("up", "--engine", "bogus", "--json", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2
    payload = stdout_json(result)
    assert payload["ok"] is False
    assert payload["error"]["exit_code"] == 2
    assert "bogus" in payload["error"]["message"]


def test_up_zero_nodes(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    result = invoke("up", "--nodes", "0", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    assert "--nodes 0" in result.stderr
    assert not (tmp_path / "sandbox.yaml").exists()
    assert not (tmp_path / ".gpuclus" / "sandbox.json").exists()
    # At most read-only questions (which networks exist); nothing made.
    assert not [call for call in fake.calls() if call[0] == "run" or call[1:2] in (["create"], ["rm"])]


@pytest.mark.parametrize(
    "options",
    [["--nodes", "0"], ["--gpus-per-node", "9"], ["--name", "Bad_Name"], ["--subnet", "not-a-net"]],
    ids=["nodes", "gpus", "name", "subnet"],
)
def test_up_checks_its_options_before_picking_an_engine(tmp_path: Path, as_root: None, options: list[str]) -> None:
    """Bad options are refused before anything happens to the host.

    pick_engine may apt-get install podman and runc; a typo in --nodes must not
    cost that (pick_engine is the failing stand-in here).
    """
    result = invoke("up", *options, "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert options[0] in result.stderr


def test_up_needs_root(tmp_path: Path, as_user: None) -> None:
    result = invoke("up", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    assert "needs root" in result.stderr
    assert "sudo" in result.stderr
    assert not (tmp_path / ".gpuclus").exists()


def test_up_needs_root_json(tmp_path: Path, as_user: None) -> None:
    result = invoke("up", "--json", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2
    payload = stdout_json(result)
    assert payload["ok"] is False
    assert "needs root" in payload["error"]["message"]
    assert result.stderr == ""


def test_down_needs_root(tmp_path: Path, as_user: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("down")
    assert result.exit_code == 2, result.output
    assert "needs root" in result.stderr


def test_down_bogus_engine(tmp_path: Path, as_root: None) -> None:
    result = invoke("down", "--engine", "lxc", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2


# The Debian mirror -----------------------------------------------------------------------------------


@pytest.fixture
def ubuntu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The image recipe as an Ubuntu host's apt sources give it: no Debian mirror among them."""
    apt = tmp_path / "host-apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text("deb http://ubuntu-mirror.example/ubuntu jammy main restricted\n")
    (apt / "apt.conf.d").mkdir()
    (apt / "apt.conf.d/90proxy").write_text('Acquire::http::Proxy "http://proxy.example:3128";\n')
    os_release = tmp_path / "os-release"
    os_release.write_text("ID=ubuntu\nVERSION_CODENAME=jammy\n")

    def recipe(mirror: str | None = None, suite: str = image.SUITE) -> ImageRecipe:
        return image.host_recipe(apt, os_release, mirror=mirror, suite=suite)

    monkeypatch.setattr(lifecycle, "host_recipe", recipe)


def test_up_without_a_debian_mirror(tmp_path: Path, as_root: None, ubuntu_host: None) -> None:
    """Refused with one line and a hint before an engine is picked (pick_engine is the failing stand-in)."""
    result = invoke("up", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    error = [line for line in result.stderr.splitlines() if line.strip()]
    assert "no Debian mirror in this host's apt sources" in error[0]
    assert "--mirror URL" in result.stderr
    assert "GPUCLUS_SANDBOX_MIRROR" in result.stderr
    assert not (tmp_path / ".gpuclus").exists()


def test_up_with_a_mirror_from_the_environment(
    tmp_path: Path, as_root: None, ubuntu_host: None, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCLUS_SANDBOX_MIRROR", "http://mirror.example/debian")
    result = invoke("up", "--nodes", "1", "--json", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 0, result.output
    expected = lifecycle.host_recipe(mirror="http://mirror.example/debian")
    assert expected.mirror == "http://mirror.example/debian"
    assert stdout_json(result)["image"] == expected.tag


@pytest.mark.parametrize("mirror", ["mirror.example/debian", "ftp://mirror.example/debian", "http://", ""])
def test_up_bogus_mirror(tmp_path: Path, as_user: None, mirror: str) -> None:
    """A mirror debootstrap cannot use is refused with the other options: before the root check."""
    result = invoke("up", "--mirror", mirror, "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    assert "--mirror" in result.stderr
    assert "needs root" not in result.stderr


# Without a sandbox ---------------------------------------------------------------------------------


def test_status_without_a_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("status")
    assert result.exit_code == 1, result.output
    assert "no sandbox" in result.stdout


def test_status_without_a_sandbox_json(tmp_path: Path) -> None:
    result = invoke("status", "--json", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 1
    assert stdout_json(result) == {
        "ok": False,
        "cluster": None,
        "engine": None,
        "subnet": None,
        "nodes": [],
        "elsewhere": [],
    }
    assert result.stderr == ""


def test_status_with_a_damaged_record(tmp_path: Path) -> None:
    (tmp_path / ".gpuclus").mkdir()
    (tmp_path / ".gpuclus" / "sandbox.json").write_text("{oops")
    result = invoke("status", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 1
    assert "damaged" in result.stderr
    assert "sandbox down" in result.stderr


def test_ssh_without_a_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "execv", refuse)
    result = invoke("ssh", "sandbox-head", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    assert "no sandbox is up here" in result.stderr


def test_down_without_a_sandbox_as_root(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    result = invoke("down", "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 0, result.output
    assert "nothing to remove" in result.stdout
    assert fake.calls() == []


# A whole life against the fake engine ------------------------------------------------------------------


def private_key_body(state: StateDir) -> list[str]:
    """The base64 lines of gpuclus' private key: none may ever be printed or sent anywhere."""
    lines = state.private_key.read_text().splitlines()
    return [line for line in lines if "PRIVATE KEY" not in line and line]


def assert_secret_absent(state: StateDir, *texts: str) -> None:
    body = private_key_body(state)
    assert body
    for text in texts:
        for line in body:
            assert line not in text


def test_up_status_ssh_down(tmp_path: Path, as_root: None, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "sandbox.yaml"
    state = StateDir.beside(spec)

    # up ----------------------------------------------------------------------------
    result = invoke("up", "--name", "lab", "--json", "--spec", str(spec))
    assert result.exit_code == 0, result.output
    payload = stdout_json(result)
    assert payload["ok"] is True
    assert (payload["cluster"], payload["engine"], payload["subnet"]) == ("lab", "podman", "10.213.0.0/24")
    assert payload["image"] == RECIPE.tag
    assert payload["image_built"] is False
    assert payload["changed"] is True
    assert [(n["name"], n["address"], n["gpus"], n["ssh"]) for n in payload["nodes"]] == [
        ("lab-head", "10.213.0.10", 0, True),
        ("lab-gpu01", "10.213.0.11", 2, True),
        ("lab-gpu02", "10.213.0.12", 2, True),
    ]

    # What the engine was asked to make.
    assert fake.state["networks"] == {"podman": "10.88.0.0/16", "gpuclus-lab": "10.213.0.0/24"}
    assert fake.state["volumes"] == ["gpuclus-lab-nfs"]
    runs = {name: c["argv"] for name, c in fake.state["containers"].items()}
    assert sorted(runs) == ["lab-gpu01", "lab-gpu02", "lab-head"]
    assert "gpuclus-lab-nfs:/srv/nfs" in runs["lab-head"]
    assert not [word for argv in runs.values() for word in argv if "/sys/fs/cgroup" in word]

    # The spec it wrote is valid and names the nodes it started.
    loaded = load_spec(spec)
    assert loaded.ok
    assert loaded.topology is not None
    assert [(n.name, n.address) for n in loaded.topology.nodes] == [
        (n.name, n.address) for n in sandbox_layout("lab", 3, 2, "10.213.0.0/24").nodes
    ]

    # Each node got its hosts, its GPUs and gpuclus' public key; the host keys went to known_hosts.
    public = state.public_key.read_text().strip()
    for name in ("lab-head", "lab-gpu01", "lab-gpu02"):
        script = fake.setup_script(name)
        assert public.split()[1] in script
        assert "10.213.0.12 lab-gpu02" in script
    assert "echo 2 > /etc/gpuclus/fake-gpus" in fake.setup_script("lab-gpu01")
    assert "rm -f /etc/gpuclus/fake-gpus" in fake.setup_script("lab-head")
    known = state.known_hosts.read_text().splitlines()
    assert known == [
        "10.213.0.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEHOSTKEYlabhead",
        "10.213.0.11 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEHOSTKEYlabgpu01",
        "10.213.0.12 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEHOSTKEYlabgpu02",
    ]
    record = SandboxRecord.load(state.root / "sandbox.json")
    assert record is not None
    assert (record.cluster, record.engine, record.image) == ("lab", "podman", RECIPE.tag)

    outputs = [result.stdout, result.stderr]
    sent = [fake.setup_script(n) for n in ("lab-head", "lab-gpu01", "lab-gpu02")]

    # up again: nothing to do, nothing started --------------------------------------------
    calls_before = len(fake.calls())
    again = invoke("up", "--name", "lab", "--spec", str(spec))
    assert again.exit_code == 0, again.output
    assert "already up, nothing to do" in again.stdout
    assert "lab-gpu02" in again.stdout
    new_calls = fake.calls()[calls_before:]
    assert not [call for call in new_calls if call[0] in {"run", "exec", "start"} or call[:2] == ["network", "create"]]
    outputs += [again.stdout, again.stderr]

    # up with another shape is refused while this one stands (another number of
    # compute nodes is not: test_sandbox_reshape.py).
    reshaped = invoke("up", "--name", "lab", "--gpus-per-node", "1", "--spec", str(spec))
    assert reshaped.exit_code == 1
    assert "already up with 3 nodes" in reshaped.stderr
    other = invoke("up", "--name", "other", "--spec", str(spec))
    assert other.exit_code == 1
    assert "already holds sandbox 'lab'" in other.stderr

    # status ---------------------------------------------------------------------------
    status = invoke("status", "--json", "--spec", str(spec))
    assert status.exit_code == 0, status.output
    status_payload = stdout_json(status)
    assert status_payload["ok"] is True
    assert (status_payload["cluster"], status_payload["engine"], status_payload["subnet"]) == (
        "lab",
        "podman",
        "10.213.0.0/24",
    )
    assert [n["name"] for n in status_payload["nodes"]] == ["lab-head", "lab-gpu01", "lab-gpu02"]
    assert set(status_payload["nodes"][0]) == {"name", "address", "role", "gpus", "state", "ssh", "detail", "os"}
    assert {(n["state"], n["ssh"]) for n in status_payload["nodes"]} == {("running", True)}
    human = invoke("status", "--spec", str(spec))
    assert human.exit_code == 0
    assert "lab-gpu01" in human.stdout
    outputs += [status.stdout, human.stdout, human.stderr]

    # ssh ------------------------------------------------------------------------------
    executed: list[list[str]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: executed.append([path, *argv]))
    monkeypatch.setattr("gpuclus.cli.sandbox.shutil.which", lambda name: f"/usr/bin/{name}")
    # A command word that looks like an option is the remote command's, never the local ssh's.
    ssh = invoke("ssh", "lab-gpu01", "--spec", str(spec), "--", "-oProxyCommand=touch /tmp/x", "sinfo", "-N")
    assert ssh.exit_code == 0, ssh.output
    (argv,) = executed
    assert argv[0] == "/usr/bin/ssh"
    assert f'IdentityFile="{state.private_key}"' in argv
    assert f'UserKnownHostsFile="{state.known_hosts}"' in argv
    assert "StrictHostKeyChecking=yes" in argv
    assert argv[argv.index("--") + 1 :] == ["gpuclus@10.213.0.11", "-oProxyCommand=touch /tmp/x", "sinfo", "-N"]
    unknown = invoke("ssh", "lab-gpu09", "--spec", str(spec))
    assert unknown.exit_code == 2
    assert "lab-head, lab-gpu01, lab-gpu02" in unknown.stderr
    outputs += [ssh.output, unknown.output, " ".join(argv)]

    # The private key never left its file.
    assert_secret_absent(state, *outputs, *sent, json.dumps(fake.calls()))

    # down -------------------------------------------------------------------------------
    down = invoke("down", "--spec", str(spec))
    assert down.exit_code == 0, down.output
    assert "removed 3 node(s), the network, 1 volume(s)" in down.stdout
    assert fake.state == {"networks": {"podman": "10.88.0.0/16"}, "volumes": [], "containers": {}, "labels": {}}
    assert not (state.root / "sandbox.json").exists()
    assert state.known_hosts.read_text() == ""
    assert state.private_key.exists()  # the identity stays for the next up

    # down again: nothing there, exit 0.
    twice = invoke("down", "--json", "--spec", str(spec))
    assert twice.exit_code == 0
    assert stdout_json(twice) == {
        "ok": True,
        "cluster": None,
        "removed_nodes": [],
        "removed_network": False,
        "removed_volumes": [],
        "removed_images": [],
        "elsewhere": [],
        "removed_from": [],
    }


def test_up_restarts_a_stopped_node(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    spec = tmp_path / "sandbox.yaml"
    assert invoke("up", "--nodes", "2", "--gpus-per-node", "1", "--spec", str(spec)).exit_code == 0
    state = fake.state
    state["containers"]["sandbox-gpu01"]["state"] = "exited"
    (fake.home / "state.json").write_text(json.dumps(state))

    result = invoke("up", "--nodes", "2", "--gpus-per-node", "1", "--json", "--spec", str(spec))
    assert result.exit_code == 0, result.output
    assert stdout_json(result)["changed"] is True
    assert ["start", "sandbox-gpu01"] in fake.calls()
    assert fake.state["containers"]["sandbox-gpu01"]["state"] == "running"


def test_status_reports_missing_nodes(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    spec = tmp_path / "sandbox.yaml"
    assert invoke("up", "--nodes", "2", "--spec", str(spec)).exit_code == 0
    state = fake.state
    del state["containers"]["sandbox-gpu01"]
    (fake.home / "state.json").write_text(json.dumps(state))

    result = invoke("status", "--json", "--spec", str(spec))
    assert result.exit_code == 1
    nodes = {n["name"]: n for n in stdout_json(result)["nodes"]}
    assert nodes["sandbox-gpu01"]["state"] == "missing"
    assert nodes["sandbox-gpu01"]["ssh"] is None
    assert nodes["sandbox-head"]["ssh"] is True


def test_up_refuses_a_spec_path_that_is_not_a_regular_file(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    # up reads the spec back and rewrites it: a FIFO there used to hang the read.
    fifo = tmp_path / "sandbox.yaml"
    os.mkfifo(fifo)
    result = invoke("up", "--spec", str(fifo))
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert not [call for call in fake.calls() if call[0] == "run" or call[1:2] in (["create"], ["rm"])]


# --artifacts -------------------------------------------------------------------------------------


def release_sources(directory: Path) -> Path:
    """``directory`` made, holding (empty) stand-ins for the release sources `up --artifacts` asks for."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"):
        (directory / name).write_bytes(b"")
    return directory


def test_up_help_documents_artifacts() -> None:
    text = " ".join(invoke("up", "--help").stdout.split())
    assert "--artifacts" in text
    assert "enroot-<v>-src.tar.gz" in text


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_up_refuses_artifacts_that_are_not_a_directory(
    tmp_path: Path, as_user: None, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line and a hint, exit 2, with the other option checks: before the root check and any engine."""
    target = tmp_path / "artifacts"
    if kind == "file":
        target.write_text("not a directory\n")
    result = invoke("up", "--artifacts", str(target), "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    error = [line for line in result.stderr.splitlines() if line.strip()]
    assert f"--artifacts {target}" in error[0]
    assert ("no such directory" if kind == "missing" else "is not a directory") in error[0]
    assert "enroot-<v>-src.tar.gz" in result.stderr
    assert "needs root" not in result.stderr
    assert not (tmp_path / ".gpuclus").exists()
    payload = stdout_json(invoke("up", "--artifacts", str(target), "--json", "--spec", str(tmp_path / "x.yaml")))
    assert payload["ok"] is False and payload["error"]["exit_code"] == 2


def test_up_refuses_artifacts_without_the_release_sources(tmp_path: Path) -> None:
    target = tmp_path / "artifacts"
    target.mkdir()
    (target / "enroot-4.1.2-src.tar.gz").write_bytes(b"")
    result = invoke("up", "--artifacts", str(target), "--spec", str(tmp_path / "sandbox.yaml"))
    assert result.exit_code == 2, result.output
    assert f"--artifacts {target} lacks pyxis-0.24.0-src.tar.gz" in result.stderr
    assert "internal error" not in result.output


def test_artifacts_directory_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release_sources(tmp_path / "shared" / "artifacts")
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert lifecycle.artifacts_directory(Path("../shared/artifacts")) == str(tmp_path / "shared" / "artifacts")


def write_record_artifacts(spec: Path, artifacts: str | None) -> None:
    path = StateDir.beside(spec).root / "sandbox.json"
    data = json.loads(path.read_text())
    data["artifacts_dir"] = artifacts
    path.write_text(json.dumps(data))


def test_up_again_keeps_the_artifacts_choice(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    """Like the shape: a re-up with another --artifacts, or without the one recorded, is refused."""
    spec = tmp_path / "sandbox.yaml"
    artifacts = release_sources(tmp_path / "artifacts")
    assert invoke("up", "--nodes", "2", "--spec", str(spec)).exit_code == 0
    record = SandboxRecord.load(StateDir.beside(spec).root / "sandbox.json")
    assert record is not None and record.artifacts_dir is None
    text = spec.read_text()

    turned_on = invoke("up", "--nodes", "2", "--artifacts", str(artifacts), "--spec", str(spec))
    assert turned_on.exit_code == 1, turned_on.output
    assert "already up without --artifacts" in turned_on.stderr
    assert "sandbox down" in turned_on.stderr

    # A sandbox made with --artifacts: up without the flag must not drop it from the spec.
    write_record_artifacts(spec, str(artifacts))
    dropped = invoke("up", "--nodes", "2", "--spec", str(spec))
    assert dropped.exit_code == 1, dropped.output
    assert f"already up with --artifacts {artifacts}" in dropped.stderr
    assert f"pass --artifacts {artifacts} again" in dropped.stderr
    other = release_sources(tmp_path / "other")
    moved = invoke("up", "--nodes", "2", "--artifacts", str(other), "--spec", str(spec))
    assert moved.exit_code == 1, moved.output
    assert spec.read_text() == text
    assert SandboxRecord.load(StateDir.beside(spec).root / "sandbox.json") == dataclasses.replace(
        record, artifacts_dir=str(artifacts)
    )


def test_a_record_from_before_artifacts_loads(tmp_path: Path, as_root: None, fake: FakeEngine) -> None:
    spec = tmp_path / "sandbox.yaml"
    assert invoke("up", "--nodes", "1", "--spec", str(spec)).exit_code == 0
    path = StateDir.beside(spec).root / "sandbox.json"
    data = json.loads(path.read_text())
    del data["artifacts_dir"]
    path.write_text(json.dumps(data))
    record = SandboxRecord.load(path)
    assert record is not None and record.artifacts_dir is None
    again = invoke("up", "--nodes", "1", "--spec", str(spec))
    assert again.exit_code == 0, again.output
    assert "already up, nothing to do" in again.stdout


def test_up_with_artifacts_writes_a_spec_with_containers_on(
    tmp_path: Path, as_root: None, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "sandbox.yaml"
    release_sources(tmp_path / "artifacts")
    monkeypatch.chdir(tmp_path)
    result = invoke("up", "--name", "lab", "--artifacts", "artifacts", "--spec", str(spec))
    assert result.exit_code == 0, result.output
    record = SandboxRecord.load(StateDir.beside(spec).root / "sandbox.json")
    assert record is not None and record.artifacts_dir == str(tmp_path / "artifacts")
    loaded = load_spec(spec)
    assert loaded.ok and loaded.spec is not None
    assert (loaded.spec.containers.enroot, loaded.spec.containers.pyxis) == (True, True)
    assert str(loaded.spec.containers.artifacts_dir) == str(tmp_path / "artifacts")
    assert str(loaded.spec.containers.validate_image) == "/var/lib/gpuclus-sandbox/images/test.sqsh"
    # The compute nodes build the test image; the head does not.
    assert "mksquashfs" in fake.setup_script("lab-gpu01") and "mksquashfs" not in fake.setup_script("lab-head")
    # Up again with the same directory: nothing to do.
    again = invoke("up", "--name", "lab", "--artifacts", str(tmp_path / "artifacts"), "--spec", str(spec))
    assert again.exit_code == 0, again.output
    assert "already up, nothing to do" in again.stdout


def test_up_checks_its_own_spec_before_starting_nodes(
    tmp_path: Path, as_root: None, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec gpuclus would refuse (a template bug, or a field the spec does not know yet) leaves nothing behind."""
    monkeypatch.setattr(
        lifecycle, "sandbox_spec_text", lambda layout, artifacts=None, wheelhouse=None: "apiVersion: gpuclus/v1\n"
    )
    spec = tmp_path / "sandbox.yaml"
    result = invoke("up", "--spec", str(spec))
    assert result.exit_code == 1, result.output
    assert "internal error: the sandbox spec does not pass its own check" in result.stderr
    assert not [call for call in fake.calls() if call[0] in {"run", "exec"} or call[1:2] == ["create"]]
    assert not spec.exists()
    assert not (tmp_path / ".gpuclus" / "sandbox.json").exists()
