"""The host's apt configuration, as the node image needs it.

The image is debootstrapped from the Debian mirror the host itself uses and
its nodes get the host's apt settings, so a site mirror, a proxy or mirror
credentials work in the sandbox without being named anywhere in gpuclus.
Both source formats apt reads are understood: one-line ``.list`` files and
deb822 ``.sources`` files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuclus.errors import UsageError
from gpuclus.fileio import read_text_or_none

# An apt source or configuration file is a few KB; a bigger one, a FIFO or a device is not one apt wrote.
MAX_APT_FILE_BYTES = 1024 * 1024

# Suite names that only Debian's own archive carries with a "main" component.
# A source for any of them is a Debian mirror, which also serves the suite the
# image needs; "stable" and the like are left out because third-party
# repositories use them too (e.g. "stable main").
DEBIAN_CODENAMES = frozenset({"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid"})
# What debootstrap can fetch from (apt's mirror+, tor+ and cdrom: methods are apt's own).
DEBOOTSTRAP_SCHEMES = ("http://", "https://", "file:/")
MIRROR_ENV = "GPUCLUS_SANDBOX_MIRROR"

# apt settings that only keep container image layers small (Debian's docker
# images ship them as docker-clean and docker-gzip-indexes): no binary package
# cache and compressed lists. In a node every apt, apt-mark and python-apt
# run would then rebuild the cache from compressed lists (~0.5-1 CPU-s each,
# measured); a real Debian server keeps apt's defaults, and so do the nodes.
LAYER_SIZE_SETTINGS = ("Dir::Cache::pkgcache", "Dir::Cache::srcpkgcache", "GzipIndexes")


@dataclass(frozen=True)
class AptSource:
    """One entry of apt's sources: a one-line ``deb`` line or a deb822 stanza."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    enabled: bool = True


def parse_one_line(text: str) -> list[AptSource]:
    """Entries of a one-line sources file: ``deb [options] URI SUITE [COMPONENT...]``."""
    sources = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words or words[0] not in {"deb", "deb-src"}:
            continue
        rest = words[1:]
        if rest and rest[0].startswith("["):
            # Options run to the word that closes the bracket: "[arch=amd64]" or "[ arch=amd64 signed-by=x ]".
            closing = next((i for i, word in enumerate(rest) if word.endswith("]")), len(rest) - 1)
            rest = rest[closing + 1 :]
        if len(rest) < 2:
            continue
        sources.append(AptSource((words[0],), (rest[0],), (rest[1],), tuple(rest[2:])))
    return sources


def parse_deb822(text: str) -> list[AptSource]:
    """Entries of a deb822 ``.sources`` file: stanzas of ``Field: value`` separated by blank lines."""
    sources = []
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        name = None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1] in {" ", "\t"} and name is not None:
                fields[name] += " " + line.strip()  # a continuation line
                continue
            match = re.match(r"([A-Za-z0-9-]+):(.*)$", line)
            if match:
                name = match.group(1).lower()
                fields[name] = match.group(2).strip()
        if not fields:
            continue
        sources.append(
            AptSource(
                tuple(fields.get("types", "").split()),
                tuple(fields.get("uris", "").split()),
                tuple(fields.get("suites", "").split()),
                tuple(fields.get("components", "").split()),
                enabled=fields.get("enabled", "yes").lower() not in {"no", "false", "0"},
            )
        )
    return sources


def source_files(apt_root: Path) -> list[Path]:
    """The sources files apt reads, in apt's order: sources.list, then sources.list.d/ by name.

    Other names in sources.list.d/ (``*.disabled``, ``*.save``) are ignored by
    apt, so a mirror a host turned off that way is not used here either.
    """
    listed = sorted(path for path in (apt_root / "sources.list.d").glob("*") if path.suffix in {".list", ".sources"})
    return [apt_root / "sources.list", *listed]


def host_sources(apt_root: Path) -> list[AptSource]:
    sources: list[AptSource] = []
    for path in source_files(apt_root):
        text = read_text_or_none(path, MAX_APT_FILE_BYTES)
        if text is None:
            continue
        sources += parse_deb822(text) if path.suffix == ".sources" else parse_one_line(text)
    return sources


def debian_mirror(sources: Iterable[AptSource], suite: str) -> str | None:
    """The first Debian mirror among ``sources``: one carrying ``suite`` if any does, else any Debian release.

    Only enabled binary ("deb") sources with the main component count: the
    security archive ("bookworm-security") and other repositories are no
    mirror of the Debian archive.
    """
    usable = [
        (uri, source)
        for source in sources
        if source.enabled and "deb" in source.types and "main" in source.components
        for uri in source.uris
        if uri.startswith(DEBOOTSTRAP_SCHEMES)
    ]
    for uri, source in usable:
        if suite in source.suites:
            return uri
    for uri, source in usable:
        if DEBIAN_CODENAMES.intersection(source.suites):
            return uri
    return None


def check_mirror(url: str) -> str:
    """A mirror given by the user (--mirror, GPUCLUS_SANDBOX_MIRROR), if debootstrap can use it."""
    if not url.startswith(DEBOOTSTRAP_SCHEMES) or not url.split(":", 1)[1].strip("/"):
        raise UsageError(
            f"mirror {url!r} (--mirror or {MIRROR_ENV}) is not a URL debootstrap can fetch from",
            "give an http://, https:// or file:/ URL of a Debian archive (the directory holding dists/ and pool/)",
        )
    return url


def no_mirror_error(apt_root: Path, suite: str) -> UsageError:
    return UsageError(
        f"no Debian mirror in this host's apt sources ({apt_root}/sources.list, sources.list.d/) "
        f"to build the {suite} node image from",
        f"pass --mirror URL or set {MIRROR_ENV} to a Debian mirror (e.g. your site's mirror of the Debian archive)",
    )


def host_apt_files(apt_root: Path) -> tuple[tuple[str, str], ...]:
    """Host apt sources and settings worth copying into nodes, as (path under apt_root, content).

    Settings with Invoke hooks are left out: they call programs (PackageKit,
    appstream) that nodes do not have, and apt would fail on them. So are
    settings that only shrink container image layers (LAYER_SIZE_SETTINGS).
    """
    candidates = [apt_root / "sources.list"]
    candidates += sorted((apt_root / "sources.list.d").glob("*.list"))
    candidates += sorted((apt_root / "sources.list.d").glob("*.sources"))
    return _readable(apt_root, candidates) + host_apt_settings(apt_root)


def host_apt_settings(apt_root: Path) -> tuple[tuple[str, str], ...]:
    """The host's apt.conf.d and auth.conf.d files (proxy, credentials, ...) that nodes can use."""
    candidates = sorted(p for p in (apt_root / "apt.conf.d").glob("*") if p.is_file())
    candidates += sorted(p for p in (apt_root / "auth.conf.d").glob("*") if p.is_file())
    return _readable(apt_root, candidates)


def _readable(apt_root: Path, paths: list[Path]) -> tuple[tuple[str, str], ...]:
    found = []
    for path in paths:
        text = read_text_or_none(path, MAX_APT_FILE_BYTES)
        if text is None:
            continue
        if "Invoke" in text or not text.strip():
            continue
        if any(setting in _without_comments(text) for setting in LAYER_SIZE_SETTINGS):
            continue
        found.append((str(path.relative_to(apt_root)), text))
    return tuple(found)


def _without_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("#", "//")))
