"""Every file gpuclus reads back goes through the one bounded reader, and every JSON parse has a depth bound.

Another process (or a mistake) can put anything where gpuclus keeps its
state: a FIFO (an unbounded read never returns), /dev/zero (never ends), a
huge file, JSON nested thousands deep (json's parser recurses once per
level) or an integer of thousands of digits (Python's int-string limit).
Each reader says so in one line, or, for run records and in-sync.json,
skips the broken file as it skips any other; none blocks, and none quotes
what the file holds. Each test that could block runs `within` a deadline.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from deadline import within
from typer.testing import CliRunner

from gpuclus import galaxy_collections
from gpuclus.cli.main import app
from gpuclus.deploy import in_sync, last_applied, records
from gpuclus.deploy.records import RunRecord, list_records, runs_dir
from gpuclus.errors import UsageError
from gpuclus.fileio import (
    MAX_JSON_DEPTH,
    FileTooLargeError,
    JsonTooDeepError,
    NotRegularFileError,
    parse_json,
    read_json_file,
    read_text_file,
)
from gpuclus.preflight.hostkeys import read_known_hosts
from gpuclus.render import MANIFEST_NAME
from gpuclus.sandbox.aptsources import MAX_APT_FILE_BYTES, host_sources
from gpuclus.sandbox.engine import SandboxError, parse_json_lines
from gpuclus.sandbox.record import SandboxRecord
from gpuclus.state import StateDir

runner = CliRunner()
SECRET = "hunter2-do-not-print"
DEEP = "[" * 10_000 + "]" * 10_000
HUGE_INTEGER = '{"n": ' + "9" * 5_000 + "}"
SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
"""


def test_json_nested_past_the_bound_is_refused_before_json_recurses() -> None:
    with pytest.raises(JsonTooDeepError, match=f"more than {MAX_JSON_DEPTH} levels"):
        parse_json(DEEP)
    assert isinstance(JsonTooDeepError(""), ValueError)  # every reader already catches ValueError
    at_the_bound = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(at_the_bound.encode()) == json.loads(at_the_bound)
    # Brackets inside strings do not nest, escaped quotes included.
    assert parse_json(json.dumps({"a": "[[[[" * 100 + '\\"{{{' * 100})) == {"a": "[[[[" * 100 + '\\"{{{' * 100}


def test_the_depth_bound_scans_each_character_once() -> None:
    # An unclosed string of escaped quotes: a string pattern that can fail is tried again from every later
    # quote (quadratic: ~10 s here, hours for a 16 MiB record); one that always matches reads it once.
    started = time.monotonic()
    with pytest.raises(ValueError):
        parse_json('["' + '\\"' * 20_000)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("data", [HUGE_INTEGER.encode(), b'{"a": "\xff"}', b"{not json"])
def test_every_problem_with_json_content_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_json(data)


def test_the_json_reader_refuses_a_fifo_and_a_huge_file(tmp_path: Path) -> None:
    fifo = tmp_path / "record.json"
    os.mkfifo(fifo)
    with within(10), pytest.raises(NotRegularFileError):
        read_json_file(fifo, 1024)
    huge = tmp_path / "huge.json"
    huge.write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(FileTooLargeError):
        read_json_file(huge, 1024)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge", "binary", "directory"])
def test_the_text_reader_says_what_is_wrong_in_one_line_without_quoting(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "known_hosts"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        path.write_text(f"{SECRET}\n" * 1000)
    elif kind == "binary":
        path.write_bytes(b"\xff" + SECRET.encode())
    else:
        path.mkdir()
    with within(10), pytest.raises(UsageError) as caught:
        read_text_file(path, 1024, hint="move it away")
    assert caught.value.message.startswith(str(path)) and "\n" not in caught.value.message
    assert SECRET not in caught.value.message and caught.value.hint == "move it away"
    with pytest.raises(FileNotFoundError):
        read_text_file(tmp_path / "none", 1024, hint="")


def _record(run_id: str) -> RunRecord:
    return RunRecord(run_id, "/lab/cluster.yaml", "5" * 64, ["base"], None, False, 1e9, "0.1.0", status="successful")


@pytest.fixture
def broken_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A good record among broken ones: a FIFO, /dev/zero, a huge, a deep and a huge-integer record."""
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 64 * 1024)
    spec = tmp_path / "cluster.yaml"
    state = StateDir.beside(spec)
    _record("20260301T120000Z-good").save(runs_dir(state) / "20260301T120000Z-good")
    for name, make in {
        "20260302T000000Z-fifo": os.mkfifo,
        "20260302T000001Z-zero": lambda path: path.symlink_to("/dev/zero"),
        "20260302T000002Z-huge": lambda path: path.write_text(" " * 100_000 + "{}"),
        "20260302T000003Z-deep": lambda path: path.write_text(DEEP),
        "20260302T000004Z-int": lambda path: path.write_text(HUGE_INTEGER),
        "20260302T000005Z-list": lambda path: path.write_text("[1, 2]"),
    }.items():
        (runs_dir(state) / name).mkdir()
        make(runs_dir(state) / name / records.RECORD_FILE)
    return spec


def test_runs_list_skips_broken_records_and_never_blocks(broken_runs: Path) -> None:
    with within(20):
        assert [record.id for record in list_records(StateDir.beside(broken_runs))] == ["20260301T120000Z-good"]
        listed = runner.invoke(app, ["runs", "list", "--spec", str(broken_runs), "--json"])
        shown = runner.invoke(app, ["runs", "show", "20260302T000003Z", "--spec", str(broken_runs)])
    assert listed.exit_code == 0, listed.output
    assert [run["id"] for run in json.loads(listed.stdout)["runs"]] == ["20260301T120000Z-good"]
    assert shown.exit_code == 2 and "Traceback" not in shown.output


def test_a_deep_render_manifest_is_a_one_line_refusal(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text('{"format": 1, "files": ' + DEEP + "}")
    result = runner.invoke(app, ["render", str(spec), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert f"{out / MANIFEST_NAME} is not a manifest gpuclus can read (nested more than" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    forced = runner.invoke(app, ["render", str(spec), "-o", str(out), "--force"])
    assert forced.exit_code == 0, forced.output


@pytest.mark.parametrize("content", ["fifo", DEEP, HUGE_INTEGER])
def test_a_broken_in_sync_store_means_a_full_deploy(tmp_path: Path, content: str) -> None:
    state = StateDir(tmp_path / ".gpuclus")
    state.root.mkdir()
    if content == "fifo":
        os.mkfifo(in_sync.store_path(state))
    else:
        in_sync.store_path(state).write_text('{"nodes": ' + content + "}")
    with within(10):
        assert in_sync.read_store(state) == {}


def test_the_run_key_never_blocks_on_a_fifo_among_its_inputs(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "munge.key").write_bytes(b"k" * 1024)
    users = tmp_path / "users.yaml"
    os.mkfifo(users)
    with within(10):
        key = in_sync.run_key({"a.yml": "x\n"}, ["users"], secrets, tmp_path / "id.pub", [users])
    users.unlink()
    users.write_text("")
    assert in_sync.run_key({"a.yml": "x\n"}, ["users"], secrets, tmp_path / "id.pub", [users]) != key


def test_known_hosts_and_the_public_key_are_read_bounded(tmp_path: Path) -> None:
    state = StateDir(tmp_path / ".gpuclus")
    state.ssh_dir.mkdir(parents=True)
    os.mkfifo(state.known_hosts)
    with within(10):
        for read in (lambda: state.knows_host("10.0.0.10"), lambda: read_known_hosts(state.known_hosts)):
            with pytest.raises(UsageError, match="is a FIFO"):
                read()
        with pytest.raises(UsageError, match="is a FIFO"):
            state.forget_known_hosts(["10.0.0.10"])
        state.private_key.write_text("private\n")
        os.mkfifo(state.public_key)
        with pytest.raises(UsageError, match="is a FIFO"):
            state.ensure_ssh_key()


@pytest.mark.parametrize(
    "content",
    ["fifo", DEEP, HUGE_INTEGER, json.dumps({"cluster": "lab", "engine": "podman", "nodes": [{SECRET: 1}]})],
    ids=["fifo", "deep", "integer", "foreign-key"],
)
def test_a_broken_sandbox_record_is_damaged_without_quoting_it(tmp_path: Path, content: str) -> None:
    path = tmp_path / "sandbox.json"
    if content == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(content)
    with within(10), pytest.raises(SandboxError, match="is damaged: ") as caught:
        SandboxRecord.load(path)
    assert SECRET not in caught.value.message and "\n" not in caught.value.message


def test_a_huge_file_in_last_applied_is_a_one_line_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(last_applied, "MAX_RENDERED_BYTES", 1024)
    state = StateDir(tmp_path / ".gpuclus")
    last_applied.save_last_applied(state, {"inventory/hosts.yml": "all: {}\n"})
    assert last_applied.read_last_applied(state) == {"inventory/hosts.yml": "all: {}\n"}
    (last_applied.last_applied_dir(state) / "inventory" / "hosts.yml").write_text(SECRET * 1000)
    with pytest.raises(UsageError, match="holds more than 1024 bytes") as caught:
        last_applied.read_last_applied(state)
    assert SECRET not in caught.value.message


def test_json_a_node_sends_is_bounded_in_depth_too() -> None:
    from gpuclus.deploy.node_stamps import StampState, judge
    from gpuclus.status.parse import parse_targets, skip_reason

    assert judge("gpu01", "10.0.0.11", DEEP, "0" * 64).state is StampState.NOT_DEPLOYED
    with pytest.raises(ValueError):
        parse_targets('{"data": ' + DEEP + "}")
    assert skip_reason(DEEP).startswith("[[[")  # read as the text it is, not a RecursionError


def test_json_in_a_jobs_output_is_bounded_in_depth_and_digits() -> None:
    from gpuclus.validate.checks.gpu.driver_state import parse_state_file
    from gpuclus.validate.checks.gpu.probe_output import parse_probe_output
    from gpuclus.validate.checks.workloads.job_output import parse_marked
    from gpuclus.validate.probes import MARKER

    for hostile in (DEEP, HUGE_INTEGER):
        assert parse_marked(f"GPUCLUS_RESULT {hostile}\nGPUCLUS_RESULT {{}}\n", "GPUCLUS_RESULT") == {}
        assert parse_probe_output(f"{MARKER} {hostile}\n{MARKER} {{}}\n") == [{}]
        assert parse_state_file(hostile) is None


def test_a_file_in_the_output_directory_larger_than_any_rendered_one_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # render compares what is there with what it would write; a huge file there is not gpuclus' anyway.
    from gpuclus.render import writer

    monkeypatch.setattr(writer, "MAX_RENDERED_BYTES", 1024)
    first = writer.write_rendered(tmp_path / "out", {"a.yml": "a: 1\n"})
    assert first.files
    (tmp_path / "out" / "a.yml").write_text("x" * 4096)
    with pytest.raises(UsageError, match=r"a\.yml \(larger than any file gpuclus renders"):
        writer.write_rendered(tmp_path / "out", {"a.yml": "a: 1\n"})
    assert (tmp_path / "out" / "a.yml").read_text() == "x" * 4096


def test_installed_collections_and_host_apt_files_are_read_bounded(tmp_path: Path) -> None:
    """A FIFO where a collection's MANIFEST.json or a host apt source is counts as unreadable, never blocks."""
    collection = tmp_path / "ansible_collections" / "community" / "general"
    collection.mkdir(parents=True)
    os.mkfifo(collection / "MANIFEST.json")
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    os.mkfifo(apt / "sources.list.d" / "stuck.list")
    (apt / "sources.list.d" / "huge.list").write_text("#" * (MAX_APT_FILE_BYTES + 1))
    with within(10):
        assert galaxy_collections._version(collection) is None
        assert [source.suites for source in host_sources(apt)] == [("bookworm",)]
    deep = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(JsonTooDeepError):
        parse_json_lines(deep)
