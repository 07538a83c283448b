"""The users file, v1: who may use the cluster, their Slurm accounts and GPU limits.

A file of its own, named by the cluster spec, so the user list can change often
without touching the cluster's layout. Structure and types are checked here;
meaning across entries (unique names and ids, accounts that exist, ...) in
``users/checks.py``. The field descriptions feed docs/users.md, so keep them
written for a cluster admin.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from gpuclus.yamldoc.grammar import ascii_grammar
from gpuclus.yamldoc.patterns import ABSOLUTE_PATH, MAX_TIME_PATTERN, USER_PATTERN, NumberText

USERS_KIND: Final = "Users"

# Debian's and Ubuntu's range for people's accounts (UID_MIN/UID_MAX in
# /etc/login.defs): below it are system accounts, 65534 is nobody.
ID_MIN: Final = 1000
ID_MAX: Final = 60000

# Slurm lower-cases account and QoS names; upper case here would not match what sacctmgr shows.
SLURM_NAME_PATTERN: Final = ascii_grammar(r"^[a-z][a-z0-9_-]{0,63}$")
# What sacctmgr's Description= may hold: one line of plain words and punctuation, no quotes.
DESCRIPTION_PATTERN: Final = ascii_grammar(r"^[A-Za-z0-9 _.,:;()/+&@-]{1,100}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Qos(_Model):
    name: str = Field(
        pattern=SLURM_NAME_PATTERN, description="QoS name, e.g. 'debug' (Slurm's 'normal' always exists)."
    )
    priority: int = Field(
        default=0, ge=0, le=1_000_000, description="QoS priority: how much it raises a job's priority (multifactor)."
    )
    max_wall: NumberText | None = Field(
        default=None,
        pattern=MAX_TIME_PATTERN,
        description="Longest time a job in this QoS may run (MaxWall): minutes or [days-]hours:minutes:seconds.",
    )
    gpus_per_user: int | None = Field(
        default=None, ge=0, le=100_000, description="GPUs one user may hold at once in this QoS (MaxTRESPerUser)."
    )


class Account(_Model):
    name: str = Field(pattern=SLURM_NAME_PATTERN, description="Slurm account name, e.g. a group: 'vision'.")
    description: str | None = Field(
        default=None, pattern=DESCRIPTION_PATTERN, description="One line shown by sacctmgr (no quotes)."
    )
    fairshare: int = Field(
        default=1, ge=1, le=1_000_000, description="Shares of the cluster against the other accounts (Fairshare)."
    )
    gpus: int | None = Field(
        default=None, ge=0, le=100_000, description="GPUs the account's running jobs may hold together (GrpTRES)."
    )
    max_wall: NumberText | None = Field(
        default=None,
        pattern=MAX_TIME_PATTERN,
        description="Longest time a job of this account may run (MaxWall).",
    )
    qos: list[str] = Field(
        default_factory=lambda: ["normal"],
        description="QoS names the account's users may ask for (entries of `qos`, or 'normal'); the first is "
        "their default.",
    )


class Group(_Model):
    name: str = Field(pattern=USER_PATTERN, description="Extra Unix group, created on every node.")
    gid: int = Field(ge=ID_MIN, le=ID_MAX, description="Its group id, the same on every node.")


class User(_Model):
    name: str = Field(pattern=USER_PATTERN, description="Login name (lower case, digits, '_' and '-').")
    uid: int = Field(ge=ID_MIN, le=ID_MAX, description="User id, the same on every node.")
    gid: int | None = Field(
        default=None,
        ge=ID_MIN,
        le=ID_MAX,
        description="Id of the user's own group (named like the user); the uid when left out.",
    )
    groups: list[str] = Field(default_factory=list, description="Extra groups (entries of `groups`).")
    shell: str = Field(default="/bin/bash", pattern=ABSOLUTE_PATH, description="Login shell.")
    ssh_keys: list[str] = Field(
        default_factory=list,
        description="Public keys allowed to log in, one authorized_keys line each: type, key, optional comment.",
    )
    account: str = Field(pattern=SLURM_NAME_PATTERN, description="The Slurm account the user's jobs run under.")
    gpus: int | None = Field(
        default=None, ge=0, le=100_000, description="GPUs the user's running jobs may hold together (GrpTRES)."
    )
    admin: bool = Field(default=False, description="Passwordless sudo on every node.")
    removed: bool = Field(
        default=False,
        description="The account is locked, its keys and Slurm association removed; its home is kept.",
    )
    delete_home: bool = Field(
        default=False,
        description="With removed: the user's home is deleted on every node where it is local (the NFS "
        "server's copy, the one that holds the data). The only way gpuclus deletes a user's files.",
    )


class UsersFile(_Model):
    api_version: str = Field(alias="apiVersion", description="Format version: gpuclus/v1.")
    kind: str = Field(description="Always 'Users': what this file is.")
    qos: list[Qos] = Field(default_factory=list, description="QoS levels beyond Slurm's 'normal'.")
    accounts: list[Account] = Field(min_length=1, description="Slurm accounts: every user belongs to one.")
    groups: list[Group] = Field(default_factory=list, description="Extra Unix groups.")
    users: list[User] = Field(default_factory=list, description="The cluster's users.")
