"""One table of Ansible settings: the rendered ansible.cfg and a run's envvars say the same thing."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_specs import THREE_NODE_SPEC
from ssh_reads import resolved

from gpuclus import ansible_settings
from gpuclus.deploy.phases import Phase
from gpuclus.deploy.pipeline import render_for_run
from gpuclus.deploy.workspace import RunConfig, prepare_run
from gpuclus.errors import UsageError
from gpuclus.secret_files import ensure_secrets
from gpuclus.spec.load import load_spec
from gpuclus.state import StateDir

PLAYBOOKS = Path(__file__).resolve().parents[1] / "fixtures" / "deploy_playbooks"
SPEC = THREE_NODE_SPEC


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunConfig:
    """A prepared run, with the ansible.cfg a deploy renders for it."""
    monkeypatch.setenv("GPUCLUS_PLAYBOOKS_DIR", str(PLAYBOOKS))
    # A space, then '~/': a path split by the shell or by ssh_config reads differently (see below); and a quote.
    spec = tmp_path / "it's my lab ~" / "cluster.yaml"
    spec.parent.mkdir()
    spec.write_text(SPEC)
    loaded = load_spec(spec)
    assert loaded.ok and loaded.topology is not None
    state = StateDir.beside(spec)
    return prepare_run(
        spec_path=spec,
        spec_text=SPEC,
        rendered=render_for_run(spec, loaded),
        state=state,
        secrets_dir=ensure_secrets(state).directory,
        phases=[Phase.BASE],
        hosts=[node.name for node in loaded.topology.nodes],
    )


def read_cfg(path: Path) -> configparser.ConfigParser:
    # Ansible reads ansible.cfg with configparser's default interpolation; so does this.
    cfg = configparser.ConfigParser(inline_comment_prefixes=(";",))
    assert cfg.read(path) == [str(path)]
    return cfg


def table(run: RunConfig) -> tuple[ansible_settings.Setting, ...]:
    state = StateDir(run.run_dir.parents[1])
    return ansible_settings.settings(
        host_count=len(run.hosts), state_dir=str(state.root), known_hosts=str(state.known_hosts)
    )


def test_the_runs_ansible_cfg_and_envvars_agree(run: RunConfig) -> None:
    cfg = read_cfg(run.run_dir / "ansible.cfg")
    for setting in table(run):
        written = cfg[setting.section][setting.key]
        if setting.path:
            # Ansible resolves a relative path setting against ansible.cfg's directory.
            written = os.path.normpath(run.run_dir / written)
        if setting.env is None:
            continue
        assert run.envvars[setting.env] == written, setting.key
    # Every setting of the cfg is one of the table's, and the other way round.
    listed = {(setting.section, setting.key) for setting in table(run)}
    assert {(section, key) for section in cfg.sections() for key in cfg[section]} == listed


def test_a_run_reads_its_own_ansible_cfg(run: RunConfig) -> None:
    # Settings Ansible reads from a config file only reach the run this way,
    # and an admin's ~/.ansible.cfg stays out of it.
    assert run.envvars["ANSIBLE_CONFIG"] == str(run.run_dir / "ansible.cfg")
    cfg = read_cfg(Path(run.envvars["ANSIBLE_CONFIG"]))
    assert {key for section in cfg.sections() for key in cfg[section]} == {setting.key for setting in table(run)}


def ssh_reads(ssh_args: str) -> dict[str, str]:
    """What ssh makes of ``ssh_args`` split as Ansible splits them (`ssh -G`: no connection is made)."""
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("the OpenSSH client is not installed")
    return resolved([ssh, *shlex.split(ssh_args), "node"])


def test_known_hosts_is_absolute_in_the_cfg_and_the_environment(run: RunConfig) -> None:
    known_hosts = run.run_dir.parents[1] / "ssh" / "known_hosts"
    assert known_hosts.is_absolute() and " ~/" in str(known_hosts)
    # ssh itself reads the whole path back: split on its space it would be two files, the second '~/...'
    # expanded to the home directory, and accept-new would write any host's key to the first.
    for ssh_args in (
        read_cfg(run.run_dir / "ansible.cfg")["ssh_connection"]["ssh_args"],
        run.envvars["ANSIBLE_SSH_ARGS"],
    ):
        found = ssh_reads(ssh_args)
        assert found["userknownhostsfile"] == str(known_hosts)
        assert found["stricthostkeychecking"] == "accept-new"


@pytest.mark.parametrize("char", ['"', "\\", "${", "%", "\n"])
def test_a_state_directory_ssh_cannot_read_back_is_refused(char: str) -> None:
    known_hosts = f"/srv/a{char}b/.gpuclus/ssh/known_hosts"
    with pytest.raises(UsageError, match=r"ansible\.cfg or ssh cannot hold"):
        ansible_settings.settings(host_count=1, state_dir="../..", known_hosts=known_hosts)


@pytest.mark.parametrize(("hosts", "forks"), [(0, 1), (3, 3), (25, 25), (400, ansible_settings.MAX_FORKS)])
def test_forks_are_the_host_count_capped(hosts: int, forks: int) -> None:
    assert ansible_settings.forks(hosts) == forks
    found = ansible_settings.settings(host_count=hosts, state_dir="../..", known_hosts="/srv/k")
    assert {setting.key: setting.value for setting in found}["forks"] == str(forks)


def test_ansible_reads_every_variable_gpuclus_sets(run: RunConfig, tmp_path: Path) -> None:
    # A misspelt variable is ignored by Ansible without a word: ask Ansible.
    tool = Path(sys.executable).parent / "ansible-config"
    if not tool.exists():
        pytest.skip(f"ansible-config is not installed beside {sys.executable}")
    variables = ansible_settings.environment(table(run))
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env |= {"HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), **variables}
    empty = tmp_path / "empty.cfg"
    empty.write_text("")
    env["ANSIBLE_CONFIG"] = str(empty)  # an empty file: only the environment counts
    dump = subprocess.run(
        [str(tool), "dump", "--only-changed", "-t", "all"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dump.returncode == 0, dump.stderr
    for name in variables:
        assert f"(env: {name})" in dump.stdout, name


def test_known_hosts_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="absolute"):
        ansible_settings.settings(host_count=1, state_dir="../..", known_hosts="ssh/known_hosts")
