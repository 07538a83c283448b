"""Ansible's settings for gpuclus, in one table: the rendered ansible.cfg and a run's envvars both come from here.

Each setting names its ansible.cfg section and key, the environment variable
Ansible reads for it (None where Ansible has none: such a setting reaches a
run through the run's own ansible.cfg, see deploy/workspace.py) and the value.
Paths differ only in form: ansible.cfg writes the state directory relative to
itself (Ansible resolves path settings against the file's directory, so the
file keeps working wherever the checkout lives), the environment absolute.
The known_hosts file is absolute in both: ssh_args reaches ssh as written and
ssh would resolve a relative path against whatever directory Ansible was run
from, silently starting a second trust store there.

Pure: no files, no network; render/ and deploy/ both import it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpuclus.errors import UsageError
from gpuclus.ssh.openssh import config_value

# Beyond this Ansible's parallel SSH sessions cost more in controller CPU and
# memory than they save; 25 is where most Ansible tuning guides stop.
MAX_FORKS = 25
FACT_CACHE_SECONDS = 86400
# A node that does not answer SSH within this many seconds is reported
# unreachable instead of holding the run up.
CONNECT_TIMEOUT_SECONDS = 15


@dataclass(frozen=True)
class Setting:
    section: str  # ansible.cfg section
    key: str  # ansible.cfg key
    env: str | None  # Ansible's environment variable for it; None: ansible.cfg only
    value: str
    why: str  # the comment above it in ansible.cfg
    path: bool = False  # a path Ansible resolves against ansible.cfg's directory


def forks(host_count: int) -> int:
    """One SSH session per node at once, capped at MAX_FORKS."""
    return max(1, min(host_count, MAX_FORKS))


def known_hosts_option(known_hosts: str) -> str:
    """ssh's ``-o`` value naming ``known_hosts`` as the one file of pinned host keys, quoted as ssh_config reads."""
    return f"UserKnownHostsFile={config_value(known_hosts, what='the path of known_hosts')}"


def known_hosts_ssh_arg(known_hosts: str) -> str:
    """known_hosts_option as one word of ssh_args.

    Two splits: Ansible splits ssh_args like a shell line, then ssh splits the option's value like an
    ssh_config line (a space would make two known_hosts files, and accept-new would write to the first).
    """
    return shlex.quote(known_hosts_option(known_hosts))


def settings(*, host_count: int, state_dir: str, known_hosts: str) -> tuple[Setting, ...]:
    """Every setting, in ansible.cfg order.

    ``state_dir`` is the spec's .gpuclus/ as the consumer wants it (relative to
    ansible.cfg's directory, or absolute for the environment); ``known_hosts``
    must be absolute.
    """
    check_known_hosts(known_hosts)
    ssh_args = (
        "-o ControlMaster=auto -o ControlPersist=60s -o StrictHostKeyChecking=accept-new "
        f"-o {known_hosts_ssh_arg(known_hosts)}"
    )
    defaults, ssh = "defaults", "ssh_connection"
    return (
        # Beside this file (the render's layout); a run passes the same file to
        # Ansible with -i, so it needs no environment variable.
        Setting(defaults, "inventory", None, "inventory/hosts.yml", "", path=True),
        Setting(
            defaults,
            "forks",
            "ANSIBLE_FORKS",
            str(forks(host_count)),
            f"One SSH session per node at once, capped at {MAX_FORKS} (min(nodes, {MAX_FORKS})).",
        ),
        # No internal_poll_interval: 10 ms between the main loop's looks at its
        # workers (instead of Ansible's 1 ms) cost 2-3 s of wall time per
        # no-change deploy of 3 nodes, and its CPU saving was not measurable.
        Setting(
            defaults,
            "gathering",
            "ANSIBLE_GATHERING",
            "smart",
            "Facts are gathered once and cached for a day: re-runs skip the slow part.",
        ),
        Setting(defaults, "fact_caching", "ANSIBLE_CACHE_PLUGIN", "jsonfile", ""),
        Setting(
            defaults,
            "fact_caching_connection",
            "ANSIBLE_CACHE_PLUGIN_CONNECTION",
            f"{state_dir}/facts",
            "",
            path=True,
        ),
        Setting(defaults, "fact_caching_timeout", "ANSIBLE_CACHE_PLUGIN_TIMEOUT", str(FACT_CACHE_SECONDS), ""),
        Setting(
            defaults,
            "private_key_file",
            "ANSIBLE_PRIVATE_KEY_FILE",
            f"{state_dir}/ssh/id_ed25519",
            "gpuclus' own key pair, created next to the spec.",
            path=True,
        ),
        Setting(defaults, "interpreter_python", "ANSIBLE_PYTHON_INTERPRETER", "auto_silent", ""),
        Setting(defaults, "retry_files_enabled", "ANSIBLE_RETRY_FILES_ENABLED", "False", ""),
        Setting(
            defaults,
            "timeout",
            "ANSIBLE_TIMEOUT",
            str(CONNECT_TIMEOUT_SECONDS),
            f"A node that does not answer SSH within {CONNECT_TIMEOUT_SECONDS} s is reported unreachable.",
        ),
        Setting(
            defaults,
            "callbacks_enabled",
            "ANSIBLE_CALLBACKS_ENABLED",
            "ansible.posix.profile_tasks",
            "Where the time went, task by task, at the end of the output.",
        ),
        Setting(
            defaults,
            "host_key_checking",
            "ANSIBLE_HOST_KEY_CHECKING",
            "True",
            "Host keys are always checked: new hosts are learned once (accept-new below)\n"
            "into gpuclus' own known_hosts, and a changed key stops the run.",
        ),
        Setting(
            ssh,
            "pipelining",
            "ANSIBLE_PIPELINING",
            "True",
            "Pipelining and a persistent master connection cut SSH round trips per task.",
        ),
        Setting(
            ssh,
            "ssh_args",
            "ANSIBLE_SSH_ARGS",
            ssh_args,
            "known_hosts by its absolute path: ssh resolves a relative one against the\n"
            "directory Ansible runs in, which would start a new trust store there.",
        ),
    )


def environment(table: tuple[Setting, ...]) -> dict[str, str]:
    """The settings Ansible takes from its environment, as envvars."""
    return {setting.env: setting.value for setting in table if setting.env is not None}


def cfg_sections(table: tuple[Setting, ...]) -> list[tuple[str, list[Setting]]]:
    """The settings grouped by ansible.cfg section, in table order (for the template)."""
    sections: dict[str, list[Setting]] = {}
    for setting in table:
        sections.setdefault(setting.section, []).append(setting)
    return list(sections.items())


def check_known_hosts(known_hosts: str) -> None:
    if not PurePosixPath(known_hosts).is_absolute():
        raise ValueError(f"known_hosts must be an absolute path, not {known_hosts!r}")
    # ansible.cfg is read by configparser: '%' starts an interpolation, ';'
    # an inline comment, and a newline would end the setting. The private key
    # beside known_hosts reaches ssh as Ansible's IdentityFile="PATH": a quote
    # or a backslash would end or escape it, and ssh expands '%' and '${' there.
    bad = sorted({char for char in known_hosts if char in '%;"\\$' or ord(char) < 32 or ord(char) == 127})
    if bad:
        raise UsageError(
            f"the path of gpuclus' known_hosts ({known_hosts!r}) contains "
            f"{', '.join(repr(char) for char in bad)}, which ansible.cfg or ssh cannot hold",
            "keep the spec in a directory whose path has no '%', ';', '\"', '\\', '$' or control characters",
        )
