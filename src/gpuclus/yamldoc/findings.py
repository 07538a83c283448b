"""Findings: what the loaders and the checks report about a spec or the users file.

A finding carries a stable code (documented in docs/spec.md), a severity, the
path of the value it is about, and a hint that says how to fix it. Positions
(file, line, column) are attached after the fact by the document, so checks
stay free of YAML concerns.
"""

from __future__ import annotations

import enum
import unicodedata
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
            # json.dumps escapes C0 only; what a script prints from here must be as safe as the terminal's text.
            "path": printable(self.path),
            "message": printable(self.message),
            "hint": printable(self.hint) if self.hint is not None else None,
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


# Printing what a user wrote ------------------------------------------------------------------------------------
# A spec line or value reaches a terminal: an ESC starts a control sequence (colours, a cursor moved, a title
# set), a C1 byte does the same on some terminals, and a bidi override makes the text read differently from
# what it holds. Such characters are shown as escapes; very long text is cut so one line stays one line.

# Messages and hints are a sentence or two; the value they quote is cut in its middle, so the words after it
# stay. Source lines are cut around the column the caret points at.
MAX_MESSAGE_CHARS = 2000
MAX_SOURCE_CHARS = 200
_ELLIPSIS = "…"
# Control (C0, DEL, C1), format (bidi overrides and isolates, zero-width characters) and line or paragraph
# separators: nothing a reader can see, everything a terminal may act on.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def visible(text: str) -> str:
    """``text`` with every control, format and separator character written as an escape (\\x1b, \\u202e)."""
    return "".join(_visible_char(char) for char in text)


def _visible_char(char: str) -> str:
    if unicodedata.category(char) not in _INVISIBLE_CATEGORIES:
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` safe to print: invisible characters made visible, cut in its middle past ``limit`` characters."""
    shown = visible(text)
    if len(shown) <= limit:
        return shown
    keep = limit - len(_ELLIPSIS)
    return shown[: keep - keep // 2] + _ELLIPSIS + shown[len(shown) - keep // 2 :]


def source_excerpt(line: str, column: int | None, width: int = MAX_SOURCE_CHARS) -> tuple[str, int]:
    """A source line safe to print, and where its caret goes (0-based, in the excerpt).

    The line is made visible, then cut to ``width`` characters around the
    column (an ellipsis at each cut end), so the caret still points at the
    character the finding is about.
    """
    at = max((column or 1) - 1, 0)
    before, after = visible(line[:at]), visible(line[at:])
    shown, caret = before + after, len(before)
    if len(shown) <= width:
        return shown, caret
    start = max(0, min(caret - width // 2, len(shown) - width))
    end = start + width
    head = _ELLIPSIS if start > 0 else ""
    tail = _ELLIPSIS if end < len(shown) else ""
    return head + shown[start:end] + tail, caret - start + len(head)
