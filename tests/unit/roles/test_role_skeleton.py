"""Every role keeps the skeleton, checked on the files (docs/architecture.md, "Roles").

Prefixed public defaults, each described in meta/argument_specs.yml; internal
names as `__<role>_*` (registered results; facts too, but for the role's
outputs, `<role>_*`); tags `<role>_<step>`
(or always/never); and standalone: no role's tasks, handlers, variables or
template expressions name another role's variables, public or internal (a
role run alone, as molecule runs it, would not have them; what roles share
comes from the inventory's `gpuclus_*` group_vars). Comments and docs may
name other roles' variables: they are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROLES_DIR = Path(__file__).resolve().parents[3] / "roles"
ROLES = sorted(path.name for path in ROLES_DIR.iterdir() if (path / "tasks" / "main.yml").is_file())
# Template expressions and statements only: the rest of a template is the file's own text.
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks(items: Any) -> Iterator[dict[str, Any]]:
    for item in items or []:
        if isinstance(item, dict):
            yield item
            for key in ("block", "rescue", "always"):
                yield from _tasks(item.get(key))


def _task_files(role: str) -> list[Path]:
    return sorted((ROLES_DIR / role).glob("tasks/*.yml")) + sorted((ROLES_DIR / role).glob("handlers/*.yml"))


def _code(role: str) -> str:
    """What the role runs: its task, handler and variable files without comment lines, and its templates'
    expressions."""
    parts = []
    for folder in ("tasks", "handlers", "vars", "defaults"):
        for path in sorted((ROLES_DIR / role / folder).glob("*.yml")):
            parts += [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
    for path in sorted((ROLES_DIR / role / "templates").rglob("*.j2")):
        parts += JINJA.findall(path.read_text())
    return "\n".join(parts)


def test_the_roles_are_found() -> None:
    assert len(ROLES) >= 25 and "slurm_common" in ROLES and "node_exporter" in ROLES


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_prefixed_and_each_has_an_argument_spec(role: str) -> None:
    defaults = _yaml(ROLES_DIR / role / "defaults" / "main.yml") or {}
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []
    specs = _yaml(ROLES_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]
    assert "main" in specs
    described = {name for entry in specs.values() for name in (entry.get("options") or {})}
    assert sorted(set(defaults) - described) == [], "defaults without an argument spec"
    # An entry point may also state what it needs from the inventory (gpuclus_* group_vars).
    assert [name for name in described if not name.startswith((f"{role}_", "gpuclus_"))] == []


@pytest.mark.parametrize("role", ROLES)
def test_internal_names_and_tags_carry_the_role_prefix(role: str) -> None:
    wrong = []
    for path in _task_files(role):
        for task in _tasks(_yaml(path)):
            registered = task.get("register")
            if registered is not None and not registered.startswith(f"__{role}_"):
                wrong.append(f"{path.name}: register {registered}")
            facts = task.get("ansible.builtin.set_fact") or {}
            # `<role>_*` facts are the role's outputs (its notice, the packages the base phase installs
            # ahead, a pending reboot), read by playbooks and gpuclus; the rest is internal.
            wrong += [
                f"{path.name}: set_fact {name}" for name in facts if not name.startswith((f"__{role}_", f"{role}_"))
            ]
            tags = task.get("tags") or []
            for tag in [tags] if isinstance(tags, str) else tags:
                if tag not in {"always", "never"} and not tag.startswith(f"{role}_"):
                    wrong.append(f"{path.name}: tag {tag}")
    assert wrong == []


@pytest.mark.parametrize("role", ROLES)
def test_a_role_reads_no_other_roles_variables(role: str) -> None:
    code = _code(role)
    others = [other for other in ROLES if other != role]
    read = set()
    for other in others:
        for match in re.finditer(rf"(?<![\w.]){other}_\w+|\b__{other}_\w+", code):
            name = match.group(0)
            # A role whose name starts with another's (none today) names its own variables with it.
            if not (name.startswith(f"{role}_") or name.startswith(f"__{role}_")):
                read.add(name)
    assert sorted(read) == []
