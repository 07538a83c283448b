"""One output object, two modes: human (rich, colours) and --json.

In JSON mode stdout carries exactly one JSON object and nothing else; in
human mode results go to stdout and errors, warnings and notes to stderr.
Everything printed through rich is escaped: spec values such as gpu[01-04]
would otherwise be read as markup. Messages, hints and source lines also go
through yamldoc.findings.printable: the values they quote come from files and
command lines, and a control character there would reach the terminal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from gpuclus.errors import GpuclusError
from gpuclus.hints import with_spec
from gpuclus.yamldoc.findings import Finding, Severity, printable, source_excerpt

_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


class Output:
    def __init__(self, *, json_mode: bool) -> None:
        self.json_mode = json_mode
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        # The spec the command works on (set once it is loaded): hints that name a
        # gpuclus command get its path (hints.with_spec) when it is not ./cluster.yaml.
        self.spec: Path | None = None

    # Results -----------------------------------------------------------------
    def emit(self, payload: dict[str, Any]) -> None:
        """Print the command's one JSON object (JSON mode only)."""
        if self.json_mode:
            sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
            sys.stdout.flush()

    def result(self, text: str) -> None:
        """A human result line on stdout (markup allowed; escape values yourself)."""
        if not self.json_mode:
            self.out.print(text)

    def raw(self, text: str) -> None:
        """Text that must reach stdout untouched in either mode (a schema, a file)."""
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()

    # Notes and problems --------------------------------------------------------
    def note(self, text: str) -> None:
        if not self.json_mode:
            self.err.print(text)

    def warn(self, text: str) -> None:
        if not self.json_mode:
            self.err.print(f"[yellow]warning:[/] {escape(printable(text))}")

    def fail(self, problem: GpuclusError, extra: dict[str, Any] | None = None) -> None:
        if self.spec is not None:
            problem.hint = with_spec(problem.hint, self.spec)
        if self.json_mode:
            error = problem.as_dict()
            error.update({key: printable(error[key]) for key in ("message", "hint") if error[key] is not None})
            self.emit({"ok": False, "error": error, **(extra or {})})
            return
        self.err.print(f"[bold red]error:[/] {escape(printable(problem.message))}")
        if problem.hint:
            self.err.print(f"  [dim]hint:[/] {escape(printable(problem.hint))}")

    def findings(self, findings: list[Finding], *, to_stderr: bool = True) -> None:
        """file:line:col: level[code] path: message, the source line with a caret, the hint."""
        if self.json_mode:
            return
        console = self.err if to_stderr else self.out
        for finding in findings:
            where = finding.file or "spec"
            if finding.line is not None:
                where += f":{finding.line}"
                if finding.column is not None:
                    where += f":{finding.column}"
            style = _SEVERITY_STYLE[finding.severity]
            console.print(
                f"[bold]{escape(printable(where))}:[/] [{style}]{finding.severity.value}[/][dim]\\[{finding.code}][/] "
                f"{escape(printable(finding.path))}: {escape(printable(finding.message))}"
            )
            if finding.source_line is not None and finding.line is not None:
                gutter = f"{finding.line:>5} | "
                excerpt, caret_at = source_excerpt(finding.source_line, finding.column)
                console.print(f"[dim]{escape(gutter)}[/]{escape(excerpt)}")
                console.print(f"[dim]{' ' * 6}| [/]{' ' * caret_at}[{style}]^[/]")
            if finding.hint:
                console.print(f"  [dim]hint:[/] {escape(printable(finding.hint))}")


def findings_summary(findings: list[Finding]) -> dict[str, int]:
    counts = {severity.value: 0 for severity in Severity}
    for finding in findings:
        counts[finding.severity.value] += 1
    return counts


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
