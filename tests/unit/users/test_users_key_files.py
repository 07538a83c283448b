"""`users add --key` and `users check` on hostile files: refusals that say what is wrong, never what a file holds.

`--key` may name any file, a secret under .gpuclus/secrets/ included: a line
that is not a public key is refused by its number and what is wrong with it,
never quoted; a FIFO, /dev/zero, a huge or a binary file is refused before it
blocks or fills memory. An integer of thousands of digits in the users file
is a located finding, not Python's int-string limit as a traceback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deadline import within
from test_users_edit import DAVE_KEY, SPEC
from test_users_file import GOOD
from typer.testing import CliRunner

from gpuclus.cli.main import app

runner = CliRunner()
SECRET = "hunter2-do-not-print"


@pytest.fixture()
def cluster(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(SPEC)
    (tmp_path / "users.yaml").write_text(GOOD)
    return tmp_path


def users_add(cluster: Path, key: Path | str, *extra: str) -> tuple[int, str]:
    args = ["users", "add", "dave", "--account", "nlp", "--key", str(key), "--spec", str(cluster / "cluster.yaml")]
    with within(20):
        result = runner.invoke(app, [*args, "--dry-run", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def test_users_add_key_refuses_a_secret_without_printing_it(cluster: Path) -> None:
    secrets = cluster / ".gpuclus" / "secrets"
    secrets.mkdir(parents=True)
    for name, text in (
        ("db_password", f"{SECRET}\n"),
        ("env", f"# comment\nDB_PASSWORD={SECRET}\n"),
        ("two", f"{DAVE_KEY}\nssh-ed25519 {SECRET}\n"),
        ("options", f'command="{SECRET}" {DAVE_KEY}\n'),
        ("comment", f"{DAVE_KEY} {{{{{SECRET}}}}}\n"),
    ):
        (secrets / name).write_text(text)
        for extra in ((), ("--json",)):
            code, output = users_add(cluster, secrets / name, *extra)
            assert code == 2, output
            assert SECRET not in output and "DB_PASSWORD" not in output, output
            assert f"--key {secrets / name}: line " in output, output
    code, output = users_add(cluster, secrets / "env")
    assert f"--key {secrets / 'env'}: line 2 is not a public key" in output
    assert (cluster / "users.yaml").read_text() == GOOD


def test_users_add_key_refuses_a_private_key_by_line(cluster: Path) -> None:
    private = cluster / "id_ed25519"
    private.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n-----END OPENSSH PRIVATE KEY-----\n")
    code, output = users_add(cluster, private)
    assert code == 2 and "line 1 is a private key" in output and SECRET not in output


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge", "binary", "directory"])
def test_users_add_key_never_blocks_or_reads_without_end(cluster: Path, kind: str) -> None:
    key = cluster / "key.pub"
    if kind == "fifo":
        os.mkfifo(key)
    elif kind == "dev-zero":
        key = Path("/dev/zero")
    elif kind == "huge":
        key.write_text((DAVE_KEY + "\n") * 10_000)
    elif kind == "binary":
        key.write_bytes(b"\xff\xfe" + SECRET.encode())
    else:
        key.mkdir()
    code, output = users_add(cluster, key)
    assert code == 2 and output.startswith(f"error: --key {key}: ") and len(output.splitlines()) == 2, output
    assert SECRET not in output
    assert (cluster / "users.yaml").read_text() == GOOD


def test_users_add_still_takes_a_key_file(cluster: Path) -> None:
    (cluster / "dave.pub").write_text(f"# dave's laptop\n\n{DAVE_KEY}\n")
    code, output = users_add(cluster, cluster / "dave.pub")
    assert code == 0, output
    assert DAVE_KEY in output  # the diff shows the line written


def test_a_five_thousand_digit_integer_in_the_users_file_is_a_located_finding(cluster: Path) -> None:
    users = cluster / "users.yaml"
    users.write_text(GOOD.replace("uid: 2002", "uid: " + "2" * 5_000))
    line = GOOD[: GOOD.index("uid: 2002")].count("\n") + 1
    with within(20):
        checked = runner.invoke(app, ["users", "check", str(users)])
        report = json.loads(runner.invoke(app, ["users", "check", str(users), "--json"]).stdout)
        added = runner.invoke(
            app, ["users", "add", "dave", "--account", "nlp", "--spec", str(cluster / "cluster.yaml")]
        )
    assert checked.exit_code == 3 and f"users.yaml:{line}:10: error[yaml-syntax]" in checked.output
    assert "an integer of 5000 characters" in checked.output and "Traceback" not in checked.output
    assert [(f["code"], f["line"]) for f in report["findings"]] == [("yaml-syntax", line)]
    assert added.exit_code == 3 and "users-file-invalid" in added.output and "Traceback" not in added.output
