"""Words for the OpenSSH client (ssh(1)) that gpuclus starts: values it reads literally, arguments it never takes
for options.

Two parsers stand between gpuclus and ssh. ssh's own command line: it parses options again after the
destination, so `ssh HOST -oProxyCommand=...` runs a local command; only a `--` before the destination ends its
options for good. And ssh_config's: the value of `-o Key=value` is a config line, split on blanks (a path with a
space becomes two known_hosts files), with quotes and backslashes as escapes and `%` tokens and `${VAR}`
expanded in file names.

Pure: nothing is run here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuclus.errors import UsageError


def config_value(text: str, *, what: str) -> str:
    """``text`` as one ssh_config value that ssh reads back unchanged, double-quoted.

    Inside the quotes a backslash escapes a quote or a backslash (OpenSSH 8.7+), and `%%` is one `%` in the
    file-name options (IdentityFile, UserKnownHostsFile, ControlPath). `${` starts an environment variable
    there and has no escape, and a control character would end the line: both are refused.
    """
    if "${" in text or any(ord(char) < 32 or ord(char) == 127 for char in text):
        raise UsageError(
            f"{what} {text!r} holds '${{' or a control character, which ssh would not read back as written",
            "keep the spec in a directory whose path has neither",
        )
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped}"'


def login_argv(
    client: str, *, key_file: Path, known_hosts: Path, user: str, address: str, command: Sequence[str]
) -> list[str]:
    """ssh's argv to log in as ``user`` at ``address`` with gpuclus' key, trusting only its known_hosts.

    Every option comes first and `--` ends them before the destination: ``command`` (the user's words, run
    on the node) can never become an option of the local ssh, whatever it starts with.
    """
    if user.startswith("-") or address.startswith("-"):
        raise UsageError(f"{user}@{address} is not a destination ssh can take", "a name never starts with '-'")
    return [
        client,
        "-o",
        f"IdentityFile={config_value(str(key_file), what='the key file')}",
        "-o",
        f"UserKnownHostsFile={config_value(str(known_hosts), what='the known_hosts file')}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "IdentitiesOnly=yes",
        "--",
        f"{user}@{address}",
        *command,
    ]
