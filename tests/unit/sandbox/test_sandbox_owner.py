"""Two directories, one sandbox name: each directory's commands touch only what its own `up` made.

Sandbox names are host-wide (containers, network and volume are named after
them) while a sandbox's state lives beside one spec. These tests run `up`,
`status`, `ssh` and `down` from two directories against one fake engine
(sandbox_fake.py) and check that the second directory neither reuses, shows,
reaches nor removes the first one's sandbox; also for resources made by a
gpuclus from before the owner label (issue 12, item 4).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from sandbox_fake import FakeEngine, block_real_engines, wire
from typer.testing import CliRunner, Result

from gpuclus.cli.main import app
from gpuclus.sandbox import hostprep, lifecycle
from gpuclus.sandbox.engine import LABEL, OWNER_LABEL, Engine, SandboxError
from gpuclus.sandbox.layout import sandbox_layout
from gpuclus.sandbox.nodes import node_containers
from gpuclus.sandbox.owner import Resource, sort_out
from gpuclus.sandbox.record import SandboxRecord, record_path
from gpuclus.state import StateDir

runner = CliRunner()
PODMAN = Engine("podman", "/usr/bin/podman")
NODES = ["lab-head", "lab-gpu01"]
MAKING = ("run", "start", "exec")  # container calls that make or change a node


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
def a(tmp_path: Path) -> Path:
    """The first directory: its spec path (the directory is its parent)."""
    (tmp_path / "a").mkdir()
    return tmp_path / "a" / "sandbox.yaml"


@pytest.fixture
def b(tmp_path: Path) -> Path:
    """The second directory's spec path."""
    (tmp_path / "b").mkdir()
    return tmp_path / "b" / "sandbox.yaml"


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["sandbox", *args])


def up(spec: Path, *extra: str, name: str = "lab") -> Result:
    return invoke("up", "--name", name, "--nodes", "2", "--gpus-per-node", "1", "--spec", str(spec), *extra)


def owner(spec: Path) -> str:
    return str(StateDir.beside(spec).root)


def directory(spec: Path) -> str:
    return str(StateDir.beside(spec).root.parent)


def sandbox_of(fake: FakeEngine, name: str = "lab") -> dict[str, Any]:
    """What the engine holds of the sandbox ``name``: containers, network, volume, with their labels."""
    state = fake.state
    return {
        "containers": {n: c for n, c in state["containers"].items() if c["cluster"] == name},
        "network": state["networks"].get(f"gpuclus-{name}"),
        "volumes": [v for v in state["volumes"] if v == f"gpuclus-{name}-nfs"],
        "labels": {k: v for k, v in state["labels"].items() if k.split("/", 1)[1].startswith(f"gpuclus-{name}")},
    }


def new_calls(fake: FakeEngine, since: int) -> list[list[str]]:
    return [call[2:] if call[:1] == ["--runtime"] else call for call in fake.calls()[since:]]


def changing(calls: list[list[str]]) -> list[list[str]]:
    """The calls that create, start, change or remove anything."""
    return [c for c in calls if c[0] in (*MAKING, "rm") or c[1:2] in (["create"], ["rm"])]


def copy_state(source: Path, target: Path) -> None:
    """What copying a project directory does: the spec and its .gpuclus/ come along."""
    shutil.copytree(StateDir.beside(source).root, StateDir.beside(target).root)
    shutil.copy(source, target)


def strip_owner_labels(fake: FakeEngine) -> None:
    """Make the engine's resources look as a gpuclus from before the owner label left them."""
    state = fake.state
    for container in state["containers"].values():
        container["labels"].pop(OWNER_LABEL, None)
    for labels in state["labels"].values():
        labels.pop(OWNER_LABEL, None)
    fake.save(state)


def stdout_json(result: Result) -> dict[str, Any]:
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


# What up creates names its directory -------------------------------------------------------------


def test_up_labels_nodes_network_and_volume_with_its_state_directory(a: Path, fake: FakeEngine) -> None:
    result = up(a)
    assert result.exit_code == 0, result.output
    made = sandbox_of(fake)
    assert sorted(made["containers"]) == sorted(NODES)
    for container in made["containers"].values():
        assert container["labels"][LABEL] == "lab"
        assert container["labels"][OWNER_LABEL] == owner(a)
    assert made["labels"] == {
        "network/gpuclus-lab": {LABEL: "lab", OWNER_LABEL: owner(a)},
        "volume/gpuclus-lab-nfs": {LABEL: "lab", OWNER_LABEL: owner(a)},
    }
    assert Path(owner(a)).is_absolute() and owner(a).endswith("/a/.gpuclus")


def test_builders_pass_the_owner_as_one_label_whatever_the_path() -> None:
    path = "/srv/my labs,2024/x=y/.gpuclus"
    argv = PODMAN.network_create("gpuclus-lab", "10.213.0.0/24", "lab", path)
    assert argv == [
        "/usr/bin/podman",
        "network",
        "create",
        "--subnet",
        "10.213.0.0/24",
        "--label",
        "gpuclus.sandbox=lab",
        "--label",
        f"gpuclus.sandbox.owner={path}",
        "gpuclus-lab",
    ]
    assert PODMAN.volume_create("gpuclus-lab-nfs", "lab", path)[3:7] == [
        "--label",
        "gpuclus.sandbox=lab",
        "--label",
        f"gpuclus.sandbox.owner={path}",
    ]
    assert PODMAN.volume_inspect(["v"]) == ["/usr/bin/podman", "volume", "inspect", "v"]
    layout = sandbox_layout("lab", 2, 1, "10.213.0.0/24")
    for container in node_containers(layout, {"debian12": "img"}, path):
        argv = PODMAN.run_node(container)
        labels = [argv[i + 1] for i, word in enumerate(argv) if word == "--label"]
        assert labels[0] == "gpuclus.sandbox=lab"
        assert f"gpuclus.sandbox.owner={path}" in labels


# up -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [[], ["--nodes", "3"]], ids=["same-shape", "other-shape"])
def test_up_refuses_a_name_that_runs_from_another_directory(
    a: Path, b: Path, fake: FakeEngine, shape: list[str]
) -> None:
    assert up(a).exit_code == 0
    before, calls = fake.state, len(fake.calls())

    result = invoke("up", "--name", "lab", "--spec", str(b), *shape)
    assert result.exit_code == 2, result.output
    assert f"a sandbox named 'lab' runs from {directory(a)}" in result.stderr
    assert "use --name OTHER" in result.stderr
    assert "(from any directory): `gpuclus sandbox down --name lab`" in result.stderr
    # Nothing of A's was touched, nothing was made, and B holds no record to act on later.
    assert fake.state == before
    assert changing(new_calls(fake, calls)) == []
    assert not record_path(StateDir.beside(b)).exists()
    assert not b.exists()


def test_up_refusal_as_json(a: Path, b: Path, fake: FakeEngine) -> None:
    assert up(a).exit_code == 0
    result = up(b, "--json")
    assert result.exit_code == 2
    error = stdout_json(result)["error"]
    assert error["exit_code"] == 2
    assert error["message"] == f"a sandbox named 'lab' runs from {directory(a)}"
    assert "`gpuclus sandbox down --name lab`" in error["hint"]


def test_a_copied_directory_does_not_adopt_the_sandbox(a: Path, b: Path, fake: FakeEngine) -> None:
    """A copy of A (spec, .gpuclus/ and its sandbox.json) is still not A: up there is refused too."""
    assert up(a).exit_code == 0
    copy_state(a, b)
    before = fake.state
    result = up(b)
    assert result.exit_code == 2, result.output
    assert f"runs from {directory(a)}" in result.stderr
    assert fake.state == before


def test_another_name_from_another_directory_stands_beside(a: Path, b: Path, fake: FakeEngine) -> None:
    assert up(a).exit_code == 0
    result = invoke("up", "--name", "other", "--nodes", "1", "--subnet", "10.213.7.0/24", "--spec", str(b))
    assert result.exit_code == 0, result.output
    a_before = sandbox_of(fake)
    down = invoke("down", "--json", "--spec", str(b))
    assert down.exit_code == 0, down.output
    assert stdout_json(down)["removed_nodes"] == ["other-head"]
    assert stdout_json(down)["elsewhere"] == []
    assert sandbox_of(fake) == a_before


def test_a_moved_directory_is_named_with_a_way_to_remove_its_sandbox(
    a: Path, b: Path, tmp_path: Path, fake: FakeEngine
) -> None:
    """A's directory was moved away: B's refusal says so, and the command it gives removes A's sandbox."""
    assert up(a).exit_code == 0
    old_a = directory(a)
    a.parent.rename(tmp_path / "moved")
    refused = up(b)
    assert refused.exit_code == 2, refused.output
    assert f"runs from {old_a}, which no longer exists" in refused.stderr
    command = "gpuclus sandbox down --name lab"
    assert f"`{command}`" in refused.stderr
    removed = invoke(*command.split()[2:], "--json", "--spec", str(b))
    assert removed.exit_code == 0, removed.output
    assert stdout_json(removed)["removed_nodes"] == sorted(NODES)
    assert sandbox_of(fake) == {"containers": {}, "network": None, "volumes": [], "labels": {}}
    assert up(b).exit_code == 0


# status ---------------------------------------------------------------------------------------------


def test_status_in_another_directory_shows_nothing_of_the_first(a: Path, b: Path, fake: FakeEngine) -> None:
    assert up(a).exit_code == 0
    empty = invoke("status", "--spec", str(b))
    assert empty.exit_code == 1
    assert "no sandbox is up here" in empty.stdout
    assert not [name for name in NODES if name in empty.output]

    copy_state(a, b)
    checks_before = len(fake.ssh_checks)
    result = invoke("status", "--json", "--spec", str(b))
    assert result.exit_code == 1, result.output
    payload = stdout_json(result)
    assert payload["ok"] is False
    assert [(n["name"], n["state"], n["ssh"]) for n in payload["nodes"]] == [(n, "missing", None) for n in NODES]
    assert payload["elsewhere"] == [directory(a)]
    # No SSH check went to A's nodes from B.
    assert [nodes for nodes in fake.ssh_checks[checks_before:] if nodes] == []

    human = invoke("status", "--spec", str(b))
    assert human.exit_code == 1
    assert "running" not in human.stdout
    assert f"the sandbox named 'lab' that runs from {directory(a)} is not this directory's" in human.stderr

    # A still sees its own sandbox, whole.
    mine = invoke("status", "--json", "--spec", str(a))
    assert mine.exit_code == 0, mine.output
    assert {(n["state"], n["ssh"]) for n in stdout_json(mine)["nodes"]} == {("running", True)}
    assert stdout_json(mine)["elsewhere"] == []


# ssh ------------------------------------------------------------------------------------------------


def test_ssh_in_another_directory_does_not_reach_the_first(
    a: Path, b: Path, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert up(a).exit_code == 0
    copy_state(a, b)
    executed: list[list[str]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: executed.append([path, *argv]))
    monkeypatch.setattr("gpuclus.cli.sandbox.shutil.which", lambda name: f"/usr/bin/{name}")

    refused = invoke("ssh", "lab-head", "--spec", str(b), "--", "hostname")
    assert refused.exit_code == 2, refused.output
    assert f"runs from {directory(a)}" in refused.stderr
    assert f"`gpuclus sandbox ssh lab-head` in {directory(a)}" in refused.stderr
    assert executed == []

    allowed = invoke("ssh", "lab-head", "--spec", str(a), "--", "hostname")
    assert allowed.exit_code == 0, allowed.output
    assert len(executed) == 1 and "gpuclus@10.213.0.10" in executed[0]


def test_ssh_to_a_node_whose_container_is_gone(a: Path, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    assert up(a).exit_code == 0
    state = fake.state
    del state["containers"]["lab-gpu01"]
    fake.save(state)
    monkeypatch.setattr(os, "execv", lambda path, argv: pytest.fail("ssh must not start"))
    monkeypatch.setattr("gpuclus.cli.sandbox.shutil.which", lambda name: f"/usr/bin/{name}")
    result = invoke("ssh", "lab-gpu01", "--spec", str(a))
    assert result.exit_code == 1, result.output
    assert "lab-gpu01 is not up here" in result.stderr


# down -----------------------------------------------------------------------------------------------


def test_down_in_a_copied_directory_leaves_the_first_alone(a: Path, b: Path, fake: FakeEngine) -> None:
    assert up(a).exit_code == 0
    copy_state(a, b)
    before = sandbox_of(fake)
    result = invoke("down", "--spec", str(b))
    assert result.exit_code == 0, result.output
    assert "nothing to remove" in result.stdout
    assert f"left alone: the sandbox named 'lab' that runs from {directory(a)}" in result.stderr
    assert sandbox_of(fake) == before
    # B's copy of the record is gone (it named nothing of B's); A's stays.
    assert not record_path(StateDir.beside(b)).exists()
    assert record_path(StateDir.beside(a)).exists()
    assert invoke("status", "--spec", str(a)).exit_code == 0


def test_down_by_name_from_another_directory_removes_it_and_its_record(a: Path, b: Path, fake: FakeEngine) -> None:
    """--name names the sandbox wherever it runs from (issue 18): its resources, A's record and host keys go."""
    assert up(a).exit_code == 0
    state_a = StateDir.beside(a)
    assert "10.213.0.10" in state_a.known_hosts.read_text()
    result = invoke("down", "--name", "lab", "--json", "--spec", str(b))
    assert result.exit_code == 0, result.output
    assert stdout_json(result) == {
        "ok": True,
        "cluster": "lab",
        "removed_nodes": sorted(NODES),
        "removed_network": True,
        "removed_volumes": ["gpuclus-lab-nfs"],
        "removed_images": [],
        "elsewhere": [],
        "removed_from": [directory(a)],
    }
    assert sandbox_of(fake) == {"containers": {}, "network": None, "volumes": [], "labels": {}}
    assert not record_path(state_a).exists()
    assert "10.213.0.10" not in state_a.known_hosts.read_text()
    human = invoke("down", "--name", "lab", "--spec", str(b))
    assert human.exit_code == 0
    assert "nothing to remove: no sandbox named 'lab' on this host" in human.stdout
    # A starts afresh; B's plain down (no record there) touches nothing of it.
    assert up(a).exit_code == 0
    before = sandbox_of(fake)
    assert invoke("down", "--spec", str(b)).exit_code == 0
    assert sandbox_of(fake) == before


def test_down_finishes_an_interrupted_up_in_its_own_directory_only(
    a: Path, b: Path, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise SandboxError("lab-head did not finish booting (systemd says starting)")

    monkeypatch.setattr(lifecycle, "configure_nodes", interrupted)
    assert up(a).exit_code == 1
    assert sorted(sandbox_of(fake)["containers"]) == sorted(NODES)
    # The record is lost too: the owner label alone says whose the leftovers are.
    record_path(StateDir.beside(a)).unlink()
    before = sandbox_of(fake)

    other = invoke("down", "--json", "--spec", str(b))
    assert other.exit_code == 0, other.output
    assert stdout_json(other)["removed_nodes"] == []
    assert sandbox_of(fake) == before

    own = invoke("down", "--name", "lab", "--json", "--spec", str(a))
    assert own.exit_code == 0, own.output
    payload = stdout_json(own)
    assert payload["removed_nodes"] == sorted(NODES)
    assert payload["removed_network"] is True
    assert payload["removed_volumes"] == ["gpuclus-lab-nfs"]
    assert payload["elsewhere"] == []
    assert sandbox_of(fake) == {"containers": {}, "network": None, "volumes": [], "labels": {}}


# Resources from a gpuclus without the owner label ---------------------------------------------------------


def test_unlabelled_resources_belong_to_the_directory_whose_record_names_them(
    a: Path, b: Path, fake: FakeEngine
) -> None:
    assert up(a).exit_code == 0
    strip_owner_labels(fake)
    before = sandbox_of(fake)

    # A's record names them: A goes on using them.
    again = up(a)
    assert again.exit_code == 0, again.output
    assert "already up, nothing to do" in again.stdout
    assert invoke("status", "--spec", str(a)).exit_code == 0

    # Anywhere else they are someone else's.
    refused = up(b)
    assert refused.exit_code == 2, refused.output
    assert "a sandbox named 'lab' made by an older gpuclus" in refused.stderr
    assert "`gpuclus sandbox down --name lab`" in refused.stderr
    # A copy of A's record in B claims nothing either: B's plain down leaves them alone.
    copy_state(a, b)
    (StateDir.beside(b).root / "sandbox.json").write_text(
        (StateDir.beside(a).root / "sandbox.json").read_text().replace("10.213.0.0/24", "10.213.9.0/24")
    )
    human = invoke("down", "--spec", str(b))
    assert human.exit_code == 0
    assert "left alone: a sandbox named 'lab' made by an older gpuclus" in human.stderr
    assert sandbox_of(fake) == before

    down_a = invoke("down", "--json", "--spec", str(a))
    assert down_a.exit_code == 0
    assert stdout_json(down_a)["removed_nodes"] == sorted(NODES)
    assert stdout_json(down_a)["removed_volumes"] == ["gpuclus-lab-nfs"]
    assert stdout_json(down_a)["removed_network"] is True


def test_a_record_left_by_an_older_refused_up_claims_nothing(a: Path, b: Path, fake: FakeEngine) -> None:
    """An older gpuclus wrote B's sandbox.json before failing on A's network: it names another subnet."""
    assert up(a).exit_code == 0
    strip_owner_labels(fake)
    before = sandbox_of(fake)
    stale = SandboxRecord("lab", "podman", "10.213.1.0/24", "img", sandbox_layout("lab", 2, 1, "10.213.1.0/24").nodes)
    StateDir.beside(b).root.mkdir()
    record_path(StateDir.beside(b)).write_text(stale.dumps())

    status = invoke("status", "--json", "--spec", str(b))
    assert status.exit_code == 1
    assert {n["state"] for n in stdout_json(status)["nodes"]} == {"missing"}
    assert stdout_json(status)["elsewhere"] == [None]

    down = invoke("down", "--json", "--spec", str(b))
    assert down.exit_code == 0, down.output
    assert stdout_json(down)["removed_nodes"] == []
    assert stdout_json(down)["removed_network"] is False
    assert sandbox_of(fake) == before
    assert invoke("status", "--spec", str(a)).exit_code == 0


# Sorting out, without an engine -------------------------------------------------------------------------


def record(subnet: str = "10.213.0.0/24", cluster: str = "lab") -> SandboxRecord:
    return SandboxRecord(cluster, "podman", subnet, "img", sandbox_layout(cluster, 2, 1, subnet).nodes)


MINE, THEIRS = "/a/.gpuclus", "/b/.gpuclus"
NET = "gpuclus-lab"


@pytest.mark.parametrize(
    ("resources", "held", "expected_mine", "elsewhere"),
    [
        # Labelled: the label decides, whatever the record says.
        ([Resource("node", "lab-head", MINE)], None, ["lab-head"], []),
        ([Resource("node", "lab-head", THEIRS)], record(), [], ["/b"]),
        # Unlabelled: this directory's only when its record names the sandbox on the network's subnet.
        (
            [Resource("node", "lab-head", None), Resource("network", NET, None, subnets=("10.213.0.0/24",))],
            record(),
            ["lab-head", "gpuclus-lab"],
            [],
        ),
        ([Resource("node", "lab-head", None)], record(), ["lab-head"], []),
        ([Resource("node", "lab-head", None)], None, [], [None]),
        ([Resource("volume", "gpuclus-lab-nfs", None)], record(cluster="other"), [], [None]),
        (
            [Resource("node", "lab-head", None), Resource("network", NET, None, subnets=("10.213.0.0/24",))],
            record("10.213.1.0/24"),
            [],
            [None],
        ),
        (
            [Resource("node", "lab-head", None), Resource("network", NET, THEIRS, subnets=("10.213.0.0/24",))],
            record(),
            [],
            ["/b", None],
        ),
    ],
    ids=[
        "labelled-mine",
        "labelled-theirs",
        "unlabelled-recorded",
        "unlabelled-no-network",
        "unlabelled-no-record",
        "unlabelled-other-name",
        "unlabelled-other-subnet",
        "unlabelled-on-their-network",
    ],
)
def test_sort_out(
    resources: list[Resource], held: SandboxRecord | None, expected_mine: list[str], elsewhere: list[str | None]
) -> None:
    sorted_out = sort_out(resources, "lab", MINE, held)
    assert [r.name for r in sorted_out.mine] == expected_mine
    assert sorted_out.elsewhere == elsewhere
    if elsewhere:
        assert sorted_out.refusal().exit_code == 2
