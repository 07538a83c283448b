"""Hostile strings in every text field: a located spec error, or config files that mean what the spec says.

For each generated spec, either the loader reports an error with a line to
point at (what `spec check` prints before exiting 3), or the spec renders and
every file built from it parses back to exactly the spec's hosts, exports and
partitions: the inventory, and the roles' /etc/hosts, chrony.conf,
slurm.conf, /etc/exports, ganesha.conf and prometheus.yml as Ansible's own
templating renders them (tests/unit/role_templates.py). A value that passes
the checks and still adds a line, a key or an NFS client fails here.

Derandomized and without an example database, so CI runs the same examples
every time.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lookalikes import libc_reads_as_address
from role_templates import group_vars, render
from spec_samples import BASE
from test_spec_grammar import PATTERN_FIELDS

from gpuclus.render import render_files
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.spec.models import Role
from gpuclus.yamldoc.findings import Severity

HOSTILE = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


TEXT_FIELDS = [
    *PATTERN_FIELDS,
    ("slurm", "partitions", 0, "nodes"),
    ("nodes", 1, "name"),
    ("nodes", 1, "address"),
]

# Characters that mean something in one of the files a value reaches.
SPECIAL = [*"\n\r\t #;\"'{}[](),=*:%/\\$`@+.-_", "\x00", "\u2028", "é"]
PLAIN = list("abcgpu0129")
FRAGMENTS = st.text(alphabet=st.sampled_from(SPECIAL + PLAIN * 2), max_size=10)
INJECTIONS = st.sampled_from(
    [
        "\n",
        " ",
        "\t",
        "\nNodeName=evil State=UP",
        " *(rw,no_root_squash,insecure) #",
        '";Clients=*;Squash=No_Root_Squash;}#',
        "\n10.6.6.6 evil",
        "%eth0",
        "{{ lookup('pipe', 'id') }}",
        ",evil",
        "\x00",
    ]
)

# Values of the classes issue 40's second round named: digits that only look ASCII, '.' and '..' path
# segments, names Ansible, the inventory or Slurm already give a meaning to, numbers the resolver reads
# as IPv4 addresses, and control or invisible characters.
CLASS_VALUES = [
    "\u0661\u0662",
    "\uff11",
    "\u00b2",
    "\u0663",
    "/..",
    "/../etc",
    "/home/../etc",
    "/.",
    "..",
    "gpu",
    "login",
    "compute",
    "cluster",
    "localhost",
    "all",
    "ungrouped",
    "default",
    "DEFAULT",
    "Default",
    "0x7f000001",
    "2130706433",
    "127.1",
    "0177.0.0.1",
    "\x01",
    "\x1b[31m",
    "\x7f",
    "\x85",
    "\u200b",
    "\u202e",
]
CLASSES = st.sampled_from(CLASS_VALUES)


def original(path: tuple[str | int, ...]) -> str:
    value: Any = BASE
    for part in path:
        value = value[part]
    return str(value)


@st.composite
def hostile_specs(draw: st.DrawFn) -> str:
    data = copy.deepcopy(BASE)
    for path in draw(st.lists(st.sampled_from(TEXT_FIELDS), min_size=1, max_size=2, unique=True)):
        base = original(path)
        piece = draw(st.one_of(INJECTIONS, FRAGMENTS, CLASSES))
        # Mostly after a valid value: that is how an injection reads; alone, a reserved name or a number is one.
        value = draw(st.sampled_from([base + piece] * 3 + [piece + base, piece, piece, base[:1] + piece + base[1:]]))
        holder: Any = data
        for part in path[:-1]:
            holder = holder[part]
        holder[path[-1]] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@given(hostile_specs())
@HOSTILE
def test_hostile_values_are_refused_with_a_location_or_change_nothing(text: str) -> None:
    refused_with_a_location_or_safe(text)


def refused_with_a_location_or_safe(text: str) -> None:
    loaded = load_spec_text(text)
    errors = [finding for finding in loaded.findings if finding.severity == Severity.ERROR]
    if errors:
        assert any(finding.line is not None for finding in errors), errors
        return
    assert loaded.spec is not None and loaded.topology is not None
    check_files_mean_the_spec(loaded)


# Where a whole value of CLASSES lands in its own right: a name, an address, a path.
WHOLE_VALUE_FIELDS = [
    ("cluster", "name"),
    ("nodes", 0, "name"),
    ("nodes", 0, "address"),
    ("slurm", "partitions", 0, "name"),
    ("nfs", "exports", 0, "path"),
    ("nfs", "exports", 0, "mount"),
]


@pytest.mark.parametrize("path", WHOLE_VALUE_FIELDS, ids=lambda path: ".".join(map(str, path)))
@pytest.mark.parametrize("value", CLASS_VALUES, ids=ascii)
def test_each_class_of_value_alone_is_refused_with_a_location_or_safe(path: tuple[str | int, ...], value: str) -> None:
    # The generator above mostly puts these after a valid value; alone, each one is tried in each field.
    data = copy.deepcopy(BASE)
    holder: Any = data
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    refused_with_a_location_or_safe(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def check_files_mean_the_spec(loaded: LoadedSpec) -> None:
    spec, topology = loaded.spec, loaded.topology
    assert spec is not None and topology is not None
    files = render_files(spec, topology, source_name="cluster.yaml", state_dir="../.gpuclus", known_hosts="/k")
    inventory = group_vars(files)
    nodes = list(topology.nodes)
    addresses = {node.name: node.address for node in nodes}
    controller = next(node.name for node in nodes if Role.CONTROLLER in node.roles)
    compute = sorted(node.name for node in nodes if Role.COMPUTE in node.roles)
    server = next(node for node in nodes if Role.NFS_SERVER in node.roles)
    clients = sorted(node.address for node in nodes if node.name != server.name)
    paths = [export.path for export in spec.nfs.exports]

    hosts = yaml.safe_load(files["inventory/hosts.yml"])
    assert _inventory_hosts(hosts) == addresses
    check_names_mean_themselves(loaded, set(_group_names(hosts)))
    check_files_are_plain_text(files)

    assert _hosts_file_entries(render("base", "etc/hosts.j2", inventory, controller)) == addresses
    chrony = render("base", "etc/chrony/chrony.conf.j2", inventory, controller)
    assert sorted(_values(chrony, "allow")) == sorted(a for n, a in addresses.items() if n != controller)

    slurm_conf = render(
        "slurm_common",
        "etc/slurm/slurm.conf.j2",
        inventory,
        controller,
        # What the role would have read on the nodes: nothing, every node is sized in the spec.
        __slurm_common_pmix=False,
        __slurm_common_probes={},
        __slurm_common_written_sizes={},
    )
    node_lines, partition_lines = _slurm_conf_lines(slurm_conf)
    assert [words["NodeName"] for words in node_lines] == compute
    assert [words["NodeAddr"] for words in node_lines] == [addresses[name] for name in compute]
    assert [words["PartitionName"] for words in partition_lines] == sorted(p.name for p in spec.slurm.partitions)

    exports = render("nfs_server", "etc/exports.j2", inventory, server.name)
    lines = [line.split() for line in exports.splitlines() if line and not line.startswith("#")]
    assert [line[0] for line in lines] == paths
    assert all(sorted(re.sub(r"\(.*\)$", "", client) for client in line[1:]) == clients for line in lines)

    ganesha = render("nfs_server", "etc/ganesha/ganesha.conf.j2", inventory, server.name)
    assert ganesha.count("EXPORT {") == len(paths)
    assert _values(ganesha, "Path =") == [f'"{path}";' for path in paths]
    assert all(value.rstrip(";").split(", ") == sorted(clients) for value in _values(ganesha, "Clients ="))

    prometheus = yaml.safe_load(render("prometheus", "etc/prometheus/prometheus.yml.j2", inventory, controller))
    node_job = next(job for job in prometheus["scrape_configs"] if job["job_name"] == "node")
    targets = {config["labels"]["instance"]: config["targets"] for config in node_job["static_configs"]}
    assert targets == {name: [f"{address}:9100"] for name, address in addresses.items()}


# Words the playbooks' plays target, found by reading them, so a new play is covered without a change here.
PLAY_WORDS = frozenset(
    word.lstrip("&!")
    for playbook in (Path(__file__).resolve().parents[3] / "playbooks").glob("*.yml")
    for play in yaml.safe_load(playbook.read_text(encoding="utf-8")) or []
    if "hosts" in play
    for word in re.split(r"[:,]", str(play["hosts"]))
)
# Ansible's groups of every inventory and its name for the control machine; slurm.conf's words for the
# defaults record, every node, and the host reading the file.
ANSIBLE_WORDS = frozenset({"all", "ungrouped", "localhost"})
SLURM_NODE_WORDS = frozenset({"default", "all", "localhost"})
SLURM_PARTITION_WORDS = frozenset({"default"})


def check_names_mean_themselves(loaded: LoadedSpec, groups: set[str]) -> None:
    """No accepted node or partition name is a word Ansible, the inventory or Slurm reads as something else."""
    assert loaded.spec is not None and loaded.topology is not None
    taken = PLAY_WORDS | groups | ANSIBLE_WORDS | SLURM_NODE_WORDS
    for node in loaded.topology.nodes:
        assert node.name.casefold() not in taken, node.name
        assert node.name.isascii() and node.address.isascii(), node
        # The resolver reads 0x7f000001 and 2130706433 as 127.0.0.1, never as a name.
        assert not libc_reads_as_address(node.name), node.name
    for partition in loaded.spec.slurm.partitions:
        assert partition.name.casefold() not in SLURM_PARTITION_WORDS, partition.name
    for export in loaded.spec.nfs.exports:
        for path in (export.path, export.mount_point):
            assert not {".", ".."} & set(path.split("/")), path


# The one character beyond printable ASCII that gpuclus' own headers write.
HEADER_DASH = "\u2014"


def check_files_are_plain_text(files: dict[str, str]) -> None:
    """Every rendered file is printable ASCII and newlines: no spec value carried a control or look-alike character."""
    for name, text in files.items():
        odd = {char for char in text if not (" " <= char <= "~" or char == "\n" or char == HEADER_DASH)}
        assert not odd, (name, odd)


def _group_names(tree: dict[str, Any]) -> Iterator[str]:
    for name, group in tree.items():
        yield str(name)
        if isinstance(group, dict):
            yield from _group_names(group.get("children") or {})


def _inventory_hosts(hosts: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for group in _groups(hosts):
        for name, variables in (group.get("hosts") or {}).items():
            found[str(name)] = variables["ansible_host"] if variables and "ansible_host" in variables else found[name]
    return found


def _groups(tree: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in tree.values():
        if isinstance(group, dict):
            yield group
            yield from _groups(group.get("children") or {})


def _hosts_file_entries(text: str) -> dict[str, str]:
    body = text.split("# cluster nodes", 1)[1].splitlines()[1:]
    entries = [line.split() for line in body if line.strip()]
    assert all(len(words) == 2 for words in entries), entries
    return {name: address for address, name in entries}


def _values(text: str, key: str) -> list[str]:
    return [line.strip()[len(key) :].strip() for line in text.splitlines() if line.strip().startswith(key + " ")]


def _slurm_conf_lines(text: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    nodes, partitions = [], []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        words = dict(word.split("=", 1) for word in line.split(" "))
        if "NodeName" in words:
            nodes.append(words)
        elif "PartitionName" in words:
            partitions.append(words)
        else:
            # One setting per line, a known Slurm key.
            assert len(words) == 1 and re.fullmatch(r"[A-Z][A-Za-z]+", next(iter(words))), line
    return nodes, partitions


def test_the_checks_hold_for_the_unmodified_spec() -> None:
    loaded = load_spec_text(yaml.safe_dump(BASE))
    assert loaded.ok, loaded.findings
    check_files_mean_the_spec(loaded)
