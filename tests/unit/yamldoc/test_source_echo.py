"""What a finding may print of the file it is about: visible characters, a bounded line, never another file's.

A finding's message, hint and source line reach a terminal (and `--json`,
which scripts print): an ESC, a C1 control or a bidi override there would
act instead of showing; a 1.9 MB line would flood it; and a spec that is a
symlink to someone else's file is refused before any of it is read as YAML. YAML nested
thousands deep and integers of thousands of digits are located findings, not
Python's RecursionError or its int-string limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuclus.users.load import load_users
from gpuclus.yamldoc.document import (
    MAX_INTEGER_CHARS,
    MAX_NESTING,
    SpecFileError,
    load_document,
    parse_spec_text,
    read_spec_text,
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


def link_of_another_owner(link: Path, target: Path) -> None:
    """A symlink owned by someone else than ``target``'s owner (a user's link to root's file, run through sudo)."""
    if os.geteuid() != 0:
        pytest.skip("only root can make a symlink of another owner than its target's")
    link.symlink_to(target)
    os.lchown(link, 65534, 65534)


def test_a_symlink_to_a_file_of_another_owner_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yaml"
    secret.write_text("apiVersion: gpuclus/v1\npassword: hunter2\n  bad: [indent\n")
    link = tmp_path / "cluster.yaml"
    link_of_another_owner(link, secret)
    for read in (load_document, load_users):
        with pytest.raises(SpecFileError) as refused:
            read(link)
        assert "a symlink (owner uid 65534) to a file of another owner (uid 0)" in str(refused.value)
        assert "hunter2" not in str(refused.value) and "password" not in str(refused.value)


def test_a_symlink_to_a_file_of_its_own_owner_is_the_owners_spec(tmp_path: Path) -> None:
    mine = tmp_path / "lab.yaml"
    mine.write_text("apiVersion: gpuclus/v1\nbogus: a: b\n")
    link = tmp_path / "cluster.yaml"
    link.symlink_to(mine)
    assert read_spec_text(link) == mine.read_text()
    (finding,) = load_document(link).findings
    assert finding.file == str(link) and finding.source_line == "bogus: a: b"


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
