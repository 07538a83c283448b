"""Reading a spec file: positions, YAML problems, file problems, schema findings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclus.spec.checks.codes import CODES
from gpuclus.spec.load import load_spec, load_spec_text
from gpuclus.yamldoc.document import (
    MAX_SPEC_BYTES,
    Position,
    SpecFileError,
    load_document,
    parse_spec_text,
    read_spec_text,
)
from gpuclus.yamldoc.findings import Finding, Severity

VALID_TEXT = """\
apiVersion: gpuclus/v1
cluster:
  name: lab
  admin_user: ubuntu
nodes:
  - name: head
    address: 10.0.0.10
    roles: [controller, nfs_server, monitoring, login]
  - name: gpu[01-02]
    address: 10.0.0.[11-12]
    roles: [compute]
    gpus: {count: 2}
nfs:
  exports: [/home]
"""


def _only(findings: list[Finding], code: str) -> Finding:
    found = [f for f in findings if f.code == code]
    assert len(found) == 1, [(f.code, f.line, f.path) for f in findings]
    return found[0]


def _assert_findings_are_well_formed(findings: list[Finding]) -> None:
    assert findings
    for finding in findings:
        assert finding.code in CODES
        assert finding.severity is CODES[finding.code][0]


# -- positions -----------------------------------------------------------------

NESTED = """\
top:
  inner:
    leaf: 1
  items:
    - first
    - {k: v, list: [10, 20]}
flow: {a: 1, b: {c: 2}}
"""


def test_positions_of_nested_keys() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    assert document.findings == []
    assert document.key_positions[("top", "inner", "leaf")] == Position(3, 5)
    assert document.value_positions[("top", "inner", "leaf")] == Position(3, 11)
    assert document.key_positions[("top", "inner")] == Position(2, 3)


def test_positions_of_list_items() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    assert document.value_positions[("top", "items", 0)] == Position(5, 7)
    assert document.value_positions[("top", "items", 1)] == Position(6, 7)
    assert document.key_positions[("top", "items", 1, "k")] == Position(6, 8)
    assert document.value_positions[("top", "items", 1, "list", 1)] == Position(6, 25)
    # List items have no key of their own.
    assert ("top", "items", 0) not in document.key_positions


def test_positions_in_flow_style() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    assert document.key_positions[("flow", "a")] == Position(7, 8)
    assert document.value_positions[("flow", "a")] == Position(7, 11)
    assert document.value_positions[("flow", "b", "c")] == Position(7, 21)


def test_a_scalar_is_shown_at_its_value_a_container_at_its_key() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    assert document.position(("top", "inner", "leaf")) == Position(3, 11)
    assert document.position(("top", "inner", "leaf"), prefer_key=True) == Position(3, 5)
    assert document.position(("top", "items")) == Position(4, 3)
    # A list item that is a mapping has no key: it is shown where it starts.
    assert document.position(("top", "items", 1)) == Position(6, 7)


def test_a_missing_key_is_shown_at_the_mapping_that_should_hold_it() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    assert document.position(("top", "inner", "missing")) == Position(2, 3)
    assert document.position(("flow", "b", "nope", "deeper")) == Position(7, 14)


def test_locate_attaches_file_line_column_and_source_line() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    finding = Finding(code="wrong-type", severity=Severity.ERROR, message="m", loc=("flow", "b", "c"))
    located = document.locate(finding)
    assert (located.file, located.line, located.column) == ("x.yaml", 7, 21)
    assert located.source_line == "flow: {a: 1, b: {c: 2}}"


def test_source_line_out_of_range_is_none() -> None:
    document = parse_spec_text(NESTED, "x.yaml")
    assert document.source_line(0) is None
    assert document.source_line(99) is None
    assert document.source_line(1) == "top:"


def test_schema_finding_in_flow_style_points_at_the_value() -> None:
    text = VALID_TEXT.replace("gpus: {count: 2}", "gpus: {model: H100, count: 0}")
    finding = _only(load_spec_text(text).findings, "out-of-range")
    assert (finding.line, finding.column, finding.path) == (12, 32, "nodes[1].gpus.count")


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_other_line_endings_keep_line_numbers(newline: str) -> None:
    text = VALID_TEXT.replace("count: 2", "count: 0").replace("\n", newline)
    finding = _only(load_spec_text(text).findings, "out-of-range")
    assert finding.line == 12
    assert finding.source_line == "    gpus: {count: 0}"


def test_byte_order_mark_is_accepted() -> None:
    assert load_spec_text("\ufeff" + VALID_TEXT).findings == []


# -- YAML problems -------------------------------------------------------------


def test_multi_document_yaml_is_a_syntax_finding_at_the_second_document() -> None:
    text = VALID_TEXT + "---\napiVersion: gpuclus/v1\n"
    result = load_spec_text(text)
    finding = _only(result.findings, "yaml-syntax")
    assert finding.line == 15
    assert "document" in finding.message
    assert result.spec is None


def test_tab_indentation_is_a_syntax_finding_on_its_line() -> None:
    text = VALID_TEXT.replace("  admin_user: ubuntu", "\tadmin_user: ubuntu")
    result = load_spec_text(text)
    finding = _only(result.findings, "yaml-syntax")
    assert finding.line == 4
    assert finding.source_line == "\tadmin_user: ubuntu"
    assert finding.hint


def test_unclosed_flow_list_is_a_syntax_finding() -> None:
    result = load_spec_text(VALID_TEXT.replace("[compute]", "[compute"))
    finding = _only(result.findings, "yaml-syntax")
    assert finding.line is not None and 11 <= finding.line <= 12
    assert finding.file == "cluster.yaml"


def test_python_tags_are_refused_not_constructed() -> None:
    result = load_spec_text("apiVersion: !!python/name:os.system ''\n")
    assert _only(result.findings, "yaml-syntax").line == 1


def test_non_scalar_mapping_key_is_a_syntax_finding() -> None:
    result = load_spec_text("apiVersion: gpuclus/v1\n? [a, b]\n: 1\n")
    assert _only(result.findings, "yaml-syntax").line == 2


def test_duplicate_top_level_key_points_at_the_second_one() -> None:
    text = VALID_TEXT + "cluster: {name: other, admin_user: ubuntu}\n"
    result = load_spec_text(text)
    finding = _only(result.findings, "duplicate-key")
    assert (finding.line, finding.column, finding.path) == (15, 1, "cluster")
    assert finding.severity is Severity.ERROR and finding.hint
    # YAML keeps the last value, and the rest of the spec is still checked.
    assert result.spec is not None and result.spec.cluster.name == "other"


def test_duplicate_nested_key_points_at_the_second_one() -> None:
    text = VALID_TEXT.replace("    roles: [compute]\n", "    roles: [compute]\n    roles: [compute, login]\n")
    finding = _only(load_spec_text(text).findings, "duplicate-key")
    assert (finding.line, finding.column, finding.path) == (12, 5, "nodes[1].roles")


def test_duplicate_key_in_flow_mapping() -> None:
    document = parse_spec_text("a: {x: 1, y: 2, x: 3}\n", "x.yaml")
    finding = _only(document.findings, "duplicate-key")
    assert (finding.line, finding.column, finding.path) == (1, 17, "a.x")
    assert document.data == {"a": {"x": 3, "y": 2}}


def test_three_copies_of_a_key_give_two_findings() -> None:
    document = parse_spec_text("a: 1\na: 2\na: 3\n", "x.yaml")
    assert [(f.code, f.line) for f in document.findings] == [("duplicate-key", 2), ("duplicate-key", 3)]


def test_merge_key_values_are_built_with_the_anchor() -> None:
    document = parse_spec_text("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  z: 3\n", "x.yaml")
    assert document.findings == []
    assert document.data["use"] == {"x": 1, "y": 2, "z": 3}


def test_explicit_key_before_a_merge_wins_without_a_finding() -> None:
    document = parse_spec_text("base: &b {x: 1}\nuse: {x: 2, <<: *b}\n", "x.yaml")
    assert document.findings == []
    assert document.data["use"] == {"x": 2}


def test_explicit_key_after_a_merge_overrides_it_without_a_finding() -> None:
    # The point of `<<:` is to override some of the merged keys; YAML's merge
    # rules say explicit keys win wherever they are written.
    text = VALID_TEXT.replace("  - name: gpu[01-02]\n", "  - &gpu\n    name: gpu[01-02]\n").replace(
        "nfs:\n", "  - <<: *gpu\n    name: gpu[03-04]\n    address: 10.0.0.[13-14]\nnfs:\n"
    )
    result = load_spec_text(text)
    assert [f.code for f in result.findings] == []
    assert result.topology is not None
    assert [n.name for n in result.topology.compute] == ["gpu01", "gpu02", "gpu03", "gpu04"]


@pytest.mark.parametrize("merged", ["5", "null", "[{b: 1}, 7]"])
def test_merge_of_a_non_mapping_is_a_finding_not_a_crash(merged: str) -> None:
    result = load_spec_text(f"apiVersion: gpuclus/v1\ncluster: {{<<: {merged}}}\n")
    finding = _only(result.findings, "yaml-syntax")
    assert finding.line == 2


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("a: &a [*a]\n", id="alias-inside-its-own-list"),
        pytest.param("a: &a {b: *a}\n", id="alias-inside-its-own-mapping"),
        pytest.param("[" * 600 + "]" * 600 + "\n", id="600-nested-lists"),
    ],
)
def test_self_referencing_or_very_deep_yaml_is_a_finding_not_a_crash(text: str) -> None:
    result = load_spec_text(text)
    _assert_findings_are_well_formed(result.findings)
    assert result.spec is None


@pytest.mark.parametrize("char", ["\x1b", "\ufffe"], ids=["escape", "non-character"])
def test_control_characters_are_a_syntax_finding_not_a_crash(char: str) -> None:
    # Valid UTF-8 that YAML refuses to read, e.g. a colour escape pasted from a terminal.
    text = VALID_TEXT.replace("name: lab", f"name: lab{char}")
    result = load_spec_text(text)
    assert _only(result.findings, "yaml-syntax").severity is Severity.ERROR


_LAUGHS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))
from gpuclus.spec.load import load_spec_text
lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
result = load_spec_text("\\n".join(lines) + "\\n")
print(len(result.findings))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="uses RLIMIT_AS to bound the child's memory")
def test_alias_bomb_is_refused_with_bounded_memory_and_time() -> None:
    # 400 bytes of YAML whose aliases name 10**8 scalars ("billion laughs").
    # PyYAML shares aliased objects; the loader must not walk every copy.
    child = subprocess.run(
        [sys.executable, "-c", _LAUGHS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert child.returncode == 0, child.stderr[-600:]
    assert int(child.stdout.strip()) > 0


# -- file problems -------------------------------------------------------------


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError) as raised:
        read_spec_text(tmp_path / "nope.yaml")
    assert raised.value.usage is True
    assert "no such file" in str(raised.value)
    assert raised.value.hint


def test_directory_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError) as raised:
        load_spec(tmp_path)
    assert raised.value.usage is True
    assert "directory" in str(raised.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(VALID_TEXT)
    spec.chmod(0)
    with pytest.raises(SpecFileError) as raised:
        read_spec_text(spec)
    assert raised.value.usage is True
    assert "permission" in str(raised.value)


def test_binary_file_is_a_content_error(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_bytes(VALID_TEXT.encode() + b"\x00\x01\x02")
    with pytest.raises(SpecFileError) as raised:
        load_spec(spec)
    assert raised.value.usage is False
    assert "binary" in str(raised.value)


def test_non_utf8_file_is_a_content_error(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_bytes(VALID_TEXT.replace("ubuntu", "J\u00fcrgen").encode("latin-1"))
    with pytest.raises(SpecFileError) as raised:
        load_spec(spec)
    assert raised.value.usage is False
    assert "UTF-8" in str(raised.value)
    assert f"offset {VALID_TEXT.index('ubuntu') + 1}" in str(raised.value)


def test_huge_file_is_refused_before_reading(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_bytes(b"# padding\n" * 1_000_000)  # 10 MB
    with pytest.raises(SpecFileError) as raised:
        load_spec(spec)
    assert raised.value.usage is False
    assert "too large" in str(raised.value)
    assert raised.value.hint and "gpu[01-64]" in raised.value.hint


def test_file_at_the_size_limit_is_still_read(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    line = b"# padding padding padding padding\n"
    spec.write_bytes(line * (MAX_SPEC_BYTES // len(line)))
    assert spec.stat().st_size <= MAX_SPEC_BYTES
    assert [f.code for f in load_spec(spec).findings] == ["empty-file"]


def test_load_document_keeps_the_path_as_given(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(VALID_TEXT)
    document = load_document(spec)
    assert document.path == str(spec)
    assert document.text == VALID_TEXT
    assert document.data["cluster"] == {"name": "lab", "admin_user": "ubuntu"}


# -- empty and non-mapping documents -------------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n", "   \n\t\n", "# only\n# comments\n"])
def test_empty_or_comment_only_file_is_empty_file(text: str) -> None:
    result = load_spec_text(text)
    assert [f.code for f in result.findings] == ["empty-file"]
    assert result.document.data is None
    assert result.findings[0].hint


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- a\n- b\n", "list"), ("just words\n", "plain string"), ("42\n", "int")],
)
def test_top_level_that_is_not_a_mapping(text: str, kind: str) -> None:
    result = load_spec_text(text)
    finding = _only(result.findings, "not-a-mapping")
    assert finding.message.endswith(kind)
    assert (finding.line, finding.path) == (1, "(document)")
    assert len(result.findings) == 1


@pytest.mark.parametrize("text", ["---\n", "null\n", "~  # nothing here\n"])
def test_a_document_of_only_null_is_not_silently_valid(text: str) -> None:
    # `---` alone parses to None; it must be reported, not pass with no findings.
    result = load_spec_text(text)
    assert [f.code for f in result.findings] in (["empty-file"], ["not-a-mapping"])
    assert not result.ok


# -- apiVersion ----------------------------------------------------------------


def test_wrong_api_version_is_reported_once() -> None:
    result = load_spec_text(VALID_TEXT.replace("gpuclus/v1", "gpuclus/v2"))
    assert [(f.code, f.line, f.path) for f in result.findings] == [("api-version", 1, "apiVersion")]
    assert "gpuclus/v2" in result.findings[0].message
    assert "gpuclus/v1" in (result.findings[0].hint or "")


def test_missing_api_version_is_reported_once() -> None:
    result = load_spec_text(VALID_TEXT.replace("apiVersion: gpuclus/v1\n", ""))
    assert [f.code for f in result.findings] == ["api-version"]
    assert "missing" in result.findings[0].message


def test_api_version_finding_comes_with_other_schema_findings() -> None:
    text = VALID_TEXT.replace("gpuclus/v1", "v1").replace("count: 2", "count: 0")
    result = load_spec_text(text)
    assert sorted(f.code for f in result.findings) == ["api-version", "out-of-range"]


# -- schema findings -----------------------------------------------------------


def test_unknown_top_level_key_suggests_the_close_one() -> None:
    finding = _only(load_spec_text(VALID_TEXT + "nodez: []\n").findings, "unknown-key")
    assert (finding.line, finding.column, finding.path) == (15, 1, "nodez")
    assert finding.hint is not None and "did you mean 'nodes'?" in finding.hint


def test_unknown_nested_key_suggests_the_close_one_and_lists_allowed() -> None:
    text = VALID_TEXT.replace("  admin_user: ubuntu\n", "  admin_user: ubuntu\n  nmae: x\n")
    finding = _only(load_spec_text(text).findings, "unknown-key")
    assert (finding.line, finding.path) == (5, "cluster.nmae")
    assert finding.hint == "did you mean 'name'? (allowed here: admin_user, name)"


def test_unknown_key_without_a_close_match_lists_what_is_allowed() -> None:
    finding = _only(load_spec_text(VALID_TEXT + "network: {zzzz: 1}\n").findings, "unknown-key")
    assert finding.hint is not None
    assert "did you mean" not in finding.hint
    assert "fabric" in finding.hint and "link_gbps" in finding.hint


@pytest.mark.parametrize(
    ("section", "path", "shown"),
    [
        ("slurm:\n  version: 23.10\n", "slurm.version", "23.1"),
        ("nvidia:\n  cuda:\n    version: 12.10\n", "nvidia.cuda.version", "12.1"),
    ],
)
def test_version_written_as_a_float_asks_for_quotes(section: str, path: str, shown: str) -> None:
    finding = _only(load_spec_text(VALID_TEXT + section).findings, "invalid-value")
    assert finding.path == path
    assert finding.line == VALID_TEXT.count("\n") + section.count("\n")
    text = f"{finding.message} {finding.hint}"
    assert "quotes" in text
    assert shown in finding.message


def test_quoted_versions_are_accepted() -> None:
    text = VALID_TEXT + 'slurm: {version: "23.11.4"}\nnvidia: {cuda: {version: "12.10"}}\n'
    result = load_spec_text(text)
    assert result.findings == []
    assert result.spec is not None
    assert (result.spec.slurm.version, result.spec.nvidia.cuda.version) == ("23.11.4", "12.10")


def test_driver_branch_as_a_number_is_read_as_text() -> None:
    result = load_spec_text(VALID_TEXT + "nvidia:\n  driver:\n    branch: 550\n")
    assert result.findings == []
    assert result.spec is not None
    assert result.spec.nvidia.driver.branch == "550"


def test_driver_branch_of_the_wrong_shape_is_invalid_format() -> None:
    result = load_spec_text(VALID_TEXT + "nvidia: {driver: {branch: 5500}}\n")
    finding = _only(result.findings, "invalid-format")
    assert finding.path == "nvidia.driver.branch"
    assert "driver branch like 550" in finding.message


def test_null_section_is_a_wrong_type_at_its_line() -> None:
    finding = _only(load_spec_text(VALID_TEXT + "slurm:\n").findings, "wrong-type")
    assert (finding.line, finding.path) == (15, "slurm")
    assert "nothing (null)" in finding.message


def test_invalid_choice_suggests_the_close_value() -> None:
    finding = _only(load_spec_text(VALID_TEXT + "network: {fabric: infiniban}\n").findings, "invalid-choice")
    assert finding.path == "network.fabric"
    assert finding.hint is not None and finding.hint.startswith("did you mean 'infiniband'?")


def test_empty_node_list_is_out_of_range_at_the_key() -> None:
    text = "apiVersion: gpuclus/v1\ncluster: {name: lab, admin_user: ubuntu}\nnodes: []\n"
    finding = _only(load_spec_text(text).findings, "out-of-range")
    assert (finding.line, finding.column, finding.path) == (3, 1, "nodes")
    assert "at least 1" in finding.message


def test_missing_top_level_section_has_no_line_rather_than_a_wrong_one() -> None:
    text = "apiVersion: gpuclus/v1\nnodes:\n  - {name: h, address: 10.0.0.1, roles: [controller, compute]}\n"
    finding = _only(load_spec_text(text).findings, "missing-field")
    assert finding.path == "cluster"
    assert finding.line is None


def test_missing_key_in_a_list_item_points_at_the_item() -> None:
    text = VALID_TEXT.replace("    address: 10.0.0.10\n", "")
    finding = _only(load_spec_text(text).findings, "missing-field")
    assert (finding.line, finding.path) == (6, "nodes[0].address")
    assert finding.source_line == "  - name: head"


def test_schema_errors_skip_the_semantic_checks() -> None:
    # With a schema error there is no spec to check meaning on; the structural
    # finding alone comes back, not a cascade of follow-on findings.
    result = load_spec_text(VALID_TEXT.replace("roles: [compute]", "roles: compute"))
    assert [f.code for f in result.findings] == ["wrong-type"]
    assert result.spec is None and result.topology is None
