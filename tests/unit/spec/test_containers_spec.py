"""The containers section: Enroot and Pyxis versions, where their files come from, registry credentials.

Fields are refused with file:line like every other; the checks that read the
machine running gpuclus (artifacts_dir, credentials_file) resolve relative
paths against the spec's directory and are tested on real files. The
credentials file holds secrets: no finding, and no output of `spec check`,
may show any of its words.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus import release_checksums
from gpuclus.cli.main import app
from gpuclus.spec.credentials import credentials_problems
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.spec.models import Containers, container_image_problem
from gpuclus.yamldoc.findings import Finding

BASE = """\
apiVersion: gpuclus/v1
cluster:
  name: lab
  admin_user: ubuntu
nodes:
  - name: head
    address: 10.0.0.10
    roles: [controller, login]
  - name: gpu01
    address: 10.0.0.11
    roles: [compute]
    gpus: {count: 2}
containers:
"""
# Line of the first key under `containers:` in BASE + body.
FIRST = BASE.count("\n") + 1
CONTAINER_CODES = {
    "artifacts-dir-missing",
    "artifacts-incomplete",
    "credentials-file-missing",
    "credentials-file-open",
    "credentials-file-grammar",
    "downloads-unverified",
}
SHA = "0123456789abcdef" * 4
# Enroot and Pyxis are off unless the spec turns them on.
ON = "  enroot: true\n  pyxis: true\n"
PASSWORD = "S3cr3t-Planted-Pa55word"


def spec(directory: Path, body: str) -> Path:
    path = directory / "cluster.yaml"
    path.write_text(BASE + body, encoding="utf-8")
    return path


def load(directory: Path, body: str) -> LoadedSpec:
    return load_spec(spec(directory, body))


def container_findings(loaded: LoadedSpec) -> list[Finding]:
    return [f for f in loaded.findings if f.path.startswith("containers") or f.code in CONTAINER_CODES]


def credentials(directory: Path, text: str, name: str = "registry.credentials", mode: int = 0o600) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def artifacts(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"")
    return directory


# -- fields ----------------------------------------------------------------------


def test_defaults() -> None:
    containers = Containers()
    # Off unless asked for: on, they need a source (artifacts_dir, checksums or
    # allow_unverified_downloads), so a spec without this section stays clean.
    assert not containers.enroot and not containers.pyxis
    assert containers.enroot_version == "4.1.2"
    assert containers.pyxis_version == "0.24.0"
    assert containers.artifacts_dir is None
    assert containers.checksums == {}
    assert containers.allow_unverified_downloads is False
    assert containers.credentials_file is None
    assert containers.credentials_users is None
    assert containers.validate_image == "ubuntu:22.04"


def test_every_field_written_out_loads_clean(tmp_path: Path) -> None:
    artifacts(tmp_path / "art", "enroot-4.1.3-src.tar.gz", "pyxis-0.25.1-src.tar.gz")
    credentials(tmp_path, "machine nvcr.io login $oauthtoken password x\n")
    loaded = load(
        tmp_path,
        f"""\
  enroot: true
  pyxis: true
  enroot_version: "4.1.3"
  pyxis_version: 0.25.1
  artifacts_dir: art
  checksums:
    enroot-4.1.3-src.tar.gz: {SHA}
    enroot_4.1.3-1_arm64.deb: {SHA}
    enroot+caps-4.1.3-1.el8.x86_64.rpm: {SHA}
  allow_unverified_downloads: false
  credentials_file: registry.credentials
  credentials_users: [ubuntu, alice]
  validate_image: nvcr.io#nvidia/pytorch:24.01-py3
""",
    )
    assert container_findings(loaded) == []
    assert loaded.ok
    assert loaded.spec is not None
    assert loaded.spec.containers.credentials_users == ["ubuntu", "alice"]


@pytest.mark.parametrize(
    ("line", "code", "path", "words"),
    [
        ("enroot_version: 4.1", "invalid-value", "containers.enroot_version", "quotes"),
        ('enroot_version: "4.1"', "invalid-format", "containers.enroot_version", "4.1.2"),
        ("enroot_version: 4", "wrong-type", "containers.enroot_version", "text"),
        ('pyxis_version: "v0.24.0"', "invalid-format", "containers.pyxis_version", "major.minor.patch"),
        ('pyxis_version: "0.24.0-rc1"', "invalid-format", "containers.pyxis_version", "major.minor.patch"),
        ("checksums: {enroot-4.1.2-src.tar.gz: ABCDEF}", "invalid-format", "containers.checksums", "sha256"),
        (f"checksums: {{enroot-4.1.2-src.tar.gz: {SHA.upper()}}}", "invalid-format", "containers.checksums", "lower"),
        (f"checksums: {{enroot.tar.gz: {SHA}}}", "invalid-format", "containers.checksums", "release file"),
        (f"checksums: {{enroot_4.1.2-1_i386.deb: {SHA}}}", "invalid-format", "containers.checksums", "release file"),
        ("checksums: [a, b]", "wrong-type", "containers.checksums", "mapping"),
        ("pyxis: maybe", "wrong-type", "containers.pyxis", "true or"),
        ("credentials_users: [Root]", "invalid-format", "containers.credentials_users[0]", "user name"),
        ("credentials_users: []", "out-of-range", "containers.credentials_users", "at least 1"),
        ("credentials_users: ubuntu", "wrong-type", "containers.credentials_users", "list"),
        ('artifacts_dir: ""', "invalid-value", "containers.artifacts_dir", "empty"),
        ('artifacts_dir: "a\\nb"', "invalid-value", "containers.artifacts_dir", "control characters"),
        ("artifacts_dir: ~/enroot", "invalid-value", "containers.artifacts_dir", "'~'"),
        ('credentials_file: "x\\ty"', "invalid-value", "containers.credentials_file", "control characters"),
        ("validate_image: ubuntu.sqsh", "invalid-value", "containers.validate_image", "absolute path"),
        ("validate_image: images/ubuntu.sqsh", "invalid-value", "containers.validate_image", "absolute path"),
        ('validate_image: "ubuntu 22.04"', "invalid-value", "containers.validate_image", "whitespace"),
        ('validate_image: "ubuntu\'"', "invalid-value", "containers.validate_image", "quotes"),
        ('validate_image: ""', "invalid-value", "containers.validate_image", "empty"),
        ("validate_image: --mpi=none", "invalid-value", "containers.validate_image", "'-'"),
    ],
)
def test_bad_values_are_refused_at_their_line(tmp_path: Path, line: str, code: str, path: str, words: str) -> None:
    file = spec(tmp_path, f"  allow_unverified_downloads: true\n  {line}\n")
    result = CliRunner().invoke(app, ["spec", "check", str(file)])
    assert result.exit_code == 3, result.output
    # `file:line:col: error[code] path: message`; for a checksum the path goes on to the file name.
    expected = f"{file}:{FIRST + 1}:"
    shown = [row for row in result.output.splitlines() if f"error[{code}] {path}" in row]
    assert shown, result.output
    assert shown[0].startswith(expected), shown
    assert words.lower() in result.output.lower()


@pytest.mark.parametrize(
    "image",
    ["ubuntu:22.04", "nvcr.io#nvidia/pytorch:24.01-py3", "user@nvcr.io#nvidia/cuda", "/shared/u.sqsh", "./u.sqsh"],
)
def test_images_pyxis_takes(image: str) -> None:
    assert container_image_problem(image) is None


# -- artifacts_dir ------------------------------------------------------------------


def codes(loaded: LoadedSpec) -> list[str]:
    return sorted(f.code for f in container_findings(loaded))


def test_artifacts_dir_missing_names_where_it_resolved(tmp_path: Path) -> None:
    loaded = load(tmp_path, "  artifacts_dir: ../nowhere\n")
    [finding] = container_findings(loaded)
    assert finding.code == "artifacts-dir-missing"
    assert finding.line == FIRST and finding.path == "containers.artifacts_dir"
    assert str((tmp_path / "../nowhere").absolute()) in (finding.hint or "")


def test_artifacts_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "art").write_text("")
    [finding] = container_findings(load(tmp_path, "  artifacts_dir: art\n"))
    assert finding.code == "artifacts-dir-missing"
    assert "not a directory" in finding.message


def test_artifacts_dir_is_relative_to_the_spec_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    artifacts(tmp_path / "art", "enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert codes(load(tmp_path, ON + "  artifacts_dir: art\n")) == []
    assert codes(load(tmp_path, ON + f"  artifacts_dir: {tmp_path / 'art'}\n")) == []


@pytest.mark.parametrize(
    "files",
    [
        ["enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"],
        ["enroot_4.1.2-1_amd64.deb", "pyxis-0.24.0-src.tar.gz"],
        ["enroot_4.1.2-1_arm64.deb", "enroot+caps_4.1.2-1_arm64.deb", "pyxis-0.24.0-src.tar.gz"],
        ["enroot-4.1.2-1.el8.x86_64.rpm", "pyxis-0.24.0-src.tar.gz"],
    ],
)
def test_artifacts_dir_with_what_is_needed(tmp_path: Path, files: list[str]) -> None:
    artifacts(tmp_path / "art", *files)
    assert codes(load(tmp_path, ON + "  artifacts_dir: art\n")) == []


def test_artifacts_incomplete_names_the_files_expected(tmp_path: Path) -> None:
    artifacts(tmp_path / "art", "enroot-4.1.1-src.tar.gz", "pyxis-0.24.0-src.tar.gz", "README")
    [finding] = container_findings(load(tmp_path, "  artifacts_dir: art\n" + ON))
    assert finding.code == "artifacts-incomplete" and finding.line == FIRST
    assert "enroot-4.1.2-src.tar.gz" in finding.message
    assert "enroot_4.1.2-1_*.deb" in finding.message
    assert "pyxis" not in finding.message


def test_artifacts_incomplete_for_pyxis_follows_its_version(tmp_path: Path) -> None:
    artifacts(tmp_path / "art", "enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz")
    [finding] = container_findings(load(tmp_path, ON + '  artifacts_dir: art\n  pyxis_version: "0.25.0"\n'))
    assert finding.code == "artifacts-incomplete"
    assert "pyxis-0.25.0-src.tar.gz" in finding.message


def test_artifacts_needed_only_for_what_is_on(tmp_path: Path) -> None:
    artifacts(tmp_path / "art", "enroot-4.1.2-src.tar.gz")
    assert codes(load(tmp_path, "  artifacts_dir: art\n  enroot: true\n  pyxis: false\n")) == []
    artifacts(tmp_path / "empty")
    assert codes(load(tmp_path, "  artifacts_dir: empty\n  enroot: false\n  pyxis: false\n")) == []


# -- downloads ------------------------------------------------------------------------


@pytest.fixture
def no_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpuclus' own checksum table emptied: these tests are of the spec's checksums (test_release_checksums)."""
    monkeypatch.setattr(release_checksums, "_table", dict)


@pytest.mark.usefixtures("no_table")
@pytest.mark.parametrize("body", ["  enroot: true\n", ON, "  pyxis: true\n"])
def test_downloads_without_checksums_are_refused(tmp_path: Path, body: str) -> None:
    findings = container_findings(load(tmp_path, body))
    # Pyxis alone is also pyxis-without-enroot; the download is refused all the same.
    [finding] = [f for f in findings if f.code != "pyxis-without-enroot"]
    assert finding.code == "downloads-unverified"
    assert finding.line == FIRST - 1 and finding.path == "containers"
    assert "checksum" in finding.message
    assert "allow_unverified_downloads" in (finding.hint or "")


@pytest.mark.usefixtures("no_table")
def test_a_download_without_its_own_checksum_is_refused_by_name(tmp_path: Path) -> None:
    # Enroot's checksum does not vouch for Pyxis: the pyxis role would refuse its download at deploy time.
    [finding] = container_findings(load(tmp_path, ON + f"  checksums: {{enroot_4.1.2-1_amd64.deb: {SHA}}}\n"))
    assert finding.code == "downloads-unverified"
    assert "Pyxis 0.24.0" in finding.message and "Enroot" not in finding.message
    assert "pyxis-0.24.0-src.tar.gz: <sha256>" in (finding.hint or "")


@pytest.mark.parametrize(
    "body",
    [
        ON + "  allow_unverified_downloads: true\n",
        ON + f"  checksums: {{enroot_4.1.2-1_amd64.deb: {SHA}, pyxis-0.24.0-src.tar.gz: {SHA}}}\n",
        f"  enroot: true\n  checksums: {{enroot_4.1.2-1_arm64.deb: {SHA}}}\n",
        "  enroot: false\n  pyxis: false\n",
        "  allow_unverified_downloads: false\n",  # off by default: nothing to download
    ],
)
def test_downloads_accepted_with_checksums_or_when_allowed_or_off(tmp_path: Path, body: str) -> None:
    assert codes(load(tmp_path, body)) == []


def test_a_spec_without_a_containers_section_downloads_nothing(tmp_path: Path) -> None:
    # Enroot and Pyxis default to off, so leaving the section out is no error.
    path = tmp_path / "cluster.yaml"
    path.write_text(BASE.removesuffix("containers:\n"), encoding="utf-8")
    loaded = load_spec(path)
    assert container_findings(loaded) == []
    assert loaded.ok


# -- credentials_file -------------------------------------------------------------------


ALLOW = "  allow_unverified_downloads: true\n"


def test_credentials_file_missing(tmp_path: Path) -> None:
    [finding] = container_findings(load(tmp_path, ALLOW + "  credentials_file: sub/none.credentials\n"))
    assert finding.code == "credentials-file-missing"
    assert finding.line == FIRST + 1 and finding.path == "containers.credentials_file"
    assert str(tmp_path / "sub/none.credentials") in (finding.hint or "")


def test_credentials_file_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "creds").mkdir()
    [finding] = container_findings(load(tmp_path, ALLOW + "  credentials_file: creds\n"))
    assert finding.code == "credentials-file-missing"
    assert "directory" in finding.message


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_credentials_file_open_to_others(tmp_path: Path, mode: int) -> None:
    path = credentials(tmp_path, "machine a.example login u password p\n", mode=mode)
    [finding] = container_findings(load(tmp_path, ALLOW + "  credentials_file: registry.credentials\n"))
    assert finding.code == "credentials-file-open"
    assert finding.hint == f"chmod 600 {path}"


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_credentials_file_private(tmp_path: Path, mode: int) -> None:
    credentials(tmp_path, "machine a.example login u password p\n", mode=mode)
    assert codes(load(tmp_path, ALLOW + f"  credentials_file: {tmp_path / 'registry.credentials'}\n")) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_credentials_file_unreadable(tmp_path: Path) -> None:
    credentials(tmp_path, "machine a.example login u password p\n", mode=0o000)
    [finding] = container_findings(load(tmp_path, ALLOW + "  credentials_file: registry.credentials\n"))
    assert finding.code == "credentials-file-missing"
    assert "cannot be read" in finding.message


def test_credentials_grammar_finding_names_the_line(tmp_path: Path) -> None:
    credentials(tmp_path, "# NGC\n\nmachine nvcr.io login $oauthtoken password k\nmachine a login b password\n")
    [finding] = container_findings(load(tmp_path, ALLOW + "  credentials_file: registry.credentials\n"))
    assert finding.code == "credentials-file-grammar"
    assert finding.line == FIRST + 1
    assert "line 4: expected `machine HOST login USER password PASSWORD`, found 5 words" in finding.message


def test_many_bad_lines_are_counted_not_all_listed(tmp_path: Path) -> None:
    credentials(tmp_path, "x\n" * 25)
    findings = container_findings(load(tmp_path, ALLOW + "  credentials_file: registry.credentials\n"))
    assert len(findings) == 11
    assert "15 more" in findings[-1].message


# -- the grammar ------------------------------------------------------------------------------


def test_grammar_good_file_with_comments_and_blank_lines() -> None:
    text = "# registries\n\nmachine nvcr.io login $oauthtoken password abc\n   \n  # indented comment\n"
    text += "machine registry-1.docker.io\tlogin  me password p@ss:w0rd\n"
    assert credentials_problems(text.encode()) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("machine a login b password\n", [(1, "found 5 words")]),
        ("machine a login b\n", [(1, "found 4 words")]),
        ("# c\nmachine a login b password c extra\n", [(2, "found 7 words")]),
        (
            "machine nvcr.io\nlogin $oauthtoken\npassword k\n",
            [(1, "one line"), (2, "one line"), (3, "one line")],
        ),
        ("login b machine a password c\n", [(1, "word 1 must be `machine`, word 3 must be `login`")]),
        ("machine a password c login b\n", [(1, "word 3 must be `login`, word 5 must be `password`")]),
        (" machine a login b password c\n", [(1, "begins the line")]),
        ("machine a login b password c\r\n", [(1, "carriage return")]),
        ("", [(0, "no entry")]),
        ("# only a comment\n", [(0, "no entry")]),
    ],
)
def test_grammar_problems(text: str, expected: list[tuple[int, str]]) -> None:
    problems = credentials_problems(text.encode())
    assert [number for number, _ in problems] == [number for number, _ in expected]
    for (_, message), (_, words) in zip(problems, expected, strict=True):
        assert words in message


def test_grammar_non_utf8() -> None:
    assert credentials_problems(b"machine a login b password \xff\n") == [(0, "the file is not UTF-8 text")]


def test_the_credentials_never_appear_in_findings_or_output(tmp_path: Path) -> None:
    secret_words = [PASSWORD, "secret-registry.example", "planted_user"]
    text = (
        f"machine secret-registry.example login planted_user password {PASSWORD}\n"  # good
        f"machine secret-registry.example login planted_user password {PASSWORD} trailing\n"
        f" machine secret-registry.example login planted_user password {PASSWORD}\n"
        f"password {PASSWORD} login planted_user machine secret-registry.example\n"
        f"{PASSWORD}\n"
        f"machine secret-registry.example login planted_user password {PASSWORD}\r\n"
    )
    credentials(tmp_path, text, mode=0o644)
    file = spec(tmp_path, ALLOW + "  credentials_file: registry.credentials\n")
    findings = container_findings(load_spec(file))
    assert {f.code for f in findings} == {"credentials-file-open", "credentials-file-grammar"}
    assert len(findings) == 6
    human = CliRunner().invoke(app, ["spec", "check", str(file)])
    as_json = CliRunner().invoke(app, ["spec", "check", str(file), "--json"])
    assert human.exit_code == as_json.exit_code == 3
    json.loads(as_json.stdout)
    for shown in [*(f"{f.message} {f.hint}" for f in findings), human.output, as_json.output]:
        for word in secret_words:
            assert word not in shown
