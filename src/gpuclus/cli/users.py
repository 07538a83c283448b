"""`gpuclus users check`: the users file's findings, as `spec check` gives the spec's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuclus.cli.common import JsonOption, handled, read_positioned_file
from gpuclus.errors import ExitCode, SpecInvalidError
from gpuclus.output import Output, findings_summary, plural

DEFAULT_USERS = Path("users.yaml")

app = typer.Typer(
    help="Check the cluster's users file (docs/users.md).",
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
