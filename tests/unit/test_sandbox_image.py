"""The node image recipe: content hash, host apt settings, and the rootfs customisation (no chroot)."""

from __future__ import annotations

import dataclasses
import re
import stat
import subprocess
from pathlib import Path

import pytest

from gpuclus.sandbox.image import (
    ADMIN_USER,
    DEFAULT_MIRROR,
    FAKE_GPU_CONFIG,
    FAKE_GPUS_SCRIPT,
    IMAGE_REPOSITORY,
    MASKED_UNITS,
    PACKAGES,
    SUITE,
    ImageRecipe,
    customize_rootfs,
    host_apt_files,
    host_mirror,
    host_recipe,
)

MIRROR = "http://mirror.example.net/debian"

DEB822 = f"""\
# Modernized from /etc/apt/sources.list
Types: deb deb-src
URIs: {MIRROR}
Suites: bookworm bookworm-updates bookworm-backports
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

BOOKWORM_OS_RELEASE = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
"""

RECIPE = ImageRecipe(
    SUITE,
    MIRROR,
    PACKAGES,
    (("apt.conf.d/80proxy", 'Acquire::http::Proxy "http://proxy:3128";\n'), ("sources.list", "deb x y z\n")),
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ImageRecipe ------------------------------------------------------------------------


def test_digest_is_stable_for_equal_recipes() -> None:
    twin = ImageRecipe(SUITE, MIRROR, tuple(PACKAGES), tuple(RECIPE.apt_files))
    assert twin.digest() == RECIPE.digest()
    assert re.fullmatch(r"[0-9a-f]{64}", RECIPE.digest())


@pytest.mark.parametrize(
    "change",
    [
        {"suite": "trixie"},
        {"mirror": "http://other.example/debian"},
        {"packages": (*PACKAGES, "vim")},
        {"packages": PACKAGES[:-1]},
        {"apt_files": (("apt.conf.d/80proxy", 'Acquire::http::Proxy "http://proxy:8080";\n'),)},
        {"apt_files": (*RECIPE.apt_files, ("auth.conf.d/mirror.conf", "machine x login y\n"))},
        {"apt_files": ()},
        {"image_format": 99},
    ],
)
def test_digest_changes_with_every_input(change: dict[str, object]) -> None:
    changed = dataclasses.replace(RECIPE, **change)  # type: ignore[arg-type]
    assert changed.digest() != RECIPE.digest()
    assert changed.tag != RECIPE.tag


def test_tag_format() -> None:
    assert IMAGE_REPOSITORY == "localhost/gpuclus-node"
    assert re.fullmatch(r"localhost/gpuclus-node:[0-9a-f]{12}", RECIPE.tag)
    assert RECIPE.tag.endswith(":" + RECIPE.digest()[:12])


# Host apt files ------------------------------------------------------------------------


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
    write(root / "auth.conf.d/mirror.conf", "machine mirror.example.net login u password p\n")
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


def test_host_apt_files_of_a_bare_tree(tmp_path: Path) -> None:
    assert host_apt_files(tmp_path / "nothing") == ()


def test_host_apt_files_include_a_one_line_sources_list(tmp_path: Path) -> None:
    write(tmp_path / "sources.list", "deb http://deb.debian.org/debian bookworm main\n")
    assert host_apt_files(tmp_path) == (("sources.list", "deb http://deb.debian.org/debian bookworm main\n"),)


def test_host_mirror_from_deb822(apt_root: Path) -> None:
    assert host_mirror(apt_root) == MIRROR


def test_host_mirror_from_one_line_sources_with_options(tmp_path: Path) -> None:
    write(
        tmp_path / "sources.list",
        "# deb http://commented.example/debian bookworm main\n"
        "deb http://security.debian.org/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://one-line.example/debian bookworm main contrib # trailing\n",
    )
    assert host_mirror(tmp_path) == "http://one-line.example/debian"


def test_host_mirror_falls_back_to_the_default(tmp_path: Path) -> None:
    assert host_mirror(tmp_path) == DEFAULT_MIRROR
    write(tmp_path / "sources.list", "deb http://archive.ubuntu.com/ubuntu jammy main\n")
    write(
        tmp_path / "sources.list.d/trixie.sources",
        "Types: deb\nURIs: http://x.example/debian\nSuites: trixie\nComponents: main\n",
    )
    assert host_mirror(tmp_path) == DEFAULT_MIRROR


def test_host_mirror_ignores_files_apt_ignores(tmp_path: Path) -> None:
    """apt reads only *.list and *.sources in sources.list.d; a renamed-away file is not the mirror.

    A host that disabled Debian's default sources for a local mirror must not have
    its node image debootstrapped from the mirror it turned off.
    """
    write(
        tmp_path / "sources.list.d/debian.sources.disabled",
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n",
    )
    write(
        tmp_path / "sources.list.d/local-mirror.sources",
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\n",
    )
    assert host_mirror(tmp_path) == MIRROR


# host_recipe ---------------------------------------------------------------------------


def test_host_recipe_on_bookworm_reuses_the_host_sources(tmp_path: Path, apt_root: Path) -> None:
    os_release = write(tmp_path / "os-release", BOOKWORM_OS_RELEASE)
    recipe = host_recipe(apt_root, os_release)
    assert recipe.suite == SUITE == "bookworm"
    assert recipe.mirror == MIRROR
    assert recipe.packages == PACKAGES
    assert recipe.apt_files == tuple(sorted(host_apt_files(apt_root)))
    # The host brings its sources: no generated sources.list beside them.
    assert "sources.list" not in dict(recipe.apt_files)
    assert recipe == host_recipe(apt_root, os_release)


def test_host_recipe_on_bookworm_without_sources_generates_them(tmp_path: Path) -> None:
    os_release = write(tmp_path / "os-release", 'VERSION_CODENAME="bookworm"\n')
    write(tmp_path / "apt/apt.conf.d/80proxy", 'Acquire::http::Proxy "http://p:3128";\n')
    recipe = host_recipe(tmp_path / "apt", os_release)
    files = dict(recipe.apt_files)
    assert files["apt.conf.d/80proxy"] == 'Acquire::http::Proxy "http://p:3128";\n'
    assert files["sources.list"] == (
        f"deb {DEFAULT_MIRROR} bookworm main\ndeb {DEFAULT_MIRROR} bookworm-updates main\n"
    )


@pytest.mark.parametrize(
    "os_release_text",
    [
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nVERSION_CODENAME=jammy\nID=ubuntu\n',
        "VERSION_CODENAME=trixie\nID=debian\n",
        "ID=fedora\n",
        None,
    ],
    ids=["ubuntu", "trixie", "no-codename", "missing"],
)
def test_host_recipe_elsewhere_uses_debians_mirror(tmp_path: Path, apt_root: Path, os_release_text: str | None) -> None:
    os_release = tmp_path / "os-release"
    if os_release_text is not None:
        os_release.write_text(os_release_text)
    recipe = host_recipe(apt_root, os_release)
    assert recipe.mirror == DEFAULT_MIRROR
    assert recipe.apt_files == (
        ("sources.list", f"deb {DEFAULT_MIRROR} bookworm main\ndeb {DEFAULT_MIRROR} bookworm-updates main\n"),
    )
    # Nothing of the non-Debian-12 host's settings leaks in (its proxy, its auth).
    assert MIRROR not in str(recipe.apt_files)


# customize_rootfs ----------------------------------------------------------------------


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """The parts of a debootstrap tree that customize_rootfs touches."""
    root = tmp_path / "rootfs"
    write(root / "etc/apt/sources.list", "deb http://deb.debian.org/debian bookworm main\n")
    write(root / "etc/ssh/ssh_host_rsa_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nbaked\n")
    write(root / "etc/ssh/ssh_host_rsa_key.pub", "ssh-rsa AAAA baked\n")
    write(root / "etc/ssh/ssh_host_ed25519_key", "baked\n")
    write(root / "etc/ssh/sshd_config", "Include /etc/ssh/sshd_config.d/*.conf\n")
    write(root / "etc/machine-id", "0123456789abcdef0123456789abcdef\n")
    (root / "etc/sudoers.d").mkdir(parents=True)  # the sudo package ships it
    # A unit file the image must mask, present as a real file.
    write(root / "etc/systemd/system/systemd-timesyncd.service", "[Unit]\n")
    return root


DEB822_RECIPE = ImageRecipe(
    SUITE,
    MIRROR,
    PACKAGES,
    (
        ("apt.conf.d/80proxy", 'Acquire::http::Proxy "http://proxy:3128";\n'),
        ("sources.list.d/debian.sources", DEB822),
    ),
)


def test_customize_rootfs(rootfs: Path) -> None:
    customize_rootfs(rootfs, DEB822_RECIPE)

    # Per-container identity: systemd makes a machine-id, the first boot makes host keys.
    assert (rootfs / "etc/machine-id").read_text() == ""
    assert not list((rootfs / "etc/ssh").glob("ssh_host_*"))
    assert (rootfs / "etc/ssh/sshd_config").exists()

    systemd = rootfs / "etc/systemd/system"
    for unit in MASKED_UNITS:
        assert (systemd / unit).is_symlink(), unit
        assert (systemd / unit).readlink() == Path("/dev/null")

    wants = systemd / "multi-user.target.wants"
    for name in ("gpuclus-hostkeys.service", "gpuclus-fake-gpus.service"):
        assert (systemd / name).is_file()
        assert (wants / name).is_symlink()
        target = (wants / name).readlink()
        assert target == Path(f"/etc/systemd/system/{name}")
        assert (rootfs / target.relative_to("/")).is_file()
        assert "WantedBy=multi-user.target" in (systemd / name).read_text()
    hostkeys = (systemd / "gpuclus-hostkeys.service").read_text()
    assert "ExecStart=/usr/bin/ssh-keygen -A" in hostkeys
    assert "Before=ssh.service" in hostkeys
    assert "ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key" in hostkeys
    fake_unit = (systemd / "gpuclus-fake-gpus.service").read_text()
    assert f"ConditionPathExists={FAKE_GPU_CONFIG}" in fake_unit
    assert "ExecStart=/usr/local/sbin/gpuclus-fake-gpus" in fake_unit
    assert "Before=slurmd.service" in fake_unit

    script = rootfs / "usr/local/sbin/gpuclus-fake-gpus"
    assert script.read_text() == FAKE_GPUS_SCRIPT
    assert stat.S_IMODE(script.stat().st_mode) == 0o755

    sudoers = rootfs / f"etc/sudoers.d/{ADMIN_USER}"
    assert stat.S_IMODE(sudoers.stat().st_mode) == 0o440
    assert sudoers.read_text() == "gpuclus ALL=(ALL:ALL) NOPASSWD: ALL\n"

    sshd = (rootfs / "etc/ssh/sshd_config.d/gpuclus.conf").read_text()
    assert re.search(r"^PasswordAuthentication no$", sshd, re.MULTILINE)
    assert re.search(r"^KbdInteractiveAuthentication no$", sshd, re.MULTILINE)

    apt = rootfs / "etc/apt"
    assert (apt / "sources.list.d/debian.sources").read_text() == DEB822
    assert (apt / "apt.conf.d/80proxy").read_text() == 'Acquire::http::Proxy "http://proxy:3128";\n'
    # debootstrap's one-line sources would duplicate the host's deb822 ones.
    assert not (apt / "sources.list").exists()


def test_customize_rootfs_keeps_a_sources_list_the_recipe_brings(rootfs: Path) -> None:
    recipe = ImageRecipe(SUITE, MIRROR, PACKAGES, (("sources.list", f"deb {MIRROR} bookworm main\n"),))
    customize_rootfs(rootfs, recipe)
    assert (rootfs / "etc/apt/sources.list").read_text() == f"deb {MIRROR} bookworm main\n"


def test_customize_rootfs_keeps_debootstraps_sources_without_host_sources(rootfs: Path) -> None:
    recipe = ImageRecipe(SUITE, MIRROR, PACKAGES, (("apt.conf.d/80proxy", "x;\n"),))
    customize_rootfs(rootfs, recipe)
    assert (rootfs / "etc/apt/sources.list").read_text() == "deb http://deb.debian.org/debian bookworm main\n"


def test_customize_rootfs_on_a_minimal_tree(tmp_path: Path) -> None:
    """Only etc/apt/sources.list, a host key and machine-id exist beforehand: every directory is made."""
    root = tmp_path / "rootfs"
    write(root / "etc/apt/sources.list", "deb http://deb.debian.org/debian bookworm main\n")
    write(root / "etc/ssh/ssh_host_rsa_key", "baked\n")
    write(root / "etc/machine-id", "0123\n")
    customize_rootfs(root, DEB822_RECIPE)
    assert stat.S_IMODE((root / f"etc/sudoers.d/{ADMIN_USER}").stat().st_mode) == 0o440


# The fake-GPU script -------------------------------------------------------------------------


def test_fake_gpu_script_text() -> None:
    assert FAKE_GPUS_SCRIPT.startswith("#!/bin/sh\n")
    assert f"$(cat {FAKE_GPU_CONFIG})" in FAKE_GPUS_SCRIPT
    assert 'mknod -m 666 "/dev/nvidia$i" c 195 "$i"' in FAKE_GPUS_SCRIPT
    subprocess.run(["sh", "-n"], input=FAKE_GPUS_SCRIPT, text=True, check=True)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_fake_gpu_script_makes_one_device_per_gpu(tmp_path: Path, count: int) -> None:
    """Its loop, run against a stand-in mknod and a config in tmp_path (no device is made)."""
    config = write(tmp_path / "fake-gpus", f"{count}\n")
    calls = tmp_path / "mknod.calls"
    bin_dir = tmp_path / "bin"
    write(bin_dir / "mknod", f'#!/bin/sh\necho "$@" >> {calls}\n').chmod(0o755)
    script = FAKE_GPUS_SCRIPT.replace(FAKE_GPU_CONFIG, str(config)).replace("/dev/nvidia", f"{tmp_path}/nvidia")
    subprocess.run(
        ["sh", "-c", script],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        check=True,
        capture_output=True,
    )
    made = calls.read_text().splitlines() if calls.exists() else []
    assert made == [f"-m 666 {tmp_path}/nvidia{i} c 195 {i}" for i in range(count)]
