"""The Ansible collections gpuclus' roles use: where a run finds them, and whether they are there.

requirements.yml (inside the wheel as gpuclus/_data/requirements.yml) names
them with the versions the roles work with. They are not Python packages:
scripts/collections.sh copies them into the ``ansible_collections/`` directory
of gpuclus' own Python environment, where Ansible finds them by scanning
``sys.path`` (ansible-lint and molecule in that environment too). A run also
looks where Ansible looks by default, so a site that installs them from Galaxy
(``ansible-galaxy collection install -r requirements.yml``) works as well; the
copy beside gpuclus comes first, so an older copy in ~/.ansible cannot shadow it.

A deploy checks them before it starts: a missing collection would otherwise
surface minutes later as a module Ansible cannot resolve.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from gpuclus.errors import UsageError
from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_json_file, read_regular_file
from gpuclus.resources import data_file

# Ansible's own default for collections_path (ansible-core's base.yml).
DEFAULT_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")
PATH_VARIABLE = "ANSIBLE_COLLECTIONS_PATH"
INSTALL_HINT = (
    "run `bash scripts/collections.sh PYTHON` from a gpuclus checkout (PYTHON: the Python gpuclus runs with), "
    "or `ansible-galaxy collection install -r {requirements}` where Ansible Galaxy is reachable"
)


@dataclass(frozen=True)
class Requirement:
    name: str  # namespace.collection
    version: str  # Galaxy's version range, e.g. ">=2.0.0,<3.0.0"

    @property
    def relative(self) -> Path:
        namespace, _, collection = self.name.partition(".")
        return Path(namespace) / collection

    def accepts(self, version: str) -> bool:
        spec = self.version.strip()
        if spec in {"", "*"}:
            return True
        if spec[0].isdigit():  # Galaxy reads a bare version as exactly that version
            spec = f"=={spec}"
        try:
            return Version(version) in SpecifierSet(spec)
        except (InvalidSpecifier, InvalidVersion):
            return False


@dataclass(frozen=True)
class Found:
    path: Path
    version: str | None  # None: no MANIFEST.json or galaxy.yml names one (a source checkout, say)


def requirements(path: Path | None = None) -> tuple[Requirement, ...]:
    """requirements.yml's collections (gpuclus' own copy unless ``path`` is given)."""
    source = path or data_file("requirements.yml")
    document = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
    return tuple(
        Requirement(str(entry["name"]), str(entry.get("version", "*"))) for entry in document.get("collections", [])
    )


def own_root() -> Path:
    """The directory of gpuclus' Python environment that holds ``ansible_collections/`` (its site-packages)."""
    return Path(sysconfig.get_paths()["purelib"])


def search_roots(environ: Mapping[str, str] | None = None, sys_path: Sequence[str] | None = None) -> list[Path]:
    """Where a run looks for collections, in the order Ansible tries them (the first copy found is used).

    gpuclus' own environment, then ANSIBLE_COLLECTIONS_PATH (or Ansible's
    defaults), then the rest of ``sys.path``: the run's Ansible is the one of
    gpuclus' environment (deploy/workspace.search_path), so its sys.path is
    gpuclus'.
    """
    environ = os.environ if environ is None else environ
    configured = environ.get(PATH_VARIABLE) or environ.get("ANSIBLE_COLLECTIONS_PATHS")
    entries = configured.split(os.pathsep) if configured else list(DEFAULT_PATHS)
    roots = [own_root()]
    for entry in [*entries, *(sys.path if sys_path is None else sys_path)]:
        if not entry:
            continue
        root = Path(os.path.expandvars(entry)).expanduser()
        # Ansible accepts both the directory above ansible_collections/ and that directory itself.
        if root.name == "ansible_collections":
            root = root.parent
        if root not in roots:
            roots.append(root)
    return roots


def run_path(environ: Mapping[str, str] | None = None) -> str:
    """ANSIBLE_COLLECTIONS_PATH for a run: the configured places, gpuclus' own environment first."""
    environ = os.environ if environ is None else environ
    configured = environ.get(PATH_VARIABLE) or environ.get("ANSIBLE_COLLECTIONS_PATHS")
    entries = configured.split(os.pathsep) if configured else list(DEFAULT_PATHS)
    own = str(own_root())
    return os.pathsep.join([own, *(entry for entry in entries if entry and entry != own)])


def find(requirement: Requirement, roots: Sequence[Path]) -> Found | None:
    for root in roots:
        path = root / "ansible_collections" / requirement.relative
        if path.is_dir():
            return Found(path, _version(path))
    return None


def problems(wanted: Sequence[Requirement], roots: Sequence[Path]) -> list[str]:
    """What is missing or of a version requirements.yml does not accept, one phrase each."""
    found: list[str] = []
    for requirement in wanted:
        hit = find(requirement, roots)
        if hit is None:
            found.append(f"{requirement.name} is not installed")
        elif hit.version is not None and not requirement.accepts(hit.version):
            found.append(f"{requirement.name} {hit.version} at {hit.path} is not {requirement.version}")
    return found


def check(roots: Sequence[Path] | None = None) -> None:
    """Raise a UsageError naming every collection a run would miss (looking in ``roots``, else search_roots())."""
    wanted = requirements()
    found = problems(wanted, search_roots() if roots is None else roots)
    if found:
        raise UsageError(
            f"Ansible collections the roles need: {'; '.join(found)}",
            INSTALL_HINT.format(requirements=data_file("requirements.yml")),
        )


# A collection's MANIFEST.json or galaxy.yml is a few KB.
MAX_COLLECTION_FILE_BYTES = 1024 * 1024


def _version(path: Path) -> str | None:
    manifest = path / "MANIFEST.json"
    try:
        if manifest.is_file():
            return str(read_json_file(manifest, MAX_COLLECTION_FILE_BYTES)["collection_info"]["version"])
        galaxy = path / "galaxy.yml"
        if galaxy.is_file():
            text = read_regular_file(galaxy, MAX_COLLECTION_FILE_BYTES).decode("utf-8")
            return str(yaml.safe_load(text)["version"])
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError, NotRegularFileError, FileTooLargeError):
        return "unreadable"
    return None


def main(argv: Sequence[str]) -> int:
    """``python -m gpuclus.galaxy_collections [REQUIREMENTS]``: scripts/collections.sh's check, one line per problem."""
    wanted = requirements(Path(argv[0]) if argv else None)
    roots = search_roots()
    found = problems(wanted, roots)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if found:
        return 1
    for requirement in wanted:
        hit = find(requirement, roots)
        if hit is not None:
            print(f"{requirement.name} {hit.version or '(no version)'}: {hit.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
