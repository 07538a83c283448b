"""validate's modules import one way: the registry reads the stage modules, never the reverse.

Read from the source (every import statement, also those inside functions),
so a circle shows here even where a lazy import would hide it at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpuclus.validate

ROOT = Path(gpuclus.validate.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each validate module → the validate modules it imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    modules = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {module for module in found if module in modules and module != name}
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module == goal:
            return True
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return False


def test_no_import_circle_in_validate() -> None:
    graph = _imports()
    circles = sorted(name for name in graph if _reaches(graph, name, name))
    assert not circles, f"these validate modules import themselves through others: {circles}"


def test_checks_never_import_the_registry_the_runner_or_the_reporters() -> None:
    graph = _imports()
    above = {"gpuclus.validate.registry", "gpuclus.validate.runner", "gpuclus.validate.junit"}
    wrong = {name: graph[name] & above for name in graph if name.startswith("gpuclus.validate.checks")}
    assert not {name: found for name, found in wrong.items() if found}


def test_the_sources_read_here_are_the_ones_the_registry_uses() -> None:
    graph = _imports()
    assert "gpuclus.validate.checks.gpu.scope" in graph
    assert "gpuclus.validate.checks.gpu" in graph["gpuclus.validate.registry"]
