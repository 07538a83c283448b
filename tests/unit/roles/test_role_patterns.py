"""The grammars roles share with the spec come from group_vars' gpuclus_patterns (yamldoc/patterns.py), once.

render writes `ROLE_PATTERNS` in Ansible's form; a role pattern that spells one of them again (with $ or \\Z)
is a second copy waiting to drift, and is refused here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuclus.yamldoc.grammar import address_problem
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
    assert readers == {
        "base",
        "cuda_toolkit",
        "deploy_stamp",
        "enroot",
        "gpu_metrics",
        "job_templates",
        "lmod",
        "nfs_client",
        "nfs_server",
        "node_exporter",
        "nvidia_driver",
        "pytorch_env",
        "pyxis",
        "slurm_adopt",
        "slurm_accounts",
        "slurm_common",
        "slurm_hygiene",
        "slurm_health",
        "slurm_metrics",
        "ssh_trust",
        "sssd",
        "users",
    }


def test_every_shared_grammar_has_a_reader() -> None:
    # render ships each one; one no role reads is a value without a purpose.
    text = "\n".join(path.read_text() for path in ROLES.glob("*/vars/*.yml"))
    assert sorted(name for name in ROLE_PATTERNS if f"gpuclus_patterns.{name} " not in text) == []


# Addresses as a person may write them, good and bad; the property below covers the rest.
ADDRESSES = ["10.0.0.11", "gpu01", "gpu01.lab.example", "gpu01.lab.example.", "a" * 63 + ".b", "1.2.3.4"]


@given(st.text(alphabet="abcXYZ019.-_: \n/", max_size=300) | st.sampled_from(ADDRESSES))
def test_every_address_the_spec_takes_passes_the_roles_grammar(address: str) -> None:
    # The roles' address grammar is the characters and length of what address_problem accepts: a role
    # never refuses an address spec check let through.
    if address_problem(address) is None:
        assert re.match(ansible_form(ROLE_PATTERNS["address"]), address), address


@pytest.mark.parametrize("address", ["gpu01\n", "gpu 01", "-gpu01", "gpu01;rm", "a" * 254, ""])
def test_the_roles_address_grammar_refuses_what_no_file_can_take(address: str) -> None:
    assert re.match(ansible_form(ROLE_PATTERNS["address"]), address) is None
    assert address_problem(address) is not None or address == ""


def test_the_node_name_grammar_is_a_dns_label() -> None:
    pattern = ansible_form(ROLE_PATTERNS["node_name"])
    assert re.match(pattern, "g" * 63) and re.match(pattern, "gpu-01")
    assert not any(re.match(pattern, name) for name in ("g" * 64, "gpu-", "Gpu01", "gpu01\n", "gpu_01"))
