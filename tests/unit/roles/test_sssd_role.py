"""Role sssd, and the users role's directory mode, without a node.

sssd.conf is rendered with Ansible's own templating from the role's defaults
and vars (tests/unit/role_templates.py); the preflight's input checks and the
users role's directory verdict are evaluated the same way. molecule `sssd`
runs both roles against a real OpenLDAP server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import trust_as_template
from role_templates import ROLES, default_group_vars, first_refusal, role_templar

# sssd.conf reads the bind password with the `file` lookup, a plugin Ansible loads through its collection loader.
init_plugin_loader()

PASSWORD = "reader-pw-3f9a"


def inputs(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """What render writes into group_vars/all/users.yml for a spec with users.directory (the bind password's
    file relative to the rendered directory), which the role's defaults read; ``overrides`` set the role's own
    variables, as a caller would."""
    rendered = tmp_path / "rendered"
    (rendered / "inventory").mkdir(parents=True, exist_ok=True)
    (tmp_path / "reader.password").write_text(PASSWORD + "\n")
    values: dict[str, Any] = {
        "inventory_dir": str(rendered / "inventory"),
        "gpuclus_apt_cache_valid_time": 3600,
        "gpuclus_package_lock_timeout": 300,
        "gpuclus_patterns": default_group_vars()["gpuclus_patterns"],
        "gpuclus_users": [
            {"name": "alice", "uid": 2101, "removed": False},
            {"name": "bob", "uid": 2102, "removed": True},
            {"name": "eve", "uid": 2103, "removed": True},
        ],
        "gpuclus_users_directory": {
            "uri": ["ldaps://ldap1.example.org", "ldaps://ldap2.example.org:636"],
            "base_dn": "dc=example,dc=org",
            "schema": "rfc2307bis",
            "bind_dn": "cn=Cluster Reader,ou=services,dc=example,dc=org",
            "bind_password_file": "../reader.password",
            "ca_cert_file": "",
            "start_tls": False,
            "id_mapping": False,
            "ssh_keys_attribute": "sshPublicKey",
            "allow_groups": ["HPC Users", "gpu-lab"],
        },
    }
    values.update(overrides)
    return values


def sssd_conf(tmp_path: Path, **overrides: Any) -> list[str]:
    t = role_templar("sssd", "Debian.yml", {}, **inputs(tmp_path, **overrides))
    source = (ROLES / "sssd" / "templates" / "etc" / "sssd" / "sssd.conf.j2").read_text()
    return str(t.template(trust_as_template(source))).splitlines()


def test_sssd_conf_binds_checks_certificates_and_limits_logins(tmp_path: Path) -> None:
    lines = sssd_conf(tmp_path)
    for line in (
        "services = nss, pam, ifp, ssh",
        "domains = directory",
        "[ssh]",
        "[domain/directory]",
        "id_provider = ldap",
        "access_provider = simple",
        "ldap_uri = ldaps://ldap1.example.org, ldaps://ldap2.example.org:636",
        "ldap_search_base = dc=example,dc=org",
        "ldap_schema = rfc2307bis",
        "ldap_default_bind_dn = cn=Cluster Reader,ou=services,dc=example,dc=org",
        f"ldap_default_authtok = {PASSWORD}",
        "ldap_tls_reqcert = demand",
        "ldap_id_mapping = false",
        "ldap_user_ssh_public_key = sshPublicKey",
        "simple_allow_groups = HPC Users, gpu-lab",
        "simple_deny_users = bob, eve",
        "cache_credentials = false",
    ):
        assert line in lines, line
    # The password is on its one line and nowhere else.
    assert sum(PASSWORD in line for line in lines) == 1
    assert not any(line.startswith(("ldap_tls_cacert", "ldap_referrals")) for line in lines)


def test_sssd_conf_anonymous_ad_with_a_ca_and_no_keys(tmp_path: Path) -> None:
    lines = sssd_conf(
        tmp_path,
        sssd_schema="ad",
        sssd_bind_dn="",
        sssd_bind_password_file="",
        sssd_ca_cert_file="/site/ca.pem",
        sssd_id_mapping=True,
        sssd_start_tls=True,
        sssd_uris=["ldap://dc1.example.org"],
        sssd_ssh_keys_attribute="",
        sssd_allow_groups=[],
        sssd_deny_users=[],
    )
    assert "services = nss, pam, ifp" in lines and "[ssh]" not in lines
    assert not any(line.startswith(("ldap_default_", "simple_", "ldap_user_ssh")) for line in lines)
    for line in (
        "ldap_schema = ad",
        "ldap_referrals = false",
        "ldap_id_mapping = true",
        "ldap_id_use_start_tls = true",
        "ldap_tls_cacert = /etc/sssd/gpuclus-ca.pem",
    ):
        assert line in lines, line


def preflight_asserts() -> list[dict[str, Any]]:
    tasks = DataLoader().load_from_file(str(ROLES / "sssd" / "tasks" / "preflight.yml"))
    return [task for task in tasks if "ansible.builtin.assert" in task and "__sssd_missing" not in str(task)]


def test_clean_inputs_pass_the_preflight(tmp_path: Path) -> None:
    assert first_refusal(role_templar("sssd", "Debian.yml", {}, **inputs(tmp_path)), preflight_asserts()) == []


@pytest.mark.parametrize(
    "hostile",
    [
        {"sssd_uris": ["ldap://ldap.example.org/ou=people"]},
        {"sssd_uris": ["ldap://ldap.example.org\nenumerate = true"]},
        {"sssd_uris": []},
        {"sssd_base_dn": "dc=example,dc=org\nldap_uri = ldap://evil"},
        {"sssd_bind_dn": 'cn="x",dc=org'},
        {"sssd_bind_password_file": ""},
        {"sssd_schema": "nis"},
        {"sssd_ssh_keys_attribute": "ssh key"},
        {"sssd_allow_groups": ["admins, wheel"]},
        {"sssd_deny_users": ["bob\nsimple_allow_users = eve"]},
        {"sssd_domain": "directory]\n[sssd"},
    ],
)
def test_a_hostile_input_fails_the_preflight(tmp_path: Path, hostile: dict[str, Any]) -> None:
    t = role_templar("sssd", "Debian.yml", {}, **inputs(tmp_path, **hostile))
    refusal = first_refusal(t, preflight_asserts())
    assert refusal and "spec check" in refusal[0]


USERS = [
    {"name": "alice", "uid": 2101, "account": "lab"},
    {"name": "bob", "uid": 2102, "account": "lab", "removed": True},
    {"name": "carol", "uid": 2103, "account": "lab"},
    {"name": "dave", "uid": 2104, "account": "lab"},
]


def test_directory_mode_names_missing_users_and_wrong_uids_and_reads_gids() -> None:
    # `getent passwd alice carol dave` through sssd: dave is not in the directory (exit 2, no line).
    lookup = {
        "rc": 2,
        "stdout_lines": [
            "alice:*:2101:2201:Alice:/home/alice:/bin/bash",
            "carol:*:2999:2201:Carol:/home/carol:/bin/bash",
        ],
    }
    t = role_templar("users", "Debian.yml", {}, users_users=USERS, __users_directory_lookup=lookup)
    problems = t.template(trust_as_template("{{ __users_directory_problems | from_json }}"))
    assert problems == [
        "user carol has uid 2999 in the directory, the users file says 2103",
        "user dave is not in the directory",
    ]
    gids = t.template(trust_as_template("{{ __users_directory_gids }}"))
    assert gids == {"alice": "2201", "carol": "2201"}


def test_directory_mode_with_every_user_found_has_no_problem() -> None:
    lookup = {"rc": 0, "stdout_lines": ["alice:*:2101:100::/home/alice:/bin/bash"]}
    t = role_templar("users", "Debian.yml", {}, users_users=USERS[:2], __users_directory_lookup=lookup)
    assert t.template(trust_as_template("{{ __users_directory_problems | from_json }}")) == []
