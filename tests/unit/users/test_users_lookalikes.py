"""Look-alike characters in the users file (issue 40): a located refusal wherever a grammar takes ASCII.

Account and QoS names, limits and descriptions reach sacctmgr and the Slurm database as written, user and
group names /etc/passwd and /etc/group, a key's comment authorized_keys: a digit or letter of another script
that reads like an ASCII one must never pass there (tests/unit/lookalikes.py says which).
"""

from __future__ import annotations

import base64
import copy
import struct
from typing import Any

import pytest
import yaml
from lookalikes import lookalikes, pattern_paths

from gpuclus.users.load import load_users_text
from gpuclus.users.models import UsersFile
from gpuclus.users.sshkeys import key_problem
from gpuclus.yamldoc.findings import Finding, Severity


def public_key(kind: str = "ssh-ed25519", body: bytes = b"\x07" * 32) -> str:
    blob = struct.pack(">I", len(kind)) + kind.encode() + struct.pack(">I", len(body)) + body
    return f"{kind} {base64.b64encode(blob).decode()}"


# Every field a grammar checks, holding digits and the letters s, k and i wherever its grammar allows them.
USERS: dict[str, Any] = {
    "apiVersion": "gpuclus/v1",
    "kind": "Users",
    "qos": [{"name": "desk1", "max_wall": "1-00:30:00"}],
    "accounts": [
        {"name": "vision1sk", "description": "Desk 1 group, skills", "max_wall": "30", "qos": ["normal", "desk1"]}
    ],
    "groups": [{"name": "desk1", "gid": 3000}],
    "users": [
        {
            "name": "ask1",
            "uid": 2001,
            "groups": ["desk1"],
            "shell": "/usr/bin/desk1",
            "ssh_keys": [public_key()],
            "account": "vision1sk",
        }
    ],
}

Path = tuple[str | int, ...]
GRAMMAR_FIELDS: list[Path] = [
    ("qos", 0, "name"),
    ("qos", 0, "max_wall"),
    ("accounts", 0, "name"),
    ("accounts", 0, "description"),
    ("accounts", 0, "max_wall"),
    ("groups", 0, "name"),
    ("users", 0, "name"),
    ("users", 0, "shell"),
    ("users", 0, "account"),
]


def dotted(path: Path) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")


def users_with(path: Path, value: Any) -> str:
    data = copy.deepcopy(USERS)
    holder: Any = data
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def errors_at(text: str, path: Path) -> list[Finding]:
    findings = load_users_text(text).findings
    return [f for f in findings if f.severity == Severity.ERROR and f.path.startswith(dotted(path))]


def test_the_users_above_load_clean() -> None:
    assert load_users_text(yaml.safe_dump(USERS)).findings == []


@pytest.mark.parametrize("path", GRAMMAR_FIELDS, ids=dotted)
def test_every_grammar_field_refuses_lookalikes_where_it_takes_ascii(path: Path) -> None:
    holder: Any = USERS
    for part in path:
        holder = holder[part]
    variants = list(lookalikes(str(holder)))
    assert variants, f"{holder!r} holds no character to swap"
    for variant in variants:
        found = errors_at(users_with(path, variant), path)
        assert found, f"{dotted(path)} accepted {variant!r}"
        assert all(finding.line is not None for finding in found), found


@pytest.mark.parametrize("comment", list(lookalikes("desk1@laptop-ski")))
def test_a_key_comment_refuses_lookalikes(comment: str) -> None:
    assert key_problem(f"{public_key()} desk1@laptop-ski") is None
    assert key_problem(f"{public_key()} {comment}") is not None
    found = errors_at(users_with(("users", 0, "ssh_keys"), [f"{public_key()} {comment}"]), ("users", 0, "ssh_keys"))
    assert found and all(finding.line is not None for finding in found)


def test_the_fields_above_are_every_field_with_a_pattern() -> None:
    schema = UsersFile.model_json_schema()
    covered = {
        ".".join("[]" if isinstance(part, int) else part for part in path).replace(".[]", "[]")
        for path in GRAMMAR_FIELDS
    }
    with_pattern = set(pattern_paths(schema))
    assert "users[].shell" in with_pattern and with_pattern - covered == set()
