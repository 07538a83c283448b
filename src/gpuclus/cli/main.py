"""The `gpuclus` command: one typer app, one module per command group.

Heavy modules (pydantic models, jinja2, ansible-runner) are imported inside
the commands so that `gpuclus --help` starts fast.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

# typer 0.29 carries its own copy of click (pinned exactly in pyproject.toml); its errors are
# these classes, not those of an installed click.
from typer._click import exceptions as click_errors

from gpuclus import __version__
from gpuclus.cli import completion
from gpuclus.cli import deploy as deploy_cli
from gpuclus.cli import image as image_cli
from gpuclus.cli import init as init_cli
from gpuclus.cli import nodes as nodes_cli
from gpuclus.cli import plan as plan_cli
from gpuclus.cli import preflight as preflight_cli
from gpuclus.cli import render as render_cli
from gpuclus.cli import reset as reset_cli
from gpuclus.cli import runs as runs_cli
from gpuclus.cli import sandbox as sandbox_cli
from gpuclus.cli import spec as spec_cli
from gpuclus.cli import status as status_cli
from gpuclus.cli import users as users_cli
from gpuclus.cli import validate as validate_cli
from gpuclus.errors import ExitCode, GpuclusError, exit_codes_text
from gpuclus.output import Output

EPILOG = f"Exit codes: {exit_codes_text()}. Set GPUCLUS_DEBUG=1 to see tracebacks."

app = typer.Typer(
    name="gpuclus",
    help="Turn a few Linux machines with NVIDIA GPUs into a Slurm deep-learning cluster, and prove it works.",
    epilog=EPILOG,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    # Locals in tracebacks can hold passwords and keys: never show them.
    pretty_exceptions_show_locals=False,
    pretty_exceptions_enable=False,
    # Our own --show-completion/--install-completion take the shell by name (see cli.completion).
    add_completion=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuclus {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit."),
    ] = False,
    install_completion: completion.InstallCompletionOption = None,
    show_completion: completion.ShowCompletionOption = None,
) -> None:
    """gpuclus: spec → render → deploy → validate."""


completion.enable()
app.command("init", epilog=EPILOG)(init_cli.init)
app.add_typer(spec_cli.app, name="spec")
app.command("render", epilog=EPILOG)(render_cli.render)
app.add_typer(sandbox_cli.app, name="sandbox")
app.command("preflight", epilog=EPILOG)(preflight_cli.preflight)
app.command("plan", epilog=EPILOG)(plan_cli.plan)
app.command("deploy", epilog=EPILOG)(deploy_cli.deploy)
app.add_typer(runs_cli.runs_app, name="runs")
app.add_typer(nodes_cli.app, name="nodes")
app.command("validate", epilog=EPILOG)(validate_cli.validate)
app.command("status", epilog=EPILOG)(status_cli.status)
app.add_typer(image_cli.app, name="image")
app.command("reset", epilog=EPILOG)(reset_cli.reset)
app.add_typer(users_cli.app, name="users")


def main(argv: list[str] | None = None) -> int:
    """Entry point: maps what escapes the commands to exit codes, never a traceback.

    Usage errors (unknown option, bad value) are typer's own: a message and
    exit 2; with --json among the arguments they are one JSON object on
    stdout instead, shaped like every other error's. Commands catch gpuclus
    errors and Ctrl-C themselves (see cli.common.handled); anything else is a
    bug and says so in one line.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if "--json" in args:
            return _run_for_json(args)
        app(args=args, prog_name="gpuclus")
    except SystemExit as finished:
        code = finished.code
        if code is None:
            return 0
        return code if isinstance(code, int) else int(ExitCode.FAILED)
    except KeyboardInterrupt:
        sys.stderr.write("gpuclus: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except Exception as problem:
        if os.environ.get("GPUCLUS_DEBUG") == "1":
            raise
        sys.stderr.write(
            f"gpuclus: internal error: {type(problem).__name__}: {problem}\n"
            "  hint: run again with GPUCLUS_DEBUG=1 for a traceback, and report it\n"
        )
        return int(ExitCode.FAILED)
    return 0


def _run_for_json(args: list[str]) -> int:
    """Run the app so that click's own errors come back to us instead of its usage box.

    A script that passed --json reads stdout as JSON; typer's box on stderr
    with nothing on stdout would leave it parsing an empty string. Only
    --json runs take this path, so every other run keeps typer's exact
    behaviour (help, --version, completion and Ctrl-C included: typer turns
    Ctrl-C into exit 130 either way).
    """
    try:
        code = app(args=args, prog_name="gpuclus", standalone_mode=False)
    except click_errors.ClickException as problem:
        # click's usage errors exit 2 (USAGE); its other errors (a file it could not open) exit 1.
        code = ExitCode.USAGE if isinstance(problem, click_errors.UsageError) else ExitCode.FAILED
        Output(json_mode=True).fail(GpuclusError(problem.format_message(), _usage_hint(problem), exit_code=code))
        return int(code)
    except typer.Abort:
        # What typer prints in standalone mode (end of input at a prompt).
        sys.stderr.write("Aborted!\n")
        return int(ExitCode.FAILED)
    # Without standalone mode click returns the code of a typer.Exit, or the command's
    # return value (None: the commands return nothing when they succeed).
    return code if isinstance(code, int) else 0


def _usage_hint(problem: click_errors.ClickException) -> str:
    context = problem.ctx if isinstance(problem, click_errors.UsageError) else None
    command = context.command_path if context is not None else "gpuclus"
    return f"`{command} --help` lists the arguments and options"


if __name__ == "__main__":  # pragma: no cover - `python -m gpuclus.cli.main`
    sys.exit(main())
