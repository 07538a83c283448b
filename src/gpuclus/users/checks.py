"""Meaning across a users file's entries, each problem a finding with a stable code.

Run once the file's structure is sound (users/load.py). Every check runs, so a
file with five problems shows five findings at once. Codes are documented in
docs/users.md; never rename one, only add new ones.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TypeVar

from gpuclus.users.models import UsersFile
from gpuclus.users.sshkeys import key_problem
from gpuclus.yamldoc.findings import Finding, Loc, error, warning

# Names the nodes already have (Debian's base-passwd, and the daemons gpuclus
# installs: Slurm, munge, MariaDB, Prometheus, chrony, NFS, Grafana): a user
# of the same name would take over a system account.
RESERVED_NAMES = frozenset(
    {
        "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
        "www-data", "backup", "list", "irc", "gnats", "nobody", "nogroup", "systemd-network",
        "systemd-resolve", "systemd-timesync", "messagebus", "sshd", "_apt", "polkitd", "statd",
        "slurm", "munge", "mysql", "prometheus", "_chrony", "chrony", "grafana", "_rpc", "nvidia-persistenced",
        "sudo", "adm", "users", "staff", "docker", "enroot",
    }
)  # fmt: skip
# Slurm's accounting database is a tree under this account; gpuclus puts its operators there, without limits.
SLURM_ROOT_ACCOUNT = "root"
# Slurm creates this QoS itself; accounts may name it without declaring it.
BUILTIN_QOS = "normal"

T = TypeVar("T")
UsersCheck = Callable[[UsersFile], list[Finding]]
_CHECKS: list[UsersCheck] = []


def _check(function: UsersCheck) -> UsersCheck:
    _CHECKS.append(function)
    return function


def run_checks(users: UsersFile) -> list[Finding]:
    return [finding for check in _CHECKS for finding in check(users)]


def _repeats(items: Iterable[tuple[Loc, T]]) -> list[tuple[Loc, Loc, T]]:
    """(later loc, first loc, value) for each value seen before."""
    first: dict[T, Loc] = {}
    repeats: list[tuple[Loc, Loc, T]] = []
    for loc, value in items:
        if value in first:
            repeats.append((loc, first[value], value))
        else:
            first[value] = loc
    return repeats


@_check
def unique_names(users: UsersFile) -> list[Finding]:
    findings = []
    for section, names in _names(users).items():
        for loc, _first, name in _repeats(((section, i, "name"), name) for i, name in enumerate(names)):
            findings.append(
                error(f"duplicate-{_ONE[section]}", f"{_ONE[section]} {name!r} is listed twice", loc, hint="keep one")
            )
    return findings


_ONE = {"users": "user", "groups": "group", "accounts": "account", "qos": "qos"}


def _names(users: UsersFile) -> dict[str, list[str]]:
    return {
        "users": [user.name for user in users.users],
        "groups": [group.name for group in users.groups],
        "accounts": [account.name for account in users.accounts],
        "qos": [entry.name for entry in users.qos],
    }


@_check
def unique_ids(users: UsersFile) -> list[Finding]:
    """uids among users; gids among extra groups and users' own groups (a user's own group is named like the user)."""
    findings = []
    for loc, _first, uid in _repeats((("users", i, "uid"), user.uid) for i, user in enumerate(users.users)):
        findings.append(error("duplicate-uid", f"uid {uid} is given to two users", loc, hint="give each its own uid"))
    owners: dict[int, tuple[str, Loc]] = {}
    for i, group in enumerate(users.groups):
        owners.setdefault(group.gid, (group.name, ("groups", i, "gid")))
    for loc, _first, gid in _repeats((("groups", i, "gid"), group.gid) for i, group in enumerate(users.groups)):
        findings.append(error("duplicate-gid", f"gid {gid} is given to two groups", loc, hint="give each its own"))
    for i, user in enumerate(users.users):
        gid = user.gid if user.gid is not None else user.uid
        owner = owners.get(gid)
        where: Loc = ("users", i, "gid" if user.gid is not None else "uid")
        if owner is not None and owner[0] != user.name:
            findings.append(
                error(
                    "duplicate-gid",
                    f"user {user.name!r}'s own group would get gid {gid}, which {owner[0]!r} has",
                    where,
                    hint="set the user's `gid` to a free id" if user.gid is None else "pick a free gid",
                )
            )
        owners.setdefault(gid, (user.name, where))
    return findings


@_check
def group_names_apart(users: UsersFile) -> list[Finding]:
    """An extra group named like a user would be that user's own group, with two gids."""
    user_names = {user.name for user in users.users}
    return [
        error(
            "group-is-a-user",
            f"group {group.name!r} has the name of a user: each user already has a group of their own name",
            ("groups", i, "name"),
            hint="rename the group, or drop it and use the user's own group",
        )
        for i, group in enumerate(users.groups)
        if group.name in user_names
    ]


@_check
def reserved_names(users: UsersFile) -> list[Finding]:
    findings = []
    for section in ("users", "groups"):
        for i, name in enumerate(_names(users)[section]):
            if name in RESERVED_NAMES:
                findings.append(
                    error(
                        "reserved-name",
                        f"{name!r} is a system account or group on the nodes",
                        (section, i, "name"),
                        hint="pick another name",
                    )
                )
    findings.extend(
        error(
            "reserved-name",
            f"{name!r} is the account at the top of Slurm's account tree, which holds every other account",
            ("accounts", i, "name"),
            hint="pick another name: its limits would bind every user, gpuclus' own validate jobs too",
        )
        for i, name in enumerate(_names(users)["accounts"])
        if name == SLURM_ROOT_ACCOUNT
    )
    return findings


@_check
def known_references(users: UsersFile) -> list[Finding]:
    groups = {group.name for group in users.groups}
    accounts = {account.name for account in users.accounts}
    qos = {entry.name for entry in users.qos} | {BUILTIN_QOS}
    findings = []
    for i, user in enumerate(users.users):
        for j, group in enumerate(user.groups):
            if group not in groups:
                findings.append(
                    error(
                        "unknown-group",
                        f"user {user.name!r} names group {group!r}, which `groups` does not list",
                        ("users", i, "groups", j),
                        hint=f"add `{{name: {group}, gid: ...}}` to groups, or fix the name",
                    )
                )
        for loc, _first, group in _repeats((("users", i, "groups", j), g) for j, g in enumerate(user.groups)):
            findings.append(error("duplicate-group", f"group {group!r} is listed twice", loc, hint="keep one"))
        if user.account not in accounts:
            findings.append(
                error(
                    "unknown-account",
                    f"user {user.name!r} names account {user.account!r}, which `accounts` does not list",
                    ("users", i, "account"),
                    hint=_choices(user.account, accounts, "accounts"),
                )
            )
    for i, account in enumerate(users.accounts):
        for j, name in enumerate(account.qos):
            if name not in qos:
                findings.append(
                    error(
                        "unknown-qos",
                        f"account {account.name!r} names QoS {name!r}, which `qos` does not list",
                        ("accounts", i, "qos", j),
                        hint=_choices(name, qos, "QoS"),
                    )
                )
        if not account.qos:
            findings.append(
                error("no-qos", f"account {account.name!r} allows no QoS", ("accounts", i, "qos"), hint="list 'normal'")
            )
    return findings


def _choices(given: str, names: set[str], what: str) -> str:
    close = difflib.get_close_matches(given, sorted(names), n=1)
    listed = f"{what}: {', '.join(sorted(names))}"
    return f"did you mean {close[0]!r}? ({listed})" if close else listed


@_check
def ssh_keys(users: UsersFile) -> list[Finding]:
    findings = []
    holders: dict[str, list[str]] = defaultdict(list)
    for i, user in enumerate(users.users):
        for j, line in enumerate(user.ssh_keys):
            problem = key_problem(line)
            if problem is not None:
                findings.append(
                    error(
                        "bad-ssh-key",
                        f"user {user.name!r}: this key {problem}",
                        ("users", i, "ssh_keys", j),
                        hint="paste one line of the user's .pub file",
                    )
                )
                continue
            key = line.split()[1]
            if user.name not in holders[key]:
                holders[key].append(user.name)
                if len(holders[key]) == 2:
                    findings.append(
                        warning(
                            "shared-ssh-key",
                            f"users {holders[key][0]!r} and {user.name!r} have the same key: "
                            "whoever holds it logs in as both",
                            ("users", i, "ssh_keys", j),
                            hint="give each person their own key",
                        )
                    )
    return findings


@_check
def active_users_can_log_in(users: UsersFile) -> list[Finding]:
    return [
        warning(
            "no-ssh-key",
            f"user {user.name!r} has no SSH key here, so cannot log in (there are no passwords) "
            "unless a directory holds the key",
            ("users", i, "name"),
            # The users file does not know the spec: with users.directory.ssh_keys_attribute the
            # directory's keys are the ones sshd asks for, and this warning can be ignored.
            hint="add the user's public key under ssh_keys, or keep it in the directory "
            "(the spec's users.directory.ssh_keys_attribute)",
        )
        for i, user in enumerate(users.users)
        if not user.removed and not user.ssh_keys
    ]


@_check
def deletion_needs_removal(users: UsersFile) -> list[Finding]:
    """A home is deleted only for a user who is removed: never for an active one by a stray flag."""
    return [
        error(
            "delete-home-not-removed",
            f"user {user.name!r} has delete_home but is not removed: gpuclus deletes only a removed user's home",
            ("users", i, "delete_home"),
            hint="add `removed: true` too (`gpuclus users remove NAME --delete-home` writes both), or drop delete_home",
        )
        for i, user in enumerate(users.users)
        if user.delete_home and not user.removed
    ]


@_check
def limits_fit(users: UsersFile) -> list[Finding]:
    """A user's GPU cap above the account's never binds: say so, it is usually a typo."""
    caps = {account.name: account.gpus for account in users.accounts}
    findings = []
    for i, user in enumerate(users.users):
        cap = caps.get(user.account)
        if user.gpus is not None and cap is not None and user.gpus > cap:
            findings.append(
                warning(
                    "limit-above-account",
                    f"user {user.name!r} may hold {user.gpus} GPUs, but account {user.account!r} only {cap} in all",
                    ("users", i, "gpus"),
                    hint=f"the account's {cap} is what binds; lower the user's or raise the account's",
                )
            )
    return findings
