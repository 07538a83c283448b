"""`sandbox up --os/--compute-os` (one image per Debian release, mixed clusters) and `sandbox list`, on the fake engine.

No container engine, root or network: sandbox_fake.py's engine stands in, and the
image recipe is the fake's (its suite is the one asked for).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sandbox_fake import RECIPE, FakeEngine, block_real_engines, wire
from typer.testing import CliRunner, Result

from gpuclus.cli.main import app
from gpuclus.errors import UsageError
from gpuclus.sandbox import hostprep, listing
from gpuclus.sandbox.layout import sandbox_layout
from gpuclus.sandbox.lifecycle import wheelhouse_directory
from gpuclus.sandbox.oses import OSES
from gpuclus.sandbox.record import SandboxRecord, record_path
from gpuclus.state import StateDir

runner = CliRunner()
TRIXIE_TAG = replace(RECIPE, suite="trixie").tag


@pytest.fixture(autouse=True)
def no_real_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    block_real_engines(monkeypatch)
    monkeypatch.setattr(hostprep, "require_root", lambda: None)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    engine = FakeEngine(tmp_path / "engine")
    wire(monkeypatch, engine)
    monkeypatch.setattr(listing, "installed_engines", lambda: [engine.engine])
    return engine


def invoke(*args: str) -> Result:
    return runner.invoke(app, ["sandbox", *args])


def payload(result: Result) -> dict[str, Any]:
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def runs(fake: FakeEngine) -> dict[str, list[str]]:
    """Each node container's `run` argv, by name."""
    return {name: container["argv"] for name, container in fake.state["containers"].items()}


def spec_in(tmp_path: Path, name: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    return directory / "sandbox.yaml"


def test_the_os_table_names_each_release_once() -> None:
    assert {name: (os.suite, os.python, os.slurm) for name, os in OSES.items()} == {
        "debian12": ("bookworm", "3.11", "22.05"),
        "debian13": ("trixie", "3.13", "24.11"),
    }
    # The image tag is a hash of the recipe, suite included: two releases never share an image.
    assert RECIPE.tag != TRIXIE_TAG


def test_up_on_debian13_runs_the_trixie_image_and_records_the_os(tmp_path: Path, fake: FakeEngine) -> None:
    spec = spec_in(tmp_path, "d13")
    result = invoke("up", "--name", "t13", "--os", "debian13", "--json", "--spec", str(spec))
    assert result.exit_code == 0, result.output
    data = payload(result)
    assert data["image"] == TRIXIE_TAG
    assert {node["name"]: node["os"] for node in data["nodes"]} == {
        "t13-head": "debian13",
        "t13-gpu01": "debian13",
        "t13-gpu02": "debian13",
    }
    for argv in runs(fake).values():
        assert argv[-1] == TRIXIE_TAG
        assert "gpuclus.sandbox.os=debian13" in argv
    record = SandboxRecord.load(record_path(StateDir.beside(spec)))
    assert record is not None
    assert {node.os for node in record.nodes} == {"debian13"}
    # A second up without --os keeps the recorded release (nothing to do).
    again = invoke("up", "--name", "t13", "--spec", str(spec))
    assert again.exit_code == 0, again.output
    assert "already up, nothing to do" in again.stdout
    assert "debian13" in again.stdout


def test_the_name_subnet_and_os_come_from_the_environment_too(
    tmp_path: Path, fake: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The quickstart script takes them from there (.ci/run runs two quickstarts beside other sandboxes).
    monkeypatch.setenv("GPUCLUS_SANDBOX_NAME", "qs13")
    monkeypatch.setenv("GPUCLUS_SANDBOX_SUBNET", "10.213.220.0/24")
    monkeypatch.setenv("GPUCLUS_SANDBOX_OS", "debian13")
    result = invoke("up", "--json", "--spec", str(spec_in(tmp_path, "env")))
    assert result.exit_code == 0, result.output
    data = payload(result)
    assert {node["name"]: (node["address"], node["os"]) for node in data["nodes"]} == {
        "qs13-head": ("10.213.220.10", "debian13"),
        "qs13-gpu01": ("10.213.220.11", "debian13"),
        "qs13-gpu02": ("10.213.220.12", "debian13"),
    }
    # An option on the command line still wins over the environment.
    other = invoke(
        "up", "--name", "named", "--subnet", "10.213.221.0/24", "--json", "--spec", str(spec_in(tmp_path, "opt"))
    )
    assert other.exit_code == 0, other.output
    assert {node["address"] for node in payload(other)["nodes"]} == {"10.213.221.10", "10.213.221.11", "10.213.221.12"}


def test_a_mixed_sandbox_runs_each_release_image_and_grows_with_the_compute_os(
    tmp_path: Path, fake: FakeEngine
) -> None:
    spec = spec_in(tmp_path, "mixed")
    result = invoke(
        "up", "--name", "mix", "--os", "debian12", "--compute-os", "debian13", "--json", "--spec", str(spec)
    )
    assert result.exit_code == 0, result.output
    assert sorted(payload(result)["image"].split()) == sorted([RECIPE.tag, TRIXIE_TAG])
    assert {name: argv[-1] for name, argv in runs(fake).items()} == {
        "mix-head": RECIPE.tag,
        "mix-gpu01": TRIXIE_TAG,
        "mix-gpu02": TRIXIE_TAG,
    }
    # Slurm 24.11 slurmd cannot join a 22.05 slurmctld: said at once, deploy's preflight leaves them out.
    assert payload(result)["notes"] == [
        "debian13 compute nodes under a debian12 head cannot join its Slurm (its Slurm 24.11 is newer than the "
        "controller's 22.05; slurmctld must be the newest): deploy's preflight leaves them out; this mix serves "
        "the OS-level phases (base, NFS)"
    ]
    grown = invoke("up", "--name", "mix", "--nodes", "4", "--json", "--spec", str(spec))
    assert grown.exit_code == 0, grown.output
    assert payload(grown)["added_nodes"] == ["mix-gpu03"]
    assert runs(fake)["mix-gpu03"][-1] == TRIXIE_TAG


@pytest.mark.parametrize(
    ("first", "again", "message"),
    [
        (["--os", "debian12"], ["--os", "debian13"], "--os debian13 cannot change a sandbox that is up (its head run"),
        (
            ["--os", "debian12"],
            ["--compute-os", "debian13"],
            "--compute-os debian13 cannot change a sandbox that is up (its compute nodes run debian12)",
        ),
    ],
)
def test_another_os_on_a_sandbox_that_is_up_is_refused(
    tmp_path: Path, fake: FakeEngine, first: list[str], again: list[str], message: str
) -> None:
    spec = spec_in(tmp_path, "one")
    assert invoke("up", "--name", "lab", *first, "--spec", str(spec)).exit_code == 0
    before = fake.state
    refused = invoke("up", "--name", "lab", *again, "--spec", str(spec))
    assert refused.exit_code == 1, refused.output
    assert message in refused.stderr
    assert "gpuclus sandbox down" in refused.stderr
    assert fake.state == before


@pytest.mark.parametrize("option", ["--os", "--compute-os"])
def test_an_unknown_os_is_refused_before_anything_is_made(tmp_path: Path, fake: FakeEngine, option: str) -> None:
    result = invoke("up", option, "ubuntu24", "--spec", str(spec_in(tmp_path, "x")))
    assert result.exit_code == 2, result.output
    assert f"{option} 'ubuntu24' is not an OS the sandbox runs" in result.stderr
    assert "debian12, debian13" in result.stderr
    assert fake.calls() == []


def test_a_wheelhouse_without_the_nodes_python_is_refused(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert wheelhouse_directory(wheels, ("debian12",)) == str(wheels)
    with pytest.raises(UsageError, match=r"no torch 2\.13\.0 wheel for Python 3\.13 \(debian13's python3"):
        wheelhouse_directory(wheels, ("debian12", "debian13"))
    (wheels / "torch-2.13.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert wheelhouse_directory(wheels, ("debian13",)) == str(wheels)


def test_layout_places_the_head_and_compute_releases() -> None:
    layout = sandbox_layout("lab", 3, 1, "10.213.0.0/24", "debian13", None)
    assert [node.os for node in layout.nodes] == ["debian13"] * 3
    mixed = sandbox_layout("lab", 2, 1, "10.213.0.0/24", "debian13", "debian12")
    assert [node.os for node in mixed.nodes] == ["debian13", "debian12"]


# sandbox list ------------------------------------------------------------------------------------------


def test_list_shows_every_sandbox_from_any_directory(tmp_path: Path, fake: FakeEngine) -> None:
    empty = invoke("list", "--json")
    assert empty.exit_code == 0, empty.output
    assert payload(empty) == {"ok": True, "sandboxes": []}
    assert "no sandbox on this host" in invoke("list").stdout

    spec_a, spec_b = spec_in(tmp_path, "a"), spec_in(tmp_path, "b")
    assert invoke("up", "--name", "bookworm-lab", "--nodes", "2", "--spec", str(spec_a)).exit_code == 0
    up_b = invoke("up", "--name", "trixie-lab", "--os", "debian13", "--nodes", "1", "--spec", str(spec_b))
    assert up_b.exit_code == 0, up_b.output

    listed = payload(invoke("list", "--json"))["sandboxes"]
    assert listed == [
        {
            "name": "bookworm-lab",
            "engine": "podman",
            "directory": str(spec_a.parent.resolve()),
            "oses": ["debian12"],
            "nodes": ["bookworm-lab-gpu01", "bookworm-lab-head"],
            "running": 2,
            "subnet": "10.213.0.0/24",
            "state": "running",
        },
        {
            "name": "trixie-lab",
            "engine": "podman",
            "directory": str(spec_b.parent.resolve()),
            "oses": ["debian13"],
            "nodes": ["trixie-lab-head"],
            "running": 1,
            "subnet": "10.213.1.0/24",
            "state": "running",
        },
    ]
    # One node stopped: partial; the human table names both, with their directories.
    state = fake.state
    state["containers"]["bookworm-lab-gpu01"]["state"] = "exited"
    fake.save(state)
    table = invoke("list").stdout
    assert "partial" in table and "running" in table
    assert "1/2" in table and "debian13" in table
    assert str(spec_b.parent.resolve()) in "".join(table.split())

    # down --name from a third directory removes one; list no longer shows it.
    elsewhere = spec_in(tmp_path, "c")
    down = invoke("down", "--name", "trixie-lab", "--json", "--spec", str(elsewhere))
    assert down.exit_code == 0, down.output
    assert payload(down)["removed_nodes"] == ["trixie-lab-head"]
    assert payload(down)["removed_from"] == [str(spec_b.parent.resolve())]
    assert [s["name"] for s in payload(invoke("list", "--json"))["sandboxes"]] == ["bookworm-lab"]


def test_list_shows_leftovers_without_nodes(tmp_path: Path, fake: FakeEngine) -> None:
    """A network and volume whose nodes are gone (an interrupted up or down) are listed, so they can be removed."""
    spec = spec_in(tmp_path, "a")
    assert invoke("up", "--name", "lab", "--nodes", "1", "--spec", str(spec)).exit_code == 0
    state = fake.state
    state["containers"] = {}
    fake.save(state)
    (entry,) = payload(invoke("list", "--json"))["sandboxes"]
    assert (entry["name"], entry["nodes"], entry["state"], entry["oses"]) == ("lab", [], "leftovers", [])
    removed = invoke("down", "--name", "lab", "--json", "--spec", str(spec_in(tmp_path, "b")))
    assert payload(removed)["removed_network"] is True
    assert payload(removed)["removed_volumes"] == ["gpuclus-lab-nfs"]
    assert payload(invoke("list", "--json"))["sandboxes"] == []
