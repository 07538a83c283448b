"""What a GPU node says about its NVIDIA driver besides nvidia-smi: loaded module, installed libraries, state file.

The nvidia-smi job (``nvidia_smi``) prints these after nvidia-smi's own
answer, in the same job, so that a failing nvidia-smi can be told apart:

- a **version mismatch**: the loaded kernel module is not the version of the
  installed user-space libraries (an upgrade without a reboot); nvidia-smi
  says "Failed to initialize NVML: Driver/library version mismatch";
- **no driver**: no module loaded and no /dev/nvidiactl (never installed, or
  installed and not loaded yet).

Sources, read as the job's user (all world-readable):
``/sys/module/nvidia/version`` (the loaded module's version; absent when none
is loaded), else ``/proc/driver/nvidia/version`` ("NVRM version: NVIDIA UNIX
x86_64 Kernel Module  550.54.15  ..." or "... Open Kernel Module for x86_64
580.126.09  Release Build ..."); the version in each ``libnvidia-ml.so.<version>``
file name (Debian/Ubuntu multiarch dirs, Debian's nvidia/current, RHEL's
/usr/lib64); and ``/var/lib/gpuclus/nvidia-driver.json``, which gpuclus'
nvidia_driver role writes on every GPU node (keys used here: installed_version,
loaded_version, verdict, reboot_needed; nothing secret is in it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuclus.fileio import parse_json

STATE_FILE = "/var/lib/gpuclus/nvidia-driver.json"
MODULE_VERSION_FILE = "/sys/module/nvidia/version"
PROC_VERSION_FILE = "/proc/driver/nvidia/version"
CONTROL_DEVICE = "/dev/nvidiactl"
LIBRARY_GLOBS = (
    "/usr/lib/*-linux-gnu/libnvidia-ml.so.*",
    "/usr/lib/*-linux-gnu/nvidia/current/libnvidia-ml.so.*",
    "/usr/lib64/libnvidia-ml.so.*",
)

# Each fact the job prints starts with "== <source>" (file contents follow on the next lines).
_HEADER = "== "
_LIBRARY = "lib "

# What nvidia-smi prints when the module and the libraries differ (NVML's
# NVML_ERROR_LIB_RM_VERSION_MISMATCH, return value 18, which nvidia-smi also
# exits with). Newer drivers add "NVML library version: 570.124" on the next
# line (seen in tinygrad/open-gpu-kernel-modules#47, intel/llvm#17614,
# cpnr/computing#109). The text decides, not the exit code.
MISMATCH_TEXT = "Driver/library version mismatch"
_NVML_LIBRARY = re.compile(r"NVML library version:\s*(\d+(?:\.\d+)+)")

_VERSION = re.compile(r"^\d+\.\d+(?:\.\d+)?$")
_PROC_MODULE = re.compile(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s")
_LIBRARY_VERSION = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")


def facts_command(root: str = "") -> str:
    """Shell lines that print every fact below, each after a "== <source>" line; silent about what is absent.

    ``root`` puts every path under another directory (the unit tests run the lines for real on a tree of files).
    """
    files = " ".join(root + path for path in (MODULE_VERSION_FILE, PROC_VERSION_FILE, STATE_FILE))
    libraries = " ".join(root + pattern for pattern in LIBRARY_GLOBS)
    return (
        f'for f in {files}; do if [ -r "$f" ]; then echo "{_HEADER}$f"; cat "$f"; echo; fi; done; '
        f'if [ -e {root}{CONTROL_DEVICE} ]; then echo "{_HEADER}{root}{CONTROL_DEVICE}"; fi; '
        f'for f in {libraries}; do if [ -e "$f" ]; then echo "{_HEADER}{_LIBRARY}$f"; fi; done'
    )


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


@dataclass(frozen=True)
class StateFile:
    """The nvidia_driver role's verdict on the node, as of the last deploy (it may be stale)."""

    installed_version: str | None = None
    loaded_version: str | None = None
    verdict: str | None = None
    reboot_needed: bool = False


@dataclass(frozen=True)
class DriverFacts:
    loaded: str | None = None  # the loaded kernel module's version; None when no module is loaded
    libraries: tuple[str, ...] = ()  # versions of the libnvidia-ml.so.<version> files, newest first
    control_device: bool = False  # /dev/nvidiactl exists
    state: StateFile | None = None  # /var/lib/gpuclus/nvidia-driver.json, when present and readable
    nvml_library: str | None = None  # "NVML library version: X" from a failing nvidia-smi (major.minor only)

    @property
    def installed(self) -> str | None:
        """The user-space driver version on disk: the newest library file, else the state file, else nvidia-smi's.

        nvidia-smi names only major.minor (570.124); the state file has the
        full version but may predate a change by hand, so it is taken only
        where nvidia-smi does not contradict it.
        """
        if self.libraries:
            return self.libraries[0]
        recorded = self.state.installed_version if self.state else None
        if recorded and (self.nvml_library is None or same_version(recorded, self.nvml_library)):
            return recorded
        return self.nvml_library

    @property
    def no_driver(self) -> bool:
        """No module loaded and no control device: nothing of the driver is running on the node."""
        return self.loaded is None and not self.control_device

    @property
    def reboot_pending(self) -> bool:
        """gpuclus installed a driver that is not the loaded module yet (the state file may predate a reboot)."""
        state = self.state
        if state is None or not state.reboot_needed:
            return False
        if state.installed_version and self.loaded:
            return not same_version(state.installed_version, self.loaded)
        return True

    def mismatch_text(self) -> str:
        """'kernel module 535.183.01 loaded, libraries 550.54.15 installed', with what is known."""
        loaded = f"kernel module {self.loaded} loaded" if self.loaded else "loaded module version unreadable"
        installed = f"libraries {self.installed} installed" if self.installed else "installed version unknown"
        return f"{loaded}, {installed}"


def same_version(one: str, other: str) -> bool:
    """Equal, or one a prefix of the other by parts (nvidia-smi's 570.124 names 570.124.06)."""
    a, b = version_key(one), version_key(other)
    shorter = min(len(a), len(b))
    return shorter >= 2 and a[:shorter] == b[:shorter]


def _section(sections: dict[str, str], path: str) -> str | None:
    """The text printed under ``path`` (the header may carry a root before it)."""
    return next((text for name, text in sections.items() if name.endswith(path)), None)


def _sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(_HEADER):
            current = sections.setdefault(line[len(_HEADER) :].strip(), [])
            continue
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in sections.items()}


def parse_state_file(text: str) -> StateFile | None:
    try:
        data: Any = parse_json(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None

    def text_of(key: str) -> str | None:
        value = data.get(key)
        return str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else None

    return StateFile(
        installed_version=text_of("installed_version"),
        loaded_version=text_of("loaded_version"),
        verdict=text_of("verdict"),
        reboot_needed=data.get("reboot_needed") is True,
    )


def parse_driver_facts(text: str, smi_said: str = "") -> DriverFacts:
    """The facts ``facts_command`` printed; ``smi_said`` is nvidia-smi's own output (for its NVML version)."""
    sections = _sections(text)
    loaded = (_section(sections, MODULE_VERSION_FILE) or "").strip() or None
    if loaded is not None and not _VERSION.match(loaded):
        loaded = None
    proc = _section(sections, PROC_VERSION_FILE)
    if loaded is None and proc is not None:
        match = _PROC_MODULE.search(proc + " ")
        loaded = match.group(1) if match else None
    libraries = set()
    for name in sections:
        if name.startswith(_LIBRARY):
            match = _LIBRARY_VERSION.search(name)
            if match:
                libraries.add(match.group(1))
    state_text = _section(sections, STATE_FILE)
    state = parse_state_file(state_text) if state_text is not None else None
    nvml = _NVML_LIBRARY.search(smi_said)
    return DriverFacts(
        loaded=loaded,
        libraries=tuple(sorted(libraries, key=version_key, reverse=True)),
        control_device=_section(sections, CONTROL_DEVICE) is not None,
        state=state,
        nvml_library=nvml.group(1) if nvml else None,
    )
