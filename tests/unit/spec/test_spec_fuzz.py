"""Fuzz the spec loader: whatever the text, it answers with findings, never a traceback.

Settings are derandomized and keep no example database, so CI runs the same
examples every time; the example counts keep this file to a few seconds.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclus.spec.checks.codes import CODES
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.yamldoc.findings import has_errors

FUZZ = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VALID_SPEC: dict[str, Any] = {
    "apiVersion": "gpuclus/v1",
    "cluster": {"name": "dl-lab", "admin_user": "ubuntu"},
    "nodes": [
        {
            "name": "head",
            "address": "192.168.1.10",
            "roles": ["controller", "nfs_server", "monitoring", "login"],
            "cpus": 16,
        },
        {
            "name": "gpu[01-02]",
            "address": "192.168.1.[11-12]",
            "roles": ["compute"],
            "gpus": {"count": 2, "model": "H100"},
            "memory_mb": 512000,
        },
    ],
    "slurm": {
        "version": "23.11.4",
        "accounting": True,
        "partitions": [{"name": "gpu", "nodes": "gpu[01-02]", "default": True, "max_time": "1-00:00:00"}],
    },
    "nfs": {"exports": ["/home", {"path": "/srv/shared", "mount": "/shared"}]},
    "nvidia": {"driver": {"install": True, "branch": "550"}, "cuda": {"install": True, "version": "12.4"}},
    "containers": {"enroot": True, "pyxis": True, "allow_unverified_downloads": True},
    "monitoring": {"prometheus": True, "grafana": False},
    "network": {"fabric": "ethernet", "link_gbps": 10, "nics_per_node": 1},
}

Path = tuple[str | int, ...]


def _assert_well_formed(result: LoadedSpec, text: str) -> None:
    lines = text.splitlines()
    for finding in result.findings:
        assert finding.code in CODES, finding
        assert finding.severity is CODES[finding.code][0], finding
        assert finding.message, finding
        if finding.line is not None and finding.source_line is not None:
            assert 1 <= finding.line <= max(len(lines), 1)
    # ok means: a spec, a topology, and not one error.
    assert result.ok == (result.spec is not None and not has_errors(result.findings))
    if not has_errors(result.findings):
        assert result.spec is not None and result.topology is not None, "no errors, yet no spec"


def test_the_fuzz_seed_is_valid() -> None:
    result = load_spec_text(yaml.safe_dump(VALID_SPEC, sort_keys=False))
    assert result.findings == []
    assert result.ok


# -- (a) mutations of a valid spec ---------------------------------------------


def _paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every path into the document, parents before children."""
    found: list[Path] = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _parent(document: Any, path: Path) -> Any:
    for part in path[:-1]:
        document = document[part]
    return document


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31),
    st.just(10**30),
    st.just(-(10**30)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["", " ", "gpu[01-", "gpu[9-1]", "10.0.0.[1-300]", "~", "yes", "0x1F", "12.4", "550"]),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x2FFF), max_size=10),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(min_size=1, max_size=8), children, max_size=4),
    ),
    max_leaves=8,
)
_unknown_keys = st.one_of(
    st.sampled_from(["nodez", "gpu", "nmae", "Name", "x-extra"]), st.text(min_size=1, max_size=12)
)


@st.composite
def _mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    document = copy.deepcopy(VALID_SPEC)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(document) if p]
        kind = draw(st.sampled_from(["delete", "replace", "unknown-key", "duplicate-node"]))
        if kind == "duplicate-node":
            nodes = document.get("nodes")
            if isinstance(nodes, list) and nodes:
                nodes.append(copy.deepcopy(draw(st.sampled_from(nodes))))
            continue
        if kind == "unknown-key":
            mappings = [p for p in [(), *paths] if isinstance(_at(document, p), dict)]
            target = _at(document, draw(st.sampled_from(mappings)))
            target[draw(_unknown_keys)] = draw(_values)
            continue
        if not paths:
            continue
        path = draw(st.sampled_from(paths))
        parent = _parent(document, path)
        if kind == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_values)
    return document


def _at(document: Any, path: Path) -> Any:
    for part in path:
        document = document[part]
    return document


@FUZZ
@given(_mutated_specs())
def test_mutated_spec_gives_findings_not_exceptions(document: dict[str, Any]) -> None:
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    result = load_spec_text(text)
    _assert_well_formed(result, text)


@FUZZ
@given(_mutated_specs())
def test_mutated_spec_in_flow_style_gives_findings_not_exceptions(document: dict[str, Any]) -> None:
    text = yaml.safe_dump(document, default_flow_style=True, width=60)
    _assert_well_formed(load_spec_text(text), text)


@FUZZ
@given(_values)
def test_any_yaml_value_as_the_whole_document(value: Any) -> None:
    text = yaml.safe_dump(value)
    result = load_spec_text(text)
    _assert_well_formed(result, text)
    assert result.findings, "a document that is not a spec must say why"


# -- (b) arbitrary text --------------------------------------------------------

_yaml_alphabet = st.sampled_from([*"ab1:-[]{},&*!|>'\"#%@`?\n\t  .<\\~", "\r\n", "---", "...", "<<"])
_yamlish = st.lists(_yaml_alphabet, max_size=60).map("".join)
_byteish = st.binary(max_size=200).map(lambda raw: raw.decode("latin-1"))


@FUZZ
@given(st.one_of(st.text(max_size=200), _yamlish, _byteish))
def test_arbitrary_text_never_raises(text: str) -> None:
    _assert_well_formed(load_spec_text(text), text)


@FUZZ
@given(_yamlish)
def test_yaml_punctuation_after_a_valid_prefix_never_raises(tail: str) -> None:
    text = yaml.safe_dump(VALID_SPEC, sort_keys=False) + tail
    _assert_well_formed(load_spec_text(text), text)
