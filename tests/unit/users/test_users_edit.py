"""`gpuclus users add|remove|list` without a cluster: the text edits, the checked change, squeue's reading.

The edits must keep every byte the admin wrote (comments, order, quoting)
and give text the users file's own loader accepts; the commands run the
users phase only after showing the diff, and --dry-run writes nothing. The
users phase itself runs on the sandbox (tests/integration/test_cluster_users.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_users_file import GOOD, public_key
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.errors import SpecInvalidError, UsageError
from gpuclus.slurm.commands import parse_gpus_in_use as gpus_in_use
from gpuclus.users.change import NewUser, next_free_id, plan_add, plan_remove
from gpuclus.users.edit import UsersEditError, add_user, mark_removed
from gpuclus.users.load import load_users_text

DAVE_KEY = public_key(body=b"\x04" * 32) + " dave@laptop"
DAVE = {"name": "dave", "uid": 2004, "ssh_keys": [DAVE_KEY], "account": "nlp", "gpus": 1}


def users_of(text: str) -> list[dict[str, object]]:
    loaded = load_users_text(text)
    assert loaded.ok, [finding.message for finding in loaded.findings]
    assert loaded.users is not None
    return [user.model_dump() for user in loaded.users.users]


def test_a_user_is_appended_in_the_lists_indentation_and_the_rest_is_untouched() -> None:
    text = GOOD + "# the end\n"
    added = add_user(text, DAVE)
    assert added.startswith(GOOD)
    assert added[len(GOOD) :] == (
        f'  - name: dave\n    uid: 2004\n    ssh_keys: ["{DAVE_KEY}"]\n    account: nlp\n    gpus: 1\n# the end\n'
    )
    assert [user["name"] for user in users_of(added)] == ["alice", "bob", "dave"]


@pytest.mark.parametrize(
    ("users_part", "expected_head"),
    [
        ("users: []  # nobody yet\ngroups: []\n", "users:  # nobody yet\n  - name: dave\n"),
        ("users:\ngroups: []\n", "users:\n  - name: dave\n"),
        ("", "users:\n  - name: dave\n"),
        ("users:\n- name: erin\n  uid: 2009\n  account: nlp\n",
         "users:\n- name: erin\n  uid: 2009\n  account: nlp\n- name: dave\n"),
    ],
)  # fmt: skip
def test_an_empty_missing_or_unindented_list_gets_the_user(users_part: str, expected_head: str) -> None:
    head = "apiVersion: gpuclus/v1\nkind: Users\naccounts: [{name: nlp}]\n"
    added = add_user(head + users_part, DAVE)
    assert added.startswith(head + expected_head), added
    assert "dave" in [user["name"] for user in users_of(added)]


def test_a_flow_list_of_users_is_left_to_the_admin() -> None:
    with pytest.raises(UsersEditError, match="block list"):
        add_user("apiVersion: gpuclus/v1\nkind: Users\naccounts: [{name: nlp}]\nusers: [{name: a, uid: 2001}]\n", DAVE)


def test_removal_adds_or_flips_the_flag_once() -> None:
    removed = mark_removed(GOOD, "alice")
    assert removed == GOOD.replace("    admin: true\n", "    admin: true\n    removed: true\n")
    assert mark_removed(removed, "alice") == removed
    flipped = mark_removed(GOOD.replace("account: nlp\n", "account: nlp\n    removed: false  # for now\n"), "bob")
    assert flipped.endswith("account: nlp\n    removed: true  # for now\n")
    assert [user["removed"] for user in users_of(flipped)] == [False, True]
    with pytest.raises(UsersEditError, match="no user named 'zed'"):
        mark_removed(GOOD, "zed")


def test_removal_with_the_home_adds_both_flags_once_and_only_a_removed_user_may_have_it() -> None:
    both = mark_removed(GOOD, "alice", delete_home=True)
    assert both == GOOD.replace("    admin: true\n", "    admin: true\n    removed: true\n    delete_home: true\n")
    assert mark_removed(both, "alice", delete_home=True) == both
    # Already removed: only the deletion is added.
    assert mark_removed(mark_removed(GOOD, "alice"), "alice", delete_home=True) == both
    assert load_users_text(both).ok
    stray = GOOD.replace("    admin: true\n", "    admin: true\n    delete_home: true\n")
    found = load_users_text(stray).findings
    assert [(f.code, f.line) for f in found] == [
        ("delete-home-not-removed", stray.splitlines().index("    delete_home: true") + 1)
    ]


def test_the_picked_id_is_above_the_users_and_free() -> None:
    loaded = load_users_text(GOOD)
    assert loaded.users is not None
    assert next_free_id(loaded.users) == 2103  # bob's own group has gid 2102
    crowded = load_users_text(GOOD.replace("gid: 3000", "gid: 2103"))
    assert crowded.users is not None
    assert next_free_id(crowded.users) == 2104


def test_plan_add_refuses_a_known_name_and_a_change_that_breaks_the_file(tmp_path: Path) -> None:
    loaded = load_users_text(GOOD)
    assert loaded.users is not None
    path = tmp_path / "users.yaml"
    with pytest.raises(UsageError, match="alice is already in"):
        plan_add(path, GOOD, loaded.users, NewUser(name="alice", account="nlp"))
    with pytest.raises(SpecInvalidError, match="names account 'nope'"):
        plan_add(path, GOOD, loaded.users, NewUser(name="dave", account="nope", ssh_keys=(DAVE_KEY,)))
    with pytest.raises(SpecInvalidError, match="ssh_keys"):
        plan_add(path, GOOD, loaded.users, NewUser(name="dave", account="nlp", ssh_keys=("ssh-rsa nonsense",)))
    change = plan_add(path, GOOD, loaded.users, NewUser(name="dave", account="nlp", ssh_keys=(DAVE_KEY,), admin=True))
    assert change.summary == "added dave (uid 2103, account nlp)"
    assert "+  - name: dave\n+    uid: 2103\n" in change.diff and "+    admin: true\n" in change.diff


def test_plan_remove_names_the_users_there_are(tmp_path: Path) -> None:
    loaded = load_users_text(GOOD)
    assert loaded.users is not None
    with pytest.raises(UsageError) as caught:
        plan_remove(tmp_path / "users.yaml", GOOD, loaded.users, "zed")
    assert caught.value.hint == "its users: alice, bob"
    change = plan_remove(tmp_path / "users.yaml", GOOD, loaded.users, "bob")
    assert change.summary == "marked bob removed" and "+    removed: true\n" in change.diff


def test_gpus_in_use_add_up_per_user_from_squeues_tres() -> None:
    # `squeue --noheader --states=RUNNING --Format='UserName:|,tres-alloc:|'` on Slurm 24.11.
    output = (
        "alice|cpu=1,mem=11834M,node=1,billing=1,gres/gpu=1|\n"
        "dave|cpu=2,mem=100M,node=2,billing=2,gres/gpu=2,gres/gpu:h100=2|\n"
        "alice|cpu=1,mem=1M,node=1,billing=1,gres/gpu=1|\n"
        "carol|cpu=4,mem=4G,node=1,billing=4|\n"
    )
    assert gpus_in_use(output) == {"alice": 2, "dave": 2}


SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
users: {file: users.yaml}
"""


@pytest.fixture()
def cluster_dir(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(SPEC)
    (tmp_path / "users.yaml").write_text(GOOD)
    (tmp_path / "dave.pub").write_text(f"# dave's laptop\n{DAVE_KEY}\n")
    return tmp_path


def test_users_add_dry_run_shows_the_diff_and_writes_nothing(cluster_dir: Path) -> None:
    spec = str(cluster_dir / "cluster.yaml")
    args = ["users", "add", "dave", "--account", "nlp", "--key", str(cluster_dir / "dave.pub"), "--gpus", "1"]
    result = CliRunner().invoke(app, [*args, "--spec", spec, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "+  - name: dave\n" in result.output and "dry run: nothing written" in result.output
    assert (cluster_dir / "users.yaml").read_text() == GOOD

    report = json.loads(CliRunner().invoke(app, [*args, "--spec", spec, "--dry-run", "--json"]).stdout)
    assert report["ok"] is True and report["written"] is False and report["summary"].startswith("added dave")

    bad = CliRunner().invoke(app, ["users", "add", "dave", "--account", "nope", "--spec", spec])
    assert bad.exit_code == 3 and "names account 'nope'" in bad.output
    missing_key = CliRunner().invoke(app, [*args[:5], "--key", str(cluster_dir / "none.pub"), "--spec", spec])
    assert missing_key.exit_code == 2 and "cannot read it" in missing_key.output
    assert (cluster_dir / "users.yaml").read_text() == GOOD


def test_users_remove_delete_home_shows_both_flags_and_needs_the_name(cluster_dir: Path) -> None:
    spec = str(cluster_dir / "cluster.yaml")
    shown = CliRunner().invoke(app, ["users", "remove", "bob", "--delete-home", "--spec", spec, "--dry-run"])
    assert shown.exit_code == 0, shown.output
    assert "+    removed: true\n+    delete_home: true\n" in shown.output
    # No terminal (CliRunner's stdin is not one) and no --confirm-delete: refused before anything is written.
    unconfirmed = CliRunner().invoke(app, ["users", "remove", "bob", "--delete-home", "--spec", spec])
    assert unconfirmed.exit_code == 2 and "--confirm-delete bob" in unconfirmed.output
    wrong = CliRunner().invoke(
        app, ["users", "remove", "bob", "--delete-home", "--confirm-delete", "alice", "--spec", spec]
    )
    assert wrong.exit_code == 1 and "does not match" in wrong.output
    stray = CliRunner().invoke(app, ["users", "remove", "bob", "--confirm-delete", "bob", "--spec", spec])
    assert stray.exit_code == 2 and "goes with --delete-home" in stray.output
    assert (cluster_dir / "users.yaml").read_text() == GOOD


def test_users_list_offline_shows_the_file(cluster_dir: Path) -> None:
    result = CliRunner().invoke(
        app, ["users", "list", "--spec", str(cluster_dir / "cluster.yaml"), "--offline", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["live"] is False
    rows = [
        (row["name"], row["account"], row["gpus"], row["account_gpus"], row["gpus_in_use"]) for row in report["users"]
    ]
    assert rows == [
        ("alice", "vision", 1, 4, None),
        ("bob", "nlp", None, None, None),
    ]  # fmt: skip


def test_a_spec_without_a_users_file_says_how_to_add_one(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(SPEC.replace("users: {file: users.yaml}\n", ""))
    result = CliRunner().invoke(app, ["users", "remove", "bob", "--spec", str(tmp_path / "cluster.yaml")])
    assert result.exit_code == 2 and "names no users file" in result.output
