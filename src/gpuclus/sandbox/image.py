"""The sandbox node image: Debian (12 or 13) with systemd and sshd, built locally with debootstrap.

No registry is needed (CI hosts have none). The image is tagged with a hash of
everything that goes into it, so a second `sandbox up` finds it and takes
seconds, and a changed recipe builds a new one instead of reusing a stale one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuclus.fileio import read_text_or_none
from gpuclus.sandbox.aptsources import (
    check_mirror,
    debian_mirror,
    host_apt_files,
    host_apt_settings,
    host_sources,
    no_mirror_error,
)
from gpuclus.sandbox.engine import Engine, SandboxError, engine_message

IMAGE_REPOSITORY = "localhost/gpuclus-node"
# Bump when the customisation below changes in a way the hash cannot see.
IMAGE_FORMAT = 1
# The default node OS's suite (oses.py lists the others).
SUITE = "bookworm"
ADMIN_USER = "gpuclus"
FAKE_GPU_CONFIG = "/etc/gpuclus/fake-gpus"
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "sudo",
    "iproute2",
    "iputils-ping",
    "ca-certificates",
    "procps",
    "gnupg",
    # mksquashfs: each compute node builds the sandbox's test image with it
    # (nodes.py), and Enroot needs it to import images.
    "squashfs-tools",
)
# Units that make no sense in a container sharing the host's kernel and
# clock, or that would only slow boot down.
MASKED_UNITS = (
    "getty@tty1.service",
    "console-getty.service",
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-timesyncd.service",
    # No module can be loaded from a container; Debian 13's unit fails trying.
    "systemd-modules-load.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
)

# Each node gets its own SSH host keys at first boot: keys baked into the image
# would be shared by every node ever made from it.
HOSTKEYS_UNIT = """\
[Unit]
Description=Generate SSH host keys on first boot (gpuclus sandbox)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
"""

# Device nodes live in the container's /dev, which is new at every start:
# recreate the fake GPUs at each boot from the count gpuclus wrote.
FAKE_GPUS_UNIT = f"""\
[Unit]
Description=Create fake NVIDIA device nodes (gpuclus sandbox; no driver)
ConditionPathExists={FAKE_GPU_CONFIG}
Before=slurmd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/gpuclus-fake-gpus

[Install]
WantedBy=multi-user.target
"""

FAKE_GPUS_SCRIPT = f"""\
#!/bin/sh
# Create /dev/nvidia0..N-1 (character devices, major 195) for the N in {FAKE_GPU_CONFIG}.
set -eu
count=$(cat {FAKE_GPU_CONFIG})
i=0
while [ "$i" -lt "$count" ]; do
  [ -c "/dev/nvidia$i" ] || mknod -m 666 "/dev/nvidia$i" c 195 "$i"
  i=$((i + 1))
done
"""

SSHD_CONFIG = """\
# gpuclus sandbox: keys only.
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""


@dataclass(frozen=True)
class ImageRecipe:
    suite: str
    mirror: str
    packages: tuple[str, ...]
    apt_files: tuple[tuple[str, str], ...]  # (path under /etc/apt, content)
    image_format: int = IMAGE_FORMAT

    def digest(self) -> str:
        parts = {
            **asdict(self),
            "units": [HOSTKEYS_UNIT, FAKE_GPUS_UNIT, FAKE_GPUS_SCRIPT, SSHD_CONFIG],
            "masked": MASKED_UNITS,
            "admin": ADMIN_USER,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.digest()[:12]}"


def host_recipe(
    apt_root: Path = Path("/etc/apt"),
    os_release: Path = Path("/etc/os-release"),
    *,
    mirror: str | None = None,
    suite: str = SUITE,
) -> ImageRecipe:
    """A recipe for a ``suite`` image that reaches Debian the way this host does.

    The mirror is ``mirror`` when the user gave one (--mirror,
    GPUCLUS_SANDBOX_MIRROR), else the host's own Debian mirror; a host without
    one (Ubuntu, say) is refused rather than sent to a mirror it may not reach.
    A host that has a Debian mirror lends the nodes its apt settings too (its
    proxy, its mirror credentials). A Debian 12 host using its own mirror also
    lends its source files as they are when ``suite`` is its own release;
    anything else gets sources generated for the mirror.
    """
    host_mirror = debian_mirror(host_sources(apt_root), suite)
    chosen = check_mirror(mirror) if mirror is not None else host_mirror
    if chosen is None:
        raise no_mirror_error(apt_root, suite)
    files: tuple[tuple[str, str], ...] = ()
    if host_mirror is not None:
        same_sources = _codename(os_release) == suite and chosen == host_mirror
        files = host_apt_files(apt_root) if same_sources else host_apt_settings(apt_root)
    if not any(path.startswith("sources.list") for path, _ in files):
        files = (
            *files,
            ("sources.list", f"deb {chosen} {suite} main\ndeb {chosen} {suite}-updates main\n"),
        )
    return ImageRecipe(suite, chosen, PACKAGES, tuple(sorted(files)))


# os-release(5) is a few hundred bytes.
MAX_OS_RELEASE_BYTES = 64 * 1024


def _codename(os_release: Path) -> str | None:
    text = read_text_or_none(os_release, MAX_OS_RELEASE_BYTES)
    if text is None:
        return None
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.MULTILINE)
    return match.group(1) if match else None


def image_present(engine: Engine, recipe: ImageRecipe) -> bool:
    return engine.ok(engine.image_exists(recipe.tag))


def remove_cached_images(engine: Engine, say: Callable[[str], None]) -> list[str]:
    """Remove every node image gpuclus built (any recipe); returns their tags."""
    if not engine.ok(engine.image_list(IMAGE_REPOSITORY), timeout=30):
        return []
    images = engine.run(engine.image_list(IMAGE_REPOSITORY), what="listing images").stdout.split()
    if images:
        say(f"removing cached image(s) {', '.join(images)}")
        engine.run(engine.image_remove(images), what="removing images")
    return images


def build_image(
    engine: Engine,
    recipe: ImageRecipe,
    *,
    debootstrap: str = "debootstrap",
    say: Callable[[str], None] = lambda _: None,
) -> None:
    """debootstrap a root file system, make it a node, import it as ``recipe.tag``.

    The tag appears only when the import has finished: an interrupted build
    leaves no image to be mistaken for a complete one, and its scratch
    directory is removed.
    """
    scratch = Path(tempfile.mkdtemp(prefix="gpuclus-image-", dir="/var/tmp"))
    try:
        rootfs = scratch / "rootfs"
        say(f"debootstrap {recipe.suite} from {recipe.mirror} (about a minute)")
        _check_call(
            [
                debootstrap,
                "--variant=minbase",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                recipe.mirror,
            ],
            what="debootstrap of the node image",
            timeout=1200,
        )
        say("configuring the image (systemd units, sshd, admin user)")
        customize_rootfs(rootfs, recipe)
        _check_call(
            [
                "chroot",
                str(rootfs),
                "useradd",
                "--create-home",
                "--shell",
                "/bin/bash",
                "--user-group",
                ADMIN_USER,
            ],
            what="creating the admin user in the image",
        )
        say(f"importing {recipe.tag}")
        with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
            engine.run(engine.image_import(recipe.tag), what="image import", stdin=tar.stdout, timeout=600)
            if tar.wait() != 0:
                raise SandboxError("packing the node image failed (tar)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def customize_rootfs(rootfs: Path, recipe: ImageRecipe) -> None:
    """Turn a debootstrap tree into a node image (file changes only; no chroot)."""
    apt = rootfs / "etc/apt"
    copied = {relative for relative, _ in recipe.apt_files}
    if "sources.list" not in copied and any(path.startswith("sources.list.d/") for path in copied):
        # debootstrap's own one-line sources would duplicate the host's.
        (apt / "sources.list").unlink(missing_ok=True)
    for relative, content in recipe.apt_files:
        target = apt / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    # Empty machine-id: systemd makes a fresh one per container at boot.
    (rootfs / "etc/machine-id").write_text("")
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    systemd = rootfs / "etc/systemd/system"
    wants = systemd / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit in MASKED_UNITS:
        link = systemd / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    for name, text in (
        ("gpuclus-hostkeys.service", HOSTKEYS_UNIT),
        ("gpuclus-fake-gpus.service", FAKE_GPUS_UNIT),
    ):
        (systemd / name).write_text(text)
        link = wants / name
        link.unlink(missing_ok=True)
        link.symlink_to(f"/etc/systemd/system/{name}")
    script = rootfs / "usr/local/sbin/gpuclus-fake-gpus"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(FAKE_GPUS_SCRIPT)
    script.chmod(0o755)
    sshd = rootfs / "etc/ssh/sshd_config.d/gpuclus.conf"
    sshd.parent.mkdir(parents=True, exist_ok=True)
    sshd.write_text(SSHD_CONFIG)
    sudoers = rootfs / f"etc/sudoers.d/{ADMIN_USER}"
    sudoers.parent.mkdir(parents=True, exist_ok=True)
    sudoers.write_text(f"{ADMIN_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    sudoers.chmod(0o440)


def _check_call(argv: list[str], *, what: str, timeout: float = 300) -> None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SandboxError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise SandboxError(f"{what} took longer than {timeout:.0f} s") from None
    if result.returncode != 0:
        detail = engine_message(result.stderr) or engine_message(result.stdout) or f"exit {result.returncode}"
        raise SandboxError(f"{what} failed: {detail}")
