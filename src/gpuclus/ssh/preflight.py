"""Preflight: can gpuclus deploy to these nodes? Checked over SSH, all nodes in parallel.

One shell probe per node gathers everything (one round trip), and pure
functions judge the answers, so the rules are unit-testable without nodes.
preflight_spec() runs it for a spec (`gpuclus preflight`, and deploy's
pipeline first). `gpuclus preflight --password` is scan_host_keys() (every
node's host key, read without logging in, judged against gpuclus' known_hosts
and an admin's known_hosts file), then pin_host_keys() for the keys the admin
trusted, then install_keys(). Nothing here prints or asks: cli/preflight.py
shows the keys and the reports and asks for the confirmation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.hints import gpuclus_command
from gpuclus.slurm.releases import mix_problem
from gpuclus.spec.models import Role
from gpuclus.spec.topology import Node, Topology
from gpuclus.ssh.client import (
    FIRST_CONTACT,
    SshFailure,
    SshTarget,
    connect,
    fingerprint,
    host_key,
    install_key,
    is_auth_failure,
    key_label,
    known_hosts_name,
    run,
)
from gpuclus.state import StateDir

if TYPE_CHECKING:
    from gpuclus.gpu_catalog import GpuKind
    from gpuclus.spec.load import LoadedSpec

SSH_PORT = 22  # every node's SSH port for --password (tests point it at a local server)
MAX_CLOCK_SKEW = 5.0  # seconds; munge rejects credentials beyond its TTL window
# The OSes gpuclus deploys to: True where the sandbox's integration suite has run on it (README, "Operating systems").
SUPPORTED = {
    ("debian", "12"): True,
    ("debian", "13"): True,
    ("ubuntu", "22.04"): False,
    ("ubuntu", "24.04"): False,
    ("rocky", "9"): False,
}
SUPPORTED_HINT = "use Debian 12 or 13, Ubuntu 22.04/24.04 or Rocky 9"
# The Slurm major release each of them ships (docs/os-support.md), which gpuclus installs: slurmctld
# talks only to nodes of its own release or a few before it, so some mixes of OSes cannot form one cluster.
DISTRIBUTION_SLURM = {
    ("debian", "12"): "22.05",
    ("debian", "13"): "24.11",
    ("ubuntu", "22.04"): "21.08",
    ("ubuntu", "24.04"): "23.11",
    ("rocky", "9"): "22.05",  # EPEL
}

# Everything in one round trip. Sections are separated by marker lines. The
# clock is read last: skew_checks() takes it as read when the answer arrived,
# and a slow step after it (a name lookup waiting on DNS) showed as skew.
# sysfs is read with the `read` builtin (no process per PCI device). Each GPU
# section tolerates a missing tool; apt-cache (up to a few seconds with a cold
# cache) runs only on a node with an NVIDIA GPU whose headers are missing.
PROBE = r"""
echo '@@sudo'; sudo -n true >/dev/null 2>&1 && echo yes || echo no
echo '@@os'; . /etc/os-release 2>/dev/null; echo "${ID:-unknown} ${VERSION_ID:-unknown}"
echo '@@python'; command -v python3 || echo none
echo '@@hostname'; hostname
echo '@@disk'; df -Pk / | awk 'NR==2 {print $4}'
echo '@@pci'; g=''; sw=''; for d in /sys/bus/pci/devices/*; do [ -r "$d/vendor" ] || continue
  read -r v < "$d/vendor"; [ "$v" = 0x10de ] || continue
  read -r c < "$d/class"; i=unknown; read -r i 2>/dev/null < "$d/device"
  case "$c" in 0x0300*|0x0302*) g=1; echo "$d $i";; 0x0680*) sw="$sw$d $i
";; esac; done
echo '@@nvswitch'; printf '%s' "$sw"
echo '@@devnodes'; ls /dev/nvidia[0-9]* 2>/dev/null | wc -l
echo '@@secureboot'; command -v mokutil >/dev/null 2>&1 &&
  echo "mokutil $(timeout 5 mokutil --sb-state 2>&1 | head -n 1)"
if [ -d /sys/firmware/efi ]; then f=''
  for e in /sys/firmware/efi/efivars/SecureBoot-*; do [ -r "$e" ] && f=$e; done
  if [ -n "$f" ]; then echo "efivar $(od -An -tu1 -j4 -N1 "$f" 2>/dev/null | tr -d ' ')"; else echo efi; fi
else echo bios; fi
echo '@@nouveau'; grep -q '^nouveau ' /proc/modules 2>/dev/null && echo loaded || echo no
echo '@@kernel'; uname -r
echo '@@headers'; k=$(uname -r); if [ -z "$g" ]; then echo nogpu
elif command -v dpkg-query >/dev/null 2>&1; then h=linux-headers-$k
  if dpkg-query -W -f='${Status}' "$h" 2>/dev/null | grep -q ' installed$'; then echo "installed $h"
  elif apt-cache policy "$h" 2>/dev/null | grep -q 'Candidate: [^(]'; then echo "candidate $h"
  else echo "missing $h"; fi
elif command -v rpm >/dev/null 2>&1; then h=kernel-devel-$k
  if rpm -q "$h" >/dev/null 2>&1; then echo "installed $h"; else echo "absent $h"; fi
else echo unknown; fi
echo '@@resolve'; for n in NAMES; do getent hosts "$n" >/dev/null && echo "$n ok" || echo "$n missing"; done
echo '@@time'; date +%s.%N
"""


@dataclass
class PreflightCheck:
    name: str
    status: str  # ok, warn, fail, skip
    message: str
    hint: str = ""


@dataclass
class NodeReport:
    node: str
    address: str
    reachable: bool
    checks: list[PreflightCheck] = field(default_factory=list)
    clock: float | None = None
    probed_at: float | None = None  # local time the answer arrived (for skew)
    os_release: str = ""  # "<ID> <VERSION_ID>" from /etc/os-release (for the Slurm release check)

    @property
    def failed(self) -> bool:
        return not self.reachable or any(check.status == "fail" for check in self.checks)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("clock")
        data.pop("probed_at")
        data.pop("os_release")
        return data


# (the node's report, nodes answered so far, nodes asked): progress while preflight runs.
AnswerCallback = Callable[[NodeReport, int, int], None]


def parse_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections[current] = []
        elif current:
            sections[current].append(line.strip())
    return sections


def judge(
    node: Node,
    sections: dict[str, list[str]],
    admin_user: str,
    min_disk_gb: float,
    *,
    driver_install: bool = True,
    modules_from_model: bool = True,
) -> list[PreflightCheck]:
    """Turn a node's probe answers into checks (pure).

    ``driver_install``: the spec's nvidia.driver.install; Secure Boot and the
    kernel headers matter only when gpuclus is to build the driver's modules.
    ``modules_from_model``: nvidia.driver.kernel_modules is auto, so the nvidia
    phase picks the modules from gpus.model (see _model_check).
    """
    checks: list[PreflightCheck] = []

    def first(name: str) -> str:
        values = sections.get(name) or [""]
        return values[0]

    if first("sudo") == "yes":
        checks.append(PreflightCheck("sudo", "ok", f"{admin_user} can sudo without a password"))
    else:
        checks.append(
            PreflightCheck(
                "sudo",
                "fail",
                f"{admin_user} cannot sudo without a password",
                f"add '{admin_user} ALL=(ALL) NOPASSWD: ALL' to /etc/sudoers.d/{admin_user}",
            )
        )
    os_id, version = _os_key(first("os"))
    tested = SUPPORTED.get((os_id, version))
    if tested is True:
        checks.append(PreflightCheck("os", "ok", f"{os_id} {version} (tested)"))
    elif tested is False:
        checks.append(PreflightCheck("os", "warn", f"{os_id} {version}: supported, not tested in CI"))
    else:
        checks.append(PreflightCheck("os", "fail", f"{os_id} {version} is not supported", SUPPORTED_HINT))
    python = first("python")
    if python and python != "none":
        checks.append(PreflightCheck("python", "ok", python))
    else:
        checks.append(
            PreflightCheck("python", "fail", "python3 is missing", "install python3 (Ansible needs it on the node)")
        )
    hostname = first("hostname")
    if hostname.split(".")[0] == node.name:
        checks.append(PreflightCheck("hostname", "ok", hostname))
    else:
        checks.append(
            PreflightCheck(
                "hostname",
                "warn",
                f"hostname is {hostname!r}, the spec says {node.name!r}",
                "deploy's base phase sets it",
            )
        )
    try:
        free_gb: float | None = int(first("disk")) / 1024 / 1024
    except ValueError:
        free_gb = None
    # :g keeps a fractional --min-disk-gb (0.5) from reading as "need 0 GB".
    need = f"need {min_disk_gb:g} GB"
    if free_gb is None:
        checks.append(
            PreflightCheck("disk", "fail", f"free space on / unknown, {need}", "check that df works on the node")
        )
    elif free_gb >= min_disk_gb:
        checks.append(PreflightCheck("disk", "ok", f"{free_gb:.0f} GB free on /"))
    else:
        checks.append(
            PreflightCheck("disk", "fail", f"{free_gb:.1f} GB free on /, {need}", "free space on the root fs")
        )
    checks.append(_gpu_check(node, sections))
    checks.extend(gpu_node_checks(node, sections, driver_install, modules_from_model=modules_from_model))
    missing = [line.split()[0] for line in sections.get("resolve", []) if line.endswith(" missing")]
    if missing:
        checks.append(
            PreflightCheck(
                "names", "warn", f"cannot resolve {', '.join(missing[:5])}", "deploy's base phase writes /etc/hosts"
            )
        )
    else:
        checks.append(PreflightCheck("names", "ok", "every node name resolves"))
    return checks


def _gpu_check(node: Node, sections: dict[str, list[str]]) -> PreflightCheck:
    pci = _pci_ids(sections, "pci")
    try:
        device_nodes = int((sections.get("devnodes") or ["0"])[0])
    except ValueError:
        device_nodes = 0
    expected = node.gpu_count
    if node.gpus is not None and node.gpus.fake:
        if device_nodes >= expected:
            return PreflightCheck("gpus", "skip", f"{device_nodes} fake GPU device(s), no driver (spec: fake)")
        return PreflightCheck(
            "gpus", "fail", f"{device_nodes} of {expected} fake GPU device nodes", "run `gpuclus sandbox up`"
        )
    if len(pci) == expected:
        return PreflightCheck("gpus", "ok" if expected else "skip", f"{len(pci)} NVIDIA GPU(s) on the PCI bus")
    return PreflightCheck(
        "gpus",
        "fail",
        f"{len(pci)} NVIDIA GPU(s) on the PCI bus, the spec says {expected}",
        "fix nodes[].gpus.count, or check the hardware (lspci -d 10de:)",
    )


# The checks of a real GPU node's readiness for the nvidia phase, in this order
# (documented in the README; --json carries them by these names).
GPU_NODE_CHECKS = ("gpu-model", "secure-boot", "nouveau", "kernel-headers", "nvswitch")


def _pci_ids(sections: dict[str, list[str]], name: str) -> list[str]:
    """The device ids of a section's "<sysfs path> <device id>" lines ("unknown" where the id is missing)."""
    ids = []
    for line in sections.get(name, []):
        if line:
            fields = line.split()
            ids.append(fields[1] if len(fields) > 1 else "unknown")
    return ids


def gpu_node_checks(
    node: Node, sections: dict[str, list[str]], driver_install: bool, *, modules_from_model: bool = True
) -> list[PreflightCheck]:
    """Model, Secure Boot, nouveau, kernel headers and NVSwitches: what the nvidia phase will meet (pure).

    Judged only on nodes whose spec says real GPUs: a CPU node needs none of it,
    and a fake GPU (the sandbox's) must never pass a GPU check.
    """
    if node.gpus is None:
        reason = "no GPUs in the spec"
    elif node.gpus.fake:
        reason = "fake GPUs (spec: fake): no driver to install"
    else:
        reason = ""
    if reason:
        return [PreflightCheck(name, "skip", reason) for name in GPU_NODE_CHECKS]
    return [
        _model_check(node, _pci_ids(sections, "pci"), driver_install and modules_from_model),
        _secure_boot_check(sections.get("secureboot", []), driver_install),
        _nouveau_check(sections, driver_install),
        _headers_check(sections, driver_install),
        _nvswitch_check(_pci_ids(sections, "nvswitch")),
    ]


def _model_check(node: Node, ids: list[str], modules_from_model: bool = False) -> PreflightCheck:
    from gpuclus.gpu_catalog import lookup, model_matches  # its table is read only when a GPU node is judged

    if not ids:
        return PreflightCheck("gpu-model", "skip", "no NVIDIA GPU on the PCI bus")
    kinds = [lookup(device_id) for device_id in ids]
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind.describe()] = counts.get(kind.describe(), 0) + 1
    found = ", ".join(f"{count}x {what}" for what, count in counts.items())
    wanted = node.gpus.model if node.gpus is not None else None
    wrong = sorted({kind.model for kind in kinds if kind.model and wanted and not model_matches(wanted, kind.model)})
    if wrong:
        return PreflightCheck(
            "gpu-model",
            "fail",
            f"the spec says {wanted}, the node has {found}",
            f"fix nodes[].gpus.model (it becomes the Slurm GRES type): {' or '.join(wrong)}, or check the node",
        )
    unknown = sorted({kind.device_id for kind in kinds if not kind.known})
    if unknown:
        ids_text = ", ".join(f"0x{device_id}" for device_id in unknown)
        checked = f"{wanted} not checked, " if wanted else ""
        return PreflightCheck(
            "gpu-model",
            "warn",
            f"{found}: {checked}device {ids_text} not in gpuclus' GPU catalogue",
            "its generation, and so the kernel-module flavour, is unknown to gpuclus: compare `lspci -nn -d 10de:` "
            "with src/gpuclus/data/nvidia_gpus.yml",
        )
    if wanted is None and modules_from_model:
        unnamed = _unnamed_model_check(kinds, found)
        if unnamed is not None:
            return unnamed
    flavours = {kind.generation: _flavour(kind.module_flavour, kind.open_required) for kind in kinds}
    if len(set(flavours.values())) == 1:
        return PreflightCheck("gpu-model", "ok", f"{found}: {next(iter(flavours.values()))}")
    each = "; ".join(f"{generation}: {flavour}" for generation, flavour in sorted(flavours.items()))
    return PreflightCheck("gpu-model", "ok", f"{found} ({each})")


def _unnamed_model_check(kinds: list[GpuKind], found: str) -> PreflightCheck | None:
    """The spec names no gpus.model, so the nvidia phase knows no generation and installs the
    proprietary modules: a failure where they cannot drive the GPUs, a warning where NVIDIA
    recommends the open ones. Known GPUs only (an unknown id is warned about already)."""
    models = sorted({kind.model for kind in kinds if kind.model})
    fix = f"set nodes[].gpus.model: {' or '.join(models)} (the nvidia phase picks the kernel modules from it)"
    if any(kind.open_required for kind in kinds):
        return PreflightCheck(
            "gpu-model",
            "fail",
            f"{found}: only the open kernel modules drive these, and without gpus.model the nvidia phase would "
            "install the proprietary ones",
            f"{fix}, or nvidia.driver.kernel_modules: open",
        )
    if any(kind.module_flavour == "open" for kind in kinds):
        return PreflightCheck(
            "gpu-model",
            "warn",
            f"{found}: without gpus.model the nvidia phase installs the proprietary kernel modules (they work; "
            "NVIDIA recommends the open ones for these)",
            fix,
        )
    return None


def _flavour(module_flavour: str, open_required: bool) -> str:
    if module_flavour != "open":
        return "proprietary kernel modules"
    return f"open kernel modules {'required' if open_required else 'recommended'}"


def secure_boot_state(lines: list[str]) -> tuple[str, str]:
    """("on" | "off" | "unknown", how it was learned) from the probe's secureboot lines."""
    for line in lines:
        source, _, value = line.partition(" ")
        text = value.lower()
        if source == "mokutil" and "enabled" in text:
            return "on", "mokutil --sb-state"
        if source == "mokutil" and "disabled" in text:
            return "off", "mokutil --sb-state"
    for line in lines:
        source, _, value = line.partition(" ")
        if source == "efivar" and value.strip() in {"0", "1"}:
            return ("on" if value.strip() == "1" else "off"), "the SecureBoot EFI variable"
        if source == "bios":
            return "off", "legacy BIOS boot, no UEFI"
    mokutil = next((line.partition(" ")[2] for line in lines if line.startswith("mokutil")), "")
    if mokutil:
        return "unknown", f"mokutil said {mokutil!r} and the SecureBoot EFI variable is not readable"
    return "unknown", "no mokutil and no readable SecureBoot EFI variable"


def _secure_boot_check(lines: list[str], driver_install: bool) -> PreflightCheck:
    state, source = secure_boot_state(lines)
    if state == "unknown":
        return PreflightCheck("secure-boot", "skip", f"Secure Boot state unknown: {source}")
    if state == "off":
        return PreflightCheck("secure-boot", "ok", f"off ({source})")
    if not driver_install:
        return PreflightCheck("secure-boot", "ok", f"on ({source}); nvidia.driver.install is false")
    return PreflightCheck(
        "secure-boot",
        "fail",
        f"Secure Boot is on ({source}): the driver's DKMS-built kernel modules are unsigned and would not load",
        "enrol a Machine Owner Key that signs DKMS modules (mokutil --import, then confirm on the node's console "
        "at the next boot; the README's GPU nodes section documents it), or turn Secure Boot off in the firmware",
    )


def _nouveau_check(sections: dict[str, list[str]], driver_install: bool) -> PreflightCheck:
    if (sections.get("nouveau") or [""])[0] != "loaded":
        return PreflightCheck("nouveau", "ok", "nouveau not loaded")
    hint = (
        "the nvidia role blacklists it and rebuilds the initramfs; a reboot follows"
        if driver_install
        else "nvidia.driver.install is false: blacklist nouveau and rebuild the initramfs yourself"
    )
    return PreflightCheck("nouveau", "warn", "nouveau (the open-source driver) is loaded", hint)


def _headers_check(sections: dict[str, list[str]], driver_install: bool) -> PreflightCheck:
    kernel = (sections.get("kernel") or ["unknown"])[0] or "unknown"
    state, _, package = (sections.get("headers") or ["unknown"])[0].partition(" ")
    if not driver_install:
        return PreflightCheck("kernel-headers", "skip", f"kernel {kernel}; nvidia.driver.install is false")
    if state == "installed":
        return PreflightCheck("kernel-headers", "ok", f"{package} installed")
    if state == "candidate":
        return PreflightCheck("kernel-headers", "ok", f"{package} installable (the nvidia role installs it)")
    if state == "missing":
        return PreflightCheck(
            "kernel-headers",
            "fail",
            f"{package} is not installed and apt has no candidate for it: DKMS cannot build the driver for {kernel}",
            f"run apt-get update; if the mirror no longer carries {package}, upgrade the kernel and reboot "
            "into it before deploying",
        )
    if state == "nogpu":
        return PreflightCheck("kernel-headers", "skip", f"kernel {kernel}: no NVIDIA GPU on the PCI bus")
    if state == "absent":
        return PreflightCheck(
            "kernel-headers",
            "warn",
            f"{package} is not installed (the nvidia role installs it with dnf)",
            f"if the repositories no longer carry {package} (a kernel older than the newest), "
            "run dnf update kernel and reboot into it before deploying",
        )
    return PreflightCheck("kernel-headers", "skip", f"kernel {kernel}: neither dpkg nor rpm on the node")


def _nvswitch_check(ids: list[str]) -> PreflightCheck:
    if not ids:
        return PreflightCheck("nvswitch", "ok", "no NVSwitch on the PCI bus")
    return PreflightCheck("nvswitch", "ok", f"HGX with {len(ids)} NVSwitches: fabric manager needed")


def skew_checks(reports: list[NodeReport], controller: str) -> None:
    """Clock skew of each node against the controller (< 5 s), from the probe times."""
    reference = next((r for r in reports if r.node == controller and r.clock is not None), None)
    for report in reports:
        if report.clock is None or report.probed_at is None:
            continue
        if reference is None or reference.clock is None or reference.probed_at is None:
            report.checks.append(PreflightCheck("clock", "skip", "controller unreachable: skew not measured"))
            continue
        # Compare each clock after removing when its answer arrived here.
        skew = (report.clock - report.probed_at) - (reference.clock - reference.probed_at)
        if abs(skew) < MAX_CLOCK_SKEW:
            report.checks.append(PreflightCheck("clock", "ok", f"{skew:+.2f} s against the controller"))
        else:
            report.checks.append(
                PreflightCheck(
                    "clock",
                    "fail",
                    f"{skew:+.1f} s against the controller (munge needs < {MAX_CLOCK_SKEW:.0f} s)",
                    "sync the clocks (chronyc makestep) before deploying",
                )
            )


def slurm_release_checks(
    reports: list[NodeReport], controller: str, backups: set[str], pinned: str | None = None
) -> None:
    """Each node's Slurm (the release its OS ships) against the controller's: slurmctld accepts its own
    release and a few before it, never a newer one; a backup controller runs the controller's exactly.
    With slurm.version pinned (``pinned``) every node installs that one: nothing to compare."""
    if pinned is not None:
        for report in reports:
            if report.reachable:
                report.checks.append(
                    PreflightCheck("slurm-release", "skip", f"slurm.version pins {pinned} on every node")
                )
        return
    reference = next((r for r in reports if r.node == controller and r.reachable), None)
    ours = DISTRIBUTION_SLURM.get(_os_key(reference.os_release)) if reference is not None else None
    for report in reports:
        if not report.reachable:
            continue
        theirs = DISTRIBUTION_SLURM.get(_os_key(report.os_release))
        if reference is None or ours is None or theirs is None:
            why = "controller unreachable" if reference is None else "an OS whose Slurm release gpuclus does not know"
            report.checks.append(PreflightCheck("slurm-release", "skip", f"not compared: {why}"))
            continue
        if report.node == controller:
            report.checks.append(PreflightCheck("slurm-release", "ok", f"Slurm {ours} (the controller)"))
            continue
        problem = (
            None
            if theirs == ours
            else f"its Slurm {theirs} differs from the controller's {ours}; both slurmctld must run one release"
            if report.node in backups
            else mix_problem(ours, theirs)
        )
        if problem is None:
            report.checks.append(PreflightCheck("slurm-release", "ok", f"Slurm {theirs}, the controller's {ours}"))
        else:
            report.checks.append(
                PreflightCheck(
                    "slurm-release",
                    "fail",
                    f"{report.os_release}: {problem}",
                    "run an OS release on this node whose Slurm the controller accepts (docs/os-support.md), "
                    "or move the controller to the newer release",
                )
            )


def _os_key(os_release: str) -> tuple[str, str]:
    os_id, _, version = os_release.partition(" ")
    return os_id, version


def run_preflight(
    topology: Topology,
    admin_user: str,
    key_file: Path,
    known_hosts: Path,
    *,
    min_disk_gb: float = 10.0,
    connector: Callable[[SshTarget], Any] = connect,
    only: list[str] | None = None,
    advice: SshAdvice | None = None,
    on_answer: AnswerCallback | None = None,
    driver_install: bool = True,
    modules_from_model: bool = True,
    slurm_pin: str | None = None,
) -> list[NodeReport]:
    """Probe the nodes (all, or those named in ``only``); the controller is always probed for clock skew
    and as the reference of the Slurm releases.

    ``driver_install``, ``modules_from_model``: from the spec's nvidia.driver (see judge).
    ``slurm_pin``: the spec's slurm.version (every node installs it; the releases are then not compared).

    ``advice``: what the hint for a failed SSH login may say about this directory.
    ``on_answer(report, answered, total)``: called as each of the chosen nodes answers (or
    fails to), from the probing threads, one call at a time; ``total`` counts the chosen
    nodes, not a controller probed only as the clock reference. The report's clock check
    comes later, once every node has answered.
    """
    names = " ".join(shlex.quote(node.name) for node in topology.nodes)
    probe = PROBE.replace("NAMES", names)

    def one(node: Node) -> NodeReport:
        report = NodeReport(node.name, node.address, reachable=False)
        target = SshTarget(node.address, admin_user, key_file, known_hosts)
        try:
            client = connector(target)
        except SshFailure as failure:
            hint = ssh_hint(str(failure), admin_user, advice or SshAdvice())
            report.checks.append(PreflightCheck("ssh", "fail", str(failure), hint))
            return report
        try:
            result = run(client, probe, timeout=60)
        finally:
            client.close()
        report.probed_at = time.time()
        report.reachable = True
        report.checks.append(PreflightCheck("ssh", "ok", f"{admin_user}@{node.address} with gpuclus' key"))
        sections = parse_sections(result.stdout)
        report.os_release = (sections.get("os") or [""])[0]
        try:
            report.clock = float((sections.get("time") or ["nan"])[0])
        except ValueError:
            report.clock = None
        report.checks.extend(
            judge(
                node,
                sections,
                admin_user,
                min_disk_gb,
                driver_install=driver_install,
                modules_from_model=modules_from_model,
            )
        )
        return report

    controller = topology.controller
    chosen = [node for node in topology.nodes if only is None or node.name in only]
    reference_only = controller is not None and controller not in chosen
    probed = [*chosen, controller] if reference_only and controller is not None else chosen
    chosen_names = {node.name for node in chosen}
    answered = 0
    # One call at a time, so a caller's counter or spinner needs no lock of its own.
    answering = threading.Lock()

    def reported(node: Node) -> NodeReport:
        nonlocal answered
        report = one(node)
        if on_answer is not None and node.name in chosen_names:
            with answering:
                answered += 1
                on_answer(report, answered, len(chosen))
        return report

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(probed)))) as pool:
        reports = list(pool.map(reported, probed))
    if controller is not None:
        skew_checks(reports, controller.name)
        backups = {node.name for node in topology.with_role(Role.BACKUP_CONTROLLER)}
        slurm_release_checks(reports, controller.name, backups, slurm_pin)
    # The controller was probed only as the clock reference: not part of the result.
    return reports[: len(chosen)]


@dataclass(frozen=True)
class SshAdvice:
    """What a hint for a failed SSH login can say about the spec's directory."""

    spec: Path | None = None  # named in the commands the hint suggests
    sandbox: bool = False  # `gpuclus sandbox up` made these nodes (.gpuclus/sandbox.json beside the spec)
    new_key: bool = False  # this directory's key was made by a plain preflight and never installed anywhere

    @classmethod
    def beside(cls, spec_path: Path) -> SshAdvice:
        state = StateDir.beside(spec_path)
        return cls(spec_path, state.sandbox_record.exists(), state.key_not_installed_marker.exists())


def ssh_hint(message: str, admin_user: str, advice: SshAdvice) -> str:
    """The hint for a node gpuclus could not log in to: a refused login is not a host that is down."""
    if "host key" in message:
        return "the node's host key changed: if it was reinstalled, remove its line from .gpuclus/ssh/known_hosts"
    if not is_auth_failure(message):
        return "check the address, that sshd runs, and the firewall"
    spec = str(advice.spec) if advice.spec is not None else "the spec"
    if advice.sandbox:
        return (
            f"authentication failed as {admin_user}: check cluster.admin_user in {spec}; gpuclus' key reaches "
            f"sandbox nodes through `{gpuclus_command('sandbox up', advice.spec)}` (as it creates or starts them), "
            "not through --password"
        )
    if advice.new_key:
        return (
            "this directory has its own new SSH key (.gpuclus/ssh/) that the nodes do not know: run gpuclus from "
            "the directory where the cluster was set up, or copy its .gpuclus/ here; for a cluster new to "
            f"gpuclus, install this key with `{gpuclus_command('preflight', advice.spec, '--password')}`"
        )
    return (
        f"authentication failed as {admin_user}: check cluster.admin_user in {spec}, or install gpuclus' key "
        f"with `{gpuclus_command('preflight', advice.spec, '--password')}`"
    )


def preflight_spec(
    loaded: LoadedSpec,
    spec_path: Path,
    min_disk_gb: float = 10.0,
    hosts: list[str] | None = None,
    on_answer: AnswerCallback | None = None,
) -> list[NodeReport]:
    """Preflight a checked spec's nodes (all, or ``hosts``) with gpuclus' key, learning new host keys.

    ``on_answer``: see run_preflight (progress while the nodes answer).
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    if not state.private_key.exists():
        state.ensure_ssh_key()
        if not state.sandbox_record.exists():
            # A key no node knows yet: a login refused with it says so (SshAdvice.new_key).
            state.mark_key_not_installed()
    return run_preflight(
        loaded.topology,
        loaded.spec.cluster.admin_user,
        state.private_key,
        state.known_hosts,
        min_disk_gb=min_disk_gb,
        only=hosts,
        advice=SshAdvice.beside(spec_path),
        on_answer=on_answer,
        driver_install=loaded.spec.nvidia.driver.install,
        modules_from_model=loaded.spec.nvidia.driver.kernel_modules == "auto",
        slurm_pin=loaded.spec.slurm.version,
        # First contact with a real node: its host key is learned (accept-new, as Ansible does).
        connector=lambda target: connect(target, accept_new=True),
    )


def preflight_exit_code(reports: list[NodeReport]) -> ExitCode:
    if any(not report.reachable for report in reports):
        return ExitCode.UNREACHABLE
    if any(report.failed for report in reports):
        return ExitCode.FAILED
    return ExitCode.OK


# `preflight --password`: host keys first, then the password ------------------------------------

# What a node's offered host key is, against what gpuclus and the admin know:
#   pinned    matches a key in gpuclus' known_hosts that was trusted (sandbox, confirmed, --known-hosts)
#   listed    matches the admin's --known-hosts FILE
#   new       unknown, or only learned on first contact by an earlier preflight: needs a confirmation
#   changed   differs from the key in gpuclus' known_hosts: refused
#   mismatch  differs from the admin's --known-hosts FILE: refused
#   unreachable  no key was read: refused
REFUSED = frozenset({"changed", "mismatch", "unreachable"})


@dataclass
class HostKeyCheck:
    node: str
    address: str
    status: str
    key_type: str = ""  # ssh-ed25519, as in known_hosts
    key: str = ""  # the base64 blob
    message: str = ""

    @property
    def refused(self) -> bool:
        return self.status in REFUSED

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key) if self.key else ""

    def describe(self) -> str:
        """head (10.0.0.10): ED25519 key SHA256:..., as ssh shows a new host's key."""
        if not self.key:
            return f"{self.node} ({self.address})"
        return f"{self.node} ({self.address}): {key_label(self.key_type)} key {self.fingerprint}"

    def offered(self) -> str:
        return f"{self.address} offers {key_label(self.key_type)} key {self.fingerprint}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "address": self.address,
            "status": self.status,
            "type": key_label(self.key_type) if self.key_type else None,
            "fingerprint": self.fingerprint or None,
            "key": f"{self.key_type} {self.key}" if self.key else None,
            "message": self.message,
        }


@dataclass(frozen=True)
class KnownKey:
    names: str  # the line's host field: names and patterns, plain or hashed, comma-separated
    key_type: str
    key: str
    first_contact: bool  # learned on first contact by a preflight, never confirmed

    def matches(self, name: str) -> bool:
        return any(_name_matches(pattern, name) for pattern in self.names.split(","))


def read_known_hosts(path: Path) -> list[KnownKey]:
    """An OpenSSH known_hosts file's keys (marker lines such as @revoked skipped); a missing file holds none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    keys = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith(("#", "@")):
            keys.append(KnownKey(fields[0], fields[1], fields[2], FIRST_CONTACT in fields[3:]))
    return keys


def _name_matches(pattern: str, name: str) -> bool:
    if not pattern.startswith("|1|"):
        return pattern == name
    # HashKnownHosts: |1|base64(salt)|base64(HMAC-SHA1(salt, name))
    try:
        salt, digest = (base64.b64decode(part) for part in pattern[3:].split("|", 1))
    except ValueError:
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def scan_host_keys(
    loaded: LoadedSpec, spec_path: Path, known_hosts_file: Path | None = None, timeout: float = 10.0
) -> list[HostKeyCheck]:
    """Every node's host key, read without logging in (all nodes in parallel), and what it is worth.

    Nothing is sent to a node but the key exchange, and nothing is written.
    ``known_hosts_file``: the admin's OpenSSH known_hosts file, whose keys are
    trusted; a missing or unreadable one is a UsageError (exit 2).
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    user = loaded.spec.cluster.admin_user
    ours = read_known_hosts(state.known_hosts)
    theirs: list[KnownKey] = []
    if known_hosts_file is not None:
        try:
            if not known_hosts_file.is_file():
                raise FileNotFoundError(2, "no such file", str(known_hosts_file))
            theirs = read_known_hosts(known_hosts_file)
        except OSError as problem:
            raise UsageError(
                f"--known-hosts {known_hosts_file}: {problem.strerror or problem}",
                "pass an OpenSSH known_hosts file, e.g. from ssh-keyscan, whose fingerprints you checked",
            ) from None

    def one(node: Node) -> HostKeyCheck:
        name = known_hosts_name(node.address, SSH_PORT)
        pinned = [known for known in ours if known.matches(name)]
        listed = [known for known in theirs if known.matches(name)]
        prefer = (pinned or listed)[0].key_type if pinned or listed else None
        target = SshTarget(node.address, user, state.private_key, state.known_hosts, SSH_PORT)
        try:
            key_type, key = host_key(target, timeout, prefer)
        except SshFailure as failure:
            return HostKeyCheck(node.name, node.address, "unreachable", message=str(failure))
        check = HostKeyCheck(node.name, node.address, "new", key_type, key)
        same = [known for known in pinned if (known.key_type, known.key) == (key_type, key)]
        if any(not known.first_contact for known in same):
            check.status, check.message = "pinned", "matches .gpuclus/ssh/known_hosts"
        elif pinned and not same:
            check.status = "changed"
            check.message = f"{check.offered()}, not the key in .gpuclus/ssh/known_hosts"
        elif any((known.key_type, known.key) == (key_type, key) for known in listed):
            check.status, check.message = "listed", f"matches {known_hosts_file}"
        elif listed:
            check.status = "mismatch"
            check.message = f"{check.offered()}, not the key in {known_hosts_file}"
        elif same:
            check.message = "learned on first contact by an earlier preflight, never confirmed"
        else:
            check.message = "not seen before"
        return check

    nodes = loaded.topology.nodes
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
        return list(pool.map(one, nodes))


def pin_host_keys(spec_path: Path, checks: list[HostKeyCheck]) -> None:
    """Record the new and listed keys in gpuclus' known_hosts as trusted (call it once the admin trusted them)."""
    entries = {
        known_hosts_name(check.address, SSH_PORT): [f"{check.key_type} {check.key}"]
        for check in checks
        if check.status in {"new", "listed"}
    }
    if entries:
        StateDir.beside(spec_path).set_known_host_keys(entries)


def install_keys(
    loaded: LoadedSpec,
    spec_path: Path,
    password: str,
    on_installed: Callable[[str], None],
    host_keys: list[HostKeyCheck],
) -> None:
    """Install gpuclus' public key on every node, logging in with ``password`` (like ssh-copy-id).

    The password goes only to nodes whose host key is pinned as trusted in
    gpuclus' known_hosts (pin_host_keys), and the connection checks the key
    again. ``host_keys`` are scan_host_keys()' answers: a refused node is
    skipped. ``on_installed`` gets each node's name as its key is in place;
    the nodes that refused or were refused are named together in one
    GpuclusError (exit 4) at the end.
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    public_key = state.ensure_ssh_key()
    user = loaded.spec.cluster.admin_user
    checks = {check.node: check for check in host_keys}
    failed = [f"{check.node}: {check.message}" for check in host_keys if check.refused]
    for node in loaded.topology.nodes:
        check = checks.get(node.name)
        if check is None or check.refused:
            continue
        name = known_hosts_name(node.address, SSH_PORT)
        if not any(known.matches(name) and not known.first_contact for known in read_known_hosts(state.known_hosts)):
            failed.append(f"{node.name}: host key not trusted yet, password not sent")
            continue
        try:
            target = SshTarget(node.address, user, state.private_key, state.known_hosts, SSH_PORT)
            install_key(target, password, public_key)
            state.key_not_installed_marker.unlink(missing_ok=True)
            on_installed(node.name)
        except SshFailure as problem:
            failed.append(f"{node.name}: {problem}")
    if failed:
        raise install_failure(failed, host_keys)


def install_failure(failed: list[str], host_keys: list[HostKeyCheck]) -> GpuclusError:
    """The one error that names every node gpuclus' key could not be installed on (exit 4)."""
    hint = None
    if any(check.status in {"changed", "mismatch"} for check in host_keys):
        hint = (
            "compare the refused keys with the node's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on its "
            "console); a reinstalled node: remove its line from .gpuclus/ssh/known_hosts"
        )
    return GpuclusError("could not install gpuclus' key on: " + "; ".join(failed), hint, exit_code=ExitCode.UNREACHABLE)
