"""Values that pass `spec check` cannot rewrite a config file on the nodes.

Each case here is an input that passed the checks before (issue 11) and then
added a line, a key or an NFS client to slurm.conf, /etc/hosts, /etc/exports
or ganesha.conf.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from spec_samples import SPEC

from gpuclus.spec.load import load_spec_text
from gpuclus.yamldoc.findings import Finding
from gpuclus.yamldoc.grammar import address_problem, export_options_problem, export_path_problem, full_match

# Every text field the spec checks against a grammar, as a path into SPEC.
# (A partition's nodes are a hostlist whose items may be padded with blanks;
# slurm.conf gets the node names it expands to, never the text itself.)
PATTERN_FIELDS: list[tuple[str | int, ...]] = [
    ("cluster", "name"),
    ("cluster", "admin_user"),
    ("nodes", 0, "name"),
    ("nodes", 0, "address"),
    ("nodes", 1, "gpus", "model"),
    ("slurm", "version"),
    ("slurm", "partitions", 0, "name"),
    ("slurm", "partitions", 0, "max_time"),
    ("nfs", "exports", 0, "path"),
    ("nfs", "exports", 0, "mount"),
    ("nfs", "exports", 0, "options"),
    ("nfs", "client_options"),
    ("nvidia", "driver", "branch"),
    ("nvidia", "cuda", "version"),
]


def spec_with(path: tuple[str | int, ...], value: Any) -> str:
    data = copy.deepcopy(SPEC)
    holder: Any = data
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return yaml.safe_dump(data, sort_keys=False)


def errors(text: str) -> list[Finding]:
    return [finding for finding in load_spec_text(text).findings if finding.severity == "error"]


def dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")


def test_the_base_spec_is_clean() -> None:
    assert errors(yaml.safe_dump(SPEC)) == []


@pytest.mark.parametrize("path", PATTERN_FIELDS, ids=dotted)
@pytest.mark.parametrize("suffix", ["\n", "\nNodeName=evil State=UP", " #"])
def test_every_pattern_field_refuses_a_trailing_newline(path: tuple[str | int, ...], suffix: str) -> None:
    value = copy.deepcopy(SPEC)
    for part in path:
        value = value[part]
    found = errors(spec_with(path, f"{value}{suffix}"))
    assert found, f"{dotted(path)} accepted {value!r} + {suffix!r}"
    # The error points at the field (a hostlist field may point at the entry).
    assert any(finding.path.startswith(dotted(path)[: dotted(path).rfind(".")]) for finding in found), found


@pytest.mark.parametrize(
    "address",
    [
        "fe80::1%eth0\nNodeName=evil State=UP",
        "fe80::1%x *(rw,no_root_squash,insecure) #",
        "fe80::1%eth0",
        "fd00::1",
        "10.0.0.10\n",
        "10.0.0.10 evil",
        "head.example.org\n10.6.6.6 evil",
        "0.0.0.0",
        "239.1.1.1",
    ],
)
def test_addresses_that_would_rewrite_a_config_file_are_refused(address: str) -> None:
    found = errors(spec_with(("nodes", 0, "address"), address))
    assert [(finding.code, finding.path) for finding in found] == [("invalid-address", "nodes[0].address")]


def test_ipv6_is_refused_with_a_message_that_says_so() -> None:
    (finding,) = errors(spec_with(("nodes", 0, "address"), "fd00::10"))
    assert "IPv6" in finding.message and "not support" in finding.message
    assert finding.hint and "IPv4" in finding.hint


@pytest.mark.parametrize(
    "path",
    [
        '/x";Clients=*;Squash=No_Root_Squash;}#',
        "/x #",
        "/x\n/y",
        "/srv/{x}",
        "/srv/a,b",
        "/srv/a b",
        "/srv/a\\b",
        "/srv/$HOME",
        "/srv/`id`",
        "/",
        "/srv/",
        "/srv//home",
        "/srv/../etc",
        "/srv/./home",
        "/" + "a" * 1100,
    ],
)
@pytest.mark.parametrize("field", ["path", "mount"])
def test_export_paths_are_limited_to_what_every_file_accepts(path: str, field: str) -> None:
    found = errors(spec_with(("nfs", "exports", 0, field), path))
    assert found and all(finding.path == f"nfs.exports[0].{field}" for finding in found), found


@pytest.mark.parametrize(
    "options",
    ["rw,no_root_squash,evil", "rw,anonuid=abc", "rw,sec=none", "rw,fsid=x;y", "rw,,sync", "rw,clients=*"],
)
def test_export_options_must_be_exports_options(options: str) -> None:
    (finding,) = errors(spec_with(("nfs", "exports", 0, "options"), options))
    assert finding.path == "nfs.exports[0].options"


@pytest.mark.parametrize(
    "options", ["rw,sync,no_subtree_check", "ro,all_squash,anonuid=65534,anongid=65534", "rw,sec=krb5:krb5i,fsid=0"]
)
def test_usual_export_options_pass(options: str) -> None:
    assert errors(spec_with(("nfs", "exports", 0, "options"), options)) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("nodes", 0, "memory_mb"), 10**35),
        (("nodes", 0, "memory_mb"), 67_108_865),
        (("nodes", 0, "cpus"), 10**9),
        (("nodes", 1, "gpus", "count"), 10**6),
        (("slurm", "partitions", 0, "max_time"), "9" * 30),
        (("slurm", "partitions", 0, "max_time"), "99999999-00:00:00"),
        (("network", "link_gbps"), 10**12),
        (("network", "nics_per_node"), 10**4),
    ],
    ids=lambda part: dotted(part) if isinstance(part, tuple) else str(part)[:12],
)
def test_numbers_have_an_upper_bound(path: tuple[str | int, ...], value: Any) -> None:
    found = errors(spec_with(path, value))
    assert [finding.path for finding in found] == [dotted(path)]


def test_full_match_refuses_what_re_match_with_a_dollar_accepts() -> None:
    import re

    assert re.match(r"^[a-z]+$", "gpu\n")  # the trap
    assert not full_match(r"[a-z]+", "gpu\n")
    assert full_match(r"[a-z]+", "gpu")


@pytest.mark.parametrize("address", ["10.0.0.1", "gpu01", "gpu01.lab.example.org", "gpu01.lab.example.org."])
def test_plain_addresses_pass(address: str) -> None:
    assert address_problem(address) is None


def test_grammar_helpers_name_the_problem() -> None:
    assert "root directory" in (export_path_problem("/") or "")
    assert "'.' or '..'" in (export_path_problem("/a/../b") or "")
    assert "unknown export option 'evil'" in (export_options_problem("rw,evil") or "")
