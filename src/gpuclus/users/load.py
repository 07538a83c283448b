"""Load a users file: read with positions, check structure, then meaning.

Like the spec loader, it never raises for bad content: everything wrong comes
back as findings with file:line. It raises SpecFileError only when the file
itself cannot be read. The meaning checks run once the structure is sound
(an entry the schema refused would make "unknown account" and the like lie).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from gpuclus.users.checks import run_checks
from gpuclus.users.models import USERS_KIND, UsersFile
from gpuclus.yamldoc.document import API_VERSION, SpecDocument, SpecFileError, parse_spec_text, read_spec_text
from gpuclus.yamldoc.findings import Finding, error, has_errors, sort_findings
from gpuclus.yamldoc.schema_findings import meant_key, schema_finding


@dataclass
class LoadedUsers:
    document: SpecDocument
    findings: list[Finding] = field(default_factory=list)
    users: UsersFile | None = None

    @property
    def ok(self) -> bool:
        return self.users is not None and not has_errors(self.findings)


def load_users(path: Path) -> LoadedUsers:
    try:
        text = read_spec_text(path)
    except SpecFileError as problem:
        if problem.usage and not path.exists():
            raise SpecFileError(
                f"{path}: no such file", "create it (docs/users.md shows one), or fix the path", usage=True
            ) from None
        raise
    return load_users_text(text, str(path))


def load_users_text(text: str, path: str = "users.yaml") -> LoadedUsers:
    document = parse_spec_text(text, path)
    result = LoadedUsers(document=document, findings=list(document.findings))
    data = document.data
    if not isinstance(data, dict):
        if data is not None or not result.findings:
            result.findings.append(
                document.locate(
                    error(
                        "not-a-mapping",
                        "the users file must be a mapping of keys (apiVersion, kind, accounts, users, ...)",
                        hint="start from the example in docs/users.md",
                    )
                )
            )
        return result
    findings: list[Finding] = []
    if data.get("apiVersion") != API_VERSION:
        message = f"apiVersion must be {API_VERSION}"
        findings.append(error("api-version", message, ("apiVersion",), hint=f"apiVersion: {API_VERSION}"))
    if data.get("kind") != USERS_KIND:
        findings.append(
            error(
                "wrong-kind",
                f"kind must be {USERS_KIND} (is this a users file?)",
                ("kind",),
                hint=f"kind: {USERS_KIND}",
            )
        )
    try:
        users = UsersFile.model_validate(data)
    except ValidationError as exc:
        details = exc.errors(include_url=False)
        # `acount: nlp` is one mistake: the unknown key's hint names `account`, so its "missing" is left out.
        meant = {
            (*tuple(detail["loc"])[:-1], key)
            for detail in details
            if detail["type"] == "extra_forbidden" and (key := meant_key(tuple(detail["loc"]), UsersFile)) is not None
        }
        findings.extend(
            finding
            for finding in (schema_finding(detail, UsersFile) for detail in details)
            # apiVersion and kind are already reported, with a better message.
            if finding.loc not in {("apiVersion",), ("kind",)}
            and not (finding.code == "missing-field" and finding.loc in meant)
        )
        users = None
    if users is not None and not findings:
        findings.extend(run_checks(users))
        result.users = users
    result.findings = sort_findings(
        result.findings
        + [
            document.locate(finding, prefer_key=finding.code in {"unknown-key", "duplicate-key"})
            for finding in findings
        ]
    )
    return result
