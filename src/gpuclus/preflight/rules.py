"""The probe every node answers, and the pure rules that judge its answers.

Sudo, OS, python, host name, disk, names; across nodes: the clock against the controller's, and each node's
Slurm release (the one its OS ships) against the controller's. The GPU node's rules are in gpu.py.
"""

from __future__ import annotations

from gpuclus.preflight.gpu import gpu_check, gpu_node_checks
from gpuclus.preflight.report import NodeReport, PreflightCheck
from gpuclus.slurm.releases import mix_problem
from gpuclus.spec.topology import Node

MAX_CLOCK_SKEW = 5.0  # seconds; munge rejects credentials beyond its TTL window
# The OSes gpuclus deploys to: True where the sandbox's integration suite has run on it (docs/os-support.md).
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
    checks.append(gpu_check(node, sections))
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
