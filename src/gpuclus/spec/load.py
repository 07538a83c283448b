"""Load a spec: read, parse with positions, validate structure, check meaning.

``load_spec`` never raises for bad content: everything wrong with the spec
comes back as findings with file:line. It raises SpecFileError only when the
file itself cannot be read (missing, directory, binary, huge).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpuclus.spec.checks import run_checks
from gpuclus.spec.document import SpecDocument, load_document, parse_spec_text
from gpuclus.spec.findings import Finding, Loc, error, has_errors, sort_findings
from gpuclus.spec.models import API_VERSION, PATTERN_RULES, ClusterSpec
from gpuclus.spec.topology import Topology, expand_nodes


@dataclass
class LoadedSpec:
    document: SpecDocument
    findings: list[Finding] = field(default_factory=list)
    spec: ClusterSpec | None = None
    topology: Topology | None = None

    @property
    def ok(self) -> bool:
        return self.spec is not None and self.topology is not None and not has_errors(self.findings)


def load_spec(path: Path) -> LoadedSpec:
    return validate_document(load_document(path))


def load_spec_text(text: str, path: str = "cluster.yaml") -> LoadedSpec:
    return validate_document(parse_spec_text(text, path))


def validate_document(document: SpecDocument) -> LoadedSpec:
    result = LoadedSpec(document=document, findings=list(document.findings))
    data = document.data
    if data is None:
        return result
    if not isinstance(data, dict):
        result.findings.append(
            document.locate(
                error(
                    "not-a-mapping",
                    f"the spec must be a mapping of keys (apiVersion, cluster, nodes, ...), not a {_yaml_kind(data)}",
                    hint="start from `gpuclus init` or an example under inventories/examples/",
                )
            )
        )
        return result

    findings: list[Finding] = []
    version = data.get("apiVersion")
    if version != API_VERSION:
        findings.append(
            error(
                "api-version",
                "apiVersion is missing" if version is None else f"apiVersion {version!r} is not supported",
                ("apiVersion",),
                hint=f"set `apiVersion: {API_VERSION}` as the first line",
            )
        )
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        findings.extend(
            finding
            for finding in (_schema_finding(detail) for detail in exc.errors(include_url=False))
            if finding.loc != ("apiVersion",)  # already reported, with a better message
        )
        result.findings.extend(_locate_all(document, findings))
        return result

    topology, expansion_findings = expand_nodes(spec)
    findings.extend(expansion_findings)
    findings.extend(run_checks(spec, topology))
    result.findings.extend(_locate_all(document, findings))
    result.spec = spec
    result.topology = topology
    result.findings = sort_findings(result.findings)
    return result


def _locate_all(document: SpecDocument, findings: list[Finding]) -> list[Finding]:
    located = []
    for finding in findings:
        # An unknown key is best shown at the key itself, not its value.
        prefer_key = finding.code in {"unknown-key", "duplicate-key"}
        located.append(document.locate(finding, prefer_key=prefer_key))
    return sort_findings(located)


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    return type(value).__name__


_TYPE_WORDS = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "text",
    "dict_type": "a mapping (key: value lines)",
    "model_type": "a mapping (key: value lines)",
    "model_attributes_type": "a mapping (key: value lines)",
    "list_type": "a list (lines starting with '- ')",
    "float_type": "a number",
    "float_parsing": "a number",
}

_RANGE_WORDS = {
    "greater_than_equal": ("ge", "≥"),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "≤"),
    "less_than": ("lt", "<"),
}


def _schema_finding(detail: ErrorDetails) -> Finding:
    loc: Loc = tuple(detail["loc"])
    kind = detail["type"]
    context = detail.get("ctx") or {}
    value = detail.get("input")
    description = _field_description(loc)
    hint = description

    if kind == "missing":
        return error("missing-field", f"required key {loc[-1]!r} is missing", loc, hint=hint)
    if kind == "extra_forbidden":
        return error("unknown-key", f"unknown key {loc[-1]!r}", loc, hint=_unknown_key_hint(loc))
    if kind in _TYPE_WORDS:
        shown = "nothing (null)" if value is None else repr(value)
        return error("wrong-type", f"must be {_TYPE_WORDS[kind]}, not {shown}", loc, hint=hint)
    if kind in _RANGE_WORDS:
        key, symbol = _RANGE_WORDS[kind]
        return error("out-of-range", f"must be {symbol} {context.get(key)}, not {value!r}", loc, hint=hint)
    if kind in {"too_short", "string_too_short"}:
        minimum = context.get("min_length")
        what = "item(s)" if kind == "too_short" else "character(s)"
        return error("out-of-range", f"needs at least {minimum} {what}", loc, hint=hint)
    if kind in {"too_long", "string_too_long"}:
        maximum = context.get("max_length")
        what = "item(s)" if kind == "too_long" else "character(s)"
        return error("out-of-range", f"allows at most {maximum} {what}", loc, hint=hint)
    if kind in {"enum", "literal_error"}:
        expected = str(context.get("expected", "")).replace("'", "")
        close = difflib.get_close_matches(str(value), [c.strip() for c in expected.replace(" or ", ",").split(",")])
        suggestion = f"did you mean {close[0]!r}? " if close else ""
        return error(
            "invalid-choice",
            f"{value!r} is not one of: {expected}",
            loc,
            hint=f"{suggestion}{hint or ''}".strip(),
        )
    if kind == "string_pattern_mismatch":
        rule = PATTERN_RULES.get(str(context.get("pattern")), "is not in the expected format")
        return error("invalid-format", f"{value!r} {rule}", loc, hint=hint)
    message = detail["msg"].removeprefix("Value error, ")
    return error("invalid-value", message, loc, hint=hint)


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The model class that holds the last key of ``loc``."""
    model: type[BaseModel] | None = ClusterSpec
    for part in loc[:-1]:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        model = _field_model(model, part)
    return model


def _field_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    for field_name, info in model.model_fields.items():
        if name in (field_name, info.alias):
            return _first_model(info.annotation)
    return None


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()) or ():
        found = _first_model(argument)
        if found is not None:
            return found
    # Annotated[...] keeps its type in __origin__.
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation:
        return _first_model(origin)
    return None


def _field_description(loc: Loc) -> str | None:
    name = next((part for part in reversed(loc) if isinstance(part, str)), None)
    keys = [part for part in loc if isinstance(part, str)]
    model = _model_at(tuple(keys))
    if model is None or name is None:
        return None
    for field_name, info in model.model_fields.items():
        if name in (field_name, info.alias):
            return info.description
    return None


def _unknown_key_hint(loc: Loc) -> str:
    model = _model_at(tuple(part for part in loc if isinstance(part, str)))
    if model is None:
        return "remove it"
    allowed = sorted(info.alias or name for name, info in model.model_fields.items())
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    if close:
        return f"did you mean {close[0]!r}? (allowed here: {', '.join(allowed)})"
    return f"allowed here: {', '.join(allowed)}"
