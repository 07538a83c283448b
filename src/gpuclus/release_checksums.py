"""The sha256 of Enroot's and Pyxis' release files that gpuclus knows (gpuclus/data/release_checksums.yml).

A spec that downloads a file listed there needs no checksum of its own for it: `spec check` asks only for the
files the table lacks, and render hands the table's values to the roles, which check each download. The table
is read on first use, never at import, so `gpuclus --help` does not pay for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpuclus.release_files import enroot_package_files, pyxis_source_file

TABLE_FILE = Path(__file__).resolve().parent / "data" / "release_checksums.yml"
# The names containers.checksums takes (spec/models.py RELEASE_FILE_PATTERN, without importing the models here).
_FILE = re.compile(
    r"(enroot(\+caps)?_\d+\.\d+\.\d+-1_(amd64|arm64)\.deb|enroot(\+caps)?-\d+\.\d+\.\d+-1\.el8\.(x86_64|aarch64)\.rpm|(enroot|pyxis)-\d+\.\d+\.\d+-src\.tar\.gz)"
)


@dataclass(frozen=True)
class KnownFile:
    name: str
    sha256: str
    url: str
    source: str


class ChecksumTableError(ValueError):
    """The table file is malformed (an editing mistake, caught by the unit tests)."""


def known_checksums(enroot_version: str, pyxis_version: str) -> dict[str, str]:
    """The table's sha256 of the files these versions download, by file name (the enroot+caps ones too)."""
    wanted = {*enroot_package_files(enroot_version, caps=True), pyxis_source_file(pyxis_version)}
    return {name: known.sha256 for name, known in sorted(_table().items()) if name in wanted}


def unknown_downloads(enroot_version: str, pyxis_version: str) -> list[str]:
    """What the table lacks of a node's downloads for these versions, as "Enroot 4.1.2" / "Pyxis 0.24.0".

    Enroot counts as known with any package of its version, as in `spec check` (which one a node downloads
    depends on its architecture).
    """
    known = known_checksums(enroot_version, pyxis_version)
    missing = [] if set(known) & set(enroot_package_files(enroot_version)) else [f"Enroot {enroot_version}"]
    return missing + ([] if pyxis_source_file(pyxis_version) in known else [f"Pyxis {pyxis_version}"])


@cache
def _table() -> dict[str, KnownFile]:
    import yaml  # only when a spec turns containers on

    with TABLE_FILE.open(encoding="utf-8") as stream:
        return parse_table(yaml.safe_load(stream))


def parse_table(data: Any) -> dict[str, KnownFile]:
    """The table's entries, checked: a release file name, a sha256, an https URL and a source for each."""
    if not isinstance(data, dict) or not isinstance(data.get("downloads"), dict):
        raise ChecksumTableError("the release checksum table needs a 'downloads' mapping")
    files: dict[str, KnownFile] = {}
    for name, entry in data["downloads"].items():
        if not isinstance(name, str) or not _FILE.fullmatch(name):
            raise ChecksumTableError(f"release checksums: {name!r} is not an Enroot or Pyxis release file name")
        if not isinstance(entry, dict):
            raise ChecksumTableError(f"release checksums: {name} needs sha256, url and source")
        sha256, url, source = entry.get("sha256"), entry.get("url"), entry.get("source")
        if not isinstance(sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", sha256):
            raise ChecksumTableError(f"release checksums: {name} needs a sha256 of 64 lower-case hex digits")
        if not isinstance(url, str) or not url.startswith("https://"):
            raise ChecksumTableError(f"release checksums: {name} needs the https url its bytes come from")
        if not isinstance(source, str) or not source.strip():
            raise ChecksumTableError(f"release checksums: {name} needs a source saying how the sha256 was obtained")
        files[name] = KnownFile(name, sha256, url, source)
    return files
