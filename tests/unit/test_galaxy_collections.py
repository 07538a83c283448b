"""The Ansible collections check: requirements.yml is the one list, and a run finds what Ansible would."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuclus import galaxy_collections
from gpuclus.errors import ExitCode, UsageError
from gpuclus.galaxy_collections import Requirement, find, problems, requirements, run_path, search_roots

REPO = Path(__file__).resolve().parents[2]
FQCN = re.compile(r"\b([a-z_]+\.[a-z_]+)\.[a-z_]+\b")


def install(root: Path, name: str, version: str | None, *, galaxy_yml: bool = False) -> Path:
    """A collection as ansible-galaxy (MANIFEST.json) or a source checkout (galaxy.yml) leaves it."""
    namespace, collection = name.split(".")
    path = root / "ansible_collections" / namespace / collection
    path.mkdir(parents=True)
    if version is not None and galaxy_yml:
        (path / "galaxy.yml").write_text(f"namespace: {namespace}\nname: {collection}\nversion: {version}\n")
    elif version is not None:
        (path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": version}}))
    return path


def test_requirements_name_every_collection_the_roles_and_playbooks_use() -> None:
    used: set[str] = set()
    sources = [*REPO.glob("roles/**/*.yml"), *REPO.glob("playbooks/**/*.yml")]
    sources.append(REPO / "src" / "gpuclus" / "ansible_settings.py")  # the profile_tasks callback
    for source in sources:
        used.update(FQCN.findall(source.read_text(encoding="utf-8")))
    used = {name for name in used if name.split(".")[0] in {"ansible", "community"}}
    used -= {"ansible.builtin", "ansible.module_utils", "ansible.cfg"}
    listed = {requirement.name for requirement in requirements()}
    assert used == listed == {"ansible.posix", "community.general", "community.mysql"}


def test_gpuclus_reads_the_repositorys_requirements_file() -> None:
    assert requirements() == requirements(REPO / "requirements.yml")


@pytest.mark.parametrize(
    ("spec", "version", "accepted"),
    [
        (">=2.0.0,<3.0.0", "2.1.0", True),
        (">=2.0.0,<3.0.0", "3.0.0", False),
        (">=2.0.0,<3.0.0", "1.5.0", False),
        ("*", "0.0.1", True),
        ("2.1.0", "2.1.0", True),  # Galaxy reads a bare version as exactly that one
        ("2.1.0", "2.1.1", False),
        (">=2.0.0", "not-a-version", False),
    ],
)
def test_version_ranges_read_as_galaxy_reads_them(spec: str, version: str, accepted: bool) -> None:
    assert Requirement("ansible.posix", spec).accepts(version) is accepted


def test_the_first_copy_on_the_search_path_is_the_one_judged(tmp_path: Path) -> None:
    own, home = tmp_path / "own", tmp_path / "home"
    install(home, "community.general", "9.0.0")
    install(own, "community.general", "11.4.2")
    wanted = [Requirement("community.general", ">=10.0.0,<12.0.0")]
    assert problems(wanted, [own, home]) == []
    older_first = problems(wanted, [home, own])
    assert older_first == [
        f"community.general 9.0.0 at {home}/ansible_collections/community/general is not >=10.0.0,<12.0.0"
    ]


def test_missing_collections_are_one_error_line_with_the_install_hint(tmp_path: Path) -> None:
    install(tmp_path, "ansible.posix", "2.1.0")
    with pytest.raises(UsageError) as raised:
        galaxy_collections.check([tmp_path])
    error = raised.value
    assert error.exit_code is ExitCode.USAGE
    assert error.message == (
        "Ansible collections the roles need: community.general is not installed; community.mysql is not installed"
    )
    assert "\n" not in error.message and error.hint is not None and "\n" not in error.hint
    assert "scripts/collections.sh" in error.hint and "requirements.yml" in error.hint


def test_a_source_checkout_is_found_by_its_galaxy_yml_and_one_without_a_version_is_accepted(tmp_path: Path) -> None:
    install(tmp_path, "ansible.posix", "2.1.0", galaxy_yml=True)
    install(tmp_path, "community.mysql", None)
    found = find(Requirement("ansible.posix", "*"), [tmp_path])
    assert found is not None and found.version == "2.1.0"
    assert problems([Requirement("community.mysql", ">=3.10.0")], [tmp_path]) == []


def test_search_roots_follow_ansibles_order_with_gpuclus_own_environment_first(tmp_path: Path) -> None:
    own = galaxy_collections.own_root()
    configured = f"{tmp_path}/a:{tmp_path}/b/ansible_collections"
    roots = search_roots({"ANSIBLE_COLLECTIONS_PATH": configured}, [str(tmp_path / "site"), str(own)])
    assert roots == [own, tmp_path / "a", tmp_path / "b", tmp_path / "site"]
    defaults = search_roots({}, [])
    assert defaults == [own, Path("~/.ansible/collections").expanduser(), Path("/usr/share/ansible/collections")]


def test_a_runs_collections_path_puts_gpuclus_environment_before_the_configured_places() -> None:
    own = str(galaxy_collections.own_root())
    assert run_path({}) == f"{own}:~/.ansible/collections:/usr/share/ansible/collections"
    assert run_path({"ANSIBLE_COLLECTIONS_PATH": f"/srv/c:{own}"}) == f"{own}:/srv/c"
