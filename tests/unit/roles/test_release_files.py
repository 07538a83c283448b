"""Enroot's and Pyxis' release file names are spelled once (gpuclus/release_files.py), and every reader agrees.

spec checks (what an artifacts directory must hold, which downloads need a checksum), the checksum table's
filter, the spec's pattern for containers.checksums' keys, render's group_vars and the enroot and pyxis roles
(through those group_vars) must name the same files; a second spelling anywhere in the roles or the containers
playbook is refused.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml
from test_enroot_choices import OSES as ENROOT_OSES
from test_enroot_choices import VARS_FILES, value
from test_enroot_choices import templar as enroot_templar
from test_pyxis_choices import templar as pyxis_templar

from gpuclus import release_files
from gpuclus.release_checksums import known_checksums
from gpuclus.render.files import GROUP_VARS_DIR, render_files
from gpuclus.spec.checks.containers import expected_artifacts
from gpuclus.spec.load import load_spec_text
from gpuclus.yamldoc.patterns import RELEASE_FILE_PATTERN

ROOT = Path(__file__).resolve().parents[3]
FAMILY = {"Debian.yml": "apt", "Ubuntu-22.yml": "apt", "Ubuntu-24.yml": "apt", "RedHat-9.yml": "dnf"}
SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.1, roles: [controller, nfs_server, login]}
  - {name: gpu01, address: 10.0.0.2, roles: [compute]}
slurm: {partitions: [{name: batch, nodes: gpu01, default: true}]}
containers:
  {enroot: true, pyxis: true, enroot_version: "4.0.1", pyxis_version: "0.23.0", allow_unverified_downloads: true}
"""


@pytest.mark.parametrize("machine", sorted(release_files.DEB_ARCHES))
@pytest.mark.parametrize("os_name", sorted(ENROOT_OSES))
def test_the_enroot_role_installs_the_files_spec_checks_expect(os_name: str, machine: str) -> None:
    t = enroot_templar(os_name, arch=machine, enroot_caps=True, enroot_version="4.0.1")
    files = value(t, "__enroot_package_files")
    family = FAMILY[VARS_FILES[os_name]]
    assert files == [
        release_files.enroot_package_file("4.0.1", family=family, machine=machine, package=package)
        for package in release_files.ENROOT_PACKAGES
    ]
    patterns = expected_artifacts("4.0.1", "0.23.0")["enroot"]
    assert any(fnmatch.fnmatchcase(files[0], pattern) for pattern in patterns)
    assert files[0] in release_files.enroot_package_files("4.0.1")
    assert all(re.fullmatch(RELEASE_FILE_PATTERN, name) for name in files)
    assert value(t, "__enroot_tarball") == patterns[0] == "enroot-4.0.1-src.tar.gz"


def test_the_pyxis_role_reads_the_tarball_spec_checks_expect() -> None:
    t = pyxis_templar("debian12", pyxis_version="0.23.0")
    name = value(t, "__pyxis_tarball_name")
    assert (name,) == expected_artifacts("4.1.2", "0.23.0")["pyxis"]
    assert re.fullmatch(RELEASE_FILE_PATTERN, name)
    # The checksum the role checks a download against is containers.checksums' entry under that name.
    checked = pyxis_templar("debian12", pyxis_version="0.23.0", gpuclus_containers_checksums={name: "a" * 64})
    assert value(checked, "pyxis_sha256") == "a" * 64


def test_a_machine_without_release_packages_is_refused_unless_built_from_source() -> None:
    t = enroot_templar("debian12", arch="ppc64le")
    assert value(t, "__enroot_package_files") == []
    that = yaml.safe_load((ROOT / "roles/enroot/tasks/preflight.yml").read_text())[0]["ansible.builtin.assert"]["that"]
    assert not all(value(t, condition) for condition in that)
    assert all(value(enroot_templar("debian12", arch="ppc64le", enroot_source="source"), c) for c in that)


def test_render_writes_the_names_for_the_specs_versions() -> None:
    spec = load_spec_text(SPEC)
    assert spec.spec is not None and spec.topology is not None
    rendered = render_files(spec.spec, spec.topology, source_name="c.yaml", state_dir="../..", known_hosts="/k")
    containers = yaml.safe_load(rendered[f"{GROUP_VARS_DIR}/containers.yml"])
    assert containers["gpuclus_enroot_release_files"]["source"] == "enroot-4.0.1-src.tar.gz"
    assert containers["gpuclus_pyxis_release_file"] == "pyxis-0.23.0-src.tar.gz"
    packages = containers["gpuclus_enroot_release_files"]["packages"]
    named = sorted(
        name for machines in packages.values() for by_package in machines.values() for name in by_package.values()
    )
    assert named == sorted(release_files.enroot_package_files("4.0.1", caps=True))


def test_the_checksum_table_filter_takes_every_package_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuclus import release_checksums

    names = [*release_files.enroot_package_files("4.1.2", caps=True), "pyxis-0.24.0-src.tar.gz"]
    others = ["enroot_4.1.1-1_amd64.deb", "pyxis-0.23.0-src.tar.gz", "enroot-4.1.2-src.tar.gz"]
    table = {name: release_checksums.KnownFile(name, "0" * 64, "https://x", "test") for name in names + others}
    monkeypatch.setattr(release_checksums, "_table", lambda: table)
    assert sorted(known_checksums("4.1.2", "0.24.0")) == sorted(names)


def _code_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]


def test_no_role_or_playbook_spells_a_release_file_name_again() -> None:
    spelled = re.compile(r"-src\.tar\.gz|\.deb\b|\.rpm\b|\.el8\.")
    files = [ROOT / "playbooks/containers.yml"]
    for role in ("enroot", "pyxis"):
        files += [
            p for part in ("defaults", "vars", "tasks", "templates") for p in (ROOT / "roles" / role / part).rglob("*")
        ]
    offenders = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in files
        if path.is_file()
        for line in _code_lines(path)
        if spelled.search(line)
    ]
    assert offenders == []
