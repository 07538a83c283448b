"""`spec check` on hostile files: it prints only what the spec named holds, and only in a form that shows.

Nothing is read of a spec that is a symlink to another owner's file, and lines are echoed with
control characters shown as escapes and long lines cut around the caret;
YAML nested thousands deep and integers of thousands of digits are located
findings, not tracebacks; `--json` messages are as printable as the text.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deadline import within
from typer.testing import CliRunner

from gpuclus.cli.main import app

runner = CliRunner()
SECRET = "hunter2-do-not-print"
SPEC_HEAD = "apiVersion: gpuclus/v1\ncluster: {name: lab, admin_user: ubuntu}\n"
NODES = "nodes:\n  - {name: head, address: 10.0.0.10, roles: [controller, login]}\n"


def spec_check(path: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    """Exit code, everything printed (stdout and stderr) in human mode, and the --json document."""
    with within(20):
        human = runner.invoke(app, ["spec", "check", str(path), *extra])
        machine = runner.invoke(app, ["spec", "check", str(path), "--json", *extra])
    assert human.exception is None or isinstance(human.exception, SystemExit), human.exception
    assert "Traceback" not in human.output
    return human.exit_code, human.output, json.loads(machine.stdout)


def test_a_spec_that_is_a_symlink_to_another_owners_secret_prints_none_of_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can make a symlink of another owner than its target's")
    secrets = tmp_path / ".gpuclus" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "notes.yaml").write_text(SPEC_HEAD + f"password: {SECRET}\n" + NODES + f"slurm: {{port: {SECRET}}}\n")
    link = tmp_path / "cluster.yaml"
    link.symlink_to(secrets / "notes.yaml")
    os.lchown(link, 65534, 65534)  # a user's link to root's file, checked through sudo
    code, output, report = spec_check(link)
    assert code == 3 and "a symlink (owner uid 65534) to a file of another owner (uid 0)" in output
    for shown in (output, json.dumps(report)):
        assert SECRET not in shown and "password" not in shown and "port" not in shown


def test_control_characters_in_a_spec_line_are_shown_as_escapes(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    # The bidi override passes YAML's reader; the ESC and the C1 CSI do not: both are located findings.
    spec.write_text(SPEC_HEAD.replace("name: lab", 'name: "lab\u202egpu"') + NODES)
    code, output, report = spec_check(spec)
    assert code == 3 and "\u202e" not in output and "lab\\u202egpu" in output
    assert "\u202e" not in json.dumps(report, ensure_ascii=False)
    for raw, shown in (("\x1b[2J", "\\x1b[2J"), ("\u009b2J", "\\x9b2J")):
        spec.write_text(SPEC_HEAD + NODES + f'slurm: {{cluster_name: "a{raw}b"}}\n')
        code, output, report = spec_check(spec)
        assert code == 3 and raw not in output and shown in output, output
        assert raw not in json.dumps(report, ensure_ascii=False)


def test_a_line_of_two_megabytes_is_cut_around_the_caret(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC_HEAD + NODES + "slurm: {cluster_name: " + "a" * 1_900_000 + ", bogus: 1}\n")
    code, output, _report = spec_check(spec)
    assert code == 3 and "error[unknown-key]" in output
    assert max(len(line) for line in output.splitlines()) < 400
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if "error[unknown-key] slurm.bogus" in line)
    source, caret = lines[at + 1], lines[at + 2]
    assert source.lstrip().startswith("5 | …")
    assert source[caret.index("^") :].startswith("bogus")


@pytest.mark.parametrize(
    ("body", "message", "line"),
    [
        (NODES + "slurm: " + "[" * 10_000 + "]" * 10_000 + "\n", "values nested more than 64 levels deep", 5),
        (NODES + "slurm: {port: " + "9" * 5_000 + "}\n", "an integer of 5000 characters", 5),
        ("nodes:\n  - {name: head, address: 10.0.0.10, roles: [controller], cpus: " + "1" * 5_000 + "}\n", "", 4),
    ],
    ids=["deep", "integer", "integer-in-a-node"],
)
def test_deep_yaml_and_huge_integers_are_located_findings(tmp_path: Path, body: str, message: str, line: int) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC_HEAD + body)
    code, output, report = spec_check(spec)
    assert code == 3 and f"cluster.yaml:{line}:" in output and message in output
    findings = report["findings"]
    assert isinstance(findings, list) and [(f["code"], f["line"]) for f in findings] == [("yaml-syntax", line)]


def test_json_error_messages_are_printable(tmp_path: Path) -> None:
    missing = tmp_path / "no\x1b]0;owned\x07such.yaml"
    result = runner.invoke(app, ["spec", "check", str(missing), "--json"])
    assert result.exit_code == 2
    message = json.loads(result.stdout)["error"]["message"]
    assert "\x1b" not in message and "\x07" not in message and "no\\x1b]0;owned\\x07such.yaml" in message
    human = runner.invoke(app, ["spec", "check", str(missing)])
    assert "\x1b" not in human.output and "no\\x1b]0;owned\\x07such.yaml" in human.output
