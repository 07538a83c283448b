"""The host's apt sources (one-line and deb822), its Debian mirror, and the apt files nodes get.

Every file is a sample written to tmp_path; the URLs are made-up hosts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclus.errors import UsageError
from gpuclus.sandbox.aptsources import (
    AptSource,
    check_mirror,
    debian_mirror,
    host_apt_files,
    host_apt_settings,
    host_sources,
    parse_deb822,
    parse_one_line,
    source_files,
)

MIRROR = "http://mirror.example/debian"
SECURITY = "http://security.example/debian-security"

DEB822 = f"""\
# Modernized from /etc/apt/sources.list
Types: deb deb-src
URIs: {MIRROR}
Suites: bookworm bookworm-updates bookworm-backports
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.example/archive/debian-security/20250520T000000Z
URIs: {SECURITY}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

ONE_LINE = f"""\
# deb http://commented.example/debian bookworm main
deb {SECURITY} bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {MIRROR} bookworm main contrib # trailing
deb [ arch=amd64 ] http://spaced-options.example/debian bookworm-updates main
deb-src {MIRROR} bookworm main
deb http://flat.example/repo/ ./
   deb   http://indented.example/debian   bookworm   main
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def deb822(uris: str, suites: str, components: str = "main", extra: str = "") -> str:
    return f"Types: deb\nURIs: {uris}\nSuites: {suites}\nComponents: {components}\n{extra}"


# Parsing ---------------------------------------------------------------------------------------


def test_parse_one_line() -> None:
    assert parse_one_line(ONE_LINE) == [
        AptSource(("deb",), (SECURITY,), ("bookworm-security",), ("main",)),
        AptSource(("deb",), (MIRROR,), ("bookworm",), ("main", "contrib")),
        AptSource(("deb",), ("http://spaced-options.example/debian",), ("bookworm-updates",), ("main",)),
        AptSource(("deb-src",), (MIRROR,), ("bookworm",), ("main",)),
        AptSource(("deb",), ("http://flat.example/repo/",), ("./",), ()),
        AptSource(("deb",), ("http://indented.example/debian",), ("bookworm",), ("main",)),
    ]


@pytest.mark.parametrize(
    "text",
    ["", "\n\n", "# only a comment\n", "deb\n", "deb http://x.example/debian\n", "deb [arch=amd64]\n", "rpm x y z\n"],
)
def test_parse_one_line_skips_what_is_no_source(text: str) -> None:
    assert parse_one_line(text) == []


def test_parse_deb822() -> None:
    assert parse_deb822(DEB822) == [
        AptSource(
            ("deb", "deb-src"),
            (MIRROR,),
            ("bookworm", "bookworm-updates", "bookworm-backports"),
            ("main", "contrib", "non-free", "non-free-firmware"),
        ),
        AptSource(("deb",), (SECURITY,), ("bookworm-security",), ("main",)),
    ]


def test_parse_deb822_continuation_lines_case_and_enabled() -> None:
    text = (
        "types: deb\nuris: http://a.example/debian\n  http://b.example/debian\nSUITES: bookworm\n"
        "Components:\n main\n contrib\nEnabled: no\n"
        "  \n\t\n"  # blank lines may hold white space
        "Types: deb\nURIs: http://c.example/debian\nSuites: bookworm\nComponents: main\nEnabled: yes\n"
        "\n\n# a stanza of comments only\n# Types: deb\n"
    )
    assert parse_deb822(text) == [
        AptSource(
            ("deb",),
            ("http://a.example/debian", "http://b.example/debian"),
            ("bookworm",),
            ("main", "contrib"),
            enabled=False,
        ),
        AptSource(("deb",), ("http://c.example/debian",), ("bookworm",), ("main",)),
    ]


def test_source_files_in_apts_order(tmp_path: Path) -> None:
    for name in ("b.sources", "a.list", "c.list.disabled", "d.sources.save", "e.list"):
        write(tmp_path / "sources.list.d" / name, "")
    assert [path.relative_to(tmp_path).as_posix() for path in source_files(tmp_path)] == [
        "sources.list",
        "sources.list.d/a.list",
        "sources.list.d/b.sources",
        "sources.list.d/e.list",
    ]


def test_host_sources_read_both_formats(tmp_path: Path) -> None:
    write(tmp_path / "sources.list", f"deb {SECURITY} bookworm-security main\n")
    write(tmp_path / "sources.list.d/debian.sources", deb822(MIRROR, "bookworm"))
    write(tmp_path / "sources.list.d/local.list", "deb http://local.example/debian bookworm main\n")
    # A file apt cannot read as text is skipped, not fatal.
    (tmp_path / "sources.list.d/binary.list").write_bytes(b"\xff\xfe\x00")
    assert [source.uris[0] for source in host_sources(tmp_path)] == [
        SECURITY,
        MIRROR,
        "http://local.example/debian",
    ]
    assert host_sources(tmp_path / "nothing") == []


# debian_mirror -------------------------------------------------------------------------------------


def mirror_of(tmp_path: Path) -> str | None:
    return debian_mirror(host_sources(tmp_path), "bookworm")


def test_debian_mirror_from_deb822(tmp_path: Path) -> None:
    write(tmp_path / "sources.list.d/debian.sources", DEB822)
    assert mirror_of(tmp_path) == MIRROR


def test_debian_mirror_from_one_line_sources_with_options(tmp_path: Path) -> None:
    write(tmp_path / "sources.list", ONE_LINE)
    assert mirror_of(tmp_path) == MIRROR


def test_debian_mirror_skips_security_source_and_disabled_entries(tmp_path: Path) -> None:
    write(tmp_path / "sources.list", f"deb {SECURITY} bookworm-security main\ndeb-src {MIRROR} bookworm main\n")
    write(
        tmp_path / "sources.list.d/a-off.sources",
        deb822("http://off.example/debian", "bookworm", extra="Enabled: no\n"),
    )
    write(tmp_path / "sources.list.d/b-no-main.list", "deb http://docker.example/linux/debian bookworm stable\n")
    write(tmp_path / "sources.list.d/c-apt-only.list", "deb mirror+file:/etc/apt/mirrors.txt bookworm main\n")
    write(tmp_path / "sources.list.d/d-debian.sources", deb822(MIRROR, "bookworm bookworm-updates"))
    assert mirror_of(tmp_path) == MIRROR


def test_debian_mirror_prefers_the_suite_over_other_releases(tmp_path: Path) -> None:
    write(tmp_path / "sources.list", "deb http://trixie.example/debian trixie main\n")
    write(tmp_path / "sources.list.d/bookworm.list", f"deb {MIRROR} bookworm main\n")
    assert mirror_of(tmp_path) == MIRROR


@pytest.mark.parametrize("suite", ["trixie", "bullseye", "sid"])
def test_debian_mirror_of_another_debian_release(tmp_path: Path, suite: str) -> None:
    write(tmp_path / "sources.list.d/debian.sources", deb822(f"{MIRROR} http://second.example/debian", suite))
    assert mirror_of(tmp_path) == MIRROR


def test_debian_mirror_accepts_https_and_local_archives() -> None:
    https = AptSource(("deb",), ("https://mirror.example/debian",), ("bookworm",), ("main",))
    local = AptSource(("deb",), ("file:/srv/mirror/debian",), ("bookworm",), ("main",))
    assert debian_mirror([https], "bookworm") == "https://mirror.example/debian"
    assert debian_mirror([local], "bookworm") == "file:/srv/mirror/debian"


def test_no_debian_mirror(tmp_path: Path) -> None:
    assert mirror_of(tmp_path) is None
    write(tmp_path / "sources.list", "deb http://ubuntu.example/ubuntu jammy main restricted\n")
    write(tmp_path / "sources.list.d/grafana.list", "deb https://grafana.example stable main\n")
    write(tmp_path / "sources.list.d/pg.list", "deb http://pg.example/apt bookworm-pgdg main\n")
    assert mirror_of(tmp_path) is None


def test_debian_mirror_ignores_files_apt_ignores(tmp_path: Path) -> None:
    """apt reads only *.list and *.sources in sources.list.d; a renamed-away file is not the mirror.

    A host that disabled its default sources for a local mirror must not have
    its node image debootstrapped from the mirror it turned off.
    """
    write(tmp_path / "sources.list.d/debian.sources.disabled", deb822("http://turned-off.example/debian", "bookworm"))
    write(tmp_path / "sources.list.d/local-mirror.sources", deb822(MIRROR, "bookworm"))
    assert mirror_of(tmp_path) == MIRROR


# check_mirror -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [MIRROR, "https://mirror.example/debian/", "file:/srv/mirror/debian"])
def test_check_mirror_accepts(url: str) -> None:
    assert check_mirror(url) == url


@pytest.mark.parametrize("url", ["mirror.example/debian", "ftp://mirror.example/debian", "http://", "file:/", ""])
def test_check_mirror_refuses(url: str) -> None:
    with pytest.raises(UsageError, match="--mirror or GPUCLUS_SANDBOX_MIRROR") as caught:
        check_mirror(url)
    assert caught.value.exit_code == 2
    assert caught.value.hint


# The files nodes get -------------------------------------------------------------------------------


@pytest.fixture
def apt_root(tmp_path: Path) -> Path:
    root = tmp_path / "etc/apt"
    write(root / "sources.list.d/debian.sources", DEB822)
    write(root / "sources.list.d/extra.list", "deb http://extra.example/debian bookworm main\n")
    write(root / "sources.list.d/old.list.disabled", "deb http://old.example/debian bookworm main\n")
    write(root / "sources.list.d/empty.list", "\n  \n")
    write(root / "apt.conf.d/80proxy", 'Acquire::http::Proxy "http://proxy:3128";\n')
    write(
        root / "apt.conf.d/50appstream",
        'APT::Update::Post-Invoke-Success { "appstreamcli refresh-cache > /dev/null || true"; };\n',
    )
    write(root / "apt.conf.d/20packagekit", 'DPkg::Post-Invoke { "/usr/bin/test -e x || true"; };\n')
    write(root / "apt.conf.d/99empty", "")
    write(root / "apt.conf.d/docker-clean", 'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n')
    write(root / "apt.conf.d/docker-gzip-indexes", 'Acquire::GzipIndexes "true";\n')
    write(root / "apt.conf.d/docker-no-languages", '# keeps GzipIndexes as it is\nAcquire::Languages "none";\n')
    write(root / "auth.conf.d/mirror.conf", "machine mirror.example login u password p\n")
    (root / "trusted.gpg.d").mkdir()
    return root


def test_host_apt_files(apt_root: Path) -> None:
    files = dict(host_apt_files(apt_root))
    assert set(files) == {
        "sources.list.d/debian.sources",
        "sources.list.d/extra.list",
        "apt.conf.d/80proxy",
        "apt.conf.d/docker-no-languages",
        "auth.conf.d/mirror.conf",
    }
    assert files["sources.list.d/debian.sources"] == DEB822
    assert files["apt.conf.d/80proxy"] == 'Acquire::http::Proxy "http://proxy:3128";\n'


def test_host_apt_settings_are_the_files_without_sources(apt_root: Path) -> None:
    assert host_apt_settings(apt_root) == tuple(
        item for item in host_apt_files(apt_root) if not item[0].startswith("sources.list")
    )


def test_host_apt_files_of_a_bare_tree(tmp_path: Path) -> None:
    assert host_apt_files(tmp_path / "nothing") == ()


def test_host_apt_files_include_a_one_line_sources_list(tmp_path: Path) -> None:
    write(tmp_path / "sources.list", f"deb {MIRROR} bookworm main\n")
    assert host_apt_files(tmp_path) == (("sources.list", f"deb {MIRROR} bookworm main\n"),)
