#!/usr/bin/python
# managed by gpuclus — part of the node_probe role
"""Compare what a role wants on a node with what is there, in one round trip, and name what is stale."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_probe
short_description: Say which of a role's files, packages, units and fstab entries differ from what it wants
description:
  - A role lists what it manages and how it wants it; the module looks at the node once and
    returns, under C(stale), only what differs. The role then runs the ordinary module
    (template, copy, file, apt, systemd_service, mount) for those items alone, with its
    check mode, diff and handler notification, and skips the rest without a round trip.
  - A file is stale when it is missing, of another type, or differs in SHA-1 (the checksum
    Ansible's copy and template compare), owner, group, mode or link target - each only
    when the role gives it.
  - Changes nothing; always returns changed=false, also in check mode.
options:
  files:
    description:
      - Wanted paths, each C({path, state, checksum, owner, group, mode, src, contains}). C(state) is
        file (the default), directory, link or absent; C(checksum) the SHA-1 of the wanted
        content; C(src) a link's target; C(contains) words the file must hold (a file a
        module edits line by line, such as authorized_keys). Keys left out are not compared.
      - A path may start with C(~user/), expanded to that user's home on the node.
    type: list
    elements: dict
    default: []
  packages:
    description: Package names that must be installed (dpkg or rpm).
    type: list
    elements: str
    default: []
  units:
    description: systemd units that must be active and enabled.
    type: list
    elements: str
    default: []
  users:
    description: Users whose uid, gid and home the role needs (reported under C(found); null when missing).
    type: list
    elements: str
    default: []
  commands:
    description:
      - Read-only commands (argv lists) whose rc, stdout and stderr the role needs, reported in
        order under C(found). They run in check mode too, so they must change nothing.
    type: list
    elements: list
    default: []
  fstab:
    description:
      - Wanted /etc/fstab entries C({src, path, fstype, opts}), stale unless a line has exactly
        these fields and dump/pass 0 0 (what ansible.posix.mount writes). With C(mounted=true)
        the path must also be mounted now.
    type: list
    elements: dict
    default: []
"""

RETURN = r"""
stale:
  description: >-
    files (paths), packages (names), units (names) and fstab (paths) that differ from what
    the role wants, each in the order given.
  returned: always
  type: dict
found:
  description: >-
    users (name to {uid, gid, home} or null), commands (list of {rc, stdout, stderr}) and
    units (name to systemd's LoadState, e.g. loaded, not-found or masked), as asked.
  returned: always
  type: dict
"""

import grp
import hashlib
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule

SHA1_LIMIT = 16 * 1024 * 1024  # a larger file is never a template: compared by everything but content
KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "link"}


def expand(path: str) -> str:
    return os.path.expanduser(path) if path.startswith("~") else path


def same_id(wanted: object, number: int, lookup) -> bool:
    """An owner or group given by name or by number."""
    text = str(wanted)
    if text.isdigit():
        return int(text) == number
    try:
        return lookup(number)[0] == text
    except KeyError:
        return False


def sha1(path: str) -> str | None:
    digest = hashlib.sha1()  # noqa: S324 - the checksum Ansible's copy and template compare
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def file_stale(want: dict) -> bool:
    path = expand(want["path"])
    state = want.get("state") or "file"
    try:
        info = os.lstat(path)
    except OSError:
        return state != "absent"
    if state == "absent":
        return True
    if KINDS.get(stat.S_IFMT(info.st_mode)) != state:
        return True
    if want.get("owner") is not None and not same_id(want["owner"], info.st_uid, pwd.getpwuid):
        return True
    if want.get("group") is not None and not same_id(want["group"], info.st_gid, grp.getgrgid):
        return True
    if want.get("mode") is not None and state != "link" and stat.S_IMODE(info.st_mode) != int(str(want["mode"]), 8):
        return True
    if state == "link" and want.get("src") is not None and os.readlink(path) != want["src"]:
        return True
    if state == "file" and want.get("checksum") is not None:
        return info.st_size > SHA1_LIMIT or sha1(path) != want["checksum"]
    if state == "file" and want.get("contains"):
        return not all(text in words(path) for text in want["contains"])
    return False


def words(path: str) -> set[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return set(handle.read().split())
    except OSError:
        return set()


def installed_packages(module: AnsibleModule, names: list[str]) -> set[str]:
    if not names:
        return set()
    found: set[str] = set()
    if module.get_bin_path("dpkg-query"):
        argv = ["dpkg-query", "--showformat=${Package}\t${db:Status-Abbrev}\n", "--show", *names]
        _, out, _ = module.run_command(argv)  # rc 1 when some name is unknown
        for line in out.splitlines():
            name, _, status = line.partition("\t")
            # The second letter is the state (i: installed); the first is the
            # wanted action, "h" for a held package (apt-mark hold): still installed.
            if status[1:2] == "i" and status[:1] in ("i", "h"):
                found.add(name)
    elif module.get_bin_path("rpm"):
        _, out, _ = module.run_command(["rpm", "--query", "--queryformat=%{NAME}\n", *names])
        found.update(line.strip() for line in out.splitlines())
    return found


def unit_states(module: AnsibleModule, units: list[str]) -> tuple[list[str], dict[str, str]]:
    """(the units not active and enabled, each unit's LoadState).

    LoadState "not-found" tells a unit whose package is not installed yet from
    one that is only stopped: a check run skips starting the former.
    """
    systemctl = module.get_bin_path("systemctl")
    if not units or systemctl is None:
        return list(units), dict.fromkeys(units, "unknown")
    _, out, _ = module.run_command([systemctl, "show", "--property=ActiveState,LoadState", *units])
    blocks = out.split("\n\n")
    stale = []
    loaded = {}
    for unit, block in zip(units, blocks + [""] * len(units)):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        loaded[unit] = fields.get("LoadState", "unknown")
        active = fields.get("ActiveState") == "active"
        # is-enabled reads the unit files; show's UnitFileState is systemd's
        # cached view, stale until a daemon-reload after a package install.
        enabled = active and module.run_command([systemctl, "is-enabled", "--quiet", unit])[0] == 0
        if not (active and enabled):
            stale.append(unit)
    return stale, loaded


def stale_fstab(entries: list[dict]) -> list[str]:
    try:
        with open("/etc/fstab", encoding="utf-8", errors="replace") as handle:
            lines = [line.split() for line in handle]
    except OSError:
        lines = []
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as handle:
            mounted = {line.split()[1] for line in handle if len(line.split()) > 1}
    except OSError:
        mounted = set()
    stale = []
    for entry in entries:
        wanted = [entry["src"], entry["path"], entry["fstype"], entry["opts"], "0", "0"]
        if wanted not in lines or (entry.get("mounted") and entry["path"] not in mounted):
            stale.append(entry["path"])
    return stale


def user_entry(name: str) -> dict | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "fstab": {"type": "list", "elements": "dict", "default": []},
            "users": {"type": "list", "elements": "str", "default": []},
            "commands": {"type": "list", "elements": "list", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    for want in params["files"]:
        if not want.get("path") or (want.get("state") or "file") not in ("file", "directory", "link", "absent"):
            module.fail_json(msg=f"files: each entry needs a path and a state of file, directory, link or absent: {want}")
    installed = installed_packages(module, params["packages"])
    stale_unit_names, unit_load_states = unit_states(module, params["units"])
    commands = []
    for argv in params["commands"]:
        rc, out, err = module.run_command([str(word) for word in argv])
        commands.append({"rc": rc, "stdout": out, "stderr": err})
    module.exit_json(
        changed=False,
        stale={
            "files": [want["path"] for want in params["files"] if file_stale(want)],
            "packages": [name for name in params["packages"] if name not in installed],
            "units": stale_unit_names,
            "fstab": stale_fstab(params["fstab"]),
        },
        found={
            "users": {name: user_entry(name) for name in params["users"]},
            "commands": commands,
            "units": unit_load_states,
        },
    )


if __name__ == "__main__":
    main()
