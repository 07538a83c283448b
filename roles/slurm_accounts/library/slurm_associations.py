#!/usr/bin/python
# managed by gpuclus — part of the slurm_accounts role
"""Make Slurm's accounting database hold the users file's QoS, accounts and users' associations."""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_associations
short_description: Bring QoS, accounts and user associations in Slurm's accounting database to a wanted state
description:
  - Reads the cluster's QoS, accounts and associations with C(sacctmgr --noheader --parsable2 show),
    compares them with the wanted ones and runs only the C(sacctmgr --immediate) calls that differ, so a
    second run changes nothing and reports changed=false.
  - Touches only what it is given; QoS, accounts and users it is not given are left as they are.
  - A user given with C(removed=true) has its jobs cancelled and its associations on the cluster
    deleted, so Slurm refuses its jobs (with AccountingStorageEnforce=associations).
  - In check mode it reports what it would run and runs none of it.
options:
  cluster:
    description: The cluster's name as Slurm has it (lower case).
    type: str
    required: true
  qos:
    description: QoS, each name, priority, max_wall (minutes or null), gpus_per_user (or null).
    type: list
    elements: dict
    default: []
  accounts:
    description: >-
      Accounts, each name, description, fairshare, gpus (or null), max_wall (minutes or null),
      qos (names, the first the default).
    type: list
    elements: dict
    default: []
  users:
    description: Users, each name, account, gpus (or null) and removed.
    type: list
    elements: dict
    default: []
  operators:
    description: >-
      Users that run the cluster's own jobs (gpuclus' admin user, for validate): an association in the
      root account without limits, so enforcement does not lock them out.
    type: list
    elements: str
    default: []
  cancel_wait:
    description: Seconds to wait for a removed user's cancelled jobs to end before its association is deleted.
    type: int
    default: 90
"""

RETURN = r"""
commands:
  description: The sacctmgr (and scancel) calls run, or in check mode those that would run.
  returned: always
  type: list
  elements: list
"""

import time

from ansible.module_utils.basic import AnsibleModule

GPU_TRES = "gres/gpu"
# The account every Slurm database has, holding root; the operators go there.
ROOT_ACCOUNT = "root"
# What sacctmgr takes to clear a limit.
CLEAR = "-1"


def parse_rows(text: str, fields: list[str]) -> list[dict[str, str]]:
    """Rows of `sacctmgr --noheader --parsable2` output as dicts of the given fields."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        rows.append(dict(zip(fields, values + [""] * (len(fields) - len(values)), strict=False)))
    return rows


def wall_minutes(text: str) -> int | None:
    """Minutes of a time sacctmgr shows ([days-]hours:minutes:seconds, or minutes:seconds); None when empty."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days = 0
    if "-" in text:
        day_text, text = text.split("-", 1)
        days = int(day_text)
    parts = [int(part) for part in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return days * 1440 + hours * 60 + minutes + (1 if seconds else 0)


def gpus_of(tres: str) -> int | None:
    """The gres/gpu count in a TRES list such as 'cpu=4,gres/gpu=2'; None when it has none."""
    for item in tres.split(","):
        name, _, value = item.partition("=")
        if name == GPU_TRES and value:
            return int(value)
    return None


def _limit(value: int | None) -> str:
    return CLEAR if value is None else str(value)


def _gpu_limit(value: int | None) -> str:
    return f"{GPU_TRES}={_limit(value)}"


def plan_qos(current: list[dict[str, str]], wanted: list[dict]) -> list[list[str]]:
    have = {row["name"]: row for row in current}
    commands = []
    for qos in wanted:
        name = qos["name"]
        row = have.get(name)
        if row is None:
            commands.append(["add", "qos", name])
            row = {"priority": "0", "max_wall": "", "max_tres_pu": ""}
        settings = []
        if int(row["priority"] or 0) != int(qos["priority"]):
            settings.append(f"Priority={int(qos['priority'])}")
        if wall_minutes(row["max_wall"]) != qos.get("max_wall"):
            settings.append(f"MaxWall={_limit(qos.get('max_wall'))}")
        if gpus_of(row["max_tres_pu"]) != qos.get("gpus_per_user"):
            settings.append(f"MaxTRESPerUser={_gpu_limit(qos.get('gpus_per_user'))}")
        if settings:
            commands.append(["modify", "qos", "where", f"name={name}", "set", *settings])
    return commands


def _account_settings(row: dict[str, str], fairshare: int, gpus: int | None, max_wall: int | None) -> list[str]:
    settings = []
    if row["share"] != str(fairshare):
        settings.append(f"Fairshare={fairshare}")
    if gpus_of(row["grp_tres"]) != gpus:
        settings.append(f"GrpTRES={_gpu_limit(gpus)}")
    if wall_minutes(row["max_wall"]) != max_wall:
        settings.append(f"MaxWall={_limit(max_wall)}")
    return settings


EMPTY_ASSOCIATION = {"share": "1", "grp_tres": "", "max_wall": "", "qos": "", "default_qos": ""}


def plan_accounts(
    cluster: str, current: list[dict[str, str]], descriptions: dict[str, str], wanted: list[dict]
) -> list[list[str]]:
    """Accounts: created when missing, then their association's fairshare, limits and QoS set where they differ."""
    account_rows = {row["account"]: row for row in current if not row["user"]}
    commands = []
    for account in wanted:
        name = account["name"]
        row = account_rows.get(name)
        if row is None:
            commands.append(
                [
                    "add",
                    "account",
                    name,
                    f"Cluster={cluster}",
                    f"Description={account['description']}",
                    f"Organization={name}",
                ]
            )
            row = EMPTY_ASSOCIATION
        # Slurm stores descriptions lower-cased.
        elif descriptions.get(name, "").lower() != account["description"].lower():
            commands.append(
                ["modify", "account", "where", f"name={name}", "set", f"Description={account['description']}"]
            )
        settings = _account_settings(row, int(account["fairshare"]), account.get("gpus"), account.get("max_wall"))
        qos = list(account["qos"])
        if set(filter(None, row["qos"].split(","))) != set(qos):
            settings.append(f"QOS={','.join(qos)}")
        if qos and row["default_qos"] != qos[0]:
            settings.append(f"DefaultQOS={qos[0]}")
        if settings:
            commands.append(["modify", "account", "where", f"name={name}", f"cluster={cluster}", "set", *settings])
    return commands


def plan_users(
    cluster: str, current: list[dict[str, str]], defaults: dict[str, str], wanted: list[dict]
) -> tuple[list[list[str]], list[str]]:
    """(sacctmgr calls, users whose jobs to cancel first): associations added, moved, limited or deleted."""
    by_user: dict[str, dict[str, dict[str, str]]] = {}
    for row in current:
        if row["user"]:
            by_user.setdefault(row["user"], {})[row["account"]] = row
    commands: list[list[str]] = []
    to_cancel = []
    for user in wanted:
        name = user["name"]
        have = by_user.get(name, {})
        if user.get("removed"):
            if have:
                to_cancel.append(name)
                commands.append(["delete", "user", "where", f"name={name}", f"cluster={cluster}"])
            continue
        account = user["account"]
        row = have.get(account)
        if row is None:
            commands.append(["add", "user", name, f"Account={account}", f"Cluster={cluster}"])
            row = EMPTY_ASSOCIATION
        # A new user's first association is its default account; a known user moved to another account
        # gets it as default before the old association goes (Slurm keeps a default account's association).
        if name in defaults and defaults[name] != account:
            commands.append(["modify", "user", "where", f"name={name}", "set", f"DefaultAccount={account}"])
        # Only the user's own GPU cap: sacctmgr shows a user's row with the limits it inherits from its
        # account (MaxWall, QoS), which are the account's to set.
        settings = [] if gpus_of(row["grp_tres"]) == user.get("gpus") else [f"GrpTRES={_gpu_limit(user.get('gpus'))}"]
        if settings:
            commands.append(
                [
                    "modify",
                    "user",
                    "where",
                    f"name={name}",
                    f"account={account}",
                    f"cluster={cluster}",
                    "set",
                    *settings,
                ]
            )
        for old in sorted(set(have) - {account}):
            commands.append(["delete", "user", "where", f"name={name}", f"account={old}", f"cluster={cluster}"])
    return commands, to_cancel


def with_operators(users: list[dict], operators: list[str]) -> list[dict]:
    """The users, and the operators as users of the root account without limits."""
    return users + [{"name": name, "account": ROOT_ACCOUNT, "gpus": None} for name in operators]


ASSOCIATION_FIELDS = ["account", "user", "share", "grp_tres", "max_wall", "qos", "default_qos"]


def read_state(module: AnsibleModule, cluster: str) -> dict:
    def show(*words: str) -> str:
        rc, out, err = module.run_command(["sacctmgr", "--noheader", "--parsable2", "show", *words])
        if rc != 0:
            module.fail_json(msg=f"sacctmgr show {words[0]} failed: {err.strip() or out.strip()}")
        return out

    qos = parse_rows(
        show("qos", "format=Name,Priority,MaxWall,MaxTRESPU"), ["name", "priority", "max_wall", "max_tres_pu"]
    )
    associations = parse_rows(
        show(
            "association", "where", f"cluster={cluster}", "format=Account,User,Fairshare,GrpTRES,MaxWall,QOS,DefaultQOS"
        ),
        ASSOCIATION_FIELDS,
    )
    accounts = parse_rows(show("account", "format=Account,Descr"), ["account", "description"])
    users = parse_rows(show("user", "format=User,DefaultAccount"), ["user", "default_account"])
    return {
        "qos": qos,
        "associations": associations,
        "descriptions": {row["account"]: row["description"] for row in accounts},
        "defaults": {row["user"]: row["default_account"] for row in users},
    }


def sacctmgr(module: AnsibleModule, command: list[str], cancel_wait: int) -> None:
    deadline = time.monotonic() + (cancel_wait if command[0] == "delete" else 0)
    while True:
        rc, out, err = module.run_command(["sacctmgr", "--immediate", *command])
        # A deleted user's cancelled jobs take a moment to end; sacctmgr refuses until they have.
        if rc == 0 or time.monotonic() >= deadline:
            break
        time.sleep(2)
    if rc != 0:
        module.fail_json(msg=f"sacctmgr {' '.join(command)} failed: {err.strip() or out.strip()}")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cluster": {"type": "str", "required": True},
            "qos": {"type": "list", "elements": "dict", "default": []},
            "accounts": {"type": "list", "elements": "dict", "default": []},
            "users": {"type": "list", "elements": "dict", "default": []},
            "operators": {"type": "list", "elements": "str", "default": []},
            "cancel_wait": {"type": "int", "default": 90},
        },
        supports_check_mode=True,
    )
    cluster = module.params["cluster"]
    state = read_state(module, cluster)
    commands = plan_qos(state["qos"], module.params["qos"])
    commands += plan_accounts(cluster, state["associations"], state["descriptions"], module.params["accounts"])
    users = with_operators(module.params["users"], module.params["operators"])
    user_commands, to_cancel = plan_users(cluster, state["associations"], state["defaults"], users)
    commands += user_commands
    shown = [["scancel", f"--user={name}"] for name in to_cancel] + [["sacctmgr", "--immediate", *c] for c in commands]
    if module.check_mode or not commands:
        module.exit_json(changed=bool(commands), commands=shown)
    for name in to_cancel:
        module.run_command(["scancel", f"--user={name}"])
    for command in commands:
        sacctmgr(module, command, module.params["cancel_wait"])
    module.exit_json(changed=True, commands=shown)


if __name__ == "__main__":
    main()
