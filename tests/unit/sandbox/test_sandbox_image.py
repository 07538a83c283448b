"""The node image recipe: content hash, host apt settings, and the rootfs customisation (no chroot)."""

from __future__ import annotations

import dataclasses
import re
import stat
import subprocess
from pathlib import Path

import pytest

from gpuclus.errors import UsageError
from gpuclus.sandbox.aptsources import host_apt_files
from gpuclus.sandbox.image import (
    ADMIN_USER,
    FAKE_GPU_CONFIG,
    FAKE_GPUS_SCRIPT,
    IMAGE_REPOSITORY,
    MASKED_UNITS,
    PACKAGES,
    SUITE,
    ImageRecipe,
    customize_rootfs,
    host_recipe,
)

MIRROR = "http://mirror.example.net/debian"
OTHER_MIRROR = "http://other-mirror.example/debian"
PROXY = 'Acquire::http::Proxy "http://proxy.example:3128";\n'
# What debootstrap leaves in the tree: one-line sources for the mirror it was given.
DEBOOTSTRAP_SOURCES = "deb http://debootstrap-mirror.example/debian bookworm main\n"

DEB822 = f"""\
# Modernized from /etc/apt/sources.list
Types: deb deb-src
URIs: {MIRROR}
Suites: bookworm bookworm-updates bookworm-backports
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.example/debian-security
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


def test_the_image_carries_mksquashfs_and_a_new_tag_with_it() -> None:
    """Compute nodes build their test image with mksquashfs; nodes from an image without it get a new tag."""
    assert "squashfs-tools" in PACKAGES
    before = dataclasses.replace(RECIPE, packages=tuple(p for p in PACKAGES if p != "squashfs-tools"))
    assert before.tag != RECIPE.tag


def test_tag_format() -> None:
    assert IMAGE_REPOSITORY == "localhost/gpuclus-node"
    assert re.fullmatch(r"localhost/gpuclus-node:[0-9a-f]{12}", RECIPE.tag)
    assert RECIPE.tag.endswith(":" + RECIPE.digest()[:12])


# host_recipe ---------------------------------------------------------------------------


@pytest.fixture
def apt_root(tmp_path: Path) -> Path:
    """A Debian 12 host's apt tree: deb822 sources for its mirror, a third-party list, a proxy, credentials."""
    root = tmp_path / "etc/apt"
    write(root / "sources.list.d/debian.sources", DEB822)
    write(root / "sources.list.d/extra.list", "deb http://extra.example/debian bookworm-extra stable\n")
    write(root / "apt.conf.d/80proxy", PROXY)
    write(root / "apt.conf.d/20packagekit", 'DPkg::Post-Invoke { "/usr/bin/test -e x || true"; };\n')
    write(root / "auth.conf.d/mirror.conf", "machine mirror.example.net login u password p\n")
    return root


def os_release(tmp_path: Path, text: str | None) -> Path:
    path = tmp_path / "os-release"
    if text is not None:
        path.write_text(text)
    return path


def generated_sources(mirror: str) -> tuple[str, str]:
    return ("sources.list", f"deb {mirror} bookworm main\ndeb {mirror} bookworm-updates main\n")


def test_host_recipe_on_bookworm_reuses_the_host_sources(tmp_path: Path, apt_root: Path) -> None:
    release = os_release(tmp_path, BOOKWORM_OS_RELEASE)
    recipe = host_recipe(apt_root, release)
    assert recipe.suite == SUITE == "bookworm"
    assert recipe.mirror == MIRROR
    assert recipe.packages == PACKAGES
    assert recipe.apt_files == tuple(sorted(host_apt_files(apt_root)))
    assert set(dict(recipe.apt_files)) == {
        "sources.list.d/debian.sources",
        "sources.list.d/extra.list",
        "apt.conf.d/80proxy",
        "auth.conf.d/mirror.conf",
    }
    # The host brings its sources: no generated sources.list beside them.
    assert "sources.list" not in dict(recipe.apt_files)
    assert recipe == host_recipe(apt_root, release)
    # Naming the host's own mirror changes nothing, so the cached image stays valid.
    assert host_recipe(apt_root, release, mirror=MIRROR) == recipe


def test_host_recipe_on_bookworm_with_another_mirror(tmp_path: Path, apt_root: Path) -> None:
    """The host's sources name the host's mirror: the image gets sources for the one asked for, and the settings."""
    recipe = host_recipe(apt_root, os_release(tmp_path, BOOKWORM_OS_RELEASE), mirror=OTHER_MIRROR)
    assert recipe.mirror == OTHER_MIRROR
    assert recipe.apt_files == (
        ("apt.conf.d/80proxy", PROXY),
        ("auth.conf.d/mirror.conf", "machine mirror.example.net login u password p\n"),
        generated_sources(OTHER_MIRROR),
    )


def test_host_recipe_on_another_debian_release(tmp_path: Path) -> None:
    """A Debian 13 host's mirror also serves bookworm; its settings (proxy) fit the nodes too."""
    root = tmp_path / "apt"
    write(
        root / "sources.list.d/debian.sources",
        f"Types: deb\nURIs: {MIRROR}\nSuites: trixie trixie-updates\nComponents: main\n",
    )
    write(root / "apt.conf.d/80proxy", PROXY)
    recipe = host_recipe(root, os_release(tmp_path, "VERSION_CODENAME=trixie\nID=debian\n"))
    assert recipe.mirror == MIRROR
    # trixie sources would give the nodes trixie packages: bookworm ones are generated instead.
    assert recipe.apt_files == (("apt.conf.d/80proxy", PROXY), generated_sources(MIRROR))


UBUNTU_SOURCES = "deb http://ubuntu.example/ubuntu jammy main restricted\n"


@pytest.mark.parametrize(
    "os_release_text",
    [
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nVERSION_CODENAME=jammy\nID=ubuntu\n',
        BOOKWORM_OS_RELEASE,
        None,
    ],
    ids=["ubuntu", "bookworm", "no-os-release"],
)
def test_host_recipe_without_a_debian_mirror(tmp_path: Path, os_release_text: str | None) -> None:
    root = tmp_path / "apt"
    write(root / "sources.list", UBUNTU_SOURCES)
    write(root / "apt.conf.d/80proxy", PROXY)
    release = os_release(tmp_path, os_release_text)
    with pytest.raises(UsageError) as caught:
        host_recipe(root, release)
    assert caught.value.exit_code == 2
    assert caught.value.message == (
        f"no Debian mirror in this host's apt sources ({root}/sources.list, sources.list.d/) "
        "to build the bookworm node image from"
    )
    assert "\n" not in caught.value.message
    assert caught.value.hint is not None
    assert "--mirror URL" in caught.value.hint
    assert "GPUCLUS_SANDBOX_MIRROR" in caught.value.hint

    # With a mirror named, nothing of this host's apt settings leaks in: they were made for another archive.
    recipe = host_recipe(root, release, mirror=OTHER_MIRROR)
    assert recipe.mirror == OTHER_MIRROR
    assert recipe.apt_files == (generated_sources(OTHER_MIRROR),)


def test_host_recipe_of_a_bare_host(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no Debian mirror"):
        host_recipe(tmp_path / "nothing", tmp_path / "missing")
    assert host_recipe(tmp_path / "nothing", tmp_path / "missing", mirror=MIRROR).apt_files == (
        generated_sources(MIRROR),
    )


@pytest.mark.parametrize("mirror", ["mirror.example/debian", "ftp://mirror.example/debian", "http://", ""])
def test_host_recipe_refuses_a_mirror_debootstrap_cannot_use(tmp_path: Path, apt_root: Path, mirror: str) -> None:
    with pytest.raises(UsageError, match="--mirror or GPUCLUS_SANDBOX_MIRROR"):
        host_recipe(apt_root, os_release(tmp_path, BOOKWORM_OS_RELEASE), mirror=mirror)


# customize_rootfs ----------------------------------------------------------------------


@pytest.fixture
def rootfs(tmp_path: Path) -> Path:
    """The parts of a debootstrap tree that customize_rootfs touches."""
    root = tmp_path / "rootfs"
    write(root / "etc/apt/sources.list", DEBOOTSTRAP_SOURCES)
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
    assert (rootfs / "etc/apt/sources.list").read_text() == DEBOOTSTRAP_SOURCES


def test_customize_rootfs_on_a_minimal_tree(tmp_path: Path) -> None:
    """Only etc/apt/sources.list, a host key and machine-id exist beforehand: every directory is made."""
    root = tmp_path / "rootfs"
    write(root / "etc/apt/sources.list", DEBOOTSTRAP_SOURCES)
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
