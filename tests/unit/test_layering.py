"""Every module imports only what docs/architecture.md's table lets its package import, and nothing imports in a circle.

The table ("Packages and what each may import") is read from the document, so the document and the code cannot
drift: a package or top-level module without a row, an import its row does not list, a row listing one that no
module makes, and a circle between packages or between modules each fail here. Imports are read from the source
(every import statement, those inside functions too), so a circle shows even where a lazy import hides it at run
time.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import gpuclus

SRC = Path(gpuclus.__file__).resolve().parent
DOC = SRC.parent.parent / "docs" / "architecture.md"
HEADING = "## Packages and what each may import"
# The only places that talk to the terminal through typer and rich.
UI_UNITS = {"cli/", "output.py"}
UI_LIBRARIES = {"typer", "rich"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def unit_of(module: str) -> str:
    """The table's name for the package or top-level module ``module`` belongs to: ``spec/``, ``errors.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return f"{parts[1]}/" if (SRC / parts[1]).is_dir() else f"{parts[1]}.py"


def imported(source: str, module: str, is_package: bool) -> set[str]:
    """The top-level names ``module`` imports (``gpuclus.spec.load``, ``typer``), from every import statement.

    ``from gpuclus.spec import load`` counts as ``gpuclus.spec.load`` when that is a module; relative imports are
    resolved against ``module``.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else base)
    return found


def _imports(module: str) -> set[str]:
    path = MODULES[module]
    return imported(path.read_text(), module, path.name == "__init__.py")


IMPORTS = {module: _imports(module) for module in MODULES}


def gpuclus_imports(module: str) -> set[str]:
    return {name for name in IMPORTS[module] if name == "gpuclus" or name.startswith("gpuclus.")}


def _cells(line: str) -> list[str]:
    # A cell may hold an escaped pipe (`users check\|add`).
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def read_table(text: str) -> dict[str, set[str]]:
    """Each row's packages and modules → what they may import, from the document's table."""
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = _cells(line)
        assert len(cells) == 3, f"a row of the table has {len(cells)} cells, not 3: {line[:80]}"
        allowed = set(re.findall(r"`([^`]+)`", cells[2]))
        assert allowed or cells[2] == "nothing of gpuclus", f"{cells[0]}: name what it may import, in backticks"
        for unit in re.findall(r"`([^`]+)`", cells[0]):
            assert unit not in rows, f"{unit} has two rows"
            rows[unit] = allowed
    return rows


TABLE = read_table(DOC.read_text())
UNITS = {unit_of(module) for module in MODULES}


def unit_graph() -> dict[str, dict[str, set[str]]]:
    """Package/module → the packages/modules it imports → the imports that make the edge (for the messages)."""
    graph: dict[str, dict[str, set[str]]] = {unit: {} for unit in UNITS}
    for module in MODULES:
        for target in gpuclus_imports(module):
            if unit_of(target) != unit_of(module):
                graph[unit_of(module)].setdefault(unit_of(target), set()).add(f"{module} → {target}")
    return graph


def find_circle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One circle in ``graph`` (its nodes in order, the first repeated at the end), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            circle = visit(target)
            if circle:
                return circle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        circle = visit(start)
        if circle:
            return circle
    return None


def test_every_package_and_module_has_a_row_and_every_row_names_one() -> None:
    assert sorted(UNITS - TABLE.keys()) == [], f"add these to {DOC.name}'s table, with what they may import"
    assert sorted(TABLE.keys() - UNITS) == [], f"{DOC.name}'s table names these, which src/gpuclus does not hold"
    named = {unit for allowed in TABLE.values() for unit in allowed}
    assert sorted(named - UNITS) == [], f"{DOC.name}'s table lets a row import these, which do not exist"


def test_every_import_stays_within_its_row() -> None:
    graph = unit_graph()
    wrong = [
        f"{unit} may not import {target} ({'; '.join(sorted(why))})"
        for unit, targets in sorted(graph.items())
        for target, why in sorted(targets.items())
        if target not in TABLE.get(unit, set())
    ]
    assert wrong == [], "\n".join(wrong)


def test_every_row_is_true_to_the_code() -> None:
    """A row that lets its package import one it never does would stop the table telling what the code does."""
    graph = unit_graph()
    unused = {unit: sorted(allowed - graph[unit].keys()) for unit, allowed in TABLE.items() if unit in graph}
    assert {unit: names for unit, names in unused.items() if names} == {}, f"drop these from {DOC.name}'s rows"


def test_no_import_circle_between_packages() -> None:
    graph = unit_graph()
    assert find_circle(graph) is None, f"these import each other in a circle: {' → '.join(find_circle(graph) or [])}"


def test_no_import_circle_between_modules() -> None:
    graph = {module: {name for name in gpuclus_imports(module) if name in MODULES} - {module} for module in MODULES}
    # A package's __init__ is imported with each of its modules, which is not a circle of the modules' own.
    graph = {module: {name for name in names if not module.startswith(f"{name}.")} for module, names in graph.items()}
    assert find_circle(graph) is None, f"these import each other in a circle: {' → '.join(find_circle(graph) or [])}"


def test_typer_and_rich_only_in_the_cli_and_output() -> None:
    wrong = sorted(
        f"{module} imports {name}"
        for module in MODULES
        if unit_of(module) not in UI_UNITS
        for name in IMPORTS[module]
        if name.split(".")[0] in UI_LIBRARIES
    )
    assert wrong == []


def test_validate_checks_never_import_the_registry_the_runner_or_the_reporters() -> None:
    above = {"gpuclus.validate.registry", "gpuclus.validate.runner", "gpuclus.validate.junit"}
    wrong = {
        module: sorted(gpuclus_imports(module) & above)
        for module in MODULES
        if module.startswith("gpuclus.validate.checks")
    }
    assert {module: found for module, found in wrong.items() if found} == {}


def test_the_sources_read_here_are_the_ones_the_code_uses() -> None:
    assert "gpuclus.validate.checks.gpu.scope" in MODULES
    assert "gpuclus.validate.checks.gpu" in IMPORTS["gpuclus.validate.registry"]
    assert TABLE["cli/"] >= {"deploy/", "output.py"}


@pytest.mark.parametrize(
    ("source", "module", "found"),
    [
        ("def f():\n    from gpuclus.cli.main import app\n", "gpuclus.spec.load", "gpuclus.cli.main"),
        ("from ...users import load\n", "gpuclus.spec.checks.users", "gpuclus.users.load"),
        ("from . import hostlist\n", "gpuclus.spec", "gpuclus.spec.hostlist"),
        ("import typer.core\n", "gpuclus.deploy.pipeline", "typer.core"),
        ("class A:\n    def f(self):\n        from gpuclus import errors\n", "gpuclus.ssh.client", "gpuclus.errors"),
    ],
)
def test_an_import_anywhere_in_a_module_is_seen(source: str, module: str, found: str) -> None:
    assert found in imported(source, module, module.count(".") == 1 and (SRC / module.split(".")[1]).is_dir())


def test_the_table_is_read_with_escaped_pipes_and_empty_rows() -> None:
    text = (
        f"{HEADING}\n\n| package / module | its job | may import |\n|---|---|---|\n"
        "| `users/` | `users check\\|add` | `yamldoc/`, `errors.py` |\n"
        "| `hints.py` | hints | nothing of gpuclus |\n\n## Next\n| `x/` | y | `z/` |\n"
    )
    assert read_table(text) == {"users/": {"yamldoc/", "errors.py"}, "hints.py": set()}


def test_a_circle_is_found() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
