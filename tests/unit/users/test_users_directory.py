"""users.directory: the spec's LDAP/AD settings, checked and rendered for the sssd role.

What the nodes do with it (sssd against a real OpenLDAP server, the users role
in directory mode) is molecule `sssd`'s; here: a valid directory spec checks
clean, the bind password's file is judged without its content ever being
shown, the render hands the sssd role what it needs, and `users add` asks for
the directory's uid instead of picking one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_users_file import GOOD
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.render.context import build_context
from gpuclus.spec.checks.users import _bind_password_problem
from gpuclus.spec.load import load_spec

SECRET = "s3cret-Bind_pw!"
SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
users:
  file: users.yaml
  directory:
    uri: [ldaps://ldap1.example.org, "ldaps://10.0.0.5:636"]
    base_dn: dc=example,dc=org
    schema: ad
    bind_dn: CN=Cluster Reader,OU=Service Accounts,DC=example,DC=org
    bind_password_file: secrets/reader.password
    ca_cert_file: /etc/ssl/site-ca.pem
    id_mapping: true
    ssh_keys_attribute: sshPublicKey
    allow_groups: [HPC Users, gpu-lab]
"""


@pytest.fixture()
def cluster_dir(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(SPEC)
    (tmp_path / "users.yaml").write_text(GOOD)
    (tmp_path / "secrets").mkdir()
    password = tmp_path / "secrets" / "reader.password"
    password.write_text(SECRET + "\n")
    password.chmod(0o600)
    return tmp_path


def test_a_directory_spec_checks_clean_and_renders_for_the_sssd_role(cluster_dir: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (cluster_dir / "cluster.yaml").write_text(SPEC.replace("/etc/ssl/site-ca.pem", str(ca)))
    loaded = load_spec(cluster_dir / "cluster.yaml")
    assert loaded.ok, loaded.findings
    assert loaded.topology is not None
    context = build_context(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir=".gpuclus", users=loaded.users
    )
    directory = context["group_vars"]["users"]["gpuclus_users_directory"]
    assert directory == {
        "uri": ["ldaps://ldap1.example.org", "ldaps://10.0.0.5:636"],
        "base_dn": "dc=example,dc=org",
        "schema": "ad",
        "bind_dn": "CN=Cluster Reader,OU=Service Accounts,DC=example,DC=org",
        # Relative to the spec's directory, written as the playbook resolves it (from the output directory).
        "bind_password_file": "secrets/reader.password",
        "ca_cert_file": str(ca),
        "start_tls": False,
        "id_mapping": True,
        "ssh_keys_attribute": "sshPublicKey",
        "allow_groups": ["HPC Users", "gpu-lab"],
    }
    # The render names the password's file, never its content.
    assert SECRET not in repr(context)


def test_without_a_directory_the_render_says_none() -> None:
    loaded = load_spec(Path(__file__).resolve().parents[2] / "fixtures" / "valid" / "minimal.yaml")
    assert loaded.ok and loaded.topology is not None
    context = build_context(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir=".gpuclus")
    assert context["group_vars"]["users"]["gpuclus_users_directory"] is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("uri: [ldap://ldap.example.org/ou=people]", "is not a directory server URI"),
        ("uri: ['ldaps://ldap.example.org\\nlisten = 0.0.0.0']", "is not a directory server URI"),
        ("base_dn: 'dc=example,dc=org\\nldap_uri = ldap://evil'", "is not a plain distinguished name"),
        ("base_dn: 'dc=\"example\",dc=org'", "is not a plain distinguished name"),
        ("schema: nis", "rfc2307"),
        ("ssh_keys_attribute: 'ssh key'", "is not an LDAP attribute name"),
        ("allow_groups: ['admins, wheel']", "no commas"),
    ],
)
def test_values_that_would_break_sssd_conf_are_refused_with_their_line(
    cluster_dir: Path, value: str, problem: str
) -> None:
    key = value.split(":")[0]
    lines = [f"    {value}" if line.startswith(f"    {key}:") else line for line in SPEC.splitlines()]
    (cluster_dir / "cluster.yaml").write_text("\n".join(lines) + "\n")
    loaded = load_spec(cluster_dir / "cluster.yaml")
    assert not loaded.ok
    found = [f for f in loaded.findings if f.path and f.path.startswith(f"users.directory.{key}")]
    assert found, loaded.findings
    assert problem in found[0].message + " " + (found[0].hint or "")
    assert found[0].line == next(i for i, line in enumerate(lines, start=1) if line.startswith(f"    {key}:"))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "is empty"),
        (b"\n", "is empty"),
        (b"first\nsecond\n", "holds more than one line"),
        (b"pw\r\n", "holds more than one line"),
        (b" padded", "starts or ends with a blank, which sssd would drop"),
        (b"tab\x07bell", "holds a control character"),
        (b"\xff\xfe", "is not UTF-8 text"),
        (SECRET.encode() + b"\n", None),
        ("päss wörd".encode(), None),
    ],
)
def test_bind_password_problems_are_named(data: bytes, problem: str | None) -> None:
    assert _bind_password_problem(data) == problem


def test_no_finding_about_the_password_file_shows_its_content(cluster_dir: Path) -> None:
    password = cluster_dir / "secrets" / "reader.password"
    for content, mode in ((SECRET + "\nsecond line\n", 0o600), (SECRET + "\n", 0o644)):
        password.write_text(content)
        password.chmod(mode)
        loaded = load_spec(cluster_dir / "cluster.yaml")
        codes = {f.code for f in loaded.findings}
        assert codes & {"directory-password-file-grammar", "directory-password-file-open"}, loaded.findings
        assert all(SECRET not in f"{f.message} {f.hint} {f.source_line}" for f in loaded.findings)


def test_users_add_asks_for_the_directorys_uid(cluster_dir: Path) -> None:
    spec = str(cluster_dir / "cluster.yaml")
    (cluster_dir / "cluster.yaml").write_text(SPEC.replace("    ca_cert_file: /etc/ssl/site-ca.pem\n", ""))
    result = CliRunner().invoke(app, ["users", "add", "dave", "--account", "nlp", "--spec", spec, "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "--uid is needed" in result.output and "id dave" in result.output
    given = CliRunner().invoke(
        app, ["users", "add", "dave", "--account", "nlp", "--uid", "2200", "--spec", spec, "--dry-run"]
    )
    assert given.exit_code == 0, given.output
    assert "+    uid: 2200\n" in given.output
