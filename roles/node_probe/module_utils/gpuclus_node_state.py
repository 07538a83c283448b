# managed by gpuclus — part of the node_probe role
"""What a node has now: files, packages, units, users. Shared by node_probe and slurm_node_probe."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

SHA1_LIMIT = 16 * 1024 * 1024  # larger files are reported without a checksum


def expand(path: str) -> str:
    return os.path.expanduser(path) if path.startswith("~") else path


def name_of(getter, number: int) -> str:
    try:
        return getter(number)[0]
    except KeyError:
        return str(number)


def file_state(path: str) -> dict[str, object]:
    try:
        info = os.lstat(expand(path))
    except OSError:
        return dict.fromkeys(("type", "mode", "owner", "group", "sha1", "target"), None) | {"exists": False}
    kinds = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "link"}
    state: dict[str, object] = {
        "exists": True,
        "type": kinds.get(stat.S_IFMT(info.st_mode), "other"),
        "mode": f"{stat.S_IMODE(info.st_mode):04o}",
        "owner": name_of(pwd.getpwuid, info.st_uid),
        "group": name_of(grp.getgrgid, info.st_gid),
        "sha1": None,
        "target": None,
    }
    if state["type"] == "link":
        state["target"] = os.readlink(expand(path))
    elif state["type"] == "file" and info.st_size <= SHA1_LIMIT:
        digest = hashlib.sha1()  # noqa: S324 - the checksum Ansible's copy and template compare
        try:
            with open(expand(path), "rb") as handle:
                for block in iter(lambda: handle.read(1 << 16), b""):
                    digest.update(block)
            state["sha1"] = digest.hexdigest()
        except OSError:
            pass
    return state


def read_text(path: str) -> str | None:
    try:
        with open(expand(path), encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def package_versions(module: AnsibleModule, names: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = dict.fromkeys(names)
    if not names:
        return found
    if module.get_bin_path("dpkg-query"):
        argv = ["dpkg-query", "--showformat=${Package}\t${db:Status-Abbrev}\t${Version}\n", "--show", *names]
        _, out, _ = module.run_command(argv)  # rc 1 when some name is unknown
        for line in out.splitlines():
            name, status, version = (line.split("\t") + ["", ""])[:3]
            if name in found and status.startswith("ii"):
                found[name] = version
    elif module.get_bin_path("rpm"):
        _, out, _ = module.run_command(["rpm", "--query", "--queryformat=%{NAME}\t%{VERSION}-%{RELEASE}\n", *names])
        for line in out.splitlines():
            name, _, version = line.partition("\t")
            if name in found and version:
                found[name] = version
    return found


def unit_states(module: AnsibleModule, units: list[str]) -> dict[str, dict[str, bool]]:
    states = {unit: {"loaded": False, "active": False, "enabled": False} for unit in units}
    systemctl = module.get_bin_path("systemctl")
    if not units or systemctl is None:
        return states
    _, out, _ = module.run_command([systemctl, "show", "--property=LoadState,ActiveState", *units])
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line) for block in out.split("\n\n")]
    for unit, props in zip(units, blocks):
        loaded = props.get("LoadState") == "loaded"
        # is-enabled reads the unit files; show's UnitFileState is systemd's
        # cached view, stale until a daemon-reload after a package install.
        enabled = loaded and module.run_command([systemctl, "is-enabled", "--quiet", unit])[0] == 0
        states[unit] = {"loaded": loaded, "active": props.get("ActiveState") == "active", "enabled": enabled}
    return states


def user_state(name: str) -> dict[str, object] | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "group": name_of(grp.getgrgid, entry.pw_gid), "home": entry.pw_dir}
