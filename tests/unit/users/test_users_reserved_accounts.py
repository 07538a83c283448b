"""Slurm's root account (issue 40, class 2): the top of the account tree is no account a users file may declare.

Every association hangs below ``root``; gpuclus puts its own operators there without limits, so validate's jobs
run whatever the users file says. An account ``root`` in the file would have the slurm_accounts role set its
GrpTRES, fairshare and MaxWall on that top node, which binds every user and the operators too.
"""

from __future__ import annotations

import pytest

from gpuclus.users.load import load_users_text
from gpuclus.yamldoc.findings import Severity

USERS = """\
apiVersion: gpuclus/v1
kind: Users
accounts:
  - name: {account}
    gpus: 4
users:
  - name: alice
    uid: 2001
    account: {account}
"""


def test_an_account_named_root_is_refused_at_its_line() -> None:
    loaded = load_users_text(USERS.format(account="root"))
    refusals = [
        (finding.line, finding.path, finding.severity) for finding in loaded.findings if finding.code == "reserved-name"
    ]
    assert refusals == [(4, "accounts[0].name", Severity.ERROR)], loaded.findings
    assert not loaded.ok


@pytest.mark.parametrize("account", ["roots", "vision", "rootless"])
def test_other_account_names_are_accepted(account: str) -> None:
    loaded = load_users_text(USERS.format(account=account))
    assert loaded.ok, loaded.findings
