"""The reset list (roles/reset/vars/main.yml) against roles/: nothing a role installs may be forgotten.

Every role directory is either in the catalog or in __reset_not_undone with a
reason; every unit a role's tasks start or enable, every package its vars
name and every gpuclus-owned path its vars and defaults name is covered. A
new role, service, package or file fails here until the reset learns it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuclus.reset.catalog import Catalog, load_catalog

ROLES = Path(__file__).resolve().parents[3] / "roles"
SYSTEMD_MODULES = {"ansible.builtin.systemd", "ansible.builtin.systemd_service", "ansible.builtin.service"}
# Paths under these prefixes are what gpuclus writes (package-owned places are purged with the package).
OWNED_PREFIXES = ("/etc/", "/var/lib/", "/var/cache/", "/var/log/", "/opt/", "/usr/local/", "/run/", "/srv/")
# Paths roles name that belong to a package or the system, with why reset leaves them to apt (or keeps them).
NOT_GPUCLUS_PATHS = {
    "/etc/hosts": "rewritten without the cluster's lines (tasks/configure.yml), never deleted",
    "/run/mysqld/mysqld.sock": "MariaDB's socket; gone with the stopped service and the package",
    "/etc/apt/keyrings": "the system's keyring directory; only grafana.asc in it is gpuclus'",
    "/etc/systemd/system": "the system's unit directory; only gpuclus' unit files in it are removed",
    "/etc/sssd/conf.d": "sssd's own snippet directory (the package's), which sssd.conf's check reads",
    "/etc/pam.d/common-session": "the system's PAM stack, written by pam-auth-update; purging libpam-sss takes "
    "sss out, and the mkhomedir profile stays on",
    "/etc/pam.d/sshd": "the system's sshd PAM file; reset takes slurm_adopt's marked block out "
    "(tasks/configure.yml), never deletes it",
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog(ROLES)


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _role_vars(role: Path) -> dict[str, Any]:
    """The role's defaults and its Debian-family and common vars (what a Debian node gets)."""
    merged: dict[str, Any] = {}
    files = [role / "defaults" / "main.yml", role / "vars" / "main.yml"]
    files += sorted((role / "vars").glob("Debian*.yml")) + sorted((role / "vars").glob("Ubuntu*.yml"))
    for file in files:
        merged.update(_yaml(file) or {})
    return merged


def _plain_strings(value: Any) -> Iterator[str]:
    """The literal strings in a value (lists and dicts walked); templated ones are skipped."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _plain_strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _plain_strings(item)


def _resolve(text: str, variables: dict[str, Any]) -> list[str]:
    """A task argument as literal names: plain text, or one `{{ var }}` of the role's plain vars."""
    match = re.fullmatch(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", text.strip())
    if match is None:
        return [] if "{{" in text else [text]
    return list(_plain_strings(variables.get(match.group(1))))


def _tasks(role: Path) -> Iterator[dict[str, Any]]:
    for file in sorted((role / "tasks").glob("*.yml")) + sorted((role / "handlers").glob("*.yml")):
        stack = list(_yaml(file) or [])
        while stack:
            task = stack.pop()
            if isinstance(task, dict):
                yield task
                for key in ("block", "rescue", "always"):
                    stack += task.get(key) or []


def _roles(catalog: Catalog) -> list[Path]:
    return [path for path in sorted(ROLES.iterdir()) if path.is_dir() and path.name not in catalog.not_undone]


def _covered(path: str, catalog_paths: set[str]) -> bool:
    return any(path == owned or path.startswith(owned.rstrip("/") + "/") for owned in catalog_paths)


def test_every_role_is_covered_or_says_why_not(catalog: Catalog) -> None:
    on_disk = {path.name for path in ROLES.iterdir() if path.is_dir()}
    listed = {entry.role for entry in catalog.entries}
    assert not listed & set(catalog.not_undone), "a role is both undone and not"
    assert on_disk == listed | set(catalog.not_undone), "roles/ and the reset list differ"
    assert all(len(why) > 20 for why in catalog.not_undone.values()), "every role left alone needs a reason"


def test_every_unit_a_role_starts_is_stopped(catalog: Catalog) -> None:
    units = {unit.removesuffix(".service") for entry in catalog.entries for unit in entry.units}
    missing: list[str] = []
    for role in _roles(catalog):
        variables = _role_vars(role)
        for task in _tasks(role):
            module = next((key for key in task if key in SYSTEMD_MODULES), None)
            if module is None or not isinstance(task[module], dict):
                continue
            arguments = task[module]
            if "name" not in arguments or not ({"state", "enabled"} & set(arguments)):
                continue
            # A reload only (the users role's sshd) neither starts nor enables a unit.
            if arguments.get("state") == "reloaded" and "enabled" not in arguments:
                continue
            names = _resolve(str(arguments["name"]), variables)
            assert names or "{{" in str(arguments["name"]), f"{role.name}: unit name {arguments['name']}"
            missing += [f"{role.name}: {name}" for name in names if name.removesuffix(".service") not in units]
    assert not missing, f"units started by roles but not stopped by reset: {missing}"


def test_the_units_from_the_roles_vars_are_stopped(catalog: Catalog) -> None:
    # Templated unit names in tasks resolve through vars: the *_service/_timer vars themselves.
    units = {unit.removesuffix(".service") for entry in catalog.entries for unit in entry.units}
    missing = []
    # gpu_metrics only names the DCGM host engine (nvidia_driver's unit, which reset leaves with the driver).
    for role in _roles(catalog):
        for key, value in _role_vars(role).items():
            if re.search(r"_(service|services|timer)$", key) and not key.endswith("hostengine_service"):
                missing += [
                    f"{role.name}.{key}: {name}"
                    for name in _plain_strings(value)
                    if name.removesuffix(".service") not in units
                ]
    assert not missing, missing


def test_every_package_a_role_installs_is_purged_or_kept_on_purpose(catalog: Catalog) -> None:
    purged = {package for entry in catalog.entries for package in entry.packages}
    kept = set(_yaml(ROLES / "reset" / "defaults" / "main.yml")["reset_keep_packages"])
    missing = []
    for role in _roles(catalog):
        for key, value in _role_vars(role).items():
            if re.search(r"_packages?$", key) and not key.endswith("_package_copy"):
                missing += [
                    f"{role.name}.{key}: {name}"
                    for name in _plain_strings(value)
                    if name not in purged | kept and not name.startswith(".")
                ]
    assert not missing, f"packages roles install that reset neither purges nor keeps: {missing}"


def test_every_gpuclus_path_a_role_names_is_removed(catalog: Catalog) -> None:
    paths = {path for entry in catalog.entries for path in entry.paths}
    missing = []
    for role in _roles(catalog):
        for key, value in _role_vars(role).items():
            for text in _plain_strings(value):
                if not text.startswith(OWNED_PREFIXES) or " " in text or text in NOT_GPUCLUS_PATHS:
                    continue
                if not _covered(text, paths):
                    missing.append(f"{role.name}.{key}: {text}")
    assert not missing, f"paths roles write that reset does not remove: {missing}"


def test_the_kept_packages_are_never_in_the_purge_list(catalog: Catalog) -> None:
    kept = set(_yaml(ROLES / "reset" / "defaults" / "main.yml")["reset_keep_packages"])
    purged = {package for entry in catalog.entries for package in entry.packages}
    # What gpuclus needs to reach a node again must survive any reset.
    assert {"openssh-server", "sudo", "python3", "python3-apt"} <= kept
    assert not purged & kept


def test_user_data_is_never_in_the_removal_list(catalog: Catalog) -> None:
    paths = [path for entry in catalog.entries for path in entry.paths]
    for protected in ("/home", "/shared", "/srv", "/srv/nfs", "/", "/etc", "/var/lib", "/opt", "/usr/local"):
        assert protected not in paths
    assert not [path for path in paths if path.startswith("/home/")]
