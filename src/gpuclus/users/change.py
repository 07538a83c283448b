"""What `gpuclus users add` and `users remove` write: the users file's new text, checked, with its diff.

Nothing here touches the disk or a node: the command shows the diff, writes
the text and runs the users phase. A change that would leave the file with
an error is refused here, naming the problem, so a bad `users add` never
reaches the file, let alone a node.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from gpuclus.errors import SpecInvalidError, UsageError
from gpuclus.users.edit import UsersEditError, add_user, mark_removed
from gpuclus.users.load import load_users_text
from gpuclus.users.models import ID_MAX, User, UsersFile
from gpuclus.yamldoc.findings import Severity

# Ids `users add` picks from when none is given: above the common
# distribution range's first accounts (1000...), so a node's own early users
# and gpuclus' never meet.
FIRST_PICKED_ID = 2001


@dataclass(frozen=True)
class UsersChange:
    path: Path
    new_text: str
    diff: str  # unified diff of the users file; empty when nothing changes
    summary: str


@dataclass(frozen=True)
class NewUser:
    name: str
    account: str
    uid: int | None = None
    gid: int | None = None
    groups: tuple[str, ...] = ()
    shell: str | None = None
    ssh_keys: tuple[str, ...] = ()
    gpus: int | None = None
    admin: bool = False


def next_free_id(users: UsersFile) -> int:
    """One above the users' highest uid or gid (at least FIRST_PICKED_ID), past any id already taken, so
    the one id serves as the uid and the gid of the user's own group."""
    user_ids = [user.uid for user in users.users] + [user.gid for user in users.users if user.gid is not None]
    taken = set(user_ids) | {group.gid for group in users.groups}
    picked = max([FIRST_PICKED_ID - 1, *user_ids]) + 1
    while picked in taken:
        picked += 1
    if picked > ID_MAX:
        raise UsageError(f"no free id above {picked - 1} up to {ID_MAX}", "give one with --uid")
    return picked


def plan_add(path: Path, text: str, users: UsersFile, new: NewUser) -> UsersChange:
    if _find(users, new.name) is not None:
        raise UsageError(
            f"{new.name} is already in {path}",
            f"`gpuclus users remove {new.name}` marks them removed; other changes: edit {path}",
        )
    uid = new.uid if new.uid is not None else next_free_id(users)
    entry: dict[str, object] = {"name": new.name, "uid": uid}
    if new.gid is not None:
        entry["gid"] = new.gid
    if new.groups:
        entry["groups"] = list(new.groups)
    if new.shell is not None:
        entry["shell"] = new.shell
    entry["ssh_keys"] = list(new.ssh_keys)
    entry["account"] = new.account
    if new.gpus is not None:
        entry["gpus"] = new.gpus
    if new.admin:
        entry["admin"] = True
    try:
        new_text = add_user(text, entry)
    except UsersEditError as problem:
        raise UsageError(f"{path}: {problem}", "then run `gpuclus deploy --only users`") from None
    return _checked(path, text, new_text, f"added {new.name} (uid {uid}, account {new.account})")


def plan_remove(path: Path, text: str, users: UsersFile, name: str, *, delete_home: bool = False) -> UsersChange:
    user = _find(users, name)
    if user is None:
        known = ", ".join(sorted(user.name for user in users.users)) or "none"
        raise UsageError(f"no user named {name!r} in {path}", f"its users: {known}")
    try:
        new_text = mark_removed(text, name, delete_home=delete_home)
    except UsersEditError as problem:
        raise UsageError(f"{path}: {problem}", "then run `gpuclus deploy --only users`") from None
    if new_text == text:
        summary = f"{name} is already marked removed" + (" with its home deleted" if delete_home else "")
    else:
        summary = f"marked {name} removed" + (", its home to be deleted" if delete_home else "")
    return _checked(path, text, new_text, summary)


def _find(users: UsersFile, name: str) -> User | None:
    return next((user for user in users.users if user.name == name), None)


def _checked(path: Path, old: str, new: str, summary: str) -> UsersChange:
    errors = [finding for finding in load_users_text(new, str(path)).findings if finding.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        raise SpecInvalidError(
            f"the change would leave {path} with {len(errors)} error(s); the first: {first.path}: {first.message}",
            first.hint or "nothing was written; fix the options",
        )
    diff = "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), str(path), str(path))
    )
    return UsersChange(path, new, diff, summary)
