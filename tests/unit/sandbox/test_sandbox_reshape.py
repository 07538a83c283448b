"""`gpuclus sandbox up --nodes M` on a sandbox that is up: compute nodes added or removed, nothing else.

Against the fake engine (sandbox_fake.py), as the other sandbox CLI tests: no
real engine, root, SSH or network is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sandbox_fake import RECIPE, FakeEngine, block_real_engines, wire
from typer.testing import CliRunner, Result

from gpuclus.cli.main import app
from gpuclus.sandbox import hostprep
from gpuclus.sandbox.layout import sandbox_layout, sandbox_spec_text
from gpuclus.sandbox.record import SandboxRecord
from gpuclus.state import StateDir

runner = CliRunner()
SUBNET = "10.213.0.0/24"  # the fake engine routes none of the pool: the first /24 is picked


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    block_real_engines(monkeypatch)
    monkeypatch.setattr(hostprep, "require_root", lambda: None)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    engine = FakeEngine(tmp_path / "engine")
    wire(monkeypatch, engine)
    return engine


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return tmp_path / "sandbox.yaml"


def up(spec: Path, *args: str) -> Result:
    return runner.invoke(app, ["sandbox", "up", "--name", "lab", "--spec", str(spec), *args])


def up_json(spec: Path, *args: str) -> dict[str, Any]:
    result = up(spec, *args, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def release_sources(directory: Path) -> Path:
    """Stand-ins for the release sources `up --artifacts` asks for."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"):
        (directory / name).write_bytes(b"")
    return directory


def calls_since(fake: FakeEngine, count: int) -> list[list[str]]:
    return fake.calls()[count:]


def changing(calls: list[list[str]]) -> list[list[str]]:
    """The calls that create, start, set up or remove something (ps, inspect and ls only read)."""
    return [call for call in calls if call[0] in {"run", "start", "exec", "rm"} or call[1:2] in (["create"], ["rm"])]


def fresh_record(nodes: int, artifacts: str | None = None) -> SandboxRecord:
    """The record a fresh `up` with ``nodes`` nodes writes."""
    return SandboxRecord("lab", "podman", SUBNET, RECIPE.tag, sandbox_layout("lab", nodes, 2, SUBNET).nodes, artifacts)


def fresh_spec(nodes: int, artifacts: str | None = None) -> str:
    """The spec a fresh `up` with ``nodes`` nodes writes."""
    return sandbox_spec_text(sandbox_layout("lab", nodes, 2, SUBNET), artifacts)


def record_of(spec: Path) -> SandboxRecord | None:
    return SandboxRecord.load(StateDir.beside(spec).sandbox_record)


def known_hosts(spec: Path) -> list[str]:
    return StateDir.beside(spec).known_hosts.read_text().splitlines()


def host_key_line(address: str, node: str) -> str:
    """The known_hosts line for a node's host key as the fake engine makes it."""
    return f"{address} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEHOSTKEY{node.replace('-', '')}"


# Growing -------------------------------------------------------------------------------------------


def test_grow_three_to_four_creates_exactly_the_next_node(spec: Path, fake: FakeEngine, tmp_path: Path) -> None:
    artifacts = str(release_sources(tmp_path / "artifacts"))
    up_json(spec, "--artifacts", artifacts)
    before = fake.state["containers"]
    hosts_before = known_hosts(spec)
    count = len(fake.calls())

    payload = up_json(spec, "--nodes", "4", "--artifacts", artifacts)

    assert payload["changed"] is True
    assert (payload["added_nodes"], payload["removed_nodes"]) == (["lab-gpu03"], [])
    assert [(n["name"], n["address"], n["ssh"]) for n in payload["nodes"]] == [
        ("lab-head", "10.213.0.10", True),
        ("lab-gpu01", "10.213.0.11", True),
        ("lab-gpu02", "10.213.0.12", True),
        ("lab-gpu03", "10.213.0.13", True),
    ]
    # One container run, one set up: the new node's; the others are not touched.
    new = changing(calls_since(fake, count))
    (run,) = [call for call in new if call[0] == "run"]
    assert run[run.index("--name") + 1] == "lab-gpu03"
    assert run[run.index("--ip") + 1] == "10.213.0.13"
    execs = [call for call in new if call[0] == "exec"]
    assert execs and all("lab-gpu03" in call for call in execs)
    assert not [call for call in new if call[0] in {"rm", "start"}]
    after = fake.state["containers"]
    assert sorted(after) == ["lab-gpu01", "lab-gpu02", "lab-gpu03", "lab-head"]
    assert {name: after[name] for name in before} == before
    # Set up as a fresh up sets up a compute node: gpuclus' key, the new hosts, its GPUs, the test image.
    script = fake.setup_script("lab-gpu03")
    assert StateDir.beside(spec).public_key.read_text().split()[1] in script
    assert "10.213.0.13 lab-gpu03" in script
    assert "echo 2 > /etc/gpuclus/fake-gpus" in script
    assert "mksquashfs" in script
    # Its host key joins the others; the spec and record are a fresh 4-node up's.
    assert known_hosts(spec) == [*hosts_before, host_key_line("10.213.0.13", "lab-gpu03")]
    assert spec.read_text() == fresh_spec(4, artifacts)
    # gpu01 is the backup controller, in an entry of its own; the others are one range.
    assert "name: lab-gpu01\n" in spec.read_text() and "lab-gpu[02-03]" in spec.read_text()
    assert "10.213.0.[12-13]" in spec.read_text()
    assert record_of(spec) == fresh_record(4, artifacts)
    assert fake.ssh_checks[-1] == ["lab-head", "lab-gpu01", "lab-gpu02", "lab-gpu03"]


def test_grow_says_what_it_added_and_that_a_deploy_comes_next(spec: Path, fake: FakeEngine) -> None:
    assert up(spec).exit_code == 0
    result = up(spec, "--nodes", "5")
    assert result.exit_code == 0, result.output
    assert "added node lab-gpu03 at 10.213.0.13" in result.stdout
    assert "added node lab-gpu04 at 10.213.0.14" in result.stdout
    assert "removed node" not in result.stdout
    assert "sandbox lab up in" in result.stdout
    assert f"next: gpuclus deploy {spec}" in result.stdout


def test_grow_with_the_recorded_subnet_given_again(spec: Path, fake: FakeEngine) -> None:
    up_json(spec)
    assert up_json(spec, "--nodes", "4", "--subnet", SUBNET)["added_nodes"] == ["lab-gpu03"]


# Shrinking -----------------------------------------------------------------------------------------


def test_shrink_four_to_three_removes_exactly_the_last_node(spec: Path, fake: FakeEngine) -> None:
    up_json(spec, "--nodes", "4")
    before = fake.state["containers"]
    hosts_before = known_hosts(spec)
    count = len(fake.calls())

    payload = up_json(spec, "--nodes", "3")

    assert payload["changed"] is True
    assert (payload["added_nodes"], payload["removed_nodes"]) == ([], ["lab-gpu03"])
    assert [n["name"] for n in payload["nodes"]] == ["lab-head", "lab-gpu01", "lab-gpu02"]
    assert changing(calls_since(fake, count)) == [["rm", "--force", "lab-gpu03"]]
    after = fake.state["containers"]
    assert after == {name: container for name, container in before.items() if name != "lab-gpu03"}
    assert known_hosts(spec) == [line for line in hosts_before if not line.startswith("10.213.0.13 ")]
    assert len(known_hosts(spec)) == 3
    assert spec.read_text() == fresh_spec(3)
    assert "name: lab-gpu01\n" in spec.read_text() and "name: lab-gpu02\n" in spec.read_text()
    assert record_of(spec) == fresh_record(3)


def test_shrink_says_what_it_removed(spec: Path, fake: FakeEngine) -> None:
    assert up(spec, "--nodes", "4").exit_code == 0
    result = up(spec, "--nodes", "2")
    assert result.exit_code == 0, result.output
    assert "removed node lab-gpu02" in result.stdout
    assert "removed node lab-gpu03" in result.stdout
    assert "added node" not in result.stdout
    assert "next: gpuclus spec check" in result.stdout
    assert sorted(fake.state["containers"]) == ["lab-gpu01", "lab-head"]


def test_an_interrupted_shrink_is_finished_by_the_next_up(spec: Path, fake: FakeEngine) -> None:
    """The container went, the record still names it: the next up rewrites the record, removing nothing."""
    up_json(spec, "--nodes", "4")
    state = fake.state
    del state["containers"]["lab-gpu03"]
    fake.save(state)
    count = len(fake.calls())
    payload = up_json(spec, "--nodes", "3")
    assert payload["removed_nodes"] == ["lab-gpu03"]
    assert changing(calls_since(fake, count)) == []
    assert record_of(spec) == fresh_record(3)
    assert spec.read_text() == fresh_spec(3)


# Idempotence ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("first", "second"), [("3", "4"), ("4", "3")], ids=["grown", "shrunk"])
def test_a_repeated_up_after_a_change_changes_nothing(spec: Path, fake: FakeEngine, first: str, second: str) -> None:
    up_json(spec, "--nodes", first)
    up_json(spec, "--nodes", second)
    text, record, hosts = spec.read_text(), record_of(spec), known_hosts(spec)
    containers = fake.state["containers"]
    count = len(fake.calls())
    payload = up_json(spec, "--nodes", second)
    assert payload["changed"] is False
    assert (payload["added_nodes"], payload["removed_nodes"]) == ([], [])
    assert changing(calls_since(fake, count)) == []
    assert (spec.read_text(), record_of(spec), known_hosts(spec)) == (text, record, hosts)
    assert fake.state["containers"] == containers
    assert "already up, nothing to do" in up(spec, "--nodes", second).stdout


def test_a_fresh_up_adds_no_nodes_to_report(spec: Path, fake: FakeEngine) -> None:
    payload = up_json(spec)
    assert (payload["added_nodes"], payload["removed_nodes"]) == ([], [])


# Refused changes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second", "error", "hint"),
    [
        (
            ["--nodes", "3"],
            ["--nodes", "3", "--gpus-per-node", "4"],
            "already up with 3 nodes, 2 GPUs each, on 10.213.0.0/24: --gpus-per-node 4 cannot change",
            "pass --gpus-per-node 2",
        ),
        (
            ["--nodes", "3"],
            ["--nodes", "4", "--gpus-per-node", "1"],
            "--gpus-per-node 1 cannot change a sandbox that is up",
            "gpuclus sandbox down",
        ),
        (
            ["--nodes", "3"],
            ["--nodes", "4", "--subnet", "10.213.9.0/24"],
            "--subnet 10.213.9.0/24 cannot change a sandbox that is up",
            "leave --subnet out",
        ),
        (
            ["--nodes", "1"],
            ["--nodes", "2"],
            "already up with 1 node, 2 GPUs each, on 10.213.0.0/24: --nodes 2 would turn its head into a controller",
            "to go to or from 1 node",
        ),
        (
            ["--nodes", "2"],
            ["--nodes", "1"],
            "--nodes 1 would turn its head into its only compute node",
            "to go to or from 1 node",
        ),
    ],
    ids=["gpus", "gpus-and-nodes", "subnet", "one-to-two", "two-to-one"],
)
def test_refused_changes_create_and_remove_nothing(
    spec: Path, fake: FakeEngine, first: list[str], second: list[str], error: str, hint: str
) -> None:
    up_json(spec, *first)
    text, record, hosts = spec.read_text(), record_of(spec), known_hosts(spec)
    containers = fake.state["containers"]
    count = len(fake.calls())

    result = up(spec, *second)

    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    (line,) = [index for index, text in enumerate(lines) if text.startswith("error:")]
    assert lines[line].startswith("error: sandbox 'lab' is already up with")
    assert error in lines[line]
    assert lines[line + 1].startswith("  hint:") and hint in lines[line + 1]
    assert changing(calls_since(fake, count)) == []
    assert fake.state["containers"] == containers
    assert (spec.read_text(), record_of(spec), known_hosts(spec)) == (text, record, hosts)
    payload = json.loads(up(spec, *second, "--json").stdout)
    assert payload["ok"] is False and payload["error"]["exit_code"] == 1


def test_a_record_with_nodes_elsewhere_is_not_reshaped(spec: Path, fake: FakeEngine) -> None:
    """Adding a node must not move the ones that stay: a record that places them elsewhere is refused."""
    up_json(spec)
    path = StateDir.beside(spec).sandbox_record
    data = json.loads(path.read_text())
    data["nodes"][2]["address"] = "10.213.0.99"
    path.write_text(json.dumps(data))
    count = len(fake.calls())
    result = up(spec, "--nodes", "4")
    assert result.exit_code == 1, result.output
    assert "recorded nodes are not where `up` places them now" in result.stderr
    assert changing(calls_since(fake, count)) == []


def test_the_artifacts_choice_still_holds_when_growing(spec: Path, fake: FakeEngine, tmp_path: Path) -> None:
    up_json(spec, "--artifacts", str(release_sources(tmp_path / "artifacts")))
    count = len(fake.calls())
    result = up(spec, "--nodes", "4")
    assert result.exit_code == 1, result.output
    assert "already up with --artifacts" in result.stderr
    assert changing(calls_since(fake, count)) == []


# Help ----------------------------------------------------------------------------------------------


def test_up_help_says_nodes_may_grow_or_shrink_a_running_sandbox() -> None:
    result = runner.invoke(app, ["sandbox", "up", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())  # the options' box, unwrapped
    assert "a new count adds or removes compute nodes" in text
    assert "grows or shrinks the sandbox" in text
    assert "`gpuclus deploy` after adding nodes" in text
    assert "`gpuclus nodes remove`" in text
    assert "need `gpuclus sandbox down` first" in text
