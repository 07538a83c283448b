"""Add a user to the users file's text, or mark one removed, leaving every other byte as the admin wrote it.

`gpuclus users add` and `users remove` keep the users file the truth: they
change it, show the diff, then apply it. The edit works on the text, not on
re-dumped YAML, so comments, order and quoting survive: a new user is
appended to the `users` list in that list's own indentation; a removed one
gets `removed: true` (its entry stays, as its account and home stay on the
nodes). Text it cannot edit safely (a flow-style list, a user written on one
line) raises UsersEditError saying what to change by hand.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from gpuclus.yamldoc.textedit import last_leaf, line_start

# A string YAML reads back as itself without quotes (and never as a number, bool or null).
_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./@:-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


class UsersEditError(ValueError):
    """The text cannot be edited safely; the message says what to change by hand."""


def add_user(text: str, entry: dict[str, Any]) -> str:
    """``text`` with ``entry`` (a user's fields, in the order to write them) appended to ``users``."""
    root = yaml.compose(text)
    if not isinstance(root, yaml.MappingNode):
        raise UsersEditError("the users file is not a mapping")
    found = _users(root)
    if found is None:
        separator = "" if not text or text.endswith("\n") else "\n"
        return text + separator + "users:\n" + _entry_text(entry, 2)
    key, users = found
    if isinstance(users, yaml.SequenceNode) and users.value and not users.flow_style:
        dash_column = _dash_column(text, users.value[0])
        at = line_start(text, last_leaf(users).end_mark.line + 1)
        head = text[:at] if text[:at].endswith("\n") or not text[:at] else text[:at] + "\n"
        return head + _entry_text(entry, dash_column) + text[at:]
    empty_flow = isinstance(users, yaml.SequenceNode) and users.flow_style and not users.value
    empty_scalar = isinstance(users, yaml.ScalarNode) and users.tag.endswith(":null")
    if empty_flow or empty_scalar:
        # `users: []` or `users:` alone: the list is written in block style under the key, after
        # whatever else the key's line holds (a comment).
        cut = users.start_mark.index if empty_flow else key.end_mark.index
        resume = users.end_mark.index if empty_flow else key.end_mark.index
        line_end = text.find("\n", resume)
        line_end = len(text) if line_end < 0 else line_end
        key_line = (text[:cut].rstrip(" ") + text[resume:line_end]).rstrip()
        return key_line + "\n" + _entry_text(entry, key.start_mark.column + 2) + text[line_end + 1 :]
    raise UsersEditError("`users` is not written as a block list (one `- ` item per user); add the user by hand")


def mark_removed(text: str, name: str, *, delete_home: bool = False) -> str:
    """``text`` with user ``name`` given ``removed: true`` (unchanged when it already has it), and
    ``delete_home: true`` too when asked."""
    text = _set_true(text, name, "removed")
    return _set_true(text, name, "delete_home") if delete_home else text


def _set_true(text: str, name: str, key: str) -> str:
    """``text`` with ``key: true`` in user ``name``'s entry: a value replaced, or a line added last."""
    root = yaml.compose(text)
    found = _users(root) if isinstance(root, yaml.MappingNode) else None
    if found is None or not isinstance(found[1], yaml.SequenceNode):
        raise UsersEditError("the users file has no `users` list")
    for item in found[1].value:
        if not isinstance(item, yaml.MappingNode):
            continue
        fields = {key.value: value for key, value in item.value if isinstance(key, yaml.ScalarNode)}
        user = fields.get("name")
        if not isinstance(user, yaml.ScalarNode) or user.value != name:
            continue
        current = fields.get(key)
        if isinstance(current, yaml.ScalarNode):
            if current.value.lower() == "true":
                return text
            return text[: current.start_mark.index] + "true" + text[current.end_mark.index :]
        if item.flow_style:
            raise UsersEditError(f"user {name} is written on one line; add `{key}: true` to it by hand")
        column: int = item.value[0][0].start_mark.column
        at = line_start(text, last_leaf(item).end_mark.line + 1)
        head = text[:at] if text[:at].endswith("\n") else text[:at] + "\n"
        return head + " " * column + f"{key}: true\n" + text[at:]
    raise UsersEditError(f"no user named {name!r} in the users file")


def _users(root: yaml.MappingNode) -> tuple[yaml.ScalarNode, yaml.Node] | None:
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "users":
            return key, value
    return None


def _dash_column(text: str, item: yaml.Node) -> int:
    line = text.split("\n")[item.start_mark.line]
    dash = line.rfind("-", 0, item.start_mark.column)
    if dash < 0:
        raise UsersEditError("`users` items do not start their own `- ` line; add the user by hand")
    return dash


def _entry_text(entry: dict[str, Any], dash_column: int) -> str:
    pad = " " * dash_column
    lines = [
        f"{pad}{'- ' if index == 0 else '  '}{key}: {_scalar(value)}"
        for index, (key, value) in enumerate(entry.items())
    ]
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(item) for item in value) + "]"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    # JSON's double-quoted strings are valid YAML double-quoted scalars.
    return json.dumps(text)
