"""gpuclus commands as hints print them: with the spec's path whenever it is not ./cluster.yaml.

A hint that says "`gpuclus deploy --retry-failed`" to someone whose spec is
sandbox.yaml sends them to "cluster.yaml: no such file". ``gpuclus_command``
writes a command for a spec; ``with_spec`` puts the spec into the commands a
hint already names (between backticks), so hints written without knowing the
spec (validate's checks, errors from deploy/) still name it where they are shown.
Imports nothing of gpuclus: every layer may use it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DEFAULT_SPEC = Path("cluster.yaml")
SANDBOX_SPEC = Path("sandbox.yaml")

# Commands whose first argument is the spec (`gpuclus deploy [FILE]`).
_POSITIONAL = frozenset({"deploy", "preflight", "plan", "validate", "render", "status"})
# Command groups that take it as --spec (`gpuclus runs list --spec FILE`, `gpuclus sandbox up --spec FILE`).
_OPTION = frozenset({"runs", "sandbox"})
_SPEC_SUFFIXES = (".yaml", ".yml")


def spec_argument(spec: Path | str | None, default: Path = DEFAULT_SPEC) -> str | None:
    """The spec as a command line should name it; None when it is ``default`` in this directory."""
    if spec is None:
        return None
    path = Path(spec)
    try:
        if path.resolve() == (Path.cwd() / default).resolve():
            return None
    except OSError:
        pass
    return shlex.quote(str(path))


def gpuclus_command(command: str, spec: Path | str | None, *args: str, default: Path | None = None) -> str:
    """`gpuclus deploy sandbox.yaml --retry-failed`, `gpuclus runs list --spec x.yaml`, or without the spec.

    ``command`` is the subcommand ("deploy", "runs list", "sandbox up"); the
    spec goes after it as an argument or as --spec, as that command takes it.
    ``default``: the spec the command reads when none is given (sandbox.yaml
    for `gpuclus sandbox`, else cluster.yaml).
    """
    group = command.split()[0]
    if default is None:
        default = SANDBOX_SPEC if group == "sandbox" else DEFAULT_SPEC
    named = spec_argument(spec, default)
    words = ["gpuclus", command]
    if named is not None:
        words += ["--spec", named] if group in _OPTION else [named]
    return " ".join([*words, *args])


_BACKTICKED = re.compile(r"`gpuclus ([^`]*)`")


def with_spec(text: str | None, spec: Path | str | None) -> str | None:
    """``text`` with the spec put into each backticked `gpuclus deploy ...` / `gpuclus preflight ...` it names.

    Commands that already name a spec file, and those that take none
    (`gpuclus sandbox ...`: its hints may be about another directory), are left alone.
    """
    named = spec_argument(spec)
    if not text or named is None:
        return text

    def put(match: re.Match[str]) -> str:
        words = match.group(1).split()
        if not words or any(word.endswith(_SPEC_SUFFIXES) or word in ("--spec", named) for word in words):
            return match.group(0)
        if words[0] in _POSITIONAL:
            return f"`{gpuclus_command(words[0], spec, *words[1:])}`"
        if words[0] == "runs" and len(words) >= 2:
            return f"`{gpuclus_command(' '.join(words[:2]), spec, *words[2:])}`"
        return match.group(0)

    return _BACKTICKED.sub(put, text)
