"""Values each fine alone that are dangerous together (issue 40): an export that squashes users to root, and
an input file on the control machine that is, or leads to, one of gpuclus' own secrets."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_samples import SPEC

from gpuclus.deploy.in_sync import CONTROL_INPUTS
from gpuclus.spec.checks.control_files import CONTROL_FILE_FIELDS
from gpuclus.spec.load import LoadedSpec, load_spec, load_spec_text
from gpuclus.yamldoc.findings import Severity


def with_options(options: str) -> LoadedSpec:
    data = copy.deepcopy(SPEC)
    data["nfs"]["exports"][0]["options"] = options
    return load_spec_text(yaml.safe_dump(data))


def squash_findings(loaded: LoadedSpec) -> list[str]:
    return [f.message for f in loaded.findings if f.code == "export-squash-to-root"]


@pytest.mark.parametrize(
    ("options", "who"),
    [
        ("rw,sync,all_squash,anonuid=0", ["every user on every client to root's uid"]),
        ("rw,sync,all_squash,anongid=0", ["every user on every client to root's gid"]),
        ("rw,all_squash,anonuid=0,anongid=0", ["root's uid", "root's gid"]),
        # root_squash is the default: root is squashed back to root.
        ("rw,sync,anonuid=0", ["root on every client (undoing root_squash) to root's uid"]),
        ("rw,all_squash,no_all_squash,anonuid=0", ["root on every client"]),
        ("rw,all_squash,anonuid=0,anonuid=65534", []),
        ("rw,all_squash,anonuid=65534,anongid=65534", []),
        ("rw,no_root_squash,anonuid=0", []),
        ("rw,sync,no_subtree_check", []),
    ],
)
def test_an_export_that_squashes_users_to_root_is_warned_about(options: str, who: list[str]) -> None:
    loaded = with_options(options)
    messages = squash_findings(loaded)
    assert len(messages) == len(who), messages
    for message, words in zip(messages, who, strict=True):
        assert words in message
    for finding in loaded.findings:
        if finding.code == "export-squash-to-root":
            assert finding.severity is Severity.WARNING
            assert finding.path == "nfs.exports[0].options" and finding.line is not None and finding.hint


# users.file and bind_password_file point at a real users file and password file unless a test moves one.
SPEC_WITH_DIRECTORY: dict[str, Any] = {
    **copy.deepcopy(SPEC),
    "users": {
        "file": "users.yml",
        "directory": {
            "uri": ["ldaps://ldap.example.org"],
            "base_dn": "dc=example,dc=org",
            "bind_dn": "cn=reader,dc=example,dc=org",
            "bind_password_file": "reader.password",
        },
    },
}
USERS = "apiVersion: gpuclus/v1\nkind: Users\naccounts: [{name: lab}]\n"


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    """A spec directory with a users file, a bind password and the generated secrets in .gpuclus/secrets/."""
    (tmp_path / "users.yml").write_text(USERS)
    (tmp_path / "reader.password").write_text("s3cret\n")
    (tmp_path / "reader.password").chmod(0o600)
    secrets = tmp_path / ".gpuclus" / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "slurmdbd_db_password").write_text("Zq9dbContent\n")
    (secrets / "slurmdbd_db_password").chmod(0o600)
    return tmp_path


def load_in(directory: Path, field: tuple[str, ...], value: str) -> LoadedSpec:
    data = copy.deepcopy(SPEC_WITH_DIRECTORY)
    holder = data
    for part in field[:-1]:
        holder = holder.setdefault(part, {})
    holder[field[-1]] = value
    spec = directory / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data))
    return load_spec(spec)


def state_dir_findings(loaded: LoadedSpec) -> list[str]:
    return [f.path for f in loaded.findings if f.code == "control-file-in-state-dir"]


FIELDS = [tuple(str(part) for part in loc) for loc in CONTROL_FILE_FIELDS]


@pytest.mark.parametrize("field", FIELDS, ids=".".join)
def test_an_input_inside_the_state_directory_is_refused(spec_dir: Path, field: tuple[str, ...]) -> None:
    value = ".gpuclus/secrets/slurmdbd_db_password"
    if field[-1].endswith("_package"):
        value = ".gpuclus/secrets/grafana.deb"
    loaded = load_in(spec_dir, field, value)
    assert state_dir_findings(loaded) == [".".join(field)], loaded.findings


def test_the_bind_password_may_not_be_the_generated_database_password_by_any_spelling(spec_dir: Path) -> None:
    field = ("users", "directory", "bind_password_file")
    (spec_dir / "innocent.password").symlink_to(spec_dir / ".gpuclus" / "secrets" / "slurmdbd_db_password")
    (spec_dir / "site").mkdir()
    spellings = [
        str(spec_dir / ".gpuclus" / "secrets" / "slurmdbd_db_password"),
        "site/../.gpuclus/secrets/slurmdbd_db_password",
        "./.gpuclus/secrets/slurmdbd_db_password",
        "innocent.password",
    ]
    for value in spellings:
        loaded = load_in(spec_dir, field, value)
        assert state_dir_findings(loaded) == [".".join(field)], (value, loaded.findings)
        finding = next(f for f in loaded.findings if f.code == "control-file-in-state-dir")
        assert finding.severity is Severity.ERROR and finding.line is not None and finding.hint
        assert "Zq9dbContent" not in finding.message  # named, never shown


def test_a_linked_state_directory_is_found_through_the_link(
    spec_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The spec's directory reached through a link: .gpuclus/ is the one beside the real directory.
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "spec"
    elsewhere.symlink_to(spec_dir)
    loaded = load_in(
        elsewhere,
        ("users", "directory", "bind_password_file"),
        str(spec_dir / ".gpuclus" / "secrets" / "slurmdbd_db_password"),
    )
    assert state_dir_findings(loaded) == ["users.directory.bind_password_file"]


def test_a_wheel_that_links_to_a_secret_is_refused(spec_dir: Path) -> None:
    wheels = spec_dir / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0-cp311-none-any.whl").symlink_to(spec_dir / ".gpuclus" / "secrets" / "slurmdbd_db_password")
    loaded = load_in(spec_dir, ("pytorch", "wheelhouse"), "wheels")
    assert state_dir_findings(loaded) == ["pytorch.wheelhouse"]
    assert any("holds torch-2.13.0" in f.message for f in loaded.findings if f.code == "control-file-in-state-dir")


def test_inputs_beside_the_state_directory_are_fine(spec_dir: Path) -> None:
    (spec_dir / ".gpuclus-notes").mkdir()
    (spec_dir / ".gpuclus-notes" / "reader.password").write_text("s3cret\n")
    (spec_dir / ".gpuclus-notes" / "reader.password").chmod(0o600)
    for field, value in [
        (("users", "directory", "bind_password_file"), "reader.password"),
        (("users", "directory", "bind_password_file"), ".gpuclus-notes/reader.password"),
        # The spec's own directory holds .gpuclus/, but the roles take only the wheels and release files in it.
        (("pytorch", "wheelhouse"), "."),
        (("containers", "artifacts_dir"), "."),
    ]:
        assert state_dir_findings(load_in(spec_dir, field, value)) == [], (field, value)


def test_every_input_the_deploy_hands_on_is_judged() -> None:
    assert set(CONTROL_INPUTS) <= set(CONTROL_FILE_FIELDS)
