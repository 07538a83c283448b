"""The slurm_accounts role's module (roles/slurm_accounts/library/slurm_associations.py): what it runs.

The module reads sacctmgr's `--noheader --parsable2 show` output and plans the
`sacctmgr --immediate` calls that differ. Its functions are called here on
output recorded from Slurm 24.11 on a Debian 13 sandbox node (the same
layout as 22.05's), so each case is a real database state. The calls
themselves run against a real slurmdbd in tests/integration/test_cluster_users.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODULE_PATH = Path(__file__).resolve().parents[3] / "roles" / "slurm_accounts" / "library" / "slurm_associations.py"

# `sacctmgr -nP show association where cluster=acct13
#  format=Account,User,Fairshare,GrpTRES,MaxWall,QOS,DefaultQOS` after a first run.
ASSOCIATIONS = """\
root||1|||normal|
root|root|1|||normal|
nlp||1|||normal|normal
nlp|carol|1|||normal|normal
vision||2|gres/gpu=3|1-00:00:00|debug,normal|normal
vision|alice|1|gres/gpu=1|1-00:00:00|debug,normal|normal
vision|bob|1||1-00:00:00|debug,normal|normal
"""
# `sacctmgr -nP show qos format=Name,Priority,MaxWall,MaxTRESPU`
QOS = """\
normal|0||
debug|100|00:30:00|gres/gpu=1
"""

WANTED_QOS = [{"name": "debug", "priority": 100, "max_wall": 30, "gpus_per_user": 1}]
WANTED_ACCOUNTS = [
    {"name": "vision", "description": "Vision group", "fairshare": 2, "gpus": 3, "max_wall": 1440,
     "qos": ["normal", "debug"]},
    {"name": "nlp", "description": "nlp", "fairshare": 1, "gpus": None, "max_wall": None, "qos": ["normal"]},
]  # fmt: skip
WANTED_USERS = [
    {"name": "alice", "account": "vision", "gpus": 1, "removed": False},
    {"name": "bob", "account": "vision", "gpus": None, "removed": False},
    {"name": "carol", "account": "nlp", "gpus": None, "removed": False},
]
# Slurm keeps descriptions lower-cased.
DESCRIPTIONS = {"root": "default root account", "vision": "vision group", "nlp": "nlp"}
DEFAULTS = {"root": "root", "alice": "vision", "bob": "vision", "carol": "nlp"}


@pytest.fixture(scope="module")
def module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slurm_associations", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def associations(module: ModuleType, text: str = ASSOCIATIONS) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = module.parse_rows(text, module.ASSOCIATION_FIELDS)
    return rows


def qos_rows(module: ModuleType, text: str = QOS) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = module.parse_rows(text, ["name", "priority", "max_wall", "max_tres_pu"])
    return rows


def plan_all(module: ModuleType, assoc_text: str = ASSOCIATIONS, qos_text: str = QOS, **changes: Any) -> list[str]:
    current = associations(module, assoc_text)
    commands = module.plan_qos(qos_rows(module, qos_text), changes.get("qos", WANTED_QOS))
    commands += module.plan_accounts(
        "acct13", current, changes.get("descriptions", DESCRIPTIONS), changes.get("accounts", WANTED_ACCOUNTS)
    )
    user_commands, cancel = module.plan_users(
        "acct13", current, changes.get("defaults", DEFAULTS), changes.get("users", WANTED_USERS)
    )
    return [" ".join(command) for command in commands + user_commands] + [f"scancel {name}" for name in cancel]


def test_the_state_a_first_run_left_needs_nothing(module: ModuleType) -> None:
    assert plan_all(module) == []


def test_an_empty_database_gets_everything_in_order(module: ModuleType) -> None:
    empty = "root||1|||normal|\nroot|root|1|||normal|\n"
    planned = plan_all(module, empty, "normal|0||\n", descriptions={"root": "x"}, defaults={"root": "root"})
    assert planned == [
        "add qos debug",
        "modify qos where name=debug set Priority=100 MaxWall=30 MaxTRESPerUser=gres/gpu=1",
        "add account vision Cluster=acct13 Description=Vision group Organization=vision",
        "modify account where name=vision cluster=acct13 set Fairshare=2 GrpTRES=gres/gpu=3 MaxWall=1440 "
        "QOS=normal,debug DefaultQOS=normal",
        "add account nlp Cluster=acct13 Description=nlp Organization=nlp",
        "modify account where name=nlp cluster=acct13 set QOS=normal DefaultQOS=normal",
        "add user alice Account=vision Cluster=acct13",
        "modify user where name=alice account=vision cluster=acct13 set GrpTRES=gres/gpu=1",
        "add user bob Account=vision Cluster=acct13",
        "add user carol Account=nlp Cluster=acct13",
    ]


def test_a_changed_limit_is_set_and_a_dropped_one_cleared(module: ModuleType) -> None:
    users = [dict(user) for user in WANTED_USERS]
    users[0]["gpus"] = None
    users[1]["gpus"] = 2
    accounts = [dict(WANTED_ACCOUNTS[0], max_wall=None, fairshare=5), WANTED_ACCOUNTS[1]]
    qos = [dict(WANTED_QOS[0], gpus_per_user=None, max_wall=60)]
    assert plan_all(module, users=users, accounts=accounts, qos=qos) == [
        "modify qos where name=debug set MaxWall=60 MaxTRESPerUser=gres/gpu=-1",
        "modify account where name=vision cluster=acct13 set Fairshare=5 MaxWall=-1",
        "modify user where name=alice account=vision cluster=acct13 set GrpTRES=gres/gpu=-1",
        "modify user where name=bob account=vision cluster=acct13 set GrpTRES=gres/gpu=2",
    ]


def test_a_user_moved_to_another_account_gets_it_as_default_before_the_old_one_goes(module: ModuleType) -> None:
    users = [dict(user) for user in WANTED_USERS]
    users[1]["account"] = "nlp"
    assert plan_all(module, users=users) == [
        "add user bob Account=nlp Cluster=acct13",
        "modify user where name=bob set DefaultAccount=nlp",
        "delete user where name=bob account=vision cluster=acct13",
    ]


def test_a_removed_user_has_jobs_cancelled_and_associations_deleted_once(module: ModuleType) -> None:
    users = [dict(user) for user in WANTED_USERS]
    users[1]["removed"] = True
    assert plan_all(module, users=users) == ["delete user where name=bob cluster=acct13", "scancel bob"]
    gone = ASSOCIATIONS.replace("vision|bob|1||1-00:00:00|debug,normal|normal\n", "")
    assert plan_all(module, gone, users=users) == []


def test_a_new_description_and_qos_list_are_set(module: ModuleType) -> None:
    accounts = [dict(WANTED_ACCOUNTS[0], description="Computer vision", qos=["debug"]), WANTED_ACCOUNTS[1]]
    assert plan_all(module, accounts=accounts) == [
        "modify account where name=vision set Description=Computer vision",
        "modify account where name=vision cluster=acct13 set QOS=debug DefaultQOS=debug",
    ]


def test_what_it_is_not_given_is_left_alone(module: ModuleType) -> None:
    extra = ASSOCIATIONS + "physics||1|||normal|\nphysics|dave|1|gres/gpu=8||normal|\n"
    assert plan_all(module, extra) == []


@pytest.mark.parametrize(
    ("shown", "minutes"),
    [("", None), ("00:30:00", 30), ("02:00:00", 120), ("1-00:00:00", 1440), ("7-12:30:00", 10830),
     ("00:00:30", 1), ("UNLIMITED", None)],
)  # fmt: skip
def test_sacctmgr_times_read_as_minutes(module: ModuleType, shown: str, minutes: int | None) -> None:
    assert module.wall_minutes(shown) == minutes


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [("", None), ("gres/gpu=2", 2), ("cpu=4,gres/gpu=0,mem=10G", 0), ("cpu=4", None), ("gres/gpu:a100=2", None)],
)
def test_the_gpu_count_is_read_from_a_tres_list(module: ModuleType, tres: str, gpus: int | None) -> None:
    assert module.gpus_of(tres) == gpus


def test_an_operator_gets_an_association_in_the_root_account(module: ModuleType) -> None:
    users = module.with_operators(WANTED_USERS, ["gpuclus"])
    assert plan_all(module, users=users) == ["add user gpuclus Account=root Cluster=acct13"]
    present = ASSOCIATIONS + "root|gpuclus|1|||normal|\n"
    assert plan_all(module, present, users=users, defaults={**DEFAULTS, "gpuclus": "root"}) == []
