"""Every setting the Slurm roles write has a value, also before any compute node has a known size.

A first deploy whose compute nodes preflight all left out (a GPU node with no
GPU on its PCI bus) knows no node's size: slurm.conf once got `DefMemPerCPU=`
(the smallest memory per CPU over the sized nodes, of which there were none),
and slurmctld stopped at "Parse error ... line 13". Here slurm.conf,
cgroup.conf, gres.conf and slurmdbd.conf are rendered with Ansible's own
templating from the roles' defaults and vars (tests/unit/role_templates.py)
for a cluster whose nodes are sized and for one whose nodes are not, and every
line that is not a comment must be `Key=Value` words with a value each. The
roles' own guard (the pattern their "every setting has a value" asserts use)
is checked against the same text and against the old failure.
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, first_refusal, group_vars, render, role_variables

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 1, model: h100}}
slurm:
  partitions:
    - {name: gpu, nodes: "gpu[01-02]", default: true, max_time: "1-00:00:00"}
    - {name: debug, nodes: gpu01, max_time: "00:30:00"}
"""

HARDWARE = {"CPUs": 8, "Boards": 1, "SocketsPerBoard": 1, "CoresPerSocket": 8, "ThreadsPerCore": 1, "RealMemory": 10000}
COMPUTE = ["gpu01", "gpu02"]

# A word of a settings line: a key, `=`, and a value with no blank in it
# (Python's None, what an unknown value renders as, is none).
WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*=(?!None(?:\s|$))\S+")
# The keys a NodeName / PartitionName line must carry, in the order the template writes them.
NODE_KEYS = ["NodeName", "NodeAddr", "CPUs"]
PARTITION_KEYS = ["PartitionName", "Nodes", "Default", "MaxTime", "State"]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    loaded = load_spec_text(SPEC)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    # slurmdbd.conf reads its password with a file lookup: Ansible's plugins must be found.
    init_plugin_loader()
    secrets = tmp_path_factory.mktemp("secrets")
    (secrets / "slurmdbd_db_password").write_text("s3cret\n")
    return {**group_vars(files), "gpuclus_secrets_dir": str(secrets)}


# What the role reads on the nodes, per run: every node in it with the compute
# nodes probed (`slurmd -C`), or a first deploy whose preflight left every
# compute node out (no probe, no slurm.conf yet, so no size at all).
RUNS: dict[str, dict[str, Any]] = {
    "sized": {
        "__slurm_common_pmix": True,
        "__slurm_common_probes": {name: {"hardware": HARDWARE} for name in COMPUTE},
        "__slurm_common_written_sizes": {},
    },
    "none-sized": {
        "ansible_play_hosts": ["head"],
        "ansible_play_hosts_all": ["head"],
        "gpuclus_excluded_nodes": COMPUTE,
        "__slurm_common_pmix": False,
        "__slurm_common_probes": {},
        "__slurm_common_written_sizes": {},
    },
}


def settings_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def malformed(text: str) -> list[str]:
    """Lines that are not all `Key=Value` words with a value each."""
    return [line for line in settings_lines(text) if not all(WORD.fullmatch(word) for word in line.split(" "))]


def keys(line: str) -> list[str]:
    return [word.split("=", 1)[0] for word in line.split(" ")]


def slurm_conf(inventory: dict[str, Any], run: str) -> str:
    return render("slurm_common", "etc/slurm/slurm.conf.j2", inventory, "head", **RUNS[run])


@pytest.mark.parametrize("run", RUNS)
def test_every_slurm_conf_setting_has_a_value(inventory: dict[str, Any], run: str) -> None:
    text = slurm_conf(inventory, run)
    assert malformed(text) == []
    lines = settings_lines(text)
    nodes = [line for line in lines if line.startswith("NodeName=")]
    partitions = [line for line in lines if line.startswith("PartitionName=")]
    assert [keys(line)[:3] for line in nodes] == [NODE_KEYS] * len(COMPUTE)
    assert all(keys(line)[-1] == "State" and "RealMemory" in keys(line) for line in nodes)
    assert sorted(keys(line) for line in partitions) == [PARTITION_KEYS, PARTITION_KEYS]
    # One setting a line, each once, except SlurmctldHost (one per controller).
    single = [keys(line) for line in lines if line not in nodes + partitions]
    assert all(len(words) == 1 for words in single)
    names = [words[0] for words in single]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []


def test_a_sized_cluster_sets_the_default_memory_per_cpu(inventory: dict[str, Any]) -> None:
    # 10000 MB less the 2% reserve, over 8 CPUs.
    assert "DefMemPerCPU=1225" in slurm_conf(inventory, "sized").splitlines()


def test_with_no_sized_compute_node_the_default_memory_per_cpu_is_left_out(inventory: dict[str, Any]) -> None:
    text = slurm_conf(inventory, "none-sized")
    assert not any(line.startswith("DefMemPerCPU") for line in text.splitlines())
    assert [line for line in text.splitlines() if line.startswith("NodeName=")] == [
        "NodeName=gpu01 NodeAddr=10.0.0.11 CPUs=1 RealMemory=1 State=FUTURE",
        "NodeName=gpu02 NodeAddr=10.0.0.12 CPUs=1 RealMemory=1 State=FUTURE",
    ]


def test_a_null_extra_setting_leaves_the_line_out(inventory: dict[str, Any]) -> None:
    text = render(
        "slurm_common",
        "etc/slurm/slurm.conf.j2",
        inventory,
        "head",
        **RUNS["sized"],
        slurm_common_extra_config={"DefMemPerCPU": None, "MaxJobCount": 5000},
    )
    assert malformed(text) == []
    assert "MaxJobCount=5000" in text.splitlines()
    assert not any(line.startswith("DefMemPerCPU") for line in text.splitlines())


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("template", ["etc/slurm/cgroup.conf.j2", "etc/slurm/gres.conf.j2"])
def test_every_compute_node_file_setting_has_a_value(inventory: dict[str, Any], run: str, template: str) -> None:
    facts = {"slurm": {"nvml_plugin": False, "nvidia_driver": False}}
    text = render("slurm_common", template, inventory, "gpu01", **RUNS[run], __slurm_common_facts=facts)
    assert malformed(text) == []
    assert settings_lines(text)


@pytest.mark.parametrize("purge", [None, "12months"])
def test_every_slurmdbd_conf_setting_has_a_value(inventory: dict[str, Any], purge: str | None) -> None:
    text = render(
        "slurm_accounting", "etc/slurm/slurmdbd.conf.j2", inventory, "head", slurm_accounting_purge_after=purge
    )
    assert malformed(text) == []
    assert ("PurgeJobAfter=12months" in text.splitlines()) == (purge is not None)


# The roles' own guard: the pattern their asserts look for before a file is written.


def role_templar(role: str, inventory: dict[str, Any], **extra: Any) -> Templar:
    variables = role_variables(role, inventory, "head", {"role_path": str(ROLES / role), **extra})
    return Templar(loader=DataLoader(), variables=variables)


def role_value(role: str, inventory: dict[str, Any], name: str) -> str:
    return str(role_templar(role, inventory).template(trust_as_template("{{ " + name + " }}")))


def role_guard(role: str, inventory: dict[str, Any]) -> re.Pattern[str]:
    return re.compile(role_value(role, inventory, f"__{role}_unset_pattern"))


@pytest.mark.parametrize("role", ["slurm_common", "slurm_accounting"])
@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("DefMemPerCPU=", "DefMemPerCPU"),
        ("DefMemPerCPU=   ", "DefMemPerCPU"),
        ("StoragePass=", "StoragePass"),
        ("DefMemPerCPU=None", "DefMemPerCPU"),
        ("NodeName=gpu01 NodeAddr= CPUs=8", "NodeAddr"),
        ("NodeName=gpu01 NodeAddr=10.0.0.11 CPUs=", "CPUs"),
        ("Name=gpu Type= File=/dev/nvidia0", "Type"),
    ],
)
def test_the_roles_guard_finds_a_setting_without_a_value(
    inventory: dict[str, Any], role: str, line: str, key: str
) -> None:
    text = "# a comment\nAuthType=auth/munge\n" + line + "\nKillWait=30\n"
    assert role_guard(role, inventory).findall(text) == [key]


@pytest.mark.parametrize("role", ["slurm_common", "slurm_accounting"])
def test_the_roles_guard_passes_what_the_roles_render(inventory: dict[str, Any], role: str) -> None:
    guard = role_guard(role, inventory)
    texts = [slurm_conf(inventory, run) for run in RUNS] + [
        render("slurm_accounting", "etc/slurm/slurmdbd.conf.j2", inventory, "head", slurm_accounting_purge_after="1")
    ]
    # Comments may say anything: `# a=` is no setting.
    texts.append("# DefMemPerCPU= is left out\n#Key=\nMpiDefault=none\nSwitchType=switch/none\n")
    assert [guard.findall(text) for text in texts] == [[] for _ in texts]


def test_the_guard_is_the_same_in_both_roles() -> None:
    def pattern(role: str) -> Any:
        return yaml.safe_load(Path(ROLES / role / "vars" / "main.yml").read_text())[f"__{role}_unset_pattern"]

    assert pattern("slurm_common") == pattern("slurm_accounting")


# Slurm's own parser, as the role's `validate:` runs it before slurm.conf is replaced. Only where
# Slurm's client is installed (a Slurm node, or a machine given `apt-get install slurm-client`).


def validate(inventory: dict[str, Any], text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The role's validate command on ``text``, split and run as Ansible's copy module runs it (no shell)."""
    conf = tmp_path / "slurm.conf.new"
    conf.write_text(text)
    command = role_value("slurm_common", inventory, "__slurm_common_conf_validate") % conf
    return subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's client (scontrol) is not installed here")
@pytest.mark.parametrize("run", RUNS)
def test_slurm_parses_what_the_role_renders(inventory: dict[str, Any], run: str, tmp_path: Path) -> None:
    result = validate(inventory, slurm_conf(inventory, run), tmp_path)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="Slurm's client (scontrol) is not installed here")
def test_slurm_refuses_a_setting_without_a_value(inventory: dict[str, Any], tmp_path: Path) -> None:
    text = slurm_conf(inventory, "sized").replace("DefMemPerCPU=1225", "DefMemPerCPU=")
    result = validate(inventory, text, tmp_path)
    assert result.returncode != 0
    assert "error: Parse error in file" in result.stderr and '"DefMemPerCPU="' in result.stderr


# The handlers' wait after a (re)start, run by bash with systemctl and journalctl stood in for.

FAILED_START = [
    'slurmctld: error: Parse error in file /etc/slurm/slurm.conf line 13: "DefMemPerCPU="',
    "slurmctld: fatal: Unable to process configuration file",
]


def wait(
    tmp_path: Path, *, state: str, journal: list[str], port: int, timeout: int = 5
) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stubs = {
        # is-active prints the state; show --property InvocationID prints the current start's id.
        "systemctl": f'case "$1" in is-active) echo {state}; [ {state} = active ];; show) echo abc123;; esac',
        "journalctl": 'case "$*" in *_SYSTEMD_INVOCATION_ID=abc123*) cat "$JOURNAL";; esac',
    }
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/bash\n{body}\n")
        stub.chmod(0o755)
    (tmp_path / "journal").write_text("".join(line + "\n" for line in journal))
    script = yaml.safe_load((ROLES / "slurm_common" / "vars" / "main.yml").read_text())["__slurm_common_wait_script"]
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "JOURNAL": str(tmp_path / "journal"),
        "UNIT": "slurmctld",
        "PORT": str(port),
        "TIMEOUT": str(timeout),
        "LOG": str(tmp_path / "slurmctld.log"),
    }
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30, check=False)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_daemon_that_stops_is_reported_at_once_with_its_own_error(tmp_path: Path) -> None:
    result = wait(tmp_path, state="failed", journal=FAILED_START, port=closed_port(), timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'slurmctld failed to start: error: Parse error in file /etc/slurm/slurm.conf line 13: "DefMemPerCPU="; '
        "fatal: Unable to process configuration file; see journalctl -u slurmctld"
    )


def test_a_daemon_without_a_journal_is_reported_from_its_log_file(tmp_path: Path) -> None:
    (tmp_path / "slurmctld.log").write_text("[2025-01-01T00:00:00] fatal: Duplicated NodeHostName gpu01 in config\n")
    result = wait(tmp_path, state="failed", journal=[], port=closed_port())
    assert result.returncode == 1
    assert "slurmctld failed to start: fatal: Duplicated NodeHostName gpu01 in config;" in result.stderr


def test_a_daemon_still_not_listening_is_reported_after_the_timeout(tmp_path: Path) -> None:
    result = wait(tmp_path, state="active", journal=[], port=closed_port(), timeout=1)
    assert result.returncode == 1
    assert "slurmctld is active but not listening on port" in result.stderr
    assert "no error line in its journal or" in result.stderr


def test_a_listening_daemon_passes(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        result = wait(tmp_path, state="active", journal=FAILED_START, port=int(server.getsockname()[1]))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# What the role says when it keeps a file: its assert and its rescue, rendered as Ansible would.


def configure_task(role: str, name: str) -> dict[str, Any]:
    tasks = DataLoader().load_from_file(str(ROLES / role / "tasks" / "configure.yml"))
    return next(task for task in tasks if task.get("name") == name)


def test_the_role_refuses_a_slurm_conf_without_a_value_and_names_the_setting(inventory: dict[str, Any]) -> None:
    check = configure_task("slurm_common", "Check every setting of the rendered Slurm files has a value")
    rendered = slurm_conf(inventory, "none-sized")
    refusals = [
        first_refusal(
            role_templar("slurm_common", inventory, **RUNS["none-sized"], __slurm_common_conf_text=text), [check]
        )
        for text in (rendered + "DefMemPerCPU=\n", rendered)
    ]
    assert refusals == [
        [
            "head: not written, the rendered slurm.conf has no value for DefMemPerCPU; the daemons would refuse it. "
            "Give the value in cluster.yaml or slurm_common_extra_config (null leaves a setting out), "
            "and report the template's gap as a gpuclus bug."
        ],
        [],
    ]


def test_slurm_s_refusal_is_reported_in_one_line(inventory: dict[str, Any]) -> None:
    block = configure_task("slurm_common", "Write slurm.conf once Slurm has parsed it")
    report = block["rescue"][0]
    failed = {
        "msg": "failed to validate",
        "stderr": 'scontrol: error: Parse error in file /root/.ansible/tmp/x/source line 13: "DefMemPerCPU="\n'
        "scontrol: fatal: Unable to process configuration file\n",
    }
    # Task vars are templates Ansible renders when read, as the role's are.
    task_vars = {name: trust_as_template(value) for name, value in report["vars"].items()}
    variables = role_variables("slurm_common", inventory, "head", {**task_vars, "ansible_failed_result": failed})
    msg = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(report["ansible.builtin.fail"]["msg"])
    )
    assert " ".join(str(msg).split()) == (
        "head: slurm.conf not written, Slurm refuses it: error: Parse error in file /root/.ansible/tmp/x/source "
        'line 13: "DefMemPerCPU=" (the current one stays; `gpuclus render` shows the file, report the '
        "template's gap as a gpuclus bug)."
    )
