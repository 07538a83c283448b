#!/usr/bin/python
# managed by gpuclus — part of the node_probe role
"""Read what a role manages on a node, in one round trip, so unchanged steps can be skipped."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_probe
short_description: Report files, packages, units, users and read-only commands of a node in one round trip
description:
  - Reads the current state of the things a role manages, so that the role can skip every task
    whose target already is as wanted (a template whose checksum, owner and mode match; a
    started unit; installed packages) instead of paying a round trip for each one.
  - Changes nothing; always returns changed=false, also in check mode. The commands in
    O(commands) must be read-only: they run in check mode too.
  - A path may start with C(~user/); it is expanded to that user's home (a user that does not
    exist leaves the path as given). Results are keyed by the path as given.
options:
  files:
    description: Paths to stat (type, mode, owner, group, link target, SHA-1 of regular files).
    type: list
    elements: str
    default: []
  read:
    description: Small text files whose content is returned (public data only, never secrets).
    type: list
    elements: str
    default: []
  packages:
    description: Package names whose installed version is reported (dpkg or rpm).
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose loaded, active and enabled state is reported.
    type: list
    elements: str
    default: []
  users:
    description: Users whose uid, gid, group and home are reported (null for a missing user).
    type: list
    elements: str
    default: []
  commands:
    description: Read-only commands (argv lists) whose rc, stdout and stderr are returned in order.
    type: list
    elements: list
    default: []
"""

RETURN = r"""
probe:
  description: >-
    files (path to {exists, type, mode, owner, group, sha1, target}), read (path to text or null),
    packages (name to version or null), missing (packages not installed), units (name to
    {loaded, active, enabled}), users (name to {uid, gid, group, home} or null),
    commands (list of {rc, stdout, stderr}), euid.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpuclus_node_state import file_state, package_versions, read_text, unit_states, user_state


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "str", "default": []},
            "read": {"type": "list", "elements": "str", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "users": {"type": "list", "elements": "str", "default": []},
            "commands": {"type": "list", "elements": "list", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    packages = package_versions(module, params["packages"])
    commands = []
    for argv in params["commands"]:
        rc, out, err = module.run_command([str(word) for word in argv])
        commands.append({"rc": rc, "stdout": out, "stderr": err})
    probe = {
        "files": {path: file_state(path) for path in params["files"]},
        "read": {path: read_text(path) for path in params["read"]},
        "packages": packages,
        "missing": [name for name in params["packages"] if packages[name] is None],
        "units": unit_states(module, params["units"]),
        "users": {name: user_state(name) for name in params["users"]},
        "commands": commands,
        "euid": os.geteuid(),
    }
    module.exit_json(changed=False, probe=probe)


if __name__ == "__main__":
    main()
