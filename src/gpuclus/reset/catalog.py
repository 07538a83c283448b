"""What gpuclus puts on a node, read from the one list the reset role undoes.

roles/reset/vars/main.yml holds it (`__reset_catalog`, `__reset_not_undone`):
the role applies it, `gpuclus reset --dry-run` shows it per node from here
(`plan_per_node`),
and a unit test holds it against roles/. Pure: reads a file, no network.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuclus.fileio import read_regular_file
from gpuclus.resources import data_dir
from gpuclus.spec.load import LoadedSpec

# Paths that depend on the machine are templated in the role; the dry run
# shows them with the placeholder instead.
_ARCH_EXPRESSION = "{{ ansible_facts['architecture'] }}"


@dataclass(frozen=True)
class Entry:
    role: str
    groups: tuple[str, ...]
    what: str
    units: tuple[str, ...]
    packages: tuple[str, ...]
    paths: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "what": self.what,
            "units": list(self.units),
            "packages": list(self.packages),
            "paths": list(self.paths),
        }


@dataclass(frozen=True)
class Catalog:
    entries: tuple[Entry, ...]
    not_undone: dict[str, str]  # role -> why reset leaves it

    def for_groups(self, groups: set[str]) -> list[Entry]:
        """The entries of the roles a node with these inventory groups runs (`cluster`: every node)."""
        return [entry for entry in self.entries if groups.intersection(entry.groups)]


# The reset role's catalog is a few KB.
MAX_CATALOG_BYTES = 1024 * 1024


def catalog_file(roles: Path | None = None) -> Path:
    return (roles or data_dir("roles")) / "reset" / "vars" / "main.yml"


def load_catalog(roles: Path | None = None) -> Catalog:
    # gpuclus' own file, read as every file is: a regular file of bounded size.
    data = yaml.safe_load(read_regular_file(catalog_file(roles), MAX_CATALOG_BYTES).decode("utf-8"))
    entries = tuple(
        Entry(
            role=str(item["role"]),
            groups=tuple(item.get("groups") or ()),
            what=" ".join(str(item.get("what", "")).split()),
            units=tuple(item.get("units") or ()),
            packages=tuple(item.get("packages") or ()),
            paths=tuple(str(path).replace(_ARCH_EXPRESSION, "<arch>") for path in item.get("paths") or ()),
        )
        for item in data["__reset_catalog"]
    )
    not_undone = {str(role): " ".join(str(why).split()) for role, why in data["__reset_not_undone"].items()}
    return Catalog(entries, not_undone)


def plan_per_node(loaded: LoadedSpec, chosen: list[str]) -> dict[str, dict[str, list[str]]]:
    """Per chosen node: the roles it runs (from the spec) and their units, packages and paths, if present there."""
    assert loaded.topology is not None
    catalog = load_catalog()
    plan: dict[str, dict[str, list[str]]] = {}
    for node in loaded.topology.nodes:
        if node.name not in chosen:
            continue
        groups = {"cluster", *(role.value for role in node.roles)}
        entries = catalog.for_groups(groups)
        plan[node.name] = {
            "roles": [entry.role for entry in entries],
            "units": _union(entry.units for entry in entries),
            "packages": _union(entry.packages for entry in entries),
            "paths": _union(entry.paths for entry in entries),
        }
    return plan


def _union(lists: Iterable[tuple[str, ...]]) -> list[str]:
    seen: list[str] = []
    for items in lists:
        seen += [item for item in items if item not in seen]
    return seen
