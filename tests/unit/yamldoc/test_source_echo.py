"""What a finding may print of the file it is about: visible characters, a bounded line, never another file's.

A finding's message, hint and source line reach a terminal (and `--json`,
which scripts print): an ESC, a C1 control or a bidi override there would
act instead of showing; a 1.9 MB line would flood it; and a spec that is a
symlink to someone else's file must not print that file's lines. YAML nested
thousands deep and integers of thousands of digits are located findings, not
Python's RecursionError or its int-string limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclus.users.load import load_users
from gpuclus.yamldoc.document import (
    MAX_INTEGER_CHARS,
    MAX_NESTING,
    load_document,
    parse_spec_text,
    read_named_spec,
)
from gpuclus.yamldoc.findings import MAX_MESSAGE_CHARS, MAX_SOURCE_CHARS, error, printable, source_excerpt, visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[2Jb", "a\\x1b[2Jb"),  # ESC: a control sequence (here: clear the screen)
        ("a\x9bc", "a\\x9bc"),  # C1 CSI: the same on terminals that read 8-bit controls
        ("user\u202eexe.txt", "user\\u202eexe.txt"),  # bidi override: reads backwards
        ("a\u2066b\u2069", "a\\u2066b\\u2069"),  # bidi isolates
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("a\rb\nc\x7f", "a\\x0db\\x0ac\\x7f"),
        ("a\u2028b", "a\\u2028b"),
        ("gpu[01-04] caf\u00e9 \u00e4\u00f6 \u65e5\u672c", "gpu[01-04] caf\u00e9 \u00e4\u00f6 \u65e5\u672c"),  # kept
    ],
)
def test_invisible_characters_are_shown_as_escapes(text: str, shown: str) -> None:
    assert visible(text) == shown
    assert printable(text) == shown


def test_a_long_message_is_cut_in_its_middle_so_its_words_after_the_value_stay() -> None:
    message = "value " + "x" * 100_000 + " is not allowed"
    shown = printable(message)
    assert len(shown) == MAX_MESSAGE_CHARS
    assert shown.startswith("value xxx") and shown.endswith("xxx is not allowed") and "…" in shown


def test_a_long_source_line_is_cut_around_the_caret() -> None:
    line = "x: " + "a" * 1_900_000 + "BAD" + "b" * 10_000
    column = line.index("BAD") + 1
    excerpt, caret = source_excerpt(line, column)
    assert len(excerpt) <= MAX_SOURCE_CHARS + 2  # an ellipsis at each cut end
    assert excerpt.startswith("…") and excerpt.endswith("…")
    assert excerpt[caret : caret + 3] == "BAD"


def test_the_caret_still_points_at_its_character_after_escapes_widen_the_line() -> None:
    line = "name: \x1b[31mred\u202e BAD"
    excerpt, caret = source_excerpt(line, line.index("BAD") + 1)
    assert excerpt == "name: \\x1b[31mred\\u202e BAD"
    assert excerpt[caret:] == "BAD"
    short, at_start = source_excerpt("a: 1", None)
    assert (short, at_start) == ("a: 1", 0)


def test_json_findings_are_printable() -> None:
    finding = error("x", "value 'a\x1b]0;owned\x07b' is bad", ("a",), hint="not \u202ethis")
    shown = finding.as_dict()
    assert shown["message"] == "value 'a\\x1b]0;owned\\x07b' is bad"
    assert shown["hint"] == "not \\u202ethis"


def test_a_symlinked_file_is_read_but_none_of_its_lines_is_echoed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("apiVersion: gpuclus/v1\npassword: hunter2\n")
    link = tmp_path / "cluster.yaml"
    link.symlink_to(secret)

    assert read_named_spec(secret) == (secret.read_text(), True)
    assert read_named_spec(link) == (secret.read_text(), False)
    document = load_document(link)
    assert document.source_line(2) is None
    assert load_document(secret).source_line(2) == "password: hunter2"

    broken = tmp_path / "users.yaml"
    secret.write_text("password: hunter2\n  bad: [indent\n")
    broken.symlink_to(secret)
    findings = load_users(broken).findings
    assert findings and all(finding.source_line is None for finding in findings)
    assert not any("hunter2" in str(finding.as_dict()) for finding in findings)


def test_yaml_nested_ten_thousand_deep_is_a_located_finding() -> None:
    for text in (
        "nodes: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "a:\n" + "".join(" " * i + "- \n" for i in range(3000)),
    ):
        document = parse_spec_text(text, "deep.yaml")
        assert document.data is None
        (finding,) = document.findings
        assert finding.code == "yaml-syntax" and f"more than {MAX_NESTING} levels" in finding.message
        assert finding.line is not None and finding.hint


def test_nesting_up_to_the_limit_still_loads() -> None:
    depth = MAX_NESTING - 1  # the root mapping is the first level
    document = parse_spec_text("a: " + "[" * depth + "1" + "]" * depth + "\n", "ok.yaml")
    assert document.findings == [] and document.data is not None


@pytest.mark.parametrize("digits", [5_000, MAX_INTEGER_CHARS + 1])
def test_an_integer_of_thousands_of_digits_is_a_located_finding(digits: int) -> None:
    text = "cluster: {name: lab}\nslurm:\n  port: " + "9" * digits + "\n"
    document = parse_spec_text(text, "big.yaml")
    (finding,) = document.findings
    assert (finding.code, finding.line, finding.column) == ("yaml-syntax", 3, 9)
    assert f"an integer of {digits} characters" in finding.message and finding.hint
    assert parse_spec_text("a: " + "9" * MAX_INTEGER_CHARS + "\n", "ok.yaml").findings == []
