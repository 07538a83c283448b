"""The users file (issue 19): structure and meaning, each problem a finding with its code and line."""

from __future__ import annotations

import base64
import struct
from pathlib import Path

import pytest

from gpuclus.users.load import load_users, load_users_text
from gpuclus.users.sshkeys import key_problem
from gpuclus.yamldoc.document import SpecFileError
from gpuclus.yamldoc.findings import Severity


def public_key(kind: str = "ssh-ed25519", body: bytes = b"\x07" * 32) -> str:
    """A well-formed public key line: the blob starts with its type as an SSH string."""
    blob = struct.pack(">I", len(kind)) + kind.encode() + struct.pack(">I", len(body)) + body
    return f"{kind} {base64.b64encode(blob).decode()}"


ALICE_KEY = public_key(body=b"\x01" * 32) + " alice@laptop"
BOB_KEY = public_key(body=b"\x02" * 32)

GOOD = f"""\
apiVersion: gpuclus/v1
kind: Users
qos:
  - name: debug
    priority: 1000
    max_wall: "00:30:00"
    gpus_per_user: 1
accounts:
  - name: vision
    description: Computer vision group
    fairshare: 2
    gpus: 4
    qos: [normal, debug]
  - name: nlp
groups:
  - name: datasets
    gid: 3000
users:
  - name: alice
    uid: 2001
    groups: [datasets]
    ssh_keys:
      - {ALICE_KEY}
    account: vision
    gpus: 1
    admin: true
  - name: bob
    uid: 2002
    gid: 2102
    shell: /usr/bin/zsh
    ssh_keys: ["{BOB_KEY}"]
    account: nlp
"""


def findings_of(text: str) -> list[tuple[str, int | None, Severity]]:
    return [(f.code, f.line, f.severity) for f in load_users_text(text).findings]


def test_a_good_file_loads_with_its_defaults() -> None:
    loaded = load_users_text(GOOD)
    assert loaded.findings == [] and loaded.ok and loaded.users is not None
    alice, bob = loaded.users.users
    assert (alice.uid, alice.gid, alice.shell, alice.groups, alice.admin, alice.removed) == (
        2001,
        None,
        "/bin/bash",
        ["datasets"],
        True,
        False,
    )
    assert (bob.gid, bob.shell, bob.gpus) == (2102, "/usr/bin/zsh", None)
    vision, nlp = loaded.users.accounts
    assert (vision.fairshare, vision.gpus, vision.qos) == (2, 4, ["normal", "debug"])
    assert (nlp.fairshare, nlp.gpus, nlp.qos, nlp.max_wall) == (1, None, ["normal"], None)
    assert loaded.users.qos[0].max_wall == "00:30:00"


def _edit(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


def _line(text: str, needle: str, occurrence: int = 1) -> int:
    lines = [number for number, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[occurrence - 1]


@pytest.mark.parametrize(
    ("old", "new", "code", "needle", "occurrence"),
    [
        ("  - name: bob\n", "  - name: alice\n", "duplicate-user", "- name: alice", 2),
        ("    uid: 2002\n", "    uid: 2001\n", "duplicate-uid", "uid: 2001", 2),
        ("    gid: 2102\n", "    gid: 3000\n", "duplicate-gid", "gid: 3000", 2),
        ("    uid: 2001\n", "    uid: 3000\n", "duplicate-gid", "uid: 3000", 1),
        ("  - name: datasets\n", "  - name: bob\n", "group-is-a-user", "- name: bob", 1),
        ("  - name: bob\n", "  - name: slurm\n", "reserved-name", "- name: slurm", 1),
        ("    groups: [datasets]\n", "    groups: [datasets, gpu-users]\n", "unknown-group", "groups: [datasets", 1),
        ("    groups: [datasets]\n", "    groups: [datasets, datasets]\n", "duplicate-group", "groups: [datasets", 1),
        ("    account: nlp\n", "    account: speech\n", "unknown-account", "account: speech", 1),
        ("    qos: [normal, debug]\n", "    qos: [normal, long]\n", "unknown-qos", "qos: [normal, long]", 1),
        ("    qos: [normal, debug]\n", "    qos: []\n", "no-qos", "qos: []", 1),
        ("  - name: nlp\n", "  - name: vision\n", "duplicate-account", "- name: vision", 2),
        (
            "  - name: debug\n",
            "  - name: debug\n    priority: 1\n  - name: debug\n",
            "duplicate-qos",
            "- name: debug",
            2,
        ),
    ],
)
def test_each_clash_is_named_at_its_line(old: str, new: str, code: str, needle: str, occurrence: int) -> None:
    text = _edit(old, new)
    found = findings_of(text)
    assert (code, _line(text, needle, occurrence), Severity.ERROR) in found, found
    assert not load_users_text(text).ok


@pytest.mark.parametrize(
    ("old", "new", "code", "needle"),
    [
        ("    uid: 2002\n", "    uid: 999\n", "out-of-range", "uid: 999"),
        ("    uid: 2002\n", "    uid: 65534\n", "out-of-range", "uid: 65534"),
        ("  - name: bob\n", "  - name: Bob\n", "invalid-format", "name: Bob"),
        ("    shell: /usr/bin/zsh\n", "    shell: zsh\n", "invalid-format", "shell: zsh"),
        ("    description: Computer vision group\n", '    description: "it\'s"\n', "invalid-format", "description"),
        ('    max_wall: "00:30:00"\n', "    max_wall: half an hour\n", "invalid-format", "max_wall"),
        ("    account: nlp\n", "    acount: nlp\n", "unknown-key", "acount: nlp"),
        ("    gpus: 1\n", "    gpus: -1\n", "out-of-range", "gpus: -1"),
        ("    admin: true\n", "    admin: maybe\n", "wrong-type", "admin: maybe"),
        ("kind: Users\n", "kind: Cluster\n", "wrong-kind", "kind: Cluster"),
        ("apiVersion: gpuclus/v1\n", "apiVersion: gpuclus/v2\n", "api-version", "apiVersion"),
    ],
)
def test_structure_problems_are_named_at_their_line(old: str, new: str, code: str, needle: str) -> None:
    text = _edit(old, new)
    found = findings_of(text)
    assert (code, _line(text, needle), Severity.ERROR) in found, found
    assert load_users_text(text).users is None


def test_an_unknown_key_suggests_the_one_meant() -> None:
    (finding,) = load_users_text(_edit("    account: nlp\n", "    acount: nlp\n")).findings
    assert finding.hint is not None and "did you mean 'account'?" in finding.hint


def test_a_missing_account_is_named_with_the_accounts_there_are() -> None:
    finding = next(f for f in load_users_text(_edit("    account: nlp\n", "    account: speech\n")).findings)
    assert finding.message == "user 'bob' names account 'speech', which `accounts` does not list"
    assert finding.hint == "accounts: nlp, vision"
    close = next(f for f in load_users_text(_edit("    account: nlp\n", "    account: nlpp\n")).findings)
    assert close.hint == "did you mean 'nlp'? (accounts: nlp, vision)"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "is a private key"),
        ('command="/bin/true" ' + BOB_KEY, "starts with authorized_keys options"),
        ("ssh-dss AAAAB3NzaC1kc3M=", "not a key type"),
        ("ssh-ed25519", "no key after it"),
        ("ssh-ed25519 not*base64", "not base64"),
        (public_key("ssh-rsa").replace("ssh-rsa ", "ssh-ed25519 ", 1), "not a ssh-ed25519 key"),
        (BOB_KEY + " caf\u00e9", "letters, digits"),
        (BOB_KEY + ' {{ lookup("pipe", "id") }}', "letters, digits"),
    ],
)
def test_a_bad_ssh_key_is_refused_with_the_reason(key: str, why: str) -> None:
    problem = key_problem(key)
    assert problem is not None and why in problem
    text = _edit(f'    ssh_keys: ["{BOB_KEY}"]\n', f"    ssh_keys:\n      - '{key}'\n")
    found = load_users_text(text).findings
    assert [(f.code, f.line) for f in found] == [("bad-ssh-key", _line(text, "      - '"))], found


@pytest.mark.parametrize("kind", ["ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "sk-ssh-ed25519@openssh.com"])
def test_the_usual_key_types_pass(kind: str) -> None:
    assert key_problem(public_key(kind) + " someone@somewhere") is None
    assert key_problem(public_key(kind)) is None


def test_warnings_do_not_stop_the_file_from_loading() -> None:
    text = _edit(f'    ssh_keys: ["{BOB_KEY}"]\n', f'    ssh_keys: ["{ALICE_KEY}"]\n')
    text = text.replace("    gpus: 1\n", "    gpus: 8\n")
    text += "  - name: carol\n    uid: 2003\n    account: nlp\n"
    loaded = load_users_text(text)
    assert loaded.ok
    assert [(f.code, f.line, f.severity) for f in loaded.findings] == [
        ("limit-above-account", _line(text, "gpus: 8"), Severity.WARNING),
        ("shared-ssh-key", _line(text, "alice@laptop", 2), Severity.WARNING),
        ("no-ssh-key", _line(text, "- name: carol"), Severity.WARNING),
    ]


def test_a_removed_user_needs_no_key() -> None:
    text = GOOD + "  - name: carol\n    uid: 2003\n    account: nlp\n    removed: true\n"
    assert load_users_text(text).findings == []


def test_not_a_mapping_and_missing_file(tmp_path: Path) -> None:
    assert findings_of("- alice\n- bob\n") == [("not-a-mapping", 1, Severity.ERROR)]
    with pytest.raises(SpecFileError) as missing:
        load_users(tmp_path / "users.yaml")
    assert missing.value.usage and missing.value.hint is not None and "docs/users.md" in missing.value.hint
    (tmp_path / "users.yaml").write_text(GOOD)
    assert load_users(tmp_path / "users.yaml").ok


def test_docs_describe_every_field_and_code() -> None:
    import inspect
    import re

    from pydantic import BaseModel

    from gpuclus.users import checks, load
    from gpuclus.users.models import UsersFile
    from gpuclus.yamldoc.schema_findings import first_model

    text = (Path(__file__).resolve().parents[3] / "docs" / "users.md").read_text()

    def fields(model: type[BaseModel], prefix: str) -> list[str]:
        names = []
        for name, info in model.model_fields.items():
            key = f"{prefix}{info.alias or name}"
            nested = first_model(info.annotation)
            names += fields(nested, f"{key}[].") if nested is not None else [key]
        return names

    missing = [name for name in fields(UsersFile, "") if f"`{name}`" not in text]
    assert not missing, f"docs/users.md does not name: {missing}"
    source = inspect.getsource(checks) + inspect.getsource(load)
    codes = set(re.findall(r'(?:error|warning)\(\s*"([a-z-]+)"', source))
    codes |= {f"duplicate-{one}" for one in checks._ONE.values()}
    assert len(codes) > 15
    assert not [code for code in sorted(codes) if f"`{code}`" not in text], "docs/users.md lacks a finding code"


def test_users_check_prints_each_finding_and_exits_3(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from gpuclus.cli.main import app

    runner = CliRunner()
    good = tmp_path / "users.yaml"
    good.write_text(GOOD + "  - name: carol\n    uid: 2003\n    account: nlp\n    removed: true\n")
    result = runner.invoke(app, ["users", "check", str(good)])
    assert result.exit_code == 0, result.output
    assert "valid — 2 users, 1 removed user, 2 accounts (no problems)" in result.output

    bad = tmp_path / "bad.yaml"
    bad.write_text(_edit("    account: nlp\n", "    account: nlpp\n"))
    result = runner.invoke(app, ["users", "check", str(bad)])
    assert result.exit_code == 3
    line = _line(bad.read_text(), "account: nlpp")
    assert f"{bad}:{line}:14: error[unknown-account] users[1].account:" in result.output
    assert "hint: did you mean 'nlp'?" in result.output

    report = json.loads(runner.invoke(app, ["users", "check", str(bad), "--json"]).stdout)
    assert report["ok"] is False and report["counts"]["error"] == 1
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("unknown-account", line)]

    warned = tmp_path / "warned.yaml"
    warned.write_text(GOOD + "  - name: dave\n    uid: 2004\n    account: nlp\n")
    assert runner.invoke(app, ["users", "check", str(warned)]).exit_code == 0
    assert runner.invoke(app, ["users", "check", str(warned), "--strict"]).exit_code == 3

    missing = runner.invoke(app, ["users", "check", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "no such file" in missing.output


def test_the_spec_load_reads_the_users_file_once_and_keeps_what_it_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuclus.spec.checks import users as user_checks
    from gpuclus.spec.load import load_spec

    (tmp_path / "users.yaml").write_text(GOOD)
    (tmp_path / "cluster.yaml").write_text(
        "apiVersion: gpuclus/v1\ncluster: {name: lab, admin_user: ubuntu}\nnodes:\n"
        "  - {name: head, address: 10.0.0.10, roles: [controller, login]}\n"
        "  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}\n"
        "users: {file: users.yaml}\n"
    )
    reads: list[Path] = []

    def counted(path: Path) -> object:
        reads.append(path)
        return load_users(path)

    monkeypatch.setattr(user_checks, "load_users", counted)
    loaded = load_spec(tmp_path / "cluster.yaml")
    assert loaded.ok and loaded.users is not None
    assert [user.name for user in loaded.users.users] == ["alice", "bob"]
    assert reads == [tmp_path / "users.yaml"]
