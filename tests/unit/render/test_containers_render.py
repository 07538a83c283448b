"""inventory/group_vars/all/containers.yml: exactly the containers phase's variables, paths per the path rule.

The spec's paths (artifacts_dir, credentials_file) are absolute or relative
to the spec's directory; rendered, a relative one is relative to the output
directory, which is what the playbook resolves it against. state_dir (the
spec's .gpuclus/ seen from the output directory) is all render knows of
where it writes, so the same input gives the same bytes anywhere.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclus.release_checksums import known_checksums
from gpuclus.release_files import group_vars_names
from gpuclus.render.files import GROUP_VARS_DIR, RENDERED_FILES, render_files
from gpuclus.spec.load import LoadedSpec, load_spec_text

CONTAINERS_YML = f"{GROUP_VARS_DIR}/containers.yml"
SHA = "fedcba9876543210" * 4
SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 1}}
"""
VARIABLES = [
    "gpuclus_enroot_install",
    "gpuclus_pyxis_install",
    "gpuclus_enroot_version",
    "gpuclus_pyxis_version",
    "gpuclus_pyxis_release_file",
    "gpuclus_enroot_release_files",
    "gpuclus_containers_artifacts_dir",
    "gpuclus_containers_checksums",
    "gpuclus_containers_allow_unverified_downloads",
    "gpuclus_enroot_credentials_file",
    "gpuclus_enroot_credentials_users",
    "gpuclus_control_cache_dir",
]


def loaded(containers: str, directory: Path | None = None) -> LoadedSpec:
    # A spec "in" directory: its relative paths are checked against it.
    path = str((directory or Path("/nonexistent")) / "cluster.yaml")
    result = load_spec_text(SPEC + containers, path)
    assert result.ok, result.findings
    return result


def containers_yml(spec: LoadedSpec, state_dir: str = "../..") -> str:
    assert spec.spec is not None and spec.topology is not None
    files = render_files(
        spec.spec, spec.topology, source_name="cluster.yaml", state_dir=state_dir, known_hosts="/k/known_hosts"
    )
    return files[CONTAINERS_YML]


def variables(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def test_containers_yml_is_rendered() -> None:
    assert CONTAINERS_YML in RENDERED_FILES


def test_exactly_these_variables_in_this_order() -> None:
    text = containers_yml(loaded("containers: {enroot: false, pyxis: false}\n"))
    names = [line.split(":")[0] for line in text.splitlines() if line.startswith("gpuclus_")]
    assert names == VARIABLES
    assert list(variables(text)) == VARIABLES


def test_defaults_are_off() -> None:
    # A spec without a containers section installs neither, and downloads nothing.
    values = variables(containers_yml(loaded("")))
    assert values["gpuclus_enroot_install"] is False
    assert values["gpuclus_pyxis_install"] is False
    assert values["gpuclus_containers_allow_unverified_downloads"] is False


def test_defaults_with_both_on_and_downloads_allowed() -> None:
    spec = loaded("containers: {enroot: true, pyxis: true, allow_unverified_downloads: true}\n")
    values = variables(containers_yml(spec))
    assert values == {
        "gpuclus_enroot_install": True,
        "gpuclus_pyxis_install": True,
        "gpuclus_enroot_version": "4.1.2",
        "gpuclus_pyxis_version": "0.24.0",
        **group_vars_names("4.1.2", "0.24.0"),
        "gpuclus_containers_artifacts_dir": None,
        # gpuclus' own table's values for the pinned releases' downloads (test_release_checksums).
        "gpuclus_containers_checksums": known_checksums("4.1.2", "0.24.0"),
        "gpuclus_containers_allow_unverified_downloads": True,
        "gpuclus_enroot_credentials_file": None,
        "gpuclus_enroot_credentials_users": ["ubuntu"],
        "gpuclus_control_cache_dir": "../../cache",
    }


def test_versions_stay_text_and_checksums_are_sorted() -> None:
    text = containers_yml(
        loaded(
            f"""\
containers:
  enroot_version: "10.0.0"
  pyxis_version: "1.10.0"
  checksums:
    pyxis-1.10.0-src.tar.gz: {SHA}
    enroot_10.0.0-1_amd64.deb: {SHA}
"""
        )
    )
    values = variables(text)
    assert values["gpuclus_enroot_version"] == "10.0.0"
    assert values["gpuclus_pyxis_version"] == "1.10.0"
    assert list(values["gpuclus_containers_checksums"]) == ["enroot_10.0.0-1_amd64.deb", "pyxis-1.10.0-src.tar.gz"]


def _with_files(tmp_path: Path) -> str:
    art = tmp_path / "site" / "art"
    art.mkdir(parents=True)
    for name in ("enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"):
        (art / name).write_bytes(b"")
    creds = tmp_path / "ngc.credentials"
    creds.write_text("machine nvcr.io login $oauthtoken password k\n")
    creds.chmod(0o600)
    return str(tmp_path)


@pytest.mark.parametrize(
    ("state_dir", "artifacts", "credentials", "cache"),
    [
        # deploy: the output directory is .gpuclus/runs/<id>, so the spec's directory is ../../..
        ("../..", "../../../site/art", "../../../ngc.credentials", "../../cache"),
        # `gpuclus render` into rendered/ beside the spec
        ("../.gpuclus", "../site/art", "../ngc.credentials", "../.gpuclus/cache"),
        # `gpuclus render -o out/here` two levels below the spec
        ("../../.gpuclus", "../../site/art", "../../ngc.credentials", "../../.gpuclus/cache"),
        # an output directory beside the spec's own directory
        ("../spec/.gpuclus", "../spec/site/art", "../spec/ngc.credentials", "../spec/.gpuclus/cache"),
    ],
)
def test_relative_paths_are_written_relative_to_the_output_directory(
    tmp_path: Path, state_dir: str, artifacts: str, credentials: str, cache: str
) -> None:
    _with_files(tmp_path)
    spec = loaded("containers:\n  artifacts_dir: site/./art\n  credentials_file: ngc.credentials\n", tmp_path)
    values = variables(containers_yml(spec, state_dir))
    assert values["gpuclus_containers_artifacts_dir"] == artifacts
    assert values["gpuclus_enroot_credentials_file"] == credentials
    assert values["gpuclus_control_cache_dir"] == cache
    # The rule itself: resolved from the output directory, they land beside the spec.
    spec_dir = posixpath.join(state_dir, "..")
    assert posixpath.normpath(posixpath.join(spec_dir, "site/art")) == artifacts


def test_a_path_up_from_the_spec(tmp_path: Path) -> None:
    spec_dir = tmp_path / "clusters" / "lab"
    spec_dir.mkdir(parents=True)
    _with_files(tmp_path)
    spec = loaded("containers:\n  artifacts_dir: ../../site/art\n", spec_dir)
    values = variables(containers_yml(spec, "../.."))
    assert values["gpuclus_containers_artifacts_dir"] == "../../../../../site/art"


def test_absolute_paths_are_written_as_they_are(tmp_path: Path) -> None:
    _with_files(tmp_path)
    art, creds = tmp_path / "site" / "art", tmp_path / "ngc.credentials"
    spec = loaded(f"containers:\n  artifacts_dir: {art}\n  credentials_file: {creds}\n")
    for state_dir in ("../..", "../.gpuclus"):
        values = variables(containers_yml(spec, state_dir))
        assert values["gpuclus_containers_artifacts_dir"] == str(art)
        assert values["gpuclus_enroot_credentials_file"] == str(creds)


def test_credentials_users_as_given_without_repeats(tmp_path: Path) -> None:
    _with_files(tmp_path)
    spec = loaded(
        "containers:\n  allow_unverified_downloads: true\n  credentials_file: ngc.credentials\n"
        "  credentials_users: [alice, ubuntu, alice]\n",
        tmp_path,
    )
    assert variables(containers_yml(spec))["gpuclus_enroot_credentials_users"] == ["alice", "ubuntu"]


def test_same_input_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_files(tmp_path)
    body = f"containers:\n  artifacts_dir: site/art\n  checksums: {{pyxis-0.24.0-src.tar.gz: {SHA}}}\n"
    first = containers_yml(loaded(body, tmp_path))
    monkeypatch.chdir(tmp_path)
    second = containers_yml(loaded(body, tmp_path))
    assert first == second
    assert str(tmp_path) not in first


def test_the_credentials_file_content_never_reaches_the_render(tmp_path: Path) -> None:
    _with_files(tmp_path)
    (tmp_path / "ngc.credentials").write_text("machine nvcr.io login $oauthtoken password PLANTED-SECRET\n")
    spec = loaded("containers:\n  allow_unverified_downloads: true\n  credentials_file: ngc.credentials\n", tmp_path)
    assert spec.spec is not None and spec.topology is not None
    files = render_files(spec.spec, spec.topology, source_name="c.yaml", state_dir="../..", known_hosts="/k")
    assert not any("PLANTED-SECRET" in text for text in files.values())
