"""Shell completion: `gpuclus --show-completion SHELL`, `--install-completion SHELL`, and completers.

typer's own two options take no shell name while shellingham is installed
(typer always installs it): they guess the shell from the process tree. That
guess fails where no shell is the parent (CI, `docker run`, some `sudo`), and
`--show-completion zsh` typed in bash silently prints the bash script. The
options here take the shell by name, as typer's do without shellingham; the
script they print and the answers to it are typer's, so completers declared
with ``autocompletion=`` (validate's --only, deploy's phases) work unchanged.
"""

from __future__ import annotations

import enum
from typing import Annotated

import typer
from typer import completion as typer_completion


class Shell(enum.StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"
    POWERSHELL = "powershell"
    PWSH = "pwsh"


def enable() -> None:
    """Register typer's completion classes, as ``Typer(add_completion=True)`` would.

    The script printed by --show-completion asks gpuclus for answers in
    typer's protocol (``_GPUCLUS_COMPLETE=complete_bash``); without these
    classes click would not understand the question. This is the call
    ``Typer(add_completion=True)`` makes; the options it returns are typer's
    guessing ones, which we replace.
    """
    typer_completion.get_completion_inspect_parameters()


def _show(ctx: typer.Context, param: typer.CallbackParam, value: Shell | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    # Given a str, typer's callback uses it as the shell instead of guessing.
    typer_completion.show_callback(ctx, param, value.value)


def _install(ctx: typer.Context, param: typer.CallbackParam, value: Shell | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    typer_completion.install_callback(ctx, param, value.value)


ShowCompletionOption = Annotated[
    Shell | None,
    typer.Option(
        "--show-completion",
        callback=_show,
        is_eager=True,
        expose_value=False,
        case_sensitive=False,
        metavar="SHELL",
        help="Print the completion script for SHELL (bash, zsh, fish, powershell or pwsh) and exit.",
    ),
]
InstallCompletionOption = Annotated[
    Shell | None,
    typer.Option(
        "--install-completion",
        callback=_install,
        is_eager=True,
        expose_value=False,
        case_sensitive=False,
        metavar="SHELL",
        help="Install completion for SHELL in its start-up file (e.g. ~/.bashrc) and exit.",
    ),
]


def complete_items(incomplete: str, choices: list[str]) -> list[str]:
    """Complete the last item of a comma-separated list, leaving out those already listed."""
    head, comma, last = incomplete.rpartition(",")
    listed = set(head.split(","))
    return [head + comma + choice for choice in choices if choice.startswith(last) and choice not in listed]


def complete_phases(incomplete: str) -> list[str]:
    """Deploy's --only and --skip: the phase names, for the item after the last comma."""
    from gpuclus.deploy.phases import ORDER

    return complete_items(incomplete, [phase.value for phase in ORDER])
