"""Symlinks where gpuclus writes (issue 40, class 9): refused, never followed.

In a spec directory others can write to, a link planted where gpuclus writes
a file, chmods one or makes a directory would have it write, chmod or fill a
file or directory of someone else's. Each test plants a link to a file (or a
directory) outside the place gpuclus writes, runs the real step, and checks
the refusal is one line and that the link's target is untouched: same bytes,
same mode, nothing added.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import Mock

import pytest
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.deploy import in_sync, records
from gpuclus.deploy.lock import deploy_lock
from gpuclus.errors import ExitCode, UsageError
from gpuclus.fileio import chmod_no_follow, make_directories, write_text_atomic
from gpuclus.secret_files import DB_PASSWORD, MUNGE_KEY, ensure_secrets
from gpuclus.ssh.client import _accept_new_policy
from gpuclus.state import StateDir

EXAMPLES = Path(__file__).resolve().parents[2] / "inventories" / "examples"
THEIRS = "someone else's file\n"
INIT_FLAGS = ["--name", "lab", "--admin-user", "ubuntu", "--controller", "head=10.0.0.10", "--gpus-per-node", "1"]

runner = CliRunner()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside every directory gpuclus writes in, 0644."""
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_text(THEIRS)
    path.chmod(0o644)
    return path


@pytest.fixture
def victim_dir(tmp_path: Path) -> Path:
    """An empty directory outside every directory gpuclus writes in, 0755."""
    path = tmp_path / "elsewhere-dir"
    path.mkdir()
    path.chmod(0o755)
    return path


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "site" / "cluster.yaml"
    path.parent.mkdir()
    shutil.copy(EXAMPLES / "lab-3node" / "cluster.yaml", path)
    return path


def assert_untouched(victim: Path) -> None:
    assert victim.read_text() == THEIRS
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644


def assert_empty(victim_dir: Path) -> None:
    assert list(victim_dir.iterdir()) == []
    assert stat.S_IMODE(victim_dir.stat().st_mode) == 0o755


def plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def assert_refused_link(result: object, link: Path) -> None:
    exit_code = getattr(result, "exit_code", None)
    output = getattr(result, "output", "")
    assert exit_code == ExitCode.USAGE, output
    assert f"{link} is a symbolic link" in output
    assert "Traceback" not in output


# --- render's output directory -------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("relative", ["inventory/hosts.yml", "inventory/group_vars/all/cluster.yml", "ansible.cfg"])
def test_render_refuses_a_link_in_place_of_a_rendered_file(
    spec: Path, victim: Path, relative: str, force: bool
) -> None:
    link = spec.parent / "rendered" / relative
    plant(link, victim)
    result = runner.invoke(app, ["render", str(spec), *(["--force"] if force else [])])
    assert_refused_link(result, link)
    assert_untouched(victim)
    # Nothing half written: the refusal came before the first file.
    assert not (spec.parent / "rendered" / ".gpuclus-render.json").exists()


def test_render_refuses_a_link_in_place_of_a_rendered_file_it_wrote_before(spec: Path, victim: Path) -> None:
    assert runner.invoke(app, ["render", str(spec)]).exit_code == 0
    link = spec.parent / "rendered" / "inventory" / "hosts.yml"
    link.unlink()
    plant(link, victim)
    result = runner.invoke(app, ["render", str(spec), "--force"])
    assert_refused_link(result, link)
    assert_untouched(victim)


@pytest.mark.parametrize("relative", ["inventory", "inventory/group_vars", "inventory/group_vars/all"])
def test_render_refuses_a_link_in_place_of_a_directory_it_makes(spec: Path, victim_dir: Path, relative: str) -> None:
    link = spec.parent / "rendered" / relative
    plant(link, victim_dir)
    result = runner.invoke(app, ["render", str(spec), "--force"])
    assert_refused_link(result, link)
    assert_empty(victim_dir)


def test_render_refuses_a_link_in_place_of_the_manifest(spec: Path, victim: Path) -> None:
    link = spec.parent / "rendered" / ".gpuclus-render.json"
    plant(link, victim)
    result = runner.invoke(app, ["render", str(spec), "--force"])
    assert_refused_link(result, link)
    assert_untouched(victim)
    assert not (spec.parent / "rendered" / "inventory").exists()


def test_render_refuses_a_link_as_its_default_output_directory(spec: Path, victim_dir: Path) -> None:
    link = spec.parent / "rendered"
    plant(link, victim_dir)
    result = runner.invoke(app, ["render", str(spec)])
    assert_refused_link(result, link)
    assert_empty(victim_dir)


def test_render_removes_a_stale_file_only_when_it_is_not_a_link(spec: Path, victim: Path) -> None:
    # A file the manifest lists and this render no longer writes is deleted: never through a link.
    assert runner.invoke(app, ["render", str(spec)]).exit_code == 0
    manifest = spec.parent / "rendered" / ".gpuclus-render.json"
    manifest.write_text(manifest.read_text().replace('"ansible.cfg"', '"old.cfg"'))
    link = spec.parent / "rendered" / "old.cfg"
    plant(link, victim)
    result = runner.invoke(app, ["render", str(spec), "--force"])
    assert_refused_link(result, link)
    assert_untouched(victim)


# --- .gpuclus/ state -------------------------------------------------------------------------------------------


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir.beside(tmp_path / "site" / "cluster.yaml")


@pytest.mark.parametrize("name", [MUNGE_KEY, DB_PASSWORD])
def test_secrets_refuse_a_link_in_place_of_a_secret(state: StateDir, victim: Path, name: str) -> None:
    link = state.root / "secrets" / name
    plant(link, victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        ensure_secrets(state)
    assert_untouched(victim)  # before: chmod 0600 through the link


def test_secrets_refuse_a_dangling_link_without_a_traceback(state: StateDir, tmp_path: Path) -> None:
    link = state.root / "secrets" / MUNGE_KEY
    plant(link, tmp_path / "elsewhere" / "not-yet")
    with pytest.raises(UsageError, match="is a symbolic link"):
        ensure_secrets(state)
    assert not (tmp_path / "elsewhere" / "not-yet").exists()


@pytest.mark.parametrize("relative", [".gpuclus", ".gpuclus/secrets"])
def test_secrets_refuse_a_linked_directory(state: StateDir, victim_dir: Path, relative: str) -> None:
    link = state.root.parent / relative
    plant(link, victim_dir)
    with pytest.raises(UsageError, match="is a symbolic link"):
        ensure_secrets(state)
    assert_empty(victim_dir)


@pytest.mark.parametrize("relative", [".gpuclus", ".gpuclus/ssh"])
def test_ssh_key_refuses_a_linked_directory(state: StateDir, victim_dir: Path, relative: str) -> None:
    plant(state.root.parent / relative, victim_dir)
    with pytest.raises(UsageError, match="is a symbolic link"):
        state.ensure_ssh_key()
    assert_empty(victim_dir)


@pytest.mark.parametrize("name", ["id_ed25519", "id_ed25519.pub"])
def test_ssh_key_refuses_a_link_in_place_of_either_half_and_writes_neither(
    state: StateDir, victim: Path, name: str
) -> None:
    plant(state.ssh_dir / name, victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        state.ensure_ssh_key()
    assert_untouched(victim)
    assert sorted(path.name for path in state.ssh_dir.iterdir()) == [name]


def test_known_hosts_refuses_a_link_when_keys_are_set(state: StateDir, victim: Path) -> None:
    plant(state.known_hosts, victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        state.set_known_host_keys({"10.0.0.10": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA"]})
    assert_untouched(victim)
    assert state.known_hosts.is_symlink()


def test_known_hosts_refuses_a_link_when_a_first_contact_key_is_appended(state: StateDir, victim: Path) -> None:
    plant(state.known_hosts, victim)
    policy = _accept_new_policy(state.known_hosts)
    client = SimpleNamespace(get_host_keys=lambda: SimpleNamespace(add=lambda *args: None))
    key = SimpleNamespace(get_name=lambda: "ssh-ed25519", get_base64=lambda: "AAAAC3NzaC1lZDI1NTE5AAAAIA")
    with pytest.raises(UsageError, match="is a symbolic link"):
        policy.missing_host_key(client, "10.0.0.10", key)
    assert_untouched(victim)  # before: the line appended and the file chmodded 0600


def test_the_deploy_lock_refuses_a_linked_state_directory(state: StateDir, victim_dir: Path) -> None:
    plant(state.root, victim_dir)
    with pytest.raises(UsageError, match="is a symbolic link"), deploy_lock(state):
        pass
    assert_empty(victim_dir)


def test_in_sync_refuses_a_link_in_place_of_its_store(state: StateDir, victim: Path) -> None:
    state.private_dir(state.root)
    plant(in_sync.store_path(state), victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        in_sync.remember(state, "key", "run1", {"head": "f" * 64})
    assert_untouched(victim)


def test_a_run_record_refuses_a_link_in_place_of_its_file(state: StateDir, victim: Path) -> None:
    run_dir = state.private_dir(state.root / "runs" / "run1")
    plant(run_dir / records.RECORD_FILE, victim)
    record = records.RunRecord("run1", "cluster.yaml", "0" * 64, [], None, False, 0.0, "0", "successful")
    with pytest.raises(UsageError, match="is a symbolic link"):
        record.save(run_dir)
    assert_untouched(victim)


def test_a_linked_runs_directory_is_refused(state: StateDir, victim_dir: Path) -> None:
    plant(state.root / "runs", victim_dir)
    with pytest.raises(UsageError, match="is a symbolic link"):
        state.private_dir(state.root / "runs")
    assert_empty(victim_dir)


# --- files the user named, which gpuclus edits or writes --------------------------------------------------------


def test_init_refuses_a_link_as_its_output(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "cluster.yaml"
    plant(link, victim)
    result = runner.invoke(
        app,
        ["init", "-o", str(link), "--force", *INIT_FLAGS],
    )
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "is a symbolic link" in result.output
    assert_untouched(victim)


def test_a_users_file_edit_refuses_a_link_and_deploys_nothing(tmp_path: Path, victim: Path) -> None:
    from gpuclus.users.change import UsersChange
    from gpuclus.usersync.workflow import apply_change

    link = tmp_path / "users.yaml"
    plant(link, victim)
    deployed: list[object] = []
    change = UsersChange(path=link, new_text="apiVersion: gpuclus/v1\nkind: Users\n", diff="", summary="")
    with pytest.raises(UsageError, match="is a symbolic link"):
        apply_change(change, tmp_path / "cluster.yaml", Mock(), load=Mock(), deploy=Mock(side_effect=deployed.append))
    assert_untouched(victim)
    assert deployed == []


# --- the mechanism -------------------------------------------------------------------------------------------


def test_write_text_atomic_replaces_nothing_through_a_link(tmp_path: Path, victim: Path) -> None:
    link = tmp_path / "out.txt"
    plant(link, victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        write_text_atomic(link, "ours\n", 0o600)
    assert_untouched(victim)
    assert link.is_symlink()
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".out.txt.")] == []


def test_chmod_no_follow_changes_a_file_and_refuses_a_link(tmp_path: Path, victim: Path) -> None:
    own = tmp_path / "own"
    own.write_text("x")
    chmod_no_follow(own, 0o600)
    assert stat.S_IMODE(own.stat().st_mode) == 0o600
    link = tmp_path / "link"
    plant(link, victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        chmod_no_follow(link, 0o600)
    assert_untouched(victim)


def test_chmod_no_follow_refuses_a_fifo_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo, 0o644)
    with pytest.raises(UsageError, match="FIFO"):
        chmod_no_follow(fifo, 0o600)
    assert stat.S_IMODE(fifo.stat().st_mode) == 0o644


def test_make_directories_makes_each_component_and_refuses_a_link_among_them(tmp_path: Path, victim_dir: Path) -> None:
    made = make_directories(tmp_path, tmp_path / "a" / "b", 0o700)
    assert made.is_dir() and stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    plant(tmp_path / "c", victim_dir)
    with pytest.raises(UsageError, match="is a symbolic link"):
        make_directories(tmp_path, tmp_path / "c" / "d")
    assert_empty(victim_dir)
