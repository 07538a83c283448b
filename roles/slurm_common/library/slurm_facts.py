#!/usr/bin/python
# managed by gpuclus — part of the slurm_common role
"""What slurm.conf and gres.conf need to know about a node that the spec does not say."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_facts
short_description: Report the Slurm version, hardware, plugins and GPU devices of a node
description:
  - Reports what the Slurm configuration of a node depends on and only the node can tell, the
    way the setup module reports facts, in one round trip - the installed Slurm version, the
    hardware as C(slurmd -C) sees it, whether the mpi/pmix and gpu/nvml plugins can work,
    whether an NVIDIA driver is loaded, which GPU device nodes are missing, and the
    restart-relevant lines of the current slurm.conf (to choose between a restart and
    C(scontrol reconfigure)).
  - Changes nothing; always returns changed=false, also in check mode. Parts that need a
    package not installed yet are reported as null.
options:
  version_package:
    description: Package whose version is the Slurm version.
    type: str
    required: true
  slurmd:
    description: Path of slurmd, run as C(slurmd -C) when O(hardware=true).
    type: path
    default: /usr/sbin/slurmd
  hardware:
    description: Report the node's CPUs, topology and memory from C(slurmd -C).
    type: bool
    default: false
  plugin_dir:
    description: Directory of Slurm's plugins (mpi_pmix.so, gpu_nvml.so).
    type: path
    required: true
  gpu_count:
    description: Number of /dev/nvidiaN device nodes the node should have.
    type: int
    default: 0
  slurm_conf:
    description: Path of slurm.conf.
    type: path
    default: /etc/slurm/slurm.conf
  restart_pattern:
    description: Regular expression selecting the slurm.conf lines that only a daemon restart applies.
    type: str
    required: true
"""

RETURN = r"""
slurm:
  description: >-
    package_version, version, hardware, pmix (plugin, loadable, libdir, runtime_lib), nvml_plugin,
    nvidia_driver, gpu_devices_missing, restart_lines (null when there is no slurm.conf yet).
  returned: always
  type: dict
"""

import ctypes
import os
import re

from ansible.module_utils.basic import AnsibleModule

HARDWARE_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
UPSTREAM = re.compile(r"(?:\d+:)?(\d+\.\d+\.\d+)")


def package_version(module: AnsibleModule, name: str) -> str | None:
    """The installed version of one package (dpkg or rpm), or None."""
    if module.get_bin_path("dpkg-query"):
        _, out, _ = module.run_command(["dpkg-query", "--showformat=${db:Status-Abbrev}\t${Version}", "--show", name])
        status, _, version = out.partition("\t")
        return version.strip() or None if status.startswith("ii") else None
    if module.get_bin_path("rpm"):
        rc, out, _ = module.run_command(["rpm", "--query", "--queryformat=%{VERSION}-%{RELEASE}", name])
        return out.strip() or None if rc == 0 else None
    return None

def hardware(module: AnsibleModule, slurmd: str) -> dict[str, int] | None:
    if not os.access(slurmd, os.X_OK):
        return None  # slurmd not installed yet
    rc, out, err = module.run_command([slurmd, "-C"])
    if rc != 0:
        module.fail_json(msg=f"{slurmd} -C failed (rc {rc}): {err.strip() or out.strip()}")
    first = out.splitlines()[0] if out else ""
    fields = dict(item.split("=", 1) for item in first.split() if "=" in item)
    try:
        return {key: int(fields[key]) for key in HARDWARE_KEYS}
    except (KeyError, ValueError):
        module.fail_json(msg=f"unexpected output from {slurmd} -C: {first!r}")
        raise  # unreachable: fail_json exits


def pmix(plugin_dir: str) -> dict[str, object]:
    """Whether Slurm's mpi/pmix can start, and what would make it.

    The plugin dlopen()s <PMIx libdir>/libpmix.so (the libdir is compiled in).
    Distributions ship that unversioned name in their -dev package only
    (Debian: libpmix-dev, which pulls in a toolchain), so with just the runtime
    library the plugin fails with "can not load PMIx library".
    """
    plugin = os.path.join(plugin_dir, "mpi_pmix.so")
    try:
        with open(os.path.realpath(plugin), "rb") as handle:
            data = handle.read()
    except OSError:
        return {"plugin": False, "loadable": False, "libdir": None, "runtime_lib": None}
    libdirs = sorted({m.decode() for m in re.findall(rb"/[\w./+-]*pmix[\w./+-]*/lib(?=\x00)", data)})
    loadable = False
    for candidate in [os.path.join(d, "libpmix.so") for d in libdirs] or ["libpmix.so"]:
        try:
            ctypes.CDLL(candidate, mode=os.RTLD_LAZY)
        except OSError:
            continue
        loadable = True
        break
    runtime = None
    for libdir in libdirs:
        names = os.listdir(libdir) if os.path.isdir(libdir) else []
        versioned = sorted(n for n in names if re.fullmatch(r"libpmix\.so\.\d+", n))
        if versioned:
            runtime = os.path.join(libdir, versioned[0])
            break
    return {"plugin": True, "loadable": loadable, "libdir": libdirs[0] if libdirs else None, "runtime_lib": runtime}


def restart_lines(path: str, pattern: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    selector = re.compile(pattern)
    return [line.strip() for line in lines if selector.search(line.strip())]


# The NodeName words that size a node, as gpuclus writes them.
SIZE_WORDS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")


def node_sizes(path: str) -> dict[str, dict[str, int]]:
    """The size of each node as the current slurm.conf defines it: name -> {CPUs: .., RealMemory: ..}.

    A node that is down during a deploy keeps the line the last deploy
    wrote for it. Nodes defined as FUTURE (never sized) are left out.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return {}
    sizes: dict[str, dict[str, int]] = {}
    for line in lines:
        words = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "NodeName" not in words or words.get("State", "").upper() == "FUTURE":
            continue
        size = {key: int(words[key]) for key in SIZE_WORDS if words.get(key, "").isdigit()}
        if "CPUs" in size and "RealMemory" in size:
            sizes[words["NodeName"]] = size
    return sizes


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "version_package": {"type": "str", "required": True},
            "slurmd": {"type": "path", "default": "/usr/sbin/slurmd"},
            "hardware": {"type": "bool", "default": False},
            "plugin_dir": {"type": "path", "required": True},
            "gpu_count": {"type": "int", "default": 0},
            "slurm_conf": {"type": "path", "default": "/etc/slurm/slurm.conf"},
            "restart_pattern": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    full = package_version(module, params["version_package"])
    match = UPSTREAM.match(full or "")
    plugin_dir = params["plugin_dir"]
    result = {
        "package_version": full,
        "version": match.group(1) if match else None,
        "hardware": hardware(module, params["slurmd"]) if params["hardware"] else None,
        "pmix": pmix(plugin_dir),
        "nvml_plugin": os.path.exists(os.path.join(plugin_dir, "gpu_nvml.so")),
        "nvidia_driver": os.path.exists("/proc/driver/nvidia/version"),
        "gpu_devices_missing": [
            f"/dev/nvidia{i}" for i in range(params["gpu_count"]) if not os.path.exists(f"/dev/nvidia{i}")
        ],
        "restart_lines": restart_lines(params["slurm_conf"], params["restart_pattern"]),
        "node_sizes": node_sizes(params["slurm_conf"]),
    }
    module.exit_json(changed=False, slurm=result)


if __name__ == "__main__":
    main()
