"""`to_yaml`: the fast emitter writes exactly what PyYAML writes, or hands the value to PyYAML."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclus import templating
from gpuclus.templating import _pyyaml_dump, to_yaml

SAME_AS_PYYAML = settings(
    max_examples=400,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Text YAML reads as something else, or must quote: the emitter's plain/quoted choice is tested on these.
TRICKY_TEXT = [
    "",
    " ",
    "null",
    "Null",
    "~",
    "yes",
    "no",
    "on",
    "OFF",
    "true",
    "123",
    "0x1f",
    "0o17",
    "017",
    "1_000",
    "1:20",
    "190:20:30",
    "1.5",
    "1e3",
    "1.0e+3",
    ".5",
    ".inf",
    ".nan",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "=",
    "<<",
    "---",
    "...",
    ".../x",
    "-",
    "- a",
    "-a",
    "a:",
    "a:b",
    "a: b",
    "a #b",
    "a#b",
    "#a",
    "?a",
    "? a",
    "[a]",
    "{a}",
    "a,b",
    ",a",
    "*a",
    "&a",
    "!a",
    "|",
    ">",
    "'a'",
    '"a"',
    "%a",
    "@a",
    "`a",
    "a b",
    " a",
    "a ",
    "a\nb",
    "a\n",
    "\ta",
    "é",
    "gpu0001",
    "10.1.0.1",
    "fd00::3",
    "2001:db8::1",
    "2001:10",
    "rw,sync,no_subtree_check",
    "/shared",
    "H100",
    "x" * 122,
    "x" * 123,
    "x" * 127,
    "x" * 128,
    "x" * 300,
    "a " * 600,
    "\x85",
    "\u2028",
    "\ufeff",
]

# Mostly characters whose place in a scalar decides its style, so the fast
# path is taken often and its edge cases are reached.
text = st.one_of(
    st.sampled_from(TRICKY_TEXT),
    st.text(alphabet="aZ09_./:,=+-~ #'\"[]{}!&*?|>@%`\n\t", max_size=8),
    st.text(max_size=12),
)
scalars = st.one_of(text, st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(children, max_size=4), st.dictionaries(text, children, max_size=4))


values = st.recursive(scalars, containers, max_leaves=30)
plain_values = st.recursive(st.one_of(text, st.integers(), st.booleans(), st.none()), containers, max_leaves=30)


@SAME_AS_PYYAML
@given(st.one_of(values, plain_values), st.sampled_from([0, 2, 10]))
def test_to_yaml_writes_what_pyyaml_writes(value: Any, indent: int) -> None:
    expected = _pyyaml_dump(value)
    if indent:
        expected = expected.replace("\n", "\n" + " " * indent)
    assert to_yaml(value, indent) == expected


@pytest.mark.parametrize("item", TRICKY_TEXT)
def test_tricky_text_as_value_key_and_list_item(item: str) -> None:
    for value in (item, {"k": item}, {item: 1}, [item], {"k": [{item: [item]}]}):
        assert to_yaml(value) == _pyyaml_dump(value)


def test_a_container_seen_twice_is_anchored_as_pyyaml_does() -> None:
    shared: dict[str, Any] = {"a": 1}
    empty: list[Any] = []
    for value in ({"x": shared, "y": shared}, [empty, empty], [shared, [shared]]):
        assert to_yaml(value) == _pyyaml_dump(value)
        assert "&id001" in to_yaml(value)


def test_a_node_list_as_render_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [
        {"name": f"gpu{index:04d}", "address": f"10.1.0.{index}", "roles": ["compute"], "gpus": 8, "cpus": None}
        for index in range(1, 50)
    ]
    value = {"gpuclus_nodes": nodes, "empty": {}, "none": [], "quoted": ["null", "123", "a b"]}
    expected = _pyyaml_dump(value)

    def scalars_only(value: Any) -> str:
        assert isinstance(value, str), "render's values must not fall back to PyYAML whole"
        return _pyyaml_dump(value)

    monkeypatch.setattr(templating, "_pyyaml_dump", scalars_only)
    assert to_yaml(value) == expected
    assert to_yaml(value, 4) == _pyyaml_dump(value).replace("\n", "\n    ")


def test_what_pyyaml_refuses_is_still_refused() -> None:
    import enum

    class Colour(enum.StrEnum):
        RED = "red"

    with pytest.raises(Exception, match="cannot represent"):
        to_yaml({"c": Colour.RED})
