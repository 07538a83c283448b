"""Exceptions that carry an exit code, and the exit codes themselves.

Commands raise these; the CLI turns them into a one-line message plus a hint
(or one JSON object with --json) and the documented exit code.
"""

from __future__ import annotations

import enum
from typing import Any


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a task or a check failed, or an internal error
    USAGE = 2  # bad arguments, missing file, refused overwrite
    SPEC_INVALID = 3  # the cluster spec has errors
    UNREACHABLE = 4  # hosts could not be reached
    REBOOT_NEEDED = 5  # deployed, but nodes need a reboot to load their new NVIDIA driver (deploy --reboot)
    INTERRUPTED = 130  # Ctrl-C


# What each exit code means, in the words the help's epilog shows; one entry per ExitCode (a unit test holds
# the two together), so the help cannot leave out a code the commands return.
EXIT_CODE_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "ok",
    ExitCode.FAILED: "failed",
    ExitCode.USAGE: "usage",
    ExitCode.SPEC_INVALID: "spec invalid",
    ExitCode.UNREACHABLE: "hosts unreachable",
    ExitCode.REBOOT_NEEDED: "reboot pending",
    ExitCode.INTERRUPTED: "interrupted",
}


def exit_codes_text() -> str:
    """'0 ok, 1 failed, ..., 130 interrupted': every exit code and its meaning, in order."""
    return ", ".join(f"{int(code)} {EXIT_CODE_MEANINGS[code]}" for code in sorted(ExitCode))


class GpuclusError(Exception):
    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, hint: str | None = None, *, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def as_dict(self) -> dict[str, Any]:
        return {"message": self.message, "hint": self.hint, "exit_code": int(self.exit_code)}


class UsageError(GpuclusError):
    exit_code = ExitCode.USAGE


class SpecInvalidError(GpuclusError):
    exit_code = ExitCode.SPEC_INVALID
