"""`gpuclus render`: the rendered files, what Ansible makes of them, the writer and the CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from typer.testing import CliRunner

from gpuclus.ansible_settings import known_hosts_ssh_arg
from gpuclus.cli.main import app
from gpuclus.errors import UsageError
from gpuclus.render import MANIFEST_NAME, RENDERED_FILES, FileStatus, render_files, write_rendered
from gpuclus.render.context import build_context
from gpuclus.render.files import GROUP_VARS_DIR
from gpuclus.spec.hostlist import expand_list
from gpuclus.spec.load import LoadedSpec, load_spec, load_spec_text
from gpuclus.spec.models import NfsExport, Role

EXAMPLES = Path(__file__).resolve().parents[3] / "inventories" / "examples"
EXAMPLE_NAMES = ("lab-3node", "ib-16node", "workstation")
ANSIBLE_BIN = Path(sys.executable).parent
STATE_DIR = "../.gpuclus"  # what the CLI passes for the default `rendered/` beside the spec
KNOWN_HOSTS = "/srv/lab/.gpuclus/ssh/known_hosts"  # absolute: where the spec's .gpuclus/ is

# Everything optional left out: CPU-only, no NFS, no monitoring, no login, so
# four inventory groups are empty and the singletons are null.
MINIMAL = """\
apiVersion: gpuclus/v1
cluster: {name: tiny, admin_user: admin}
nodes:
  - {name: ctl, address: 10.1.0.1, roles: [controller]}
  - {name: cpu1, address: 10.1.0.2, roles: [compute]}
monitoring: {prometheus: false, grafana: false}
containers: {enroot: false, pyxis: false}
"""

# Node names YAML would read as a number (0b101 is 5 in YAML 1.1; digits alone are no host name), a boolean
# and null unless quoted.
TRICKY_NAMES = """\
apiVersion: gpuclus/v1
cluster: {name: tricky, admin_user: admin}
nodes:
  - {name: "null", address: 10.2.0.1, roles: [controller, monitoring]}
  - {name: "0b101", address: 10.2.0.2, roles: [compute], gpus: {count: 1, fake: true, model: "yes"}}
  - {name: "on", address: 10.2.0.3, roles: [compute]}
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: true, pyxis: true, allow_unverified_downloads: true}
"""


class TextFileSnapshot(SingleFileSnapshotExtension):
    """One plain-text snapshot file per rendered file, so a change diffs like the file itself."""

    _write_mode = WriteMode.TEXT
    file_extension = "txt"


@pytest.fixture
def file_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(TextFileSnapshot)


def example(name: str) -> LoadedSpec:
    loaded = load_spec(EXAMPLES / name / "cluster.yaml")
    assert loaded.ok, loaded.findings
    return loaded


def inline(text: str) -> LoadedSpec:
    loaded = load_spec_text(text)
    assert loaded.ok, loaded.findings
    return loaded


SPECS = {name: (lambda name=name: example(name)) for name in EXAMPLE_NAMES} | {
    "minimal": lambda: inline(MINIMAL),
    "tricky-names": lambda: inline(TRICKY_NAMES),
}


def rendered(name: str, state_dir: str = STATE_DIR, known_hosts: str = KNOWN_HOSTS) -> dict[str, str]:
    loaded = SPECS[name]()
    return render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir=state_dir, known_hosts=known_hosts
    )


# The examples' rendered files are stored once, in inventories/examples/*/rendered, where readers find them;
# test_examples.py renders each example afresh and compares. Syrupy keeps only the specs that live here.
SNAPSHOT_SPECS = ("minimal", "tricky-names")


def spec_and_file_ids() -> list[Any]:
    return [
        pytest.param(name, path, id=f"{name}__{path.replace('/', '__')}")
        for name in SNAPSHOT_SPECS
        for path in RENDERED_FILES
    ]


# Rendered files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "path"), spec_and_file_ids())
def test_rendered_file_matches_snapshot(name: str, path: str, file_snapshot: SnapshotAssertion) -> None:
    assert rendered(name)[path] == file_snapshot


def test_render_produces_exactly_the_listed_files() -> None:
    assert tuple(rendered("lab-3node")) == RENDERED_FILES
    assert all(
        path.startswith(f"{GROUP_VARS_DIR}/")
        for path in RENDERED_FILES
        if path.endswith(".yml") and path != "inventory/hosts.yml"
    )


RENDER_IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
from gpuclus.render import render_files
from gpuclus.spec.load import load_spec
loaded = load_spec(Path(sys.argv[1]))
files = render_files(
    loaded.spec,
    loaded.topology,
    source_name="cluster.yaml",
    state_dir="../.gpuclus",
    known_hosts="/srv/lab/.gpuclus/ssh/known_hosts",
)
print(json.dumps(files))
"""


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_render_is_byte_identical_across_processes_and_directories(name: str, tmp_path: Path) -> None:
    # Another hash seed reorders sets and dicts built from them; another
    # working directory would show up in any path that leaked in.
    expected = rendered(name)
    assert rendered(name) == expected
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", RENDER_IN_A_FRESH_PROCESS, str(EXAMPLES / name / "cluster.yaml")],
            cwd=tmp_path,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(result.stdout) == expected


@pytest.mark.parametrize("name", SPECS)
def test_no_absolute_path_of_this_machine_in_the_output(name: str) -> None:
    machine_paths = {str(EXAMPLES.parents[1]), str(Path.home()), str(Path.cwd()), sys.prefix}
    for path, text in rendered(name).items():
        for machine_path in machine_paths:
            assert machine_path not in text, (path, machine_path)
        # Outside comments, the only absolute paths are the spec's NFS paths, the
        # paths on the nodes the pytorch phase derives from them, the health
        # check's program and watched file systems, and the known_hosts file
        # the caller named.
        settings = "\n".join(line for line in _without_patterns(text).splitlines() if not line.lstrip().startswith("#"))
        for found in re.findall(r"(?<![\w.])/[\w./-]+", settings):
            assert path.endswith(("nfs.yml", "pytorch.yml", "slurm.yml")) or (
                path == "ansible.cfg" and found == KNOWN_HOSTS
            ), (
                path,
                found,
            )


def _without_patterns(text: str) -> str:
    """``text`` without the gpuclus_patterns mapping: its values are grammars (an ldap:// URI's, a path's), not
    paths."""
    kept, inside = [], False
    for line in text.splitlines():
        if line.startswith("gpuclus_patterns:"):
            inside = True
            continue
        if inside and line.startswith("  "):
            continue
        inside = False
        kept.append(line)
    return "\n".join(kept)


@pytest.mark.parametrize("name", SPECS)
def test_every_file_starts_with_the_generated_header(name: str) -> None:
    header = "# generated by gpuclus from cluster.yaml — edits are overwritten by `gpuclus render`"
    for path, text in rendered(name).items():
        assert text.splitlines()[0] == header, path
        assert text.endswith("\n") and not text.endswith("\n\n"), path


def test_source_name_must_be_a_bare_file_name() -> None:
    loaded = inline(MINIMAL)
    with pytest.raises(ValueError, match="file name"):
        render_files(
            loaded.spec,
            loaded.topology,
            source_name="/home/me/cluster.yaml",
            state_dir=STATE_DIR,
            known_hosts=KNOWN_HOSTS,
        )
    with pytest.raises(UsageError, match="control characters"):
        render_files(
            loaded.spec, loaded.topology, source_name="clu\nster.yaml", state_dir=STATE_DIR, known_hosts=KNOWN_HOSTS
        )


def test_state_dir_must_be_relative_and_fit_in_ansible_cfg() -> None:
    loaded = inline(MINIMAL)
    with pytest.raises(ValueError, match="relative"):
        render_files(
            loaded.spec,
            loaded.topology,
            source_name="cluster.yaml",
            state_dir="/srv/x/.gpuclus",
            known_hosts=KNOWN_HOSTS,
        )
    with pytest.raises(UsageError, match=r"ansible\.cfg cannot hold"):
        render_files(
            loaded.spec,
            loaded.topology,
            source_name="cluster.yaml",
            state_dir="../100%/.gpuclus",
            known_hosts=KNOWN_HOSTS,
        )


def test_known_hosts_with_a_space_stays_one_ssh_argument() -> None:
    cfg = rendered("minimal", known_hosts="/srv/my lab/.gpuclus/ssh/known_hosts")["ansible.cfg"]
    assert """-o 'UserKnownHostsFile="/srv/my lab/.gpuclus/ssh/known_hosts"'""" in cfg


def test_known_hosts_must_be_absolute_and_fit_in_ansible_cfg() -> None:
    # A relative one would be resolved by ssh against wherever Ansible runs:
    # a new, empty trust store there, and every host key "new" again.
    with pytest.raises(ValueError, match="absolute"):
        rendered("minimal", known_hosts="../.gpuclus/ssh/known_hosts")
    with pytest.raises(UsageError, match=r"ansible\.cfg or ssh cannot hold"):
        rendered("minimal", known_hosts="/srv/100%/.gpuclus/ssh/known_hosts")


def test_values_with_jinja_delimiters_are_refused() -> None:
    # Ansible would evaluate them as templates on the machine running it. The
    # spec's grammar keeps braces out of every field; the renderer refuses
    # them again, for a spec built in Python without the loader.
    text = (
        MINIMAL.replace("[controller]", "[controller, nfs_server]") + 'nfs: {exports: [\'/{{lookup("pipe","id")}}\']}\n'
    )
    assert "invalid-format" in [finding.code for finding in load_spec_text(text).findings]
    loaded = inline(MINIMAL.replace("[controller]", "[controller, nfs_server]") + "nfs: {exports: [/home]}\n")
    hostile = NfsExport.model_construct(path='/{{lookup("pipe","id")}}', mount=None, options="rw")
    spec = loaded.spec.model_copy(update={"nfs": loaded.spec.nfs.model_copy(update={"exports": [hostile]})})
    with pytest.raises(UsageError, match="Jinja"):
        render_files(spec, loaded.topology, source_name="cluster.yaml", state_dir=STATE_DIR, known_hosts=KNOWN_HOSTS)


# YAML and Ansible's view of it --------------------------------------------------------------------


@pytest.mark.parametrize("name", SPECS)
def test_group_vars_hold_exactly_the_context_values(name: str) -> None:
    loaded = SPECS[name]()
    context = build_context(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir=STATE_DIR)
    files = rendered(name)
    for concern, expected in context["group_vars"].items():
        text = files[f"{GROUP_VARS_DIR}/{concern}.yml"]
        assert yaml.safe_load(text) == expected
        assert all(key.startswith("gpuclus_") for key in expected)
        # Each variable line, or the group of lines it belongs to, has a comment above it.
        lines = text.splitlines()
        for index, line in enumerate(lines):
            if re.match(r"^gpuclus_\w+:", line):
                above = next(prev for prev in reversed(lines[:index]) if not re.match(r"^gpuclus_\w+: ", prev))
                assert above.startswith("# "), (concern, line)


def test_cluster_vars_list_nodes_in_spec_order_with_sorted_roles() -> None:
    cluster = yaml.safe_load(rendered("lab-3node")[f"{GROUP_VARS_DIR}/cluster.yml"])
    assert [node["name"] for node in cluster["gpuclus_nodes"]] == ["head", "gpu01", "gpu02"]
    assert cluster["gpuclus_nodes"][0]["roles"] == ["controller", "login", "monitoring", "nfs_server"]
    assert cluster["gpuclus_nodes"][1] == {
        "name": "gpu01",
        "address": "192.168.1.11",
        "roles": ["compute"],
        "gpus": 2,
        "gpu_model": None,
        "gpu_fake": False,
        "cpus": None,
        "memory_mb": None,
    }


def test_partitions_use_compressed_hostlists() -> None:
    slurm = yaml.safe_load(rendered("ib-16node")[f"{GROUP_VARS_DIR}/slurm.yml"])
    partitions = {p["name"]: p for p in slurm["gpuclus_slurm_partitions"]}
    assert set(partitions) == {"batch", "debug"}
    assert partitions["batch"]["default"] is True
    assert expand_list(partitions["batch"]["nodes"]) == [f"dgx{number:02d}" for number in range(1, 17)]
    assert partitions["debug"] == {
        "name": "debug",
        "nodes": "dgx[15-16]",
        "default": False,
        "max_time": "02:00:00",
    }
    assert slurm["gpuclus_slurm_version"] == "23.11.4"


def test_minimal_spec_gets_the_default_partition_and_null_servers() -> None:
    files = rendered("minimal")
    slurm = yaml.safe_load(files[f"{GROUP_VARS_DIR}/slurm.yml"])
    assert slurm["gpuclus_slurm_partitions"] == [
        {"name": "gpu", "nodes": "cpu1", "default": True, "max_time": "UNLIMITED"}
    ]
    assert yaml.safe_load(files[f"{GROUP_VARS_DIR}/nfs.yml"])["gpuclus_nfs_server"] is None
    assert yaml.safe_load(files[f"{GROUP_VARS_DIR}/monitoring.yml"])["gpuclus_monitoring_server"] is None


def test_hosts_yml_parses_with_spec_order_and_host_vars() -> None:
    inventory = yaml.safe_load(rendered("workstation")["inventory/hosts.yml"])
    assert inventory["all"]["vars"] == {"ansible_user": "ubuntu"}
    # A host gets its address only; its hardware is in gpuclus_nodes, which
    # slurm.conf and gres.conf are built from.
    assert inventory["all"]["children"]["cluster"]["hosts"] == {"ws01": {"ansible_host": "192.168.1.50"}}
    assert inventory["all"]["children"]["nfs_server"] == {"hosts": {}}
    cluster = yaml.safe_load(rendered("workstation")[f"{GROUP_VARS_DIR}/cluster.yml"])
    (record,) = cluster["gpuclus_nodes"]
    assert {key: record[key] for key in ("gpus", "gpu_model", "gpu_fake", "cpus", "memory_mb")} == {
        "gpus": 4,
        "gpu_model": "A6000",
        "gpu_fake": False,
        "cpus": 32,
        "memory_mb": 250000,
    }
    lab = yaml.safe_load(rendered("lab-3node")["inventory/hosts.yml"])
    assert list(lab["all"]["children"]["cluster"]["hosts"]) == ["head", "gpu01", "gpu02"]


def test_names_yaml_would_misread_stay_strings() -> None:
    inventory = yaml.safe_load(rendered("tricky-names")["inventory/hosts.yml"])
    assert list(inventory["all"]["children"]["cluster"]["hosts"]) == ["null", "0b101", "on"]
    cluster = yaml.safe_load(rendered("tricky-names")[f"{GROUP_VARS_DIR}/cluster.yml"])
    assert [(node["name"], node["gpu_model"]) for node in cluster["gpuclus_nodes"]][1] == ("0b101", "yes")


REPO = Path(__file__).resolve().parents[3]


def ansible_sources() -> str:
    """Every playbook, task, template, default and var file: where a rendered variable can be read."""
    paths = sorted((REPO / "roles").rglob("*")) + sorted((REPO / "playbooks").rglob("*"))
    return "\n".join(path.read_text() for path in paths if path.is_file() and path.suffix in {".yml", ".j2"})


@pytest.mark.parametrize("name", SPECS)
def test_every_rendered_variable_has_a_reader(name: str) -> None:
    # A variable no role reads looks configured and is not; it comes back with
    # the role that reads it (nvidia, containers, ...).
    files = rendered(name)
    variables: set[str] = set()
    for path, text in files.items():
        if path.startswith(f"{GROUP_VARS_DIR}/"):
            variables |= set(yaml.safe_load(text))
    for host in yaml.safe_load(files["inventory/hosts.yml"])["all"]["children"]["cluster"]["hosts"].values():
        variables |= {key for key in host if not key.startswith("ansible_")}
    sources = ansible_sources()
    unread = sorted(variable for variable in variables if not re.search(rf"\b{variable}\b", sources))
    assert unread == []


def render_into(directory: Path, name: str, **kwargs: Any) -> Path:
    write_rendered(directory, rendered(name, **kwargs))
    return directory


def run_ansible(tool: str, *args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    executable = ANSIBLE_BIN / tool
    if not executable.exists():
        pytest.skip(f"{tool} is not installed beside {sys.executable}")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env["ANSIBLE_LOCAL_TEMP"] = str(cwd / ".ansible-tmp")
    env["ANSIBLE_HOME"] = str(cwd / ".ansible-home")
    env.update(extra_env)
    return subprocess.run(
        [str(executable), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120
    )


def expected_groups(loaded: LoadedSpec) -> dict[str, list[str]]:
    topology = loaded.topology
    assert topology is not None
    groups = {"cluster": [node.name for node in topology.nodes]}
    for role in ("controller", "compute", "login", "nfs_server", "monitoring", "backup_controller"):
        groups[role] = [node.name for node in topology.with_role(Role(role))]
    # The nvidia phase's hosts: real GPUs only (the sandbox's fake ones have no driver to install).
    groups["gpu"] = [node.name for node in topology.nodes if node.gpus is not None and not node.gpus.fake]
    return groups


@pytest.mark.parametrize("name", SPECS)
def test_ansible_inventory_loads_groups_hosts_and_group_vars(name: str, tmp_path: Path) -> None:
    out = render_into(tmp_path / "rendered", name)
    result = run_ansible("ansible-inventory", "-i", "inventory/hosts.yml", "--list", cwd=out)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr.upper(), result.stderr
    listing = json.loads(result.stdout)
    loaded = SPECS[name]()
    groups = expected_groups(loaded)
    # Empty groups still exist (listed as children of all); their entries are left out.
    assert listing["all"]["children"] == ["ungrouped", *groups]
    for group, hosts in groups.items():
        assert listing.get(group, {}).get("hosts", []) == hosts, group
    assert loaded.spec is not None
    hostvars = listing["_meta"]["hostvars"]
    for node in groups["cluster"]:
        # group_vars/all/ is read: every host sees the cluster-wide variables.
        assert hostvars[node]["gpuclus_cluster_name"] == loaded.spec.cluster.name
        assert hostvars[node]["ansible_user"] == loaded.spec.cluster.admin_user


def config_settings(dump: str) -> dict[str, str]:
    settings = {}
    for line in dump.splitlines():
        match = re.match(r"^(\w+)\(.*?\) = (.*)$", line)
        if match:
            settings[match.group(1)] = match.group(2)
    return settings


def test_ansible_cfg_settings_as_ansible_reads_them(tmp_path: Path) -> None:
    out = render_into(tmp_path / "rendered", "lab-3node")
    result = run_ansible("ansible-config", "dump", "--only-changed", cwd=out)
    assert result.returncode == 0, result.stderr
    settings = config_settings(result.stdout)
    assert settings["CONFIG_FILE"] == str(out / "ansible.cfg")
    assert settings["DEFAULT_HOST_LIST"] == repr([str(out / "inventory" / "hosts.yml")])
    assert settings["DEFAULT_PRIVATE_KEY_FILE"] == str(tmp_path / ".gpuclus" / "ssh" / "id_ed25519")
    assert settings["DEFAULT_FORKS"] == "3"
    assert settings["HOST_KEY_CHECKING"] == "True"
    assert settings["DEFAULT_GATHERING"] == "smart"
    assert settings["CACHE_PLUGIN"] == "jsonfile"
    assert "DEFAULT_INTERNAL_POLL_INTERVAL" not in settings  # Ansible's 1 ms (see ansible_settings)
    assert (
        known_hosts_ssh_arg(KNOWN_HOSTS)
        in run_ansible("ansible-config", "dump", "--only-changed", "-t", "connection", cwd=out).stdout
    )


def test_path_settings_resolve_against_the_cfg_directory_not_the_working_directory(tmp_path: Path) -> None:
    # What the comment at the top of ansible.cfg claims, checked from another
    # working directory: the key file and the fact cache still land in the
    # spec's .gpuclus/ (ssh_args, handed to ssh as is, names known_hosts by
    # its absolute path for that reason).
    out = render_into(tmp_path / "spec" / "rendered", "lab-3node")
    elsewhere = tmp_path / "elsewhere" / "deeper"
    elsewhere.mkdir(parents=True)
    config = {"ANSIBLE_CONFIG": str(out / "ansible.cfg")}
    dump = run_ansible("ansible-config", "dump", "--only-changed", cwd=elsewhere, **config)
    assert dump.returncode == 0, dump.stderr
    key = config_settings(dump.stdout)["DEFAULT_PRIVATE_KEY_FILE"]
    assert key == str(tmp_path / "spec" / ".gpuclus" / "ssh" / "id_ed25519")
    # Gather facts from the implicit localhost, only to see where the cache goes.
    setup = run_ansible(
        "ansible",
        "localhost",
        "--connection=local",
        "-m",
        "ansible.builtin.setup",
        "-a",
        "gather_subset=min",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        cwd=elsewhere,
        **config,
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    # ansible-core prefixes cache keys with a schema tag (s1_localhost).
    cached = [path.name for path in (tmp_path / "spec" / ".gpuclus" / "facts").iterdir()]
    assert [name for name in cached if name.endswith("localhost")], cached
    assert not (tmp_path / "elsewhere" / ".gpuclus").exists()


@pytest.mark.parametrize("name", SPECS)
def test_ansible_cfg_never_turns_host_key_checking_off(name: str) -> None:
    cfg = rendered(name)["ansible.cfg"]
    assert not re.search(r"StrictHostKeyChecking\s*=\s*no", cfg, re.IGNORECASE)
    assert not re.search(r"host_key_checking\s*=\s*(false|no|0)", cfg, re.IGNORECASE)
    assert "host_key_checking = True" in cfg
    assert "-o StrictHostKeyChecking=accept-new" in cfg
    assert known_hosts_ssh_arg(KNOWN_HOSTS) in cfg


def cluster_of(count: int) -> LoadedSpec:
    entries = ["  - {name: ctl, address: 10.1.0.1, roles: [controller, compute]}"]
    if count > 1:
        entries.append(f'  - {{name: "cpu[1-{count - 1}]", address: "10.1.1.[1-{count - 1}]", roles: [compute]}}')
    return inline(
        "apiVersion: gpuclus/v1\ncluster: {name: many, admin_user: admin}\nnodes:\n"
        + "\n".join(entries)
        + "\nmonitoring: {prometheus: false, grafana: false}\ncontainers: {enroot: false, pyxis: false}\n"
    )


@pytest.mark.parametrize(("nodes", "forks"), [(1, 1), (17, 17), (25, 25), (40, 25)])
def test_forks_is_nodes_capped_at_25(nodes: int, forks: int) -> None:
    loaded = cluster_of(nodes)
    assert loaded.topology is not None and len(loaded.topology.nodes) == nodes
    cfg = render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir=STATE_DIR, known_hosts=KNOWN_HOSTS
    )["ansible.cfg"]
    assert f"\nforks = {forks}\n" in cfg


# Writer -------------------------------------------------------------------------------------------


def statuses(report: Any) -> dict[str, str]:
    return {item.path: item.status.value for item in report.files}


def snapshot_tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def test_first_write_writes_every_file_and_a_sorted_manifest(tmp_path: Path) -> None:
    files = rendered("lab-3node")
    report = write_rendered(tmp_path / "out", files)
    assert statuses(report) == dict.fromkeys(files, "written")
    assert report.changed
    for path, text in files.items():
        assert (tmp_path / "out" / path).read_text(encoding="utf-8") == text
    manifest_text = (tmp_path / "out" / MANIFEST_NAME).read_text()
    manifest = json.loads(manifest_text)
    assert manifest["format"] == 1
    assert set(manifest["files"]) == set(files)
    assert manifest_text == json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def test_second_write_changes_nothing(tmp_path: Path) -> None:
    files = rendered("lab-3node")
    write_rendered(tmp_path, files)
    before = {path: (tmp_path / path).stat().st_mtime_ns for path in [*files, MANIFEST_NAME]}
    report = write_rendered(tmp_path, files)
    assert statuses(report) == dict.fromkeys(files, "unchanged")
    assert not report.changed
    assert {path: (tmp_path / path).stat().st_mtime_ns for path in before} == before


def test_changed_spec_rewrites_only_the_files_that_changed(tmp_path: Path) -> None:
    write_rendered(tmp_path, rendered("lab-3node"))
    loaded = load_spec_text(
        (EXAMPLES / "lab-3node" / "cluster.yaml").read_text().replace("accounting: true", "accounting: false")
    )
    assert loaded.ok
    report = write_rendered(
        tmp_path,
        render_files(
            loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir=STATE_DIR, known_hosts=KNOWN_HOSTS
        ),
    )
    assert {path for path, status in statuses(report).items() if status == "written"} == {f"{GROUP_VARS_DIR}/slurm.yml"}


def test_hand_edit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    write_rendered(tmp_path, rendered("lab-3node"))
    edited = tmp_path / "inventory" / "hosts.yml"
    edited.write_text(edited.read_text() + "# my note\n")
    before = snapshot_tree(tmp_path)
    # Another file would change too; it must stay as it is.
    with pytest.raises(UsageError) as caught:
        write_rendered(tmp_path, rendered("lab-3node", state_dir="../elsewhere/.gpuclus"))
    assert "inventory/hosts.yml (edited by hand)" in caught.value.message
    assert "ansible.cfg" not in caught.value.message
    assert "\n" not in caught.value.message
    assert caught.value.hint == "pass --force to overwrite, or move your edits into cluster.yaml"
    assert snapshot_tree(tmp_path) == before


def test_force_overwrites_hand_edits(tmp_path: Path) -> None:
    files = rendered("lab-3node")
    write_rendered(tmp_path, files)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    report = write_rendered(tmp_path, files, force=True)
    assert statuses(report)["ansible.cfg"] == "written"
    assert (tmp_path / "ansible.cfg").read_text() == files["ansible.cfg"]
    assert write_rendered(tmp_path, files).changed is False


def test_file_without_manifest_entry_is_a_conflict(tmp_path: Path) -> None:
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 50\n")
    with pytest.raises(UsageError, match=r"ansible\.cfg \(not written by gpuclus\)"):
        write_rendered(tmp_path, rendered("lab-3node"))
    assert not (tmp_path / MANIFEST_NAME).exists()
    assert not (tmp_path / "inventory").exists()


def test_file_without_manifest_entry_that_already_matches_is_unchanged(tmp_path: Path) -> None:
    files = rendered("lab-3node")
    (tmp_path / "ansible.cfg").write_text(files["ansible.cfg"])
    report = write_rendered(tmp_path, files)
    assert statuses(report)["ansible.cfg"] == "unchanged"


def test_files_no_longer_rendered_are_removed(tmp_path: Path) -> None:
    files = rendered("lab-3node")
    write_rendered(tmp_path, {**files, "inventory/group_vars/old/legacy.yml": "# old\n"})
    report = write_rendered(tmp_path, files)
    assert statuses(report)["inventory/group_vars/old/legacy.yml"] == FileStatus.REMOVED
    assert not (tmp_path / "inventory" / "group_vars" / "old").exists()
    assert "inventory/group_vars/old/legacy.yml" not in json.loads((tmp_path / MANIFEST_NAME).read_text())["files"]


def test_edited_file_no_longer_rendered_is_a_conflict(tmp_path: Path) -> None:
    files = rendered("lab-3node")
    write_rendered(tmp_path, {**files, "legacy.yml": "# old\n"})
    (tmp_path / "legacy.yml").write_text("# mine now\n")
    with pytest.raises(UsageError, match=r"legacy\.yml \(edited by hand, and gpuclus no longer renders it\)"):
        write_rendered(tmp_path, files)
    assert (tmp_path / "legacy.yml").exists()
    report = write_rendered(tmp_path, files, force=True)
    assert statuses(report)["legacy.yml"] == "removed"


def test_manifest_is_only_trusted_inside_the_output_directory(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text(json.dumps({"format": 1, "files": {"../victim.txt": "0" * 64}}))
    with pytest.raises(UsageError, match="not a manifest gpuclus can read"):
        write_rendered(out, rendered("minimal"))
    write_rendered(out, rendered("minimal"), force=True)
    assert victim.read_text() == "keep me\n"


def test_a_manifest_that_is_a_fifo_is_refused_without_reading_it(tmp_path: Path) -> None:
    # An unbounded read of a FIFO never returns.
    os.mkfifo(tmp_path / MANIFEST_NAME)
    with pytest.raises(UsageError, match="not a manifest gpuclus can read"):
        write_rendered(tmp_path, rendered("minimal"))
    assert stat.S_ISFIFO((tmp_path / MANIFEST_NAME).stat().st_mode)


def test_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("")
    with pytest.raises(UsageError, match="not a directory"):
        write_rendered(tmp_path / "out", rendered("minimal"))


def test_file_where_a_directory_must_go_is_refused_before_writing(tmp_path: Path) -> None:
    (tmp_path / "inventory").write_text("not a directory\n")
    with pytest.raises(UsageError, match="is in the way"):
        write_rendered(tmp_path, rendered("minimal"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["inventory"]


# CLI ----------------------------------------------------------------------------------------------

runner = CliRunner()


@pytest.fixture
def lab_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "cluster.yaml"
    shutil.copy(EXAMPLES / "lab-3node" / "cluster.yaml", spec)
    return spec


def mask_known_hosts(cfg: str) -> str:
    return re.sub(r"'UserKnownHostsFile=\"[^\"]*\"'", "UserKnownHostsFile=KNOWN_HOSTS", cfg)


def test_cli_renders_beside_the_spec(lab_spec: Path) -> None:
    result = runner.invoke(app, ["render", str(lab_spec)])
    assert result.exit_code == 0, result.output
    out = lab_spec.parent / "rendered"
    assert sorted(snapshot_tree(out)) == sorted([*RENDERED_FILES, MANIFEST_NAME])
    assert "written" in result.stdout and f"{len(RENDERED_FILES)} files for 3 nodes" in result.stdout
    # The files do not depend on where the spec lives, but for the absolute
    # path of its known_hosts in ansible.cfg.
    known_hosts = lab_spec.parent / ".gpuclus" / "ssh" / "known_hosts"
    for path in RENDERED_FILES:
        text = (out / path).read_text()
        committed = (EXAMPLES / "lab-3node" / "rendered" / path).read_text()
        if path == "ansible.cfg":
            assert f"{known_hosts_ssh_arg(str(known_hosts))}\n" in text
            text, committed = mask_known_hosts(text), mask_known_hosts(committed)
        assert str(lab_spec.parent) not in text
        assert text == committed


def test_cli_output_option_and_state_dir(lab_spec: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", str(lab_spec), "-o", str(tmp_path / "build" / "ansible")])
    assert result.exit_code == 0, result.output
    cfg = (tmp_path / "build" / "ansible" / "ansible.cfg").read_text()
    assert "private_key_file = ../../.gpuclus/ssh/id_ed25519" in cfg
    known_hosts = tmp_path / ".gpuclus" / "ssh" / "known_hosts"
    assert f"{known_hosts_ssh_arg(str(known_hosts))}\n" in cfg
    assert str(tmp_path) not in cfg.replace(str(known_hosts), "")


@pytest.mark.parametrize("output", ["/proc/gpuclus-render", "/proc/gpuclus/render"])
def test_cli_output_directory_that_cannot_be_made_is_a_usage_error(lab_spec: Path, output: str) -> None:
    # It was "internal error: FileNotFoundError" (exit 1).
    result = runner.invoke(app, ["render", str(lab_spec), "-o", output])
    assert result.exit_code == 2, result.output
    assert f"{output}: cannot create the output directory" in result.stderr
    assert "internal error" not in result.output


def test_cli_json_is_one_object(lab_spec: Path) -> None:
    result = runner.invoke(app, ["render", str(lab_spec), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload == {
        "ok": True,
        "output_dir": str(lab_spec.parent / "rendered"),
        "files": [{"path": path, "status": "written"} for path in sorted(RENDERED_FILES)],
        "nodes": 3,
    }
    again = json.loads(runner.invoke(app, ["render", str(lab_spec), "--json"]).stdout)
    assert {item["status"] for item in again["files"]} == {"unchanged"}


def test_cli_invalid_spec_exits_3_and_writes_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(MINIMAL.replace("roles: [compute]", "roles: [login]"))
    result = runner.invoke(app, ["render", str(spec)])
    assert result.exit_code == 3
    assert "no-compute" in result.stderr
    assert not (tmp_path / "rendered").exists()


def test_cli_missing_spec_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    result = runner.invoke(app, ["render", str(tmp_path / "missing.yaml"), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["ok"] is False


def test_cli_refused_overwrite_exits_2(lab_spec: Path) -> None:
    assert runner.invoke(app, ["render", str(lab_spec)]).exit_code == 0
    hosts = lab_spec.parent / "rendered" / "inventory" / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("192.168.1.11", "192.168.1.99"))
    result = runner.invoke(app, ["render", str(lab_spec)])
    assert result.exit_code == 2
    assert "inventory/hosts.yml" in result.stderr and "--force" in result.stderr
    result = runner.invoke(app, ["render", str(lab_spec), "--json"])
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False and payload["error"]["exit_code"] == 2
    assert "192.168.1.99" in hosts.read_text()
    result = runner.invoke(app, ["render", str(lab_spec), "--force"])
    assert result.exit_code == 0
    assert "192.168.1.99" not in hosts.read_text()
