"""Pieces every command shares: options, error handling, spec loading."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuclus.errors import ExitCode, GpuclusError, SpecInvalidError, UsageError
from gpuclus.output import Output, findings_summary, plural

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout and nothing else.")]
SpecArgument = Annotated[
    Path,
    typer.Argument(help="Cluster spec (YAML).", show_default=True),
]
DEFAULT_SPEC = Path("cluster.yaml")


@contextmanager
def handled(out: Output, extra: dict[str, Any] | None = None) -> Iterator[None]:
    """Turn gpuclus errors and Ctrl-C into a message and the documented exit code."""
    try:
        yield
    except GpuclusError as problem:
        out.fail(problem, extra)
        raise typer.Exit(int(problem.exit_code)) from None
    except KeyboardInterrupt as problem:
        # "terminated (SIGTERM)" when a run was stopped by SIGTERM; plain Ctrl-C says nothing.
        out.fail(GpuclusError(str(problem) or "interrupted", exit_code=ExitCode.INTERRUPTED), extra)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


def read_spec(path: Path) -> Any:
    """Load a spec with all its findings; an unreadable file becomes a GpuclusError (exit 2 or 3)."""
    from gpuclus.spec.load import load_spec

    return read_positioned_file(load_spec, path)


def read_positioned_file(load: Callable[[Path], Any], path: Path) -> Any:
    """``load(path)`` for a YAML file read with positions (the spec, the users file); an unreadable
    file becomes a GpuclusError: exit 2 for how gpuclus was called, 3 for a file it cannot use."""
    from gpuclus.yamldoc.document import SpecFileError

    try:
        return load(path)
    except SpecFileError as problem:
        code = ExitCode.USAGE if problem.usage else ExitCode.SPEC_INVALID
        raise GpuclusError(str(problem), problem.hint, exit_code=code) from None


def load_checked_spec(path: Path, out: Output) -> Any:
    """Load and check a spec for a command that needs a valid one.

    Prints warnings, and raises SpecInvalidError (exit 3) with every finding
    shown when the spec has errors. Returns the LoadedSpec.
    """
    out.spec = path
    loaded = read_spec(path)
    counts = findings_summary(loaded.findings)
    failing = counts["error"] > 0
    shown = loaded.findings if failing else [f for f in loaded.findings if f.severity.value != "info"]
    out.findings(shown)
    if failing or not loaded.ok:
        raise SpecInvalidError(
            f"{path}: spec has {plural(counts['error'], 'error')}",
            f"fix the lines above; `gpuclus spec check {path}` lists them again",
        )
    return loaded


def require_absent_or_force(path: Path, force: bool, what: str) -> None:
    if path.exists() and not force:
        raise UsageError(f"{path} already exists; not overwriting the {what}", "pass --force to replace it")


def require_typed_name(name: str, typed: str | None, *, deletes: str, flag: str, interactive: bool) -> None:
    """Before data is deleted: ``name`` typed at a prompt, or given with ``flag`` where there is no terminal.

    ``deletes`` says what goes ("--purge-data deletes everything in the NFS
    export directories"). A flag such as --yes never stands in for the name:
    deleting data is the one step that asks for more than a yes.
    """
    if typed is None:
        if not interactive:
            raise UsageError(
                f"{deletes} and needs the name {name} typed: no terminal here",
                f"pass {flag} {name} (--yes is not enough)",
            )
        typed = typer.prompt(f"{deletes}. Type {name} to go on", default="", show_default=False, err=True)
    if typed != name:
        raise GpuclusError(
            f"the name typed does not match {name}; nothing was changed",
            f"type {name} exactly, or leave out what deletes the data",
            exit_code=ExitCode.FAILED,
        )
