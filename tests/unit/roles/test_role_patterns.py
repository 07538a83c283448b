"""The grammars roles share with the spec come from group_vars' gpuclus_patterns (yamldoc/patterns.py), once.

render writes `ROLE_PATTERNS` in Ansible's form; a role pattern that spells one of them again (with $ or \\Z)
is a second copy waiting to drift, and is refused here.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gpuclus.yamldoc.patterns import ROLE_PATTERNS, ansible_form

ROLES = Path(__file__).resolve().parents[3] / "roles"


def test_ansible_form_ends_in_backslash_z_and_refuses_unanchored_patterns() -> None:
    assert ansible_form(r"^[0-9a-f]{64}$") == r"^[0-9a-f]{64}\Z"
    assert re.match(ansible_form(ROLE_PATTERNS["sha256"]), "a" * 64 + "\n") is None
    try:
        ansible_form("[0-9]+")
    except ValueError:
        pass
    else:
        raise AssertionError("an unanchored pattern was taken")


def test_no_role_spells_a_shared_grammar_again() -> None:
    shared = {form for pattern in ROLE_PATTERNS.values() for form in (pattern, ansible_form(pattern))}
    copies = [
        f"{path.relative_to(ROLES)}: {name}"
        for path in sorted(ROLES.glob("*/vars/*.yml")) + sorted(ROLES.glob("*/defaults/*.yml"))
        for name, value in (yaml.safe_load(path.read_text()) or {}).items()
        if name.endswith("_pattern") and value in shared
    ]
    assert copies == []


def test_the_roles_read_the_shared_grammars() -> None:
    readers = {path.parts[-3] for path in ROLES.glob("*/vars/*.yml") if "gpuclus_patterns." in path.read_text()}
    assert readers == {"deploy_stamp", "enroot", "nfs_client", "nfs_server", "pyxis", "slurm_common", "users"}
