"""Findings: what the loaders and the checks report about a spec or the users file.

A finding carries a stable code (documented in docs/spec.md), a severity, the
path of the value it is about, and a hint that says how to fix it. Positions
(file, line, column) are attached after the fact by the document, so checks
stay free of YAML concerns.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

Loc = tuple[str | int, ...]


class Severity(enum.StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    loc: Loc = ()
    hint: str | None = None
    file: str | None = None
    line: int | None = None
    column: int | None = None
    source_line: str | None = field(default=None, compare=False)

    @property
    def path(self) -> str:
        return format_loc(self.loc)

    def located(self, file: str, line: int | None, column: int | None, source_line: str | None) -> Finding:
        return replace(self, file=file, line=line, column=column, source_line=source_line)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            # "level" is the key `spec check --json` has always printed; scripts read it.
            "level": self.severity.value,
            "path": self.path,
            "message": self.message,
            "hint": self.hint,
            "file": self.file,
            "line": self.line,
            "column": self.column,
        }


def error(code: str, message: str, loc: Loc = (), hint: str | None = None) -> Finding:
    return Finding(code=code, severity=Severity.ERROR, message=message, loc=loc, hint=hint)


def warning(code: str, message: str, loc: Loc = (), hint: str | None = None) -> Finding:
    return Finding(code=code, severity=Severity.WARNING, message=message, loc=loc, hint=hint)


def info(code: str, message: str, loc: Loc = (), hint: str | None = None) -> Finding:
    return Finding(code=code, severity=Severity.INFO, message=message, loc=loc, hint=hint)


def format_loc(loc: Loc) -> str:
    """``("nodes", 1, "gpus", "count")`` -> ``nodes[1].gpus.count``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(document)"


_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then by line, so the most useful line is on top."""
    return sorted(findings, key=lambda f: (_SEVERITY_ORDER[f.severity], f.line or 0, f.column or 0, f.code))


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)
