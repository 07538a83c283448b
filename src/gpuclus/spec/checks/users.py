"""Users: where they log in, the users file the spec names, and the directory (sssd) that gives their accounts."""

from __future__ import annotations

import shlex

from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file
from gpuclus.spec.checks.control_files import read_secret_file, shown
from gpuclus.spec.checks.view import NODES, RegisteredCheck, SpecView, registrar
from gpuclus.spec.models import Role
from gpuclus.users.load import load_users
from gpuclus.yamldoc.document import SpecFileError
from gpuclus.yamldoc.findings import Finding, Loc, Severity, error, info, warning

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


@_check(NODES)
def login_node(view: SpecView) -> list[Finding]:
    controller = view.topology.controller
    if view.topology.with_role(Role.LOGIN) or controller is None:
        return []
    return [
        info(
            "no-login-node",
            f"no node has the login role; users will submit jobs from the controller {controller.name!r}",
            ("nodes",),
            hint="add 'login' to the node users should SSH into",
        )
    ]


# A bind password is one line of sssd.conf: no line break, no blank at either end (sssd strips them), and
# short; far more than any password, less than any wrong file.
BIND_PASSWORD_MAX_BYTES = 1024
PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"
CA_CERT_MAX_BYTES = 1024 * 1024


def _directory(*keys: str) -> tuple[Loc, ...]:
    return tuple(("users", "directory", key) for key in keys) or (("users", "directory"),)


@_check(("users", "file"), *_directory())
def directory_settings(view: SpecView) -> list[Finding]:
    """users.directory's settings that only make sense together."""
    directory = view.spec.users.directory
    if directory is None:
        return []
    findings: list[Finding] = []
    if view.spec.users.file is None:
        findings.append(
            error(
                "directory-needs-users-file",
                "users.directory needs users.file: the users file names who may use the cluster and their Slurm "
                "accounts and limits; the directory gives their accounts",
                ("users", "directory"),
                hint="add users.file naming a users file (docs/users.md shows one); each user's uid there is the "
                "directory's, as `id NAME` on a node shows it",
            )
        )
    if (directory.bind_dn is None) != (directory.bind_password_file is None):
        given, missing = ("bind_dn", "bind_password_file") if directory.bind_dn else ("bind_password_file", "bind_dn")
        findings.append(
            error(
                "directory-bind-incomplete",
                f"users.directory.{given} without {missing}",
                ("users", "directory", given),
                hint="give both (a read-only account and the file with its password), or neither for anonymous binds",
            )
        )
    encrypted = [uri for uri in directory.uri if uri.startswith("ldaps://")]
    if directory.start_tls and encrypted:
        findings.append(
            error(
                "directory-start-tls-ldaps",
                f"users.directory.start_tls with {encrypted[0]}: ldaps:// is encrypted already and sssd cannot "
                "start TLS inside it",
                ("users", "directory", "start_tls"),
                hint="use ldap:// URIs with start_tls: true, or ldaps:// URIs and leave start_tls out",
            )
        )
    if directory.bind_password_file is not None and not directory.start_tls and len(encrypted) < len(directory.uri):
        findings.append(
            warning(
                "directory-cleartext-bind",
                "users.directory binds with a password over ldap:// without start_tls: the password crosses the "
                "network unencrypted",
                ("users", "directory", "uri"),
                hint="use ldaps:// URIs, or set start_tls: true (with ca_cert_file when the servers' CA is not "
                "trusted by the nodes)",
            )
        )
    if directory.id_mapping and directory.schema_name != "ad":
        findings.append(
            error(
                "directory-id-mapping-needs-ad",
                f"users.directory.id_mapping makes ids from Active Directory SIDs, which a {directory.schema_name} "
                "directory does not have",
                ("users", "directory", "id_mapping"),
                hint="set schema: ad for an Active Directory, or leave id_mapping out to read uidNumber/gidNumber",
            )
        )
    return findings


@_check(*_directory("bind_password_file"))
def directory_bind_password_file(view: SpecView) -> list[Finding]:
    """The bind password's file: there, 0600, one line. Its content is never shown."""
    directory = view.spec.users.directory
    if directory is None or directory.bind_password_file is None:
        return []
    loc: Loc = ("users", "directory", "bind_password_file")
    data, findings = read_secret_file(
        view,
        directory.bind_password_file,
        loc,
        code="directory-password-file",
        max_bytes=BIND_PASSWORD_MAX_BYTES,
        too_large=f"holds more than {BIND_PASSWORD_MAX_BYTES} bytes, far more than a password",
        what="the file holding the password",
        wanted="a file holding only the bind DN's password, on one line",
        holds="the directory's bind password",
    )
    if data is None:
        return findings
    problem = _bind_password_problem(data)
    if problem:
        findings.append(
            error(
                "directory-password-file-grammar",
                f"users.directory.bind_password_file {problem}",
                loc,
                hint="write the password alone on the file's first line (a final line break is fine); sssd.conf "
                "takes it as one line",
            )
        )
    return findings


def _bind_password_problem(data: bytes) -> str | None:
    """What keeps ``data`` from being one line of sssd.conf, named without showing any of it."""
    text = data[:-1] if data.endswith(b"\n") else data
    if not text:
        return "is empty"
    if b"\n" in text or b"\r" in text:
        return "holds more than one line"
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    if decoded != decoded.strip():
        return "starts or ends with a blank, which sssd would drop"
    if any(not character.isprintable() for character in decoded):
        return "holds a control character"
    return None


@_check(*_directory("ca_cert_file"))
def directory_ca_cert_file(view: SpecView) -> list[Finding]:
    """The directory's CA certificate: a PEM file there."""
    directory = view.spec.users.directory
    if directory is None or directory.ca_cert_file is None:
        return []
    value = directory.ca_cert_file
    loc: Loc = ("users", "directory", "ca_cert_file")
    path = view.control_path(value)
    try:
        data = read_regular_file(path, CA_CERT_MAX_BYTES)
    except (OSError, NotRegularFileError, FileTooLargeError) as exc:
        reason = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc})"
        return [
            error(
                "directory-ca-cert-invalid",
                f"users.directory.ca_cert_file {value!r} {reason}",
                loc,
                hint=f"it resolves to {shown(path)}; name the PEM file with the CA that signed the servers' "
                "certificates",
            )
        ]
    if PEM_CERTIFICATE not in data:
        return [
            error(
                "directory-ca-cert-invalid",
                f"users.directory.ca_cert_file {value!r} holds no PEM certificate ({PEM_CERTIFICATE.decode()})",
                loc,
                hint="convert a DER certificate with `openssl x509 -inform der -in CA.cer -out ca.pem`",
            )
        ]
    return []


@_check(("users", "file"), ("cluster", "admin_user"), ("slurm", "accounting"))
def users_file(view: SpecView) -> list[Finding]:
    """The users file the spec names: readable, free of errors, and not listing the admin user."""
    value = view.spec.users.file
    if value is None:
        return []
    loc: Loc = ("users", "file")
    path = view.control_path(value)
    try:
        loaded = load_users(path)
    except SpecFileError as problem:
        return [error("users-file-missing", f"users.file: {problem}", loc, hint=problem.hint)]
    view.users_read[path] = loaded
    errors = [finding for finding in loaded.findings if finding.severity is Severity.ERROR]
    if errors:
        first = errors[0]
        # By its code and line only: a message quotes the file's keys and values, and the spec may name a file
        # its author cannot read (/etc/shadow, checked through sudo). `users check` shows them for the file it is given.
        where = f" on line {first.line}" if first.line is not None else ""
        return [
            error(
                "users-file-invalid",
                f"{value} has {len(errors)} error(s); the first is {first.code}{where}",
                loc,
                hint=f"`gpuclus users check {shlex.quote(shown(path))}` lists them all with their lines",
            )
        ]
    if not view.spec.slurm.accounting:
        return [
            error(
                "users-need-accounting",
                f"{value} gives Slurm accounts and limits, which need Slurm's accounting database",
                loc,
                hint="set slurm.accounting: true (the default), or leave users.file out",
            )
        ]
    admin = view.spec.cluster.admin_user
    assert loaded.users is not None
    if any(user.name == admin for user in loaded.users.users):
        return [
            error(
                "users-admin-user",
                f"{value} lists {admin!r}, the admin user gpuclus logs in as",
                loc,
                hint="leave the admin user out of the users file: gpuclus' own access is not the users file's",
            )
        ]
    return []
