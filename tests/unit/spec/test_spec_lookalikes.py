"""Look-alike characters (issue 40): every grammar is ASCII-only, in pydantic, in Python's re and in the roles.

`\\d` matches any script's digits in pydantic's Rust engine and in Python's re alike (Arabic-Indic digits as a
max_time, fullwidth ones as a CUDA version), and re.IGNORECASE reads the Kelvin sign and the long s as 'k' and
's'. Each case here puts a non-ASCII digit or letter where a field's grammar takes an ASCII one, and wants a
refusal that points at the field: what `spec check` passes reaches slurm.conf, package names and paths as
written.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from lookalikes import lookalikes, pattern_paths
from spec_samples import SPEC
from test_spec_grammar import PATTERN_FIELDS, dotted

from gpuclus.spec.hostlist import HostlistError, compress, expand
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.models import ClusterSpec
from gpuclus.yamldoc.findings import Finding, Severity
from gpuclus.yamldoc.grammar import EXPORT_VALUED, ascii_grammar, full_match
from gpuclus.yamldoc.patterns import PATTERN_RULES, ROLE_PATTERNS, ansible_form

ROLES = Path(__file__).resolve().parents[3] / "roles"


def test_lookalikes_are_what_they_claim() -> None:
    variants = list(lookalikes("desk1"))
    assert len(variants) == 4 + 1 + 2  # four scripts' 1, a fullwidth d, the long s and the Kelvin sign
    assert all(not variant.isascii() and len(variant) == 5 for variant in variants)
    assert {"desk\u0661", "\uff44esk1", "de\u017fk1", "des\u212a1"} <= set(variants)
    assert re.fullmatch(r"\d+", "\u0663\u0660")  # the trap: Python's \d takes them


# A spec that fills every field a grammar checks, with values holding digits and the letters s, k and i
# wherever the grammar allows them, so that each look-alike lands where an ASCII character is accepted.
FULL = copy.deepcopy(SPEC)
FULL["cluster"] = {"name": "desk1", "admin_user": "ask1"}
FULL["nodes"][0].update(name="desk1", address="10.0.0.10")
FULL["nodes"][1]["gpus"]["model"] = "h100-sk"
FULL["slurm"].update(
    version="23.11.4-desk1",
    state_save_location="/srv/desk1",
    health_check={"disks": [{"path": "/desk1", "min_free_mb": 10}]},
)
FULL["slurm"]["partitions"][0]["name"] = "gpu1sk"
FULL["nfs"] = {
    "exports": [{"path": "/srv/desk1", "mount": "/desk1", "options": "rw,sync,no_subtree_check,anonuid=65534"}],
    "client_options": "rw,hard,timeo=600",
}
FULL["containers"] = {
    "enroot": True,
    "pyxis": True,
    "enroot_version": "4.1.2",
    "pyxis_version": "0.24.0",
    "checksums": {"enroot_4.1.2-1_amd64.deb": "0123456789abcdef" * 4},
    "allow_unverified_downloads": True,
    "credentials_users": ["ask1"],
}
FULL["monitoring"] = {
    "alertmanager": True,
    "alert_receiver": {
        "webhook_url": "https://chat1.example.org/hook/sk1",
        "email_to": "ops1@example.org",
        "email_from": "desk1@example.org",
        "smarthost": "smtp1.example.org:25",
    },
}
FULL["modules"] = {"lmod": True, "path": "/opt/desk1/modules"}
FULL["pytorch"] = {
    "install": True,
    "location": "node-local",
    "prefix": "/opt/desk1/sw",
    "version": "2.4.1",
    "flavour": "cu124",
    "numpy_version": "1.26.4",
    "extra_packages": ["tqdm==4.66.1"],
    "index_url": "https://pypi1.example.org/simple/k",
    "examples_dir": "/opt/desk1/examples",
    "nccl_env": {"NCCL_IB_HCA": "mlx5_0:1,desk"},
}
FULL["users"] = {
    "file": "users.yaml",
    "directory": {
        "uri": ["ldaps://ldap1.desk.example.org:636"],
        "base_dn": "dc=desk1,dc=org",
        "bind_dn": "cn=reader1,dc=desk,dc=org",
        "bind_password_file": "bind-password",
        "ssh_keys_attribute": "sshPublicKey1",
        "allow_groups": ["gpu-desk1"],
    },
}

# Stands for a mapping's one key in a path: the key is what the grammar checks.
KEY = object()

Field = tuple[Any, ...]
GRAMMAR_FIELDS: list[Field] = [
    *PATTERN_FIELDS,
    ("nodes", 1, "name"),
    ("nodes", 1, "address"),
    ("slurm", "state_save_location"),
    ("slurm", "health_check", "disks", 0, "path"),
    ("containers", "enroot_version"),
    ("containers", "pyxis_version"),
    ("containers", "checksums", KEY),
    ("containers", "checksums", "enroot_4.1.2-1_amd64.deb"),
    ("containers", "credentials_users", 0),
    ("monitoring", "alert_receiver", "webhook_url"),
    ("monitoring", "alert_receiver", "email_to"),
    ("monitoring", "alert_receiver", "email_from"),
    ("monitoring", "alert_receiver", "smarthost"),
    ("modules", "path"),
    ("pytorch", "prefix"),
    ("pytorch", "version"),
    ("pytorch", "flavour"),
    ("pytorch", "numpy_version"),
    ("pytorch", "extra_packages", 0),
    ("pytorch", "index_url"),
    ("pytorch", "examples_dir"),
    ("pytorch", "nccl_env", KEY),
    ("pytorch", "nccl_env", "NCCL_IB_HCA"),
    ("users", "directory", "uri", 0),
    ("users", "directory", "base_dn"),
    ("users", "directory", "bind_dn"),
    ("users", "directory", "ssh_keys_attribute"),
    ("users", "directory", "allow_groups", 0),
]


def field_id(path: Field) -> str:
    return dotted(tuple("{key}" if part is KEY else part for part in path))


def value_at(data: Any, path: Field) -> str:
    for part in path:
        data = next(iter(data)) if part is KEY else data[part]
    return str(data)


def spec_with(path: Field, value: str) -> str:
    data = copy.deepcopy(FULL)
    holder: Any = data
    for part in path[:-1]:
        holder = holder[part]
    if path[-1] is KEY:
        ((_, old_value),) = holder.items()
        holder.clear()
        holder[value] = old_value
    else:
        holder[path[-1]] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def errors_at(text: str, path: Field) -> list[Finding]:
    # A mapping's key is reported at the key; a hostlist entry's value at its entry.
    where = field_id(path[:-1] if path[-1] is KEY else path)
    findings = load_spec_text(text).findings
    return [f for f in findings if f.severity == Severity.ERROR and f.path.startswith(where)]


@pytest.mark.parametrize("path", GRAMMAR_FIELDS, ids=field_id)
def test_every_grammar_field_refuses_lookalikes_where_it_takes_ascii(path: Field) -> None:
    value = value_at(FULL, path)
    assert errors_at(spec_with(path, value), path) == [], f"{field_id(path)} refuses its own ASCII value"
    variants = list(lookalikes(value))
    assert variants, f"{value!r} holds no character to swap"
    for variant in variants:
        found = errors_at(spec_with(path, variant), path)
        assert found, f"{field_id(path)} accepted {variant!r}"
        assert all(finding.line is not None for finding in found), found


def _generic(path: Field) -> str:
    parts = ["[]" if isinstance(part, int) else "{key}" if part is KEY else part for part in path]
    if path[-2:-1] in {("checksums",), ("nccl_env",)} and path[-1] is not KEY:
        parts[-1] = "{value}"
    return ".".join(parts).replace(".[]", "[]")


def test_the_fields_above_are_every_field_with_a_pattern() -> None:
    schema = ClusterSpec.model_json_schema()
    with_pattern = set(pattern_paths(schema))
    assert {"pytorch.nccl_env.{key}", "users.directory.uri[]"} <= with_pattern
    assert with_pattern - {_generic(path) for path in GRAMMAR_FIELDS} == set()


# -- the one helper every grammar goes through ------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [r"^\d+$", r"^\w+$", r"^a\sb$", r"^\D$", r"^\W$", r"^\S$", r"\bword\b", r"^a.b$", r"^[^,]+$", r"(?i)^[a-z]+$"],
)
def test_ascii_grammar_refuses_what_can_match_beyond_ascii(source: str) -> None:
    with pytest.raises(ValueError, match="ASCII"):
        ascii_grammar(source)


@pytest.mark.parametrize("source", [r"^[0-9]+\.[0-9]+$", r"^a\\d$", r"^[a.b]$", r"^(?:ab|cd)\Z", r"^x\.y$"])
def test_ascii_grammar_takes_explicit_ascii_classes(source: str) -> None:
    assert ascii_grammar(source) == source


def _every_grammar() -> list[str]:
    schema = ClusterSpec.model_json_schema()
    in_schema: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            in_schema.extend([node["pattern"]] if isinstance(node.get("pattern"), str) else [])
            in_schema.extend(node.get("patternProperties", {}))
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    return sorted({*in_schema, *PATTERN_RULES, *ROLE_PATTERNS.values(), *EXPORT_VALUED.values()})


@pytest.mark.parametrize("pattern", _every_grammar())
def test_every_grammar_in_use_is_ascii_only(pattern: str) -> None:
    assert ascii_grammar(pattern) == pattern


@pytest.mark.parametrize("name", sorted(ROLE_PATTERNS))
def test_the_roles_grammars_refuse_lookalikes(name: str) -> None:
    # What a role's `is match(gpuclus_patterns.x)` runs: Python's re, Unicode-aware unless told otherwise.
    samples = {
        "absolute_path": "/srv/desk1",
        "disk_path": "/desk1",
        "node_name": "desk1",
        "address": "desk1.example.org",
        "release_version": "4.1.2",
        "sha256": "0123456789abcdef" * 4,
        "user_name": "ask1",
        "partition": "gpu1sk",
        "gpu_model": "h100-sk",
        "nccl_variable": "NCCL_IB_HCA1",
        "nccl_value": "mlx5_0:1,desk",
        "index_url": "https://pypi1.example.org/simple/k",
        "ldap_uri": "ldaps://ldap1.desk.example.org:636",
        "ldap_attribute": "sshPublicKey1",
        "driver_branch": "550",
        "cuda_version": "12.4",
        "slurm_version": "23.11.4-desk1",
        "pip_requirement": "tqdm==4.66.1",
    }
    pattern = ansible_form(ROLE_PATTERNS[name])
    assert re.match(pattern, samples[name])
    for variant in lookalikes(samples[name]):
        assert re.match(pattern, variant) is None, (name, variant)


def test_full_match_reads_digits_and_case_as_ascii() -> None:
    assert not full_match(r"[0-9]{2}", "\u0663\u0660")
    assert full_match(r"[0-9]{2}", "30")


def test_no_role_matches_ignoring_case() -> None:
    # IGNORECASE over Unicode text reads the Kelvin sign as 'k'; the shared grammars say what case they take.
    uses = [str(path.relative_to(ROLES)) for path in ROLES.rglob("*.yml") if "ignorecase" in path.read_text()]
    assert uses == []


@pytest.mark.parametrize("expression", ["gpu[\u0660\u0661-\u0660\u0662]", "gpu[\uff10\uff11]", "10.0.0.[\u0967\u0967]"])
def test_hostlist_ranges_take_ascii_digits_only(expression: str) -> None:
    # int() reads any script's digits: these expanded to gpu01, gpu02, names the spec never showed.
    with pytest.raises(HostlistError):
        expand(expression)


def test_hostlists_fold_ascii_numbers_only() -> None:
    assert compress(["gpu\u0661", "gpu\u0662"]) == "gpu\u0661,gpu\u0662"
    assert compress(["gpu1", "gpu2"]) == "gpu[1-2]"
