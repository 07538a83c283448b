"""Paths on the nodes are judged where they land (issue 40): no '.' or '..' part, containment by parts, and no
field whose directory a role chowns, chmods, exports or mounts over may name a directory of the system."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from spec_samples import SPEC

from gpuclus.spec.checks.paths import NODE_DIRECTORY_FIELDS, SYSTEM_DIRECTORIES, SYSTEM_TREES, system_directory_problem
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.software import strictly_inside
from gpuclus.users.load import load_users_text
from gpuclus.yamldoc.grammar import export_options_problem, export_path_problem, full_match
from gpuclus.yamldoc.patterns import ABSOLUTE_PATH, DISK_PATH_PATTERN, ROLE_PATTERNS, ansible_form

# A shared layout on /shared with every node-path field of the spec set to a directory inside it.
SHARED: dict[str, Any] = {
    **copy.deepcopy(SPEC),
    "nfs": {"exports": [{"path": "/srv/shared", "mount": "/shared"}]},
    "slurm": {"state_save_location": "/shared/slurm/state"},
    "modules": {"lmod": True, "path": "/shared/modules"},
    "pytorch": {"install": True, "location": "shared", "prefix": "/shared/sw", "examples_dir": "/shared/ex"},
}

# Every spec field holding a path on the nodes, by where it is in SHARED.
NODE_PATH_FIELDS: list[tuple[str, ...]] = [
    ("nfs", "exports", "0", "path"),
    ("nfs", "exports", "0", "mount"),
    ("slurm", "state_save_location"),
    ("modules", "path"),
    ("pytorch", "prefix"),
    ("pytorch", "examples_dir"),
    ("slurm", "health_check", "disks", "0", "path"),
]


def load_with(field: tuple[str, ...], value: str) -> LoadedSpec:
    data = copy.deepcopy(SHARED)
    data["slurm"]["health_check"] = {"disks": [{"path": "/scratch", "min_free_mb": 10}]}
    holder: Any = data
    for part in field[:-1]:
        holder = holder[int(part)] if part.isdigit() else holder[part]
    holder[field[-1]] = value
    return load_spec_text(yaml.safe_dump(data))


def codes_at(loaded: LoadedSpec, field: tuple[str, ...]) -> set[str]:
    path = ".".join(field).replace(".0", "[0]")
    return {finding.code for finding in loaded.findings if finding.path == path}


def test_the_shared_sample_passes() -> None:
    loaded = load_spec_text(yaml.safe_dump(SHARED))
    assert [f.code for f in loaded.findings if f.severity.value == "error"] == []


@pytest.mark.parametrize("field", NODE_PATH_FIELDS, ids=".".join)
@pytest.mark.parametrize("value", ["/shared/../etc", "/shared/./x", "/shared/x/..", "/shared/...", "/./shared"])
def test_a_dot_or_dot_dot_part_is_refused_in_every_node_path(field: tuple[str, ...], value: str) -> None:
    # /shared/../etc passed the "inside the share" text prefix and was /etc where the pytorch play chowned it.
    loaded = load_with(field, value)
    assert codes_at(loaded, field) & {"invalid-format", "invalid-value"}, loaded.findings


@pytest.mark.parametrize("value", ["/shared/.cache", "/shared/..x", "/shared/x..", "/shared/a.b"])
def test_dots_inside_a_name_are_still_fine(value: str) -> None:
    for pattern in (ABSOLUTE_PATH, DISK_PATH_PATTERN):
        assert full_match(pattern, value)
    assert export_path_problem(value) is None


@pytest.mark.parametrize("pattern", ["absolute_path", "disk_path"])
def test_the_roles_path_grammars_refuse_dot_parts_too(pattern: str) -> None:
    role_pattern = ansible_form(ROLE_PATTERNS[pattern])
    assert not full_match(role_pattern, "/shared/../etc")
    assert full_match(role_pattern, "/shared/software")


def test_an_export_options_mount_point_has_no_dot_parts() -> None:
    assert export_options_problem("rw,mp=/shared/../etc") is not None
    assert export_options_problem("rw,mp=/shared") is None


def test_a_users_login_shell_has_no_dot_parts() -> None:
    text = """\
apiVersion: gpuclus/v1
kind: Users
accounts: [{name: lab}]
users:
  - {name: alice, uid: 2001, account: lab, shell: /bin/../tmp/sh}
"""
    loaded = load_users_text(text)
    assert any(f.code == "invalid-format" and f.path == "users[0].shell" for f in loaded.findings), loaded.findings


@pytest.mark.parametrize(
    ("path", "directory", "inside"),
    [
        ("/shared/sw", "/shared", True),
        ("/shared", "/shared", False),
        ("/sharedX/sw", "/shared", False),
        ("/shared/../etc", "/shared", False),
        ("/shared/a/../b", "/shared", True),
    ],
)
def test_containment_is_judged_on_normalised_parts(path: str, directory: str, inside: bool) -> None:
    assert strictly_inside(path, directory) is inside


def test_a_path_beside_the_share_with_the_same_prefix_is_outside_it() -> None:
    loaded = load_with(("pytorch", "prefix"), "/sharedX/sw")
    assert "pytorch-path-outside-share" in codes_at(loaded, ("pytorch", "prefix"))


# Every field whose directory a role chowns, chmods, exports or mounts over, with a value inside SHARED.
DIRECTORY_FIELDS = [field for field in NODE_PATH_FIELDS if field[:3] != ("slurm", "health_check", "disks")]


@pytest.mark.parametrize("field", DIRECTORY_FIELDS, ids=".".join)
@pytest.mark.parametrize(
    "value",
    ["/etc", "/etc/ssh", "/usr", "/usr/lib/x", "/var/lib", "/var/log/slurm", "/tmp/x", "/root", "/opt", "/run/x"],
)
def test_a_system_directory_is_refused_with_a_located_finding(field: tuple[str, ...], value: str) -> None:
    loaded = load_with(field, value)
    findings = [f for f in loaded.findings if f.code == "system-directory"]
    assert findings, loaded.findings
    assert findings[0].path == ".".join(field).replace(".0", "[0]")
    assert findings[0].line is not None and findings[0].hint
    assert value in findings[0].message


@pytest.mark.parametrize("field", DIRECTORY_FIELDS, ids=".".join)
@pytest.mark.parametrize("value", ["/srv/cluster", "/opt/site/x", "/var/lib/slurm/slurmctld", "/usr/local/site"])
def test_a_directory_below_the_systems_own_is_fine(field: tuple[str, ...], value: str) -> None:
    loaded = load_with(field, value)
    assert "system-directory" not in {f.code for f in loaded.findings}


@pytest.mark.parametrize(
    ("field", "refused"),
    [
        (("nfs", "exports", "0", "path"), False),
        (("nfs", "exports", "0", "mount"), False),
        (("pytorch", "prefix"), True),
        (("slurm", "state_save_location"), True),
    ],
)
def test_home_may_be_exported_and_mounted_but_not_chowned(field: tuple[str, ...], refused: bool) -> None:
    loaded = load_with(field, "/home")
    assert ("system-directory" in codes_at(loaded, field)) is refused


def test_the_system_lists_are_normal_absolute_paths() -> None:
    for path in SYSTEM_TREES | SYSTEM_DIRECTORIES:
        assert path == "/" or full_match(ABSOLUTE_PATH, path)
    assert not SYSTEM_TREES & SYSTEM_DIRECTORIES
    assert system_directory_problem("/etcetera") is None
    assert system_directory_problem("/etc/ssh") == "lies in /etc, a directory of the operating system"


def _path_fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The fields of ``model`` (and the models in it) that take an absolute path on the nodes."""
    found = []
    for name, info in model.model_fields.items():
        if any(getattr(meta, "pattern", None) == ABSOLUTE_PATH for meta in info.metadata):
            found.append((*prefix, name))
        for nested in _models_in(info.annotation):
            found.extend(_path_fields(nested, (*prefix, name)))
    return found


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in getattr(annotation, "__args__", ()) for model in _models_in(arg)]


def test_every_absolute_path_field_of_the_spec_is_judged_as_a_node_directory() -> None:
    # A new path field a role creates must join NODE_DIRECTORY_FIELDS; export paths are validated by hand.
    listed = {tuple(part for part in field.loc if part != "*") for field in NODE_DIRECTORY_FIELDS}
    assert set(_path_fields(ClusterSpec)) == listed
