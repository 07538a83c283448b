"""gpuclus' own table of Enroot and Pyxis release checksums (gpuclus/data/release_checksums.yml).

The shipped table is well formed and lists only values it can vouch for; a spec whose downloads the table
covers needs no checksums of its own, and render hands the table's values to the roles only for downloads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpuclus import release_checksums
from gpuclus.release_checksums import ChecksumTableError, KnownFile, known_checksums, parse_table
from gpuclus.render.context import _containers_vars
from gpuclus.spec.load import load_spec
from gpuclus.spec.models import ClusterSpec

SHA = "0123456789abcdef" * 4
SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
containers: {enroot: true, pyxis: true}
"""
ENTRY = {"sha256": SHA, "url": "https://example.org/f", "source": "sha256sum of the file at url"}


ROLES = Path(__file__).resolve().parents[2] / "roles"


def role_defaults(role: str) -> dict[str, Any]:
    import yaml

    with (ROLES / role / "defaults" / "main.yml").open(encoding="utf-8") as stream:
        defaults: dict[str, Any] = yaml.safe_load(stream)
    return defaults


def download_url(name: str) -> str:
    """Where the roles download the release file ``name`` from, by their defaults."""
    if match := re.fullmatch(r"pyxis-(\d+\.\d+\.\d+)-src\.tar\.gz", name):
        template = role_defaults("pyxis")["pyxis_url"]
        assert "{{ pyxis_version }}" in template
        return str(template).replace("{{ pyxis_version }}", match[1])
    match = re.fullmatch(r"enroot(?:\+caps)?[_-](\d+\.\d+\.\d+)-1[_.].*", name)
    assert match, name
    return f"{role_defaults('enroot')['enroot_release_url']}/v{match[1]}/{name}"


@pytest.fixture
def shipped() -> dict[str, KnownFile]:
    release_checksums._table.cache_clear()
    return release_checksums._table()


def test_the_shipped_table_is_well_formed(shipped: dict[str, KnownFile]) -> None:
    for known in shipped.values():
        assert known.url.startswith("https://") and known.source


def test_each_shipped_sha256_is_of_the_url_the_roles_download(shipped: dict[str, KnownFile]) -> None:
    # A value of another URL (a tag archive for a release package, a mirror) would fail every download.
    for name, known in shipped.items():
        assert known.url == download_url(name), name
    assert download_url("enroot_4.1.2-1_amd64.deb") == (
        "https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot_4.1.2-1_amd64.deb"
    )


def test_the_shipped_table_spares_a_default_spec_pyxis_checksum(tmp_path: Path, shipped: dict[str, KnownFile]) -> None:
    # Pyxis 0.24.0's source (GitHub's archive of the tag) is known: a spec asks only for Enroot's checksum.
    path = tmp_path / "cluster.yaml"
    path.write_text(SPEC, encoding="utf-8")
    [finding] = [f for f in load_spec(path).findings if f.code == "downloads-unverified"]
    assert "Enroot 4.1.2" in finding.message and "Pyxis" not in finding.message
    assert "enroot_4.1.2-1_amd64.deb: <sha256>" in (finding.hint or "") and "pyxis" not in (finding.hint or "")
    with_enroot = SPEC.replace("pyxis: true}", f"pyxis: true, checksums: {{enroot_4.1.2-1_amd64.deb: {SHA}}}}}")
    assert findings(tmp_path, with_enroot) == []


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([], "downloads"),
        ({"downloads": {"enroot.deb": ENTRY}}, "release file"),
        ({"downloads": {"pyxis-0.24.0-src.tar.gz": {**ENTRY, "sha256": SHA.upper()}}}, "64 lower-case"),
        ({"downloads": {"pyxis-0.24.0-src.tar.gz": {**ENTRY, "url": "http://example.org/f"}}}, "https"),
        ({"downloads": {"pyxis-0.24.0-src.tar.gz": {**ENTRY, "source": ""}}}, "source"),
    ],
)
def test_a_malformed_table_is_refused(data: Any, words: str) -> None:
    with pytest.raises(ChecksumTableError, match=words):
        parse_table(data)


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> dict[str, KnownFile]:
    """A table that knows Enroot 4.1.2's amd64 package and Pyxis 0.24.0's source (the versions gpuclus pins)."""
    files = parse_table(
        {
            "downloads": {
                "enroot_4.1.2-1_amd64.deb": ENTRY,
                "pyxis-0.24.0-src.tar.gz": {**ENTRY, "sha256": "f" * 64},
                "pyxis-0.23.0-src.tar.gz": {**ENTRY, "sha256": "e" * 64},
            }
        }
    )
    monkeypatch.setattr(release_checksums, "_table", lambda: files)
    return files


def test_known_checksums_are_those_of_the_versions_asked_for(table: dict[str, KnownFile]) -> None:
    assert known_checksums("4.1.2", "0.24.0") == {"enroot_4.1.2-1_amd64.deb": SHA, "pyxis-0.24.0-src.tar.gz": "f" * 64}
    assert known_checksums("4.1.3", "0.23.0") == {"pyxis-0.23.0-src.tar.gz": "e" * 64}


def findings(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(text, encoding="utf-8")
    return [f.code for f in load_spec(path).findings if f.code == "downloads-unverified"]


def test_a_spec_the_table_covers_needs_no_checksums(tmp_path: Path, table: dict[str, KnownFile]) -> None:
    assert findings(tmp_path, SPEC) == []
    # A version the table does not know still asks for its checksums.
    other = SPEC.replace("pyxis: true}", 'pyxis: true, pyxis_version: "0.25.0"}')
    assert findings(tmp_path, other) == ["downloads-unverified"]


def test_without_the_table_the_default_asks_for_checksums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(release_checksums, "_table", dict)
    assert findings(tmp_path, SPEC) == ["downloads-unverified"]


def containers_vars(text: str) -> dict[str, Any]:
    import yaml

    return _containers_vars(ClusterSpec.model_validate(yaml.safe_load(text)), state_dir=".gpuclus")


def test_render_hands_the_table_to_the_roles_under_the_specs_own(table: dict[str, KnownFile]) -> None:
    own = SPEC.replace("pyxis: true}", f"pyxis: true, checksums: {{pyxis-0.24.0-src.tar.gz: {'a' * 64}}}}}")
    assert containers_vars(own)["gpuclus_containers_checksums"] == {
        "enroot_4.1.2-1_amd64.deb": SHA,
        "pyxis-0.24.0-src.tar.gz": "a" * 64,  # the spec's value wins
    }


def test_render_keeps_the_table_away_from_an_artifacts_directory(table: dict[str, KnownFile]) -> None:
    # Another packing of the same release (a tarball made from the tag) is checked by its own sha256.
    offline = SPEC.replace("pyxis: true}", "pyxis: true, artifacts_dir: artifacts}")
    assert containers_vars(offline)["gpuclus_containers_checksums"] == {}
    assert (
        containers_vars(SPEC.replace("enroot: true, pyxis: true", "enroot: false, pyxis: false"))[
            "gpuclus_containers_checksums"
        ]
        == {}
    )
