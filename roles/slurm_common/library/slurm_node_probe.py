#!/usr/bin/python
# managed by gpuclus — part of the slurm_common role
"""Look at a node once, before its Slurm packages and configuration are handled."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_node_probe
short_description: Report what a node's Slurm setup depends on, in one round trip
description:
  - Reports which of the wanted packages are installed (and at which version), the Slurm
    version, the hardware as C(slurmd -C) sees it, whether the mpi/pmix and gpu/nvml plugins
    can work, whether an NVIDIA driver is loaded, which GPU device nodes exist, the state of
    the daemons, and the restart-relevant lines of the current slurm.conf.
  - Changes nothing; always returns changed=false. Parts that need a package not installed
    yet are reported as null.
options:
  packages:
    description: Package names the node needs.
    type: list
    elements: str
    default: []
  version:
    description: Upstream Slurm version the O(pinned) packages must have (e.g. 22.05.8); null for any.
    type: str
  pinned:
    description: Packages held to O(version).
    type: list
    elements: str
    default: []
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
  units:
    description: systemd units whose active and enabled state is reported.
    type: list
    elements: str
    default: []
  gpu_count:
    description: Number of /dev/nvidiaN device nodes the node should have.
    type: int
    default: 0
  slurm_conf:
    description: Path of slurm.conf.
    type: path
    default: /etc/slurm/slurm.conf
  restart_pattern:
    description: Regular expression selecting the slurm.conf lines whose change needs a daemon restart.
    type: str
    required: true
  pin_file:
    description: Path whose existence is reported as pin_file_exists (the package manager's version hold).
    type: path
  files:
    description: >-
      Paths whose type, mode, owner, group and SHA-1 are reported (the configuration files of the
      Slurm play's roles), so that the play skips writing those already as wanted.
    type: list
    elements: str
    default: []
  accounting_cluster:
    description: >-
      Cluster name to look up with C(sacctmgr list cluster) when slurmdbd is active (the
      controller with accounting); reported as cluster_registered (null when not looked up).
    type: str
"""

RETURN = r"""
slurm:
  description: >-
    installed (name to version or null), missing (names to install), package_version, version,
    hardware, pmix (plugin, loadable, libdir, runtime_lib), nvml_plugin, nvidia_driver,
    gpu_devices_missing, units (name to loaded/active/enabled), restart_lines, pin_file_exists,
    files (path to exists/type/mode/owner/group/sha1/target), cluster_registered.
  returned: always
  type: dict
"""

import ctypes
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpuclus_node_state import file_state, package_versions, unit_states

HARDWARE_KEYS = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
UPSTREAM = re.compile(r"(?:\d+:)?(\d+\.\d+\.\d+)")


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


def cluster_registered(module: AnsibleModule, name: str | None, units: dict[str, dict[str, bool]]) -> bool | None:
    """Whether slurmdbd knows the cluster; None when not asked or slurmdbd is not running."""
    sacctmgr = module.get_bin_path("sacctmgr")
    if not name or sacctmgr is None or not units.get("slurmdbd", {}).get("active"):
        return None
    rc, out, _ = module.run_command([sacctmgr, "--noheader", "--parsable2", "list", "cluster", "format=Cluster"])
    if rc != 0:
        return None
    return name.lower() in out.split()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "version": {"type": "str"},
            "pinned": {"type": "list", "elements": "str", "default": []},
            "version_package": {"type": "str", "required": True},
            "slurmd": {"type": "path", "default": "/usr/sbin/slurmd"},
            "hardware": {"type": "bool", "default": False},
            "plugin_dir": {"type": "path", "required": True},
            "units": {"type": "list", "elements": "str", "default": []},
            "gpu_count": {"type": "int", "default": 0},
            "slurm_conf": {"type": "path", "default": "/etc/slurm/slurm.conf"},
            "restart_pattern": {"type": "str", "required": True},
            "pin_file": {"type": "path"},
            "files": {"type": "list", "elements": "str", "default": []},
            "accounting_cluster": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = module.params
    wanted = params["version"]
    installed = package_versions(module, sorted(set(params["packages"]) | {params["version_package"]}))

    def needs_install(name: str) -> bool:
        version = installed.get(name)
        if version is None:
            return True
        if wanted and name in params["pinned"]:
            match = UPSTREAM.match(version)
            return not (match and (match.group(1) + ".").startswith(wanted + "."))
        return False

    full = installed.get(params["version_package"])
    match = UPSTREAM.match(full or "")
    plugin_dir = params["plugin_dir"]
    units = unit_states(module, sorted(set(params["units"]) | ({"slurmdbd"} if params["accounting_cluster"] else set())))
    result = {
        "installed": {name: installed[name] for name in params["packages"]},
        "missing": [name for name in params["packages"] if needs_install(name)],
        "package_version": full,
        "version": match.group(1) if match else None,
        "hardware": hardware(module, params["slurmd"]) if params["hardware"] else None,
        "pmix": pmix(plugin_dir),
        "nvml_plugin": os.path.exists(os.path.join(plugin_dir, "gpu_nvml.so")),
        "nvidia_driver": os.path.exists("/proc/driver/nvidia/version"),
        "gpu_devices_missing": [
            f"/dev/nvidia{i}" for i in range(params["gpu_count"]) if not os.path.exists(f"/dev/nvidia{i}")
        ],
        "units": units,
        "restart_lines": restart_lines(params["slurm_conf"], params["restart_pattern"]),
        "pin_file_exists": bool(params["pin_file"]) and os.path.exists(params["pin_file"]),
        "files": {path: file_state(path) for path in params["files"]},
        "cluster_registered": cluster_registered(module, params["accounting_cluster"], units),
    }
    result["units"] = {unit: units[unit] for unit in params["units"]}
    module.exit_json(changed=False, slurm=result)


if __name__ == "__main__":
    main()
