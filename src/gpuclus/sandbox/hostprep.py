"""Getting the host ready for sandbox nodes: root, an engine, debootstrap, disk space.

When something is missing and the host is Debian/Ubuntu run as root, gpuclus
installs it with apt and says so (allowed unless --no-install). Every setting
the nodes need is passed per container, but one: the host's inotify instances
for many nodes (ensure_inotify_instances), which has no per-container form.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpuclus.errors import UsageError
from gpuclus.sandbox.engine import (
    Engine,
    SandboxError,
    cgroup_v2_only,
    docker_engine,
    engine_message,
    podman_engine,
)

EngineChoice = Literal["auto", "podman", "docker"]
MIN_FREE_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class EnginePick:
    engine: Engine
    reason: str


def require_root() -> None:
    if os.geteuid() != 0:
        raise UsageError(
            "gpuclus sandbox needs root: its nodes are privileged systemd containers on a private network",
            "run it with sudo (or as root)",
        )


APT_LOCK_WAIT_S = 600


def can_apt() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def apt_install(packages: list[str], say: Callable[[str], None]) -> None:
    say(f"installing {' '.join(packages)} with apt-get (needed by the sandbox)")
    # Another apt (unattended-upgrades, a second `sandbox up` beside this one) may hold
    # dpkg's lock for a while: wait for it instead of failing at once.
    wait_for_lock = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
    for argv in (
        ["apt-get", *wait_for_lock, "update", "-qq"],
        ["apt-get", *wait_for_lock, "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        result = run_apt(argv, deadline=time.monotonic() + APT_LOCK_WAIT_S)
        if result.returncode != 0:
            raise SandboxError(
                f"apt-get could not install {' '.join(packages)}: {engine_message(result.stderr) or 'failed'}",
                "install them by hand, then run `gpuclus sandbox up` again",
            )


# What apt says when another apt holds a lock. DPkg::Lock::Timeout makes apt wait
# for dpkg's lock only: `apt-get update` fails at once on the lists' lock.
APT_LOCK_MESSAGES = ("Could not get lock", "Unable to lock")


def run_apt(argv: list[str], *, deadline: float, pause: float = 2.0) -> subprocess.CompletedProcess[str]:
    """Run an apt-get command, again every ``pause`` seconds while another apt holds a lock, until ``deadline``."""
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    while True:
        result = subprocess.run(argv, capture_output=True, text=True, env=environment, check=False, timeout=900)
        locked = result.returncode != 0 and any(message in result.stderr for message in APT_LOCK_MESSAGES)
        if not locked or time.monotonic() + pause > deadline:
            return result
        time.sleep(pause)


def _podman_usable() -> bool:
    if shutil.which("podman") is None:
        return False
    if not cgroup_v2_only() and shutil.which("runc") is None:
        return False
    return subprocess.run(["podman", "info"], capture_output=True, check=False, timeout=60).returncode == 0


def _docker_usable() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30).returncode == 0


def pick_engine(choice: EngineChoice, *, install: bool, say: Callable[[str], None]) -> EnginePick:
    """The engine to use, installing podman when it is missing and allowed."""
    if choice in ("auto", "podman") and _podman_usable():
        return EnginePick(podman_engine(), "podman works here (no daemon needed)")
    if choice == "docker" or (choice == "auto" and shutil.which("podman") is None):
        if _docker_usable():
            reason = "asked for docker" if choice == "docker" else "podman is not installed; docker's daemon answers"
            return EnginePick(docker_engine(), reason)
        if choice == "docker":
            raise UsageError(
                "docker does not answer (no docker binary, or its daemon is not running)",
                "start dockerd, or use --engine podman",
            )
    if install and can_apt():
        packages = ["podman"] if cgroup_v2_only() else ["podman", "runc"]
        apt_install(packages, say)
        if _podman_usable():
            return EnginePick(podman_engine(), f"installed {' and '.join(packages)} with apt")
        raise SandboxError("podman was installed but `podman info` still fails", "run `podman info` to see why")
    raise UsageError(
        "no usable container engine (podman, or docker with a running daemon)",
        "apt-get install podman runc (or run as root on Debian/Ubuntu and gpuclus installs it)",
    )


def ensure_debootstrap(*, install: bool, say: Callable[[str], None]) -> str:
    found = shutil.which("debootstrap")
    if found:
        return found
    if install and can_apt():
        apt_install(["debootstrap"], say)
        found = shutil.which("debootstrap")
        if found:
            return found
    raise UsageError(
        "debootstrap is needed to build the node image and is not installed",
        "apt-get install debootstrap (needs a Debian/Ubuntu host)",
    )


# Each node's systemd (PID 1, journald, logind, ... and later the cluster's
# daemons) holds inotify instances, counted against root on the host: the nodes
# run as the host's root (privileged, no user namespace). A booted node holds
# about 7, a deployed one more; with Linux's default of 128 the 18th node's
# systemd cannot watch its units and its boot stalls. Room for 16 per node is
# left on top of what the host itself uses.
INOTIFY_INSTANCES_FILE = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_BASE = 128
INOTIFY_PER_NODE = 16


def inotify_instances_needed(node_count: int) -> int:
    return INOTIFY_BASE + INOTIFY_PER_NODE * node_count


def ensure_inotify_instances(node_count: int, *, install: bool, say: Callable[[str], None]) -> None:
    """Raise fs.inotify.max_user_instances for ``node_count`` nodes on this host, or say how (--no-install).

    The one host setting the sandbox changes: the kernel has no per-container
    limit to set instead. It lasts until the host reboots; it is only raised.
    """
    setting = INOTIFY_INSTANCES_FILE
    try:
        current = int(setting.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return  # not Linux's procfs: nothing to read, nothing gpuclus can set
    needed = inotify_instances_needed(node_count)
    if current >= needed:
        return
    hint = f"sysctl -w fs.inotify.max_user_instances={needed} (until reboot; a file in /etc/sysctl.d/ keeps it)"
    if not install:
        raise UsageError(
            f"{node_count} sandbox nodes need fs.inotify.max_user_instances >= {needed} (it is {current}): "
            "each node's systemd holds inotify instances, and a node short of them stalls at boot",
            hint,
        )
    try:
        setting.write_text(f"{needed}\n")
    except OSError as problem:
        raise SandboxError(
            f"could not raise fs.inotify.max_user_instances from {current} to {needed}: {problem.strerror}", hint
        ) from None
    say(f"raised fs.inotify.max_user_instances from {current} to {needed} for {node_count} nodes (until reboot)")


def check_disk(paths: list[Path], minimum: int = MIN_FREE_BYTES) -> None:
    for path in paths:
        probe = path
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        if free < minimum:
            raise UsageError(
                f"only {free / 1024**3:.1f} GiB free under {path}; the sandbox needs {minimum / 1024**3:.0f} GiB",
                "free some space (podman system prune removes unused images)",
            )
