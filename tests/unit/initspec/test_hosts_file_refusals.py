"""`gpuclus init --hosts FILE` names the line and the field that is wrong, never what the field holds.

The file can be any the user can read (`--hosts /etc/shadow` under sudo, a
secret under .gpuclus/secrets/): a refusal quoting its first word would print
a password hash or a password.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.errors import UsageError
from gpuclus.initspec.hostsfile import parse_hosts_text

SECRET = "hunter2-Do_Not-Print"


@pytest.mark.parametrize(
    "line",
    [
        f"root:{SECRET}:19000:0:99999:7:::",
        f"DB_PASSWORD={SECRET}",
        f"{SECRET} 10.0.0.5",
        f"10.0.0.5 {SECRET}",
        f"{SECRET} is the password",
        f"10.0.0.{SECRET} node1",
    ],
)
def test_a_line_that_is_not_a_hosts_line_is_named_not_quoted(line: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_hosts_text(f"10.0.0.1 node1\n{line}\n", "secret")
    assert caught.value.message.startswith("secret:2: ")
    assert SECRET not in caught.value.message and "hunter2" not in caught.value.message


def test_init_with_a_secret_as_hosts_file_prints_none_of_it(tmp_path: object) -> None:
    from pathlib import Path

    secret = Path(str(tmp_path)) / "db_password"
    secret.write_text(f"{SECRET}\n")
    args = ["init", "-o", str(Path(str(tmp_path)) / "cluster.yaml"), "--hosts", str(secret)]
    for extra in ((), ("--json",)):
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == 2, result.output
        assert SECRET not in result.output and "hunter2" not in result.output
