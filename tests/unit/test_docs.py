"""docs/spec.md must describe every spec field and every finding code; the docs' example specs must deploy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.cli.spec import deploy_refusals
from gpuclus.spec.checks.codes import CODES
from gpuclus.spec.load import load_spec
from gpuclus.spec.models import ClusterSpec, Containers
from gpuclus.yamldoc.findings import Severity
from gpuclus.yamldoc.schema_findings import first_model

SPEC_DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def _field_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        names.append(key)
        nested = first_model(info.annotation)
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


# The example specs in the README and docs/: what an admin copies first must deploy.
DOCS_WITH_SPECS = [SPEC_DOC.parents[1] / "README.md", *sorted(SPEC_DOC.parent.glob("*.md"))]
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _example_specs() -> list[tuple[str, str]]:
    found = []
    for path in DOCS_WITH_SPECS:
        for number, block in enumerate(YAML_BLOCK.findall(path.read_text())):
            # A block is a spec when it says which format it is and has nodes; the others are
            # fragments, or another file of gpuclus' (a users file names its kind).
            if re.search(r"^apiVersion:", block, re.MULTILINE) and re.search(r"^nodes:", block, re.MULTILINE):
                found.append((f"{path.name}#{number}", block))
    return found


def test_the_docs_have_example_specs() -> None:
    names = [name for name, _ in _example_specs()]
    assert any(name.startswith("deploy.md") for name in names)
    assert any(name.startswith("spec.md") for name in names)


def _stand_in_artifacts_dir(text: str, directory: Path) -> None:
    """Create the relative containers.artifacts_dir an example names, as the admin would have.

    It stands in for the admin's directory of release files: empty placeholder
    files with the names the spec's (or the default) versions call for, which
    is all spec check reads. An absolute path is not created (it lies outside
    tmp_path), so an example spec naming one fails with artifacts-dir-missing.
    """
    data = yaml.safe_load(text)
    containers = data.get("containers") if isinstance(data, dict) else None
    if not isinstance(containers, dict) or not isinstance(containers.get("artifacts_dir"), str):
        return
    if Path(containers["artifacts_dir"]).is_absolute():
        return
    defaults = Containers()
    enroot = str(containers.get("enroot_version", defaults.enroot_version))
    pyxis = str(containers.get("pyxis_version", defaults.pyxis_version))
    artifacts = directory / containers["artifacts_dir"]
    artifacts.mkdir(parents=True, exist_ok=True)
    for name in (f"enroot-{enroot}-src.tar.gz", f"pyxis-{pyxis}-src.tar.gz"):
        (artifacts / name).write_bytes(b"")


@pytest.mark.parametrize(("name", "text"), _example_specs(), ids=[name for name, _ in _example_specs()])
def test_example_spec_checks_clean_and_deploy_would_take_it(name: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    _stand_in_artifacts_dir(text, tmp_path)
    loaded = load_spec(path)
    problems = [f"{f.code} {f.path}" for f in loaded.findings if f.severity is not Severity.INFO]
    assert problems == [], f"{name}: {problems}"
    assert loaded.ok
    assert deploy_refusals(loaded) == [], f"{name}: deploy would refuse it"
    check = CliRunner().invoke(app, ["spec", "check", str(path), "--strict"])
    assert check.exit_code == 0, check.output
    rendered = CliRunner().invoke(app, ["render", str(path), "-o", str(tmp_path / "rendered")])
    assert rendered.exit_code == 0, rendered.output
    assert "warning" not in rendered.output
