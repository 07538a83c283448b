"""The rules for a node with NVIDIA GPUs (pure): the model from the PCI id, Secure Boot, nouveau, the kernel
headers, NVSwitch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuclus.preflight.report import PreflightCheck
from gpuclus.spec.topology import Node

if TYPE_CHECKING:
    from gpuclus.gpu_catalog import GpuKind


def gpu_check(node: Node, sections: dict[str, list[str]]) -> PreflightCheck:
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
# (documented in docs/cli.md; --json carries them by these names).
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
        "at the next boot; docs/gpu-nodes.md documents it), or turn Secure Boot off in the firmware",
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
