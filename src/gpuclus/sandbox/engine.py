"""Container engines (podman, docker): command builders and a runner.

The builders are pure (argv lists), so the flags that make systemd nodes work
on a given host are unit-tested without an engine. Why the flags are what they
are (DESIGN.md §7):
- rlimits are set per container below the host's hard limits: podman's and
  docker's defaults ask for more, and on hosts whose capability bounding set
  lacks CAP_SYS_RESOURCE the runtime then fails with "error setting rlimit".
- /sys/fs/cgroup is never bind-mounted: systemd inside would remount the
  host's cgroup tree read-only.
- podman uses runc where the host's cgroups are v1/hybrid: crun refuses
  "cgroups in hybrid mode".
- docker cannot drop CAP_SYS_RESOURCE from --privileged, so it gets every
  capability but that one, unconfined security profiles, a device rule for
  the fake GPUs' major number (195), and a private cgroup namespace over an
  empty tmpfs in which systemd mounts its own cgroup view.
- nodes restart on failure: `systemctl reboot` inside a node ends its systemd
  with a non-zero status, and the engine starts it again, which is a real
  reboot of the node's systemd (a fresh /run and /dev, every unit started
  anew; the nvidia_reboot role's test relies on it). `podman stop` and
  `docker stop` leave a node stopped: both engines ignore the policy for a
  container stopped by hand (measured with podman 4.3; docker's
  documentation says so), so a stopped node stays down until started.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpuclus.errors import GpuclusError
from gpuclus.fileio import parse_json

EngineKind = Literal["podman", "docker"]
LABEL = "gpuclus.sandbox"
# The .gpuclus directory of the spec whose `up` created a resource (see sandbox/owner.py).
OWNER_LABEL = "gpuclus.sandbox.owner"
# A node container's OS (sandbox/oses.py), for `sandbox list`.
OS_LABEL = "gpuclus.sandbox.os"
NVIDIA_MAJOR = 195
ULIMITS = ("nofile=1024:16384", "nproc=16384:16384")
# A node that reboots itself comes back; one stopped by hand stays stopped.
RESTART_POLICY = "on-failure"
# systemd stops cleanly on SIGRTMIN+3. docker import cannot set STOPSIGNAL, so
# docker gets it per container (--stop-signal) instead.
IMAGE_CHANGES = {
    "podman": ('CMD ["/lib/systemd/systemd"]', "STOPSIGNAL SIGRTMIN+3"),
    "docker": ('CMD ["/lib/systemd/systemd"]',),
}

# Podman logs to syslog when the host has one; where it has none, it says so on
# every call. That line is noise, never the reason a command failed.
_NOISE = ("failed to connect to syslog",)


class SandboxError(GpuclusError):
    """A sandbox step failed; the message names the step and the engine's own words."""


@dataclass(frozen=True)
class NodeContainer:
    name: str
    address: str
    network: str
    image: str
    cluster: str
    volumes: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Engine:
    kind: EngineKind
    binary: str
    runtime: str | None = None  # podman's OCI runtime when the default cannot work here
    fixed_mac: bool = True  # see mac_for; off where the client and daemon disagree on how to set it

    # Command builders ------------------------------------------------------------
    def _cli(self, *args: str) -> list[str]:
        if self.kind == "podman" and self.runtime:
            return [self.binary, "--runtime", self.runtime, *args]
        return [self.binary, *args]

    def run_node(self, node: NodeContainer) -> list[str]:
        argv = self._cli("run", "--detach", "--name", node.name, "--hostname", node.name)
        argv.append(f"--restart={RESTART_POLICY}")
        for key, value in ((LABEL, node.cluster), *node.labels):
            argv += ["--label", f"{key}={value}"]
        for limit in ULIMITS:
            argv += ["--ulimit", limit]
        argv += ["--network", node.network, "--ip", node.address]
        if self.fixed_mac:
            argv += ["--mac-address", mac_for(node.address)]
        if self.kind == "podman":
            # --no-hosts: the node's /etc/hosts is a plain file that gpuclus and
            # Ansible can rewrite, not a bind mount the engine owns.
            # --cgroupns=private: without it a v1/hybrid host shows the node its
            # name=systemd hierarchy twice on /sys/fs/cgroup/systemd (its own
            # subtree, then the whole tree over it), and enroot's cgroup hook,
            # which reads the first mount, cannot find a process's cgroup
            # outside the node's root one (an SSH session, slurmstepd).
            argv += ["--privileged", "--systemd=always", "--cgroupns=private", "--no-hosts", "--log-driver", "k8s-file"]
        else:
            argv += [
                "--cap-add=ALL",
                "--cap-drop=SYS_RESOURCE",
                "--security-opt",
                "seccomp=unconfined",
                "--security-opt",
                "apparmor=unconfined",
                "--device-cgroup-rule",
                f"c {NVIDIA_MAJOR}:* rwm",
                "--tmpfs",
                "/run",
                "--tmpfs",
                "/run/lock",
                # Without --privileged docker mounts the cgroup tree read-only
                # and systemd exits at once. A private cgroup namespace with an
                # empty tmpfs lets systemd mount its own view (never the host's).
                "--cgroupns=private",
                "--tmpfs",
                "/sys/fs/cgroup:rw",
                "--stop-signal",
                "SIGRTMIN+3",
            ]
        argv += ["--tmpfs", "/tmp:exec"]
        for volume, mount_point in node.volumes:
            argv += ["--volume", f"{volume}:{mount_point}"]
        argv.append(node.image)
        return argv

    def exec(self, name: str, command: Sequence[str], *, interactive: bool = False) -> list[str]:
        flags = ["--interactive"] if interactive else []
        return self._cli("exec", *flags, name, *command)

    def start(self, names: Sequence[str]) -> list[str]:
        return self._cli("start", *names)

    def stop(self, names: Sequence[str], timeout: int = 10) -> list[str]:
        return self._cli("stop", "--time", str(timeout), *names)

    def remove(self, names: Sequence[str]) -> list[str]:
        return self._cli("rm", "--force", *names)

    def all_container_names(self) -> list[str]:
        return self._cli("ps", "--all", "--format", "{{.Names}}")

    def list_containers(self, cluster: str | None = None) -> list[str]:
        selector = f"label={LABEL}" if cluster is None else f"label={LABEL}={cluster}"
        return self._cli("ps", "--all", "--filter", selector, "--format", "{{.Names}}")

    def inspect(self, names: Sequence[str]) -> list[str]:
        return self._cli("inspect", *names)

    def network_create(self, name: str, subnet: str, cluster: str, owner: str | None = None) -> list[str]:
        return self._cli("network", "create", "--subnet", subnet, *_labels(cluster, owner), name)

    def network_inspect(self, names: Sequence[str]) -> list[str]:
        return self._cli("network", "inspect", *names)

    def network_list(self, labelled: bool = False) -> list[str]:
        """Every network's name; ``labelled``: only the sandboxes' (any cluster)."""
        selector = ("--filter", f"label={LABEL}") if labelled else ()
        return self._cli("network", "ls", *selector, "--format", "{{.Name}}")

    def network_remove(self, name: str) -> list[str]:
        return self._cli("network", "rm", name)

    def volume_create(self, name: str, cluster: str, owner: str | None = None) -> list[str]:
        return self._cli("volume", "create", *_labels(cluster, owner), name)

    def volume_inspect(self, names: Sequence[str]) -> list[str]:
        return self._cli("volume", "inspect", *names)

    def volume_list(self, cluster: str | None = None) -> list[str]:
        selector = f"label={LABEL}" if cluster is None else f"label={LABEL}={cluster}"
        return self._cli("volume", "ls", "--filter", selector, "--format", "{{.Name}}")

    def volume_remove(self, names: Sequence[str]) -> list[str]:
        return self._cli("volume", "rm", "--force", *names)

    def image_exists(self, tag: str) -> list[str]:
        return self._cli("image", "inspect", "--format", "{{.Id}}", tag)

    def image_import(self, tag: str) -> list[str]:
        argv = self._cli("import")
        for change in IMAGE_CHANGES[self.kind]:
            argv += ["--change", change]
        return [*argv, "-", tag]

    def image_remove(self, tags: Sequence[str]) -> list[str]:
        return self._cli("image", "rm", "--force", *tags)

    def image_list(self, repository: str) -> list[str]:
        return self._cli("images", "--format", "{{.Repository}}:{{.Tag}}", repository)

    # Running them ------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        what: str,
        check: bool = True,
        stdin: Any = None,
        stdin_text: str | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run an engine command; failures raise SandboxError naming ``what``."""
        feed: dict[str, Any] = {"input": stdin_text} if stdin_text is not None else {"stdin": stdin}
        try:
            result = subprocess.run(
                list(argv),
                **feed,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SandboxError(f"{what}: {self.kind} did not answer within {timeout:.0f} s") from None
        except FileNotFoundError:
            raise SandboxError(f"{what}: {self.binary} is not installed") from None
        if check and result.returncode != 0:
            raise SandboxError(f"{what} failed: {engine_message(result.stderr) or f'exit {result.returncode}'}")
        return result

    def ok(self, argv: Sequence[str], timeout: float = 60) -> bool:
        """Whether the command succeeds; a missing engine or a hang counts as no."""
        try:
            return self.run(argv, what="probe", check=False, timeout=timeout).returncode == 0
        except SandboxError:
            return False

    def json_lines(self, argv: Sequence[str], *, what: str) -> list[dict[str, Any]]:
        """Parse output that is either a JSON array or one JSON object per line."""
        return parse_json_lines(self.run(argv, what=what).stdout)


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    """Inspect output: either a JSON array or one JSON object per line."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        loaded = parse_json(text)
        return loaded if isinstance(loaded, list) else []
    return [parse_json(line) for line in text.splitlines() if line.strip()]


def _labels(cluster: str, owner: str | None) -> list[str]:
    # One --label per value: podman and docker split them on the first "=" only,
    # and neither splits a value on commas, so any directory path fits.
    argv = ["--label", f"{LABEL}={cluster}"]
    return [*argv, "--label", f"{OWNER_LABEL}={owner}"] if owner is not None else argv


def mac_for(address: str) -> str:
    """A fixed, locally administered MAC address derived from the node's IPv4 address.

    A restarted node keeps its MAC, so the host's neighbour cache entry for it
    stays valid; with a fresh random MAC the host cannot reach the node over
    TCP until the stale entry expires (about half a minute).
    """
    octets = [int(part) for part in address.split(".")]
    return "02:67:" + ":".join(f"{octet:02x}" for octet in octets)


def engine_message(stderr: str) -> str:
    """The engine's own error line: the last one that says "error", else the last line.

    docker ends its messages with "Run 'docker run --help' ..."; the reason is
    the line before. Known noise is dropped.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not any(noise in line for noise in _NOISE)]
    errors = [line for line in lines if "error" in line.lower() or line.startswith("docker:")]
    if errors:
        return errors[-1]
    return lines[-1] if lines else ""


def cgroup_v2_only(root: Path = Path("/sys/fs/cgroup")) -> bool:
    """True on a unified (v2-only) cgroup host, where crun works."""
    return (root / "cgroup.controllers").exists()


def podman_engine(runc_path: str | None = None) -> Engine:
    binary = shutil.which("podman") or "podman"
    runtime = None
    if not cgroup_v2_only():
        runtime = runc_path or shutil.which("runc") or "runc"
    return Engine("podman", binary, runtime)


def docker_engine() -> Engine:
    binary = shutil.which("docker") or "docker"
    return Engine("docker", binary, fixed_mac=_docker_can_fix_mac(binary))


def _docker_can_fix_mac(binary: str) -> bool:
    # Clients speaking API >= 1.44 set a MAC per network, which older daemons
    # (Debian 12's docker.io speaks 1.41) refuse; clients below 1.44 use the
    # old container-wide field, which every daemon takes.
    try:
        result = subprocess.run(
            [binary, "version", "--format", "{{json .}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        report = parse_json(result.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return True
    if not isinstance(report, dict):
        return True
    client_info, server_info = report.get("Client") or {}, report.get("Server") or {}
    # The client reports the version it negotiated down to as ApiVersion and
    # the one it speaks natively as DefaultAPIVersion (newer clients only).
    client = _api_version(str(client_info.get("DefaultAPIVersion") or client_info.get("ApiVersion") or ""))
    server = _api_version(str(server_info.get("ApiVersion") or ""))
    return client < (1, 44) or server >= (1, 44)


def _api_version(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor)
    except ValueError:
        return (0, 0)
