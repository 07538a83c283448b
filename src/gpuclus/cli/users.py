"""`gpuclus users`: check the users file, add or remove a user (file edit + users phase), list users."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from gpuclus.cli.common import (
    DEFAULT_SPEC,
    JsonOption,
    handled,
    load_checked_spec,
    read_positioned_file,
    require_typed_name,
)
from gpuclus.errors import ExitCode, SpecInvalidError, UsageError
from gpuclus.output import Output, findings_summary, plural

DEFAULT_USERS = Path("users.yaml")

app = typer.Typer(
    help="The cluster's users file (docs/users.md): check it, add or remove users, list them with their GPUs.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("check")
def check(
    users_file: Annotated[Path, typer.Argument(help="Users file (YAML).")] = DEFAULT_USERS,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors.")] = False,
    json_mode: JsonOption = False,
) -> None:
    """Report every problem in a users file at once, as file:line with a hint.

    Exit 0 when the file is valid (warnings allowed unless --strict), 3 when it
    has errors, 2 when it cannot be read.
    """
    from gpuclus.users.load import load_users

    out = Output(json_mode=json_mode)
    with handled(out, {"file": str(users_file)}):
        loaded = read_positioned_file(load_users, users_file)
        counts = findings_summary(loaded.findings)
        failed = counts["error"] > 0 or (strict and counts["warning"] > 0)
        users = loaded.users
        active = [user for user in users.users if not user.removed] if users is not None else []
        out.emit(
            {
                "ok": not failed,
                "file": str(users_file),
                "counts": counts,
                "findings": [finding.as_dict() for finding in loaded.findings],
                "users": len(active) if users is not None else None,
                "removed": len(users.users) - len(active) if users is not None else None,
                "accounts": len(users.accounts) if users is not None else None,
            }
        )
        out.findings(loaded.findings, to_stderr=False)
        tally = (
            ", ".join(plural(counts[level], level) for level in ("error", "warning") if counts[level]) or "no problems"
        )
        if failed or users is None:
            if not json_mode:
                out.fail(SpecInvalidError(f"{users_file}: {tally}", "fix the lines above, then check again"))
            raise typer.Exit(int(ExitCode.SPEC_INVALID))
        removed = plural(len(users.users) - len(active), "removed user")
        out.result(
            f"[green]✓[/] {users_file}: valid — {plural(len(active), 'user')}, {removed}, "
            f"{plural(len(users.accounts), 'account')} ({tally})"
        )


SpecOption = Annotated[Path, typer.Option("--spec", help="Cluster spec (YAML) whose users.file to use.")]
DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Show the users file's diff; write nothing, deploy nothing.")
]


@app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Login name of the new user.")],
    account: Annotated[str, typer.Option("--account", help="Slurm account (an entry of the file's accounts).")],
    keys: Annotated[
        list[Path] | None, typer.Option("--key", help="Public key file (.pub); repeat for several.")
    ] = None,
    uid: Annotated[
        int | None,
        typer.Option(
            "--uid",
            help="User id; one above the file's highest when left out (needed with users.directory: the directory's).",
        ),
    ] = None,
    gid: Annotated[int | None, typer.Option("--gid", help="Id of the user's own group; the uid when left out.")] = None,
    groups: Annotated[list[str] | None, typer.Option("--group", help="Extra group; repeat for several.")] = None,
    gpus: Annotated[
        int | None, typer.Option("--gpus", help="GPUs the user's running jobs may hold together.", min=0)
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Passwordless sudo on every node.")] = False,
    shell: Annotated[str | None, typer.Option("--shell", help="Login shell (default /bin/bash).")] = None,
    spec: SpecOption = DEFAULT_SPEC,
    dry_run: DryRunOption = False,
    json_mode: JsonOption = False,
) -> None:
    """Add a user to the users file, show the diff, then run the users phase.

    The file keeps its comments and layout: the user is appended to `users`.
    The new file is checked first; a change that would leave an error is
    refused and nothing is written. The users phase then creates the user on
    every node and its Slurm association (seconds, not a full deploy). Exit
    0 when applied, 1 when the phase failed (the file is written: run
    `gpuclus deploy --only users` again), 2 for bad options, 3 when the spec
    or the change is invalid.
    """
    from gpuclus.users.change import NewUser, plan_add

    out = Output(json_mode=json_mode)
    payload: dict[str, Any] = {"user": name}
    with handled(out, payload):
        loaded, path, text = _users_file_of(spec, out)
        if name == loaded.spec.cluster.admin_user:
            # The spec's check (users-admin-user) would refuse the file only after it is written.
            raise SpecInvalidError(
                f"{name} is the admin user gpuclus logs in as (cluster.admin_user); not adding it to {path}",
                "leave the admin user out of the users file: gpuclus' own access is not the users file's",
            )
        if uid is None and loaded.spec.users.directory is not None:
            # A picked id would be gpuclus' guess; the directory's is the account's.
            raise UsageError(
                f"--uid is needed: {spec} reads users from a directory (users.directory), which gives {name} a uid",
                f"`id {name}` on a node, or the directory entry's uidNumber, shows it",
            )
        new = NewUser(
            name=name,
            account=account,
            uid=uid,
            gid=gid,
            groups=tuple(groups or ()),
            shell=shell,
            ssh_keys=tuple(line for key in keys or () for line in _public_keys(key)),
            gpus=gpus,
            admin=admin,
        )
        change = plan_add(path, text, loaded.users, new)
        _apply(out, spec, change, dry_run=dry_run, payload=payload)


@app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(help="Login name of the user to remove.")],
    spec: SpecOption = DEFAULT_SPEC,
    delete_home: Annotated[
        bool,
        typer.Option(
            "--delete-home", help="Also delete the user's home on every node where it is local (asks for the name)."
        ),
    ] = False,
    confirm_delete: Annotated[
        str | None,
        typer.Option("--confirm-delete", help="The user's name, confirming --delete-home without a prompt."),
    ] = None,
    dry_run: DryRunOption = False,
    json_mode: JsonOption = False,
) -> None:
    """Mark a user removed in the users file, show the diff, then run the users phase.

    The user's entry gets `removed: true`; the users phase then locks the
    account on every node, deletes its keys' file, cancels its jobs and
    deletes its Slurm association, so it can neither log in nor submit. The
    account and its home stay, unless --delete-home (`delete_home: true`):
    then the home is deleted where it is local (the NFS server's copy), after
    the user's name is typed (or given with --confirm-delete). Exit codes as
    for `users add`; 1 also when the name typed does not match.
    """
    from gpuclus.users.change import plan_remove

    out = Output(json_mode=json_mode)
    payload: dict[str, Any] = {"user": name, "delete_home": delete_home}
    with handled(out, payload):
        if confirm_delete is not None and not delete_home:
            raise UsageError("--confirm-delete goes with --delete-home", "add --delete-home, or leave it out")
        loaded, path, text = _users_file_of(spec, out)
        change = plan_remove(path, text, loaded.users, name, delete_home=delete_home)
        if delete_home and not dry_run:
            _confirm_deletion(name, confirm_delete)
        _apply(out, spec, change, dry_run=dry_run, payload=payload)


def _confirm_deletion(name: str, typed: str | None) -> None:
    """The user's name, typed at a prompt or given with --confirm-delete, before a home is deleted."""
    require_typed_name(
        name,
        typed,
        deletes=f"--delete-home deletes {name}'s home and every file in it",
        flag="--confirm-delete",
        interactive=sys.stdin.isatty(),
    )


@app.command("list")
def list_users(
    spec: SpecOption = DEFAULT_SPEC,
    offline: Annotated[
        bool, typer.Option("--offline", help="From the file alone: do not ask Slurm for the GPUs in use.")
    ] = False,
    json_mode: JsonOption = False,
) -> None:
    """The users file's users with their account, limits and the GPUs their running jobs hold now.

    The GPUs in use come from `squeue` on the controller (over SSH as the
    admin user); when it cannot be asked, the list says so and shows the
    file alone. Exit 0, 2 for a spec without users.file, 3 for an invalid spec.
    """
    from gpuclus.usersync.usage import gpus_in_use

    out = Output(json_mode=json_mode)
    with handled(out):
        loaded, _path, _text = _users_file_of(spec, out)
        in_use, problem = ({}, "not asked (--offline)") if offline else gpus_in_use(loaded, spec)
        if problem and not offline:
            out.warn(f"GPUs in use unknown: {problem}")
        accounts = {account.name: account for account in loaded.users.accounts}
        rows = [
            {
                "name": user.name,
                "uid": user.uid,
                "account": user.account,
                "gpus": user.gpus,
                "account_gpus": accounts[user.account].gpus if user.account in accounts else None,
                "max_wall": accounts[user.account].max_wall if user.account in accounts else None,
                "admin": user.admin,
                "removed": user.removed,
                "gpus_in_use": None if problem else in_use.get(user.name, 0),
            }
            for user in loaded.users.users
        ]
        out.emit({"ok": True, "live": problem is None, "users": rows})
        if not json_mode:
            _print_users(out, rows)


def _users_file_of(spec: Path, out: Output) -> tuple[Any, Path, str]:
    """The checked spec, its users file's path and text (a usage error when the spec names none)."""
    loaded = load_checked_spec(spec, out)
    value = loaded.spec.users.file
    if value is None or loaded.users is None:
        raise UsageError(
            f"{spec} names no users file",
            "add `users: {file: users.yaml}` to the spec and create the file (docs/users.md shows one)",
        )
    path = spec.parent / value
    # Read again, as the spec's check read it (bounded, a regular file): what is edited is the file now.
    from gpuclus.yamldoc.document import read_spec_text

    return loaded, path, read_positioned_file(read_spec_text, path)


# A public key line is under 1 KiB (a 16384-bit RSA key is ~2.8 KiB); a file of a few dozen keys is far less.
MAX_KEY_FILE_BYTES = 64 * 1024
_KEY_FILE_HINT = "give the path of a public key (.pub), e.g. ~/.ssh/id_ed25519.pub"


def _public_keys(path: Path) -> list[str]:
    """The key lines of a public key file (blank and comment lines skipped), each checked.

    The file can be anything the command line names (a secret, a device), so
    it is read bounded and no line of it is ever quoted: a refusal says what
    is wrong with the line, by its number.
    """
    from gpuclus.users.sshkeys import key_problem

    text = _key_file_text(path)
    numbered = [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not numbered:
        raise UsageError(f"--key {path}: no key in it", _KEY_FILE_HINT)
    for number, line in numbered:
        problem = key_problem(line)
        if problem is not None:
            raise UsageError(f"--key {path}: line {number} {problem}", _KEY_FILE_HINT)
    return [line for _number, line in numbered]


def _key_file_text(path: Path) -> str:
    """A key file's text; a FIFO, a device, a huge or a binary file is a UsageError, and nothing is quoted."""
    from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file

    try:
        data = read_regular_file(path, MAX_KEY_FILE_BYTES)
    except NotRegularFileError as exc:
        raise UsageError(f"--key {path}: is {exc.kind}, not a public key file", _KEY_FILE_HINT) from None
    except FileTooLargeError:
        raise UsageError(
            f"--key {path}: over {MAX_KEY_FILE_BYTES // 1024} KiB, far more than a public key file holds",
            _KEY_FILE_HINT,
        ) from None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UsageError(f"--key {path}: cannot read it ({why})", _KEY_FILE_HINT) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--key {path}: binary data, not a public key file", _KEY_FILE_HINT) from None


def _apply(out: Output, spec: Path, change: Any, *, dry_run: bool, payload: dict[str, Any]) -> None:
    from gpuclus.usersync.workflow import apply_change

    payload.update({"file": str(change.path), "diff": change.diff, "summary": change.summary})
    if not out.json_mode and change.diff:
        out.raw(change.diff)
    if dry_run or not change.diff:
        out.result(escape(change.summary) + (" (dry run: nothing written)" if dry_run and change.diff else ""))
        out.emit({"ok": True, "dry_run": dry_run, "written": False, **payload})
        return
    result = apply_change(change, spec, _ChangeView(out, payload), load=lambda path: load_checked_spec(path, out))
    if result.exit_code != 0:
        out.warn(f"the users phase did not finish: {change.path} is written; run `gpuclus deploy {spec} --only users`")
        out.emit({"ok": False, "exit_code": int(result.exit_code), **payload})
        raise typer.Exit(int(result.exit_code))
    out.emit({"ok": True, "exit_code": 0, **payload})


class _ChangeView:
    """The users change's observer: the file written as a note, the users phase with its lines and summary.

    It fills ``payload`` as the steps are done, so an error part way reports what was already done.
    """

    def __init__(self, out: Output, payload: dict[str, Any]) -> None:
        self.out = out
        self.payload = payload

    def written(self, change: Any) -> None:
        self.payload["written"] = True
        self.out.note(f"{change.path}: {escape(change.summary)}")

    def watch_deploy(self, request: Any, loaded: Any, deploy: Any) -> Any:
        from gpuclus.cli.deploy_view import run_with_progress

        return run_with_progress(self.out, request, loaded, only=True, run=deploy)

    def deployed(self, result: Any) -> None:
        from gpuclus.cli.deploy_view import record_deploy

        record_deploy(self.out, self.payload, result)


def _print_users(out: Output, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("user", "uid", "account", "GPU limit", "GPUs in use", "state"):
        table.add_column(column)
    for row in rows:
        limit = row["gpus"] if row["gpus"] is not None else "-"
        if row["account_gpus"] is not None:
            limit = f"{limit} (account {row['account_gpus']})"
        in_use = "?" if row["gpus_in_use"] is None else str(row["gpus_in_use"])
        state = "removed" if row["removed"] else "admin" if row["admin"] else "active"
        table.add_row(escape(row["name"]), str(row["uid"]), escape(row["account"]), str(limit), in_use, state)
    out.out.print(table)
