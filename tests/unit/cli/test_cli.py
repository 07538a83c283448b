"""CLI behaviour: exit codes, --json output, error handling, help."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.cli import main as cli_main
from gpuclus.cli.main import app, main
from gpuclus.errors import EXIT_CODE_MEANINGS, ExitCode

runner = CliRunner()
SRC = Path(__file__).resolve().parents[3] / "src" / "gpuclus"

VALID = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, monitoring, login]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2}}
nfs: {exports: [/shared]}
# Off: this version does not ship these phases, and spec check warns when a spec needs them.
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: false, pyxis: false}
"""

# Two problems of meaning (checked once the structure is valid).
INVALID = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [compute]}
  - name: gpu01
    address: 10.0.0.10
    roles: [compute]
    gpus: {count: 2}
"""

# Three problems of structure, all reported at once.
MALFORMED = """\
apiVersion: gpuclus/v1
cluster: {name: Lab, admin_user: ubuntu}
nodes:
  - name: gpu01
    address: 10.0.0.11
    roles: [compute]
    gpus: {count: 0}
network: {fabric: ethernett}
"""

WARNING_ONLY = VALID.replace(
    "roles: [controller, nfs_server, monitoring, login]",
    "roles: [controller, nfs_server, monitoring, login, login]",
)


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-h"],
        ["spec", "--help"],
        ["spec", "check", "-h"],
        ["spec", "schema", "-h"],
        ["init", "-h"],
        ["render", "-h"],
    ],
)
def test_help_exits_zero_and_documents_exit_codes(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    if args[0] in {"--help", "-h", "init", "render"}:
        assert "3 spec invalid" in result.output.replace("\n", " ").replace("  ", " ")


def test_help_lists_every_exit_code_the_commands_return() -> None:
    # The epilog is built from errors.EXIT_CODE_MEANINGS; read it back from the help as a user sees it, and
    # compare with the ExitCode values the code returns (5, reboot pending, was once left out).
    result = runner.invoke(app, ["--help"], terminal_width=400)
    text = " ".join(result.output.replace("│", " ").split())
    listed = text.split("Exit codes: ", 1)[1].split(".", 1)[0]
    shown = {int(number): meaning for number, meaning in (item.split(" ", 1) for item in listed.split(", "))}
    assert shown == {int(code): EXIT_CODE_MEANINGS[code] for code in ExitCode}
    assert shown[5] == "reboot pending"
    used = set(re.findall(r"ExitCode\.([A-Z_]+)", "".join(p.read_text() for p in SRC.rglob("*.py"))))
    assert used <= {code.name for code in ExitCode}
    assert {int(ExitCode[name]) for name in used} <= set(shown)


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    # The installed metadata's (hatch-vcs, from git tags): one source, never a number written in the code.
    assert result.output == f"gpuclus {importlib.metadata.version('gpuclus')}\n"


def test_valid_spec_exits_zero(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spec", "check", str(write(tmp_path, VALID))])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    assert "3 nodes, 4 GPUs" in result.output


def test_invalid_spec_exits_three_with_every_finding(tmp_path: Path) -> None:
    path = write(tmp_path, INVALID)
    result = runner.invoke(app, ["spec", "check", str(path)])
    assert result.exit_code == 3
    # Both problems at once: no controller (points at `nodes:`) and the address.
    assert f"{path}:3:1: error[controller-count] nodes: no node has the controller role" in result.output
    assert f"{path}:6:14: error[duplicate-address] nodes[1].address:" in result.output
    assert "    6 |     address: 10.0.0.10" in result.output
    assert "hint:" in result.output


def test_structure_errors_are_all_reported(tmp_path: Path) -> None:
    path = write(tmp_path, MALFORMED)
    result = runner.invoke(app, ["spec", "check", str(path)])
    assert result.exit_code == 3
    assert f"{path}:2:17: error[invalid-format] cluster.name:" in result.output
    assert f"{path}:7:19: error[out-of-range] nodes[0].gpus.count: must be ≥ 1, not 0" in result.output
    assert f"{path}:8:19: error[invalid-choice] network.fabric:" in result.output
    assert "did you mean 'ethernet'?" in result.output


def test_json_output_is_one_object(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spec", "check", str(write(tmp_path, INVALID)), "--json"])
    assert result.exit_code == 3
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["counts"]["error"] == 2
    codes = {(f["code"], f["line"], f["path"]) for f in payload["findings"]}
    assert ("duplicate-address", 6, "nodes[1].address") in codes
    assert ("controller-count", 3, "nodes") in codes


def test_json_on_valid_spec(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spec", "check", str(write(tmp_path, VALID)), "--json"])
    assert result.exit_code == 0
    payload = json.loads(result.stdout)
    assert payload == {
        "ok": True,
        "file": str(tmp_path / "cluster.yaml"),
        "counts": {"error": 0, "warning": 0, "info": 0},
        "findings": [],
        "nodes": 3,
        "gpus": 4,
    }


def test_strict_turns_warnings_into_failure(tmp_path: Path) -> None:
    path = write(tmp_path, WARNING_ONLY)
    assert runner.invoke(app, ["spec", "check", str(path)]).exit_code == 0
    strict = runner.invoke(app, ["spec", "check", str(path), "--strict"])
    assert strict.exit_code == 3
    assert "warning[duplicate-role]" in strict.output


@pytest.mark.parametrize(
    ("make", "code", "text"),
    [
        (lambda d: d / "missing.yaml", 2, "no such file"),
        (lambda d: d, 2, "is a directory"),
        (lambda d: _bytes(d, b"\x7fELF\x00\x01\x02"), 3, "binary data"),
        (lambda d: _bytes(d, b"x" * (11 * 1024 * 1024)), 3, "far too large"),
        (lambda d: _bytes(d, b"nodes: [\n"), 3, "yaml-syntax"),
        (lambda d: _bytes(d, b""), 3, "empty-file"),
    ],
    ids=["missing", "directory", "binary", "10MB", "malformed", "empty"],
)
def test_unreadable_files_give_one_clear_message(tmp_path: Path, make, code: int, text: str) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["spec", "check", str(make(tmp_path))])
    assert result.exit_code == code
    assert text in result.output
    assert "Traceback" not in result.output


def _bytes(directory: Path, data: bytes) -> Path:
    path = directory / "spec.yaml"
    path.write_bytes(data)
    return path


def test_errors_in_json_mode_are_json(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spec", "check", str(tmp_path / "nope.yaml"), "--json"])
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    assert payload["error"]["exit_code"] == 2
    assert "no such file" in payload["error"]["message"]


def test_schema_is_json_schema(tmp_path: Path) -> None:
    result = runner.invoke(app, ["spec", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].endswith("2020-12/schema")
    assert {"apiVersion", "cluster", "nodes"} <= set(schema["required"])
    assert schema["additionalProperties"] is False
    target = tmp_path / "schema.json"
    written = runner.invoke(app, ["spec", "schema", "-o", str(target), "--json"])
    assert written.exit_code == 0
    assert json.loads(written.stdout) == {"ok": True, "file": str(target)}
    assert json.loads(target.read_text()) == schema


def test_usage_errors_exit_two(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "check", "--no-such-flag"]) == 2
    assert main(["no-such-command"]) == 2
    assert "No such" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "list", "--json", "--bogus"], "No such option: --bogus"),
        (["validate", "--json", "--level"], "Option '--level' requires an argument"),
        (["spec", "check", "--json", "a.yaml", "b.yaml"], "Got unexpected extra argument"),
        (["no-such-command", "--json"], "No such command"),
    ],
)
def test_usage_errors_under_json_are_json(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    # A script that passed --json parses stdout: typer's usage box on stderr left it nothing to parse.
    assert main(argv) == 2
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["ok"] is False
    # The shape every other error has under --json (output.Output.fail).
    assert set(payload["error"]) == {"message", "hint", "exit_code"}
    assert payload["error"]["exit_code"] == 2
    assert message in payload["error"]["message"]
    assert "--help" in payload["error"]["hint"]
    assert "Usage:" not in captured.err


def test_usage_errors_without_json_keep_typers_box(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--bogus"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Usage: gpuclus runs list" in captured.err


def test_json_runs_still_succeed_and_exit_with_their_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "check", str(write(tmp_path, VALID)), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert main(["spec", "check", str(write(tmp_path, INVALID)), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["counts"]["error"] == 2


def test_internal_error_is_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def explode(path: Path) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("gpuclus.spec.load.load_spec", explode)
    monkeypatch.delenv("GPUCLUS_DEBUG", raising=False)
    assert main(["spec", "check", str(write(tmp_path, VALID))]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: boom" in err
    assert "GPUCLUS_DEBUG=1" in err
    assert "Traceback" not in err


def test_debug_mode_shows_the_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def explode(path: Path) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("gpuclus.spec.load.load_spec", explode)
    monkeypatch.setenv("GPUCLUS_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["spec", "check", str(write(tmp_path, VALID))])


def test_locals_never_shown_in_tracebacks() -> None:
    assert cli_main.app.pretty_exceptions_show_locals is False


def test_console_script_runs(tmp_path: Path) -> None:
    # The installed entry point, not just the typer app.
    result = subprocess.run(
        [sys.executable, "-m", "gpuclus", "spec", "check", str(write(tmp_path, INVALID)), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 3
    assert json.loads(result.stdout)["counts"]["error"] == 2
