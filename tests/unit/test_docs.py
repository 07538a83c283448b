"""docs/spec.md must describe every spec field and every finding code."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from gpuclus.spec.checks import CODES
from gpuclus.spec.load import _first_model
from gpuclus.spec.models import ClusterSpec

SPEC_DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def _field_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        names.append(key)
        nested = _first_model(info.annotation)
        if nested is not None:
            names.extend(_field_names(nested, f"{prefix}{key}."))
    return names


def test_every_code_is_documented() -> None:
    text = SPEC_DOC.read_text()
    missing = [code for code in CODES if f"| `{code}` | {CODES[code][0].value} |" not in text]
    assert not missing, f"docs/spec.md lacks a table row (with the right level) for: {missing}"


def test_every_field_is_documented() -> None:
    text = SPEC_DOC.read_text()
    missing = sorted(
        {
            name
            for name in _field_names(ClusterSpec)
            if not any(form in text for form in (f"`{name}`", f".{name}`", f"`{name}."))
        }
    )
    assert not missing, f"docs/spec.md does not mention: {missing}"


VALIDATE_DOCS = [SPEC_DOC.parent / "validate.md", SPEC_DOC.parent / "validate-gpu.md"]


def test_every_validate_check_has_a_section_with_its_level() -> None:
    from gpuclus.validate.registry import all_checks

    text = "\n".join(path.read_text() for path in VALIDATE_DOCS)
    missing = [check.id for check in all_checks() if f"`{check.id}` ({check.level.label})" not in text]
    assert not missing, f"docs/validate*.md lack a '`id` (level)' heading for: {missing}"
