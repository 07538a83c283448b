"""Pydantic's structure errors as findings a cluster admin can act on.

Shared by every YAML file gpuclus reads with positions (the cluster spec, the
users file): the root model is passed in, so an unknown key's hint lists the
keys allowed at that place and a value's hint is its field's description.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from gpuclus.yamldoc.findings import Finding, Loc, error
from gpuclus.yamldoc.patterns import PATTERN_RULES

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


def schema_finding(detail: ErrorDetails, root: type[BaseModel]) -> Finding:
    """One pydantic error as a finding with a code, a message a person can act on, and a hint."""
    loc: Loc = tuple(detail["loc"])
    # pydantic names a mapping's refused key (containers.checksums) by the key
    # and then "[key]"; the key alone is where it is written.
    if loc[-1:] == ("[key]",):
        loc = loc[:-1]
    kind = detail["type"]
    context = detail.get("ctx") or {}
    value = detail.get("input")
    description = _field_description(loc, root)
    hint = description

    if kind == "missing":
        return error("missing-field", f"required key {loc[-1]!r} is missing", loc, hint=hint)
    if kind == "extra_forbidden":
        return error("unknown-key", f"unknown key {loc[-1]!r}", loc, hint=_unknown_key_hint(loc, root))
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


def _model_at(loc: Loc, root: type[BaseModel]) -> type[BaseModel] | None:
    """The model class that holds the last key of ``loc``."""
    model: type[BaseModel] | None = root
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
            return first_model(info.annotation)
    return None


def first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in getattr(annotation, "__args__", ()) or ():
        found = first_model(argument)
        if found is not None:
            return found
    # Annotated[...] keeps its type in __origin__.
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation:
        return first_model(origin)
    return None


def _field_description(loc: Loc, root: type[BaseModel]) -> str | None:
    """The description of the field ``loc`` lies in; a mapping's entry (checksums.<file>) takes its field's."""
    keys = tuple(part for part in loc if isinstance(part, str))
    for end in range(len(keys), 0, -1):
        model = _model_at(keys[:end], root)
        for field_name, info in (model.model_fields if model is not None else {}).items():
            if keys[end - 1] in (field_name, info.alias):
                return info.description
    return None


def _allowed_keys(loc: Loc, root: type[BaseModel]) -> list[str]:
    """The keys the mapping holding ``loc``'s last key may have; [] when unknown."""
    model = _model_at(tuple(part for part in loc if isinstance(part, str)), root)
    if model is None:
        return []
    return sorted(info.alias or name for name, info in model.model_fields.items())


def meant_key(loc: Loc, root: type[BaseModel]) -> str | None:
    """The allowed key an unknown key at ``loc`` is most likely a typo of."""
    close = difflib.get_close_matches(str(loc[-1]), _allowed_keys(loc, root), n=1)
    return close[0] if close else None


def _unknown_key_hint(loc: Loc, root: type[BaseModel]) -> str:
    allowed = _allowed_keys(loc, root)
    if not allowed:
        return "remove it"
    meant = meant_key(loc, root)
    if meant is not None:
        return f"did you mean {meant!r}? (allowed here: {', '.join(allowed)})"
    return f"allowed here: {', '.join(allowed)}"
