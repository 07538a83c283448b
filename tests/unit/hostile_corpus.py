"""The corpus of issue 40's hostile inputs: each one a command line, the files it needs, and what should come of it.

tests/unit/test_hostile_inputs.py runs every case in-process and sorts what came out into refused, accepted,
traceback, hang or leak. A case is one hostile value in an otherwise valid setup: a spec that is
``spec_samples.BASE`` with one field changed, a users file, a key file, a state directory with a broken run
record, an output directory with a planted link. ``{d}`` in a command line or a link target stands for the
case's own directory.

The classes are the issue's: 1 paths with '.'/'..' parts or system directories, 2 names the inventory,
Ansible or Slurm already give a meaning to, 3 Unicode look-alikes, 4 names the resolver reads as numbers,
5 dangerous combinations, 6 refusals that could print what they should not, 7 unbounded reads and deep
structures, 8 arguments read as options, 9 the rendered files and the output directory, 10 the webhook URL
as a secret.
"""

from __future__ import annotations

import base64
import copy
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from lookalikes import lookalikes
from spec_samples import BASE

# Written into every file whose content no command may print; found in any output, it is a leak.
SECRET = "hunter2-do-not-print"
# The token a chat service puts in a webhook URL's path (class 10).
TOKEN = "T0K3Nxoxb9f8e7d6c5"
HOSTILE_OPTION = "-oProxyCommand=touch /tmp/gpuclus-pwned"
DEEP = "[" * 10_000 + "]" * 10_000
HUGE_INTEGER = "9" * 5_000


@dataclass(frozen=True)
class Fifo:
    """A named pipe: a read that does not check the type waits for a writer forever."""


@dataclass(frozen=True)
class Link:
    """A symbolic link to ``target`` ({d} is the case's directory); ``other_owner``: the link is nobody's (as a
    user's link to root's file, read through sudo), which only root can make: the case is skipped otherwise."""

    target: str
    other_owner: bool = False


@dataclass(frozen=True)
class Private:
    """A file only its owner may read (0600), as a password file must be."""

    text: str


@dataclass(frozen=True)
class Directory:
    """An empty directory."""


Content = str | bytes | Fifo | Link | Private | Directory
# Given the case's directory and what the command printed, a problem with what was accepted, or None.
Check = Callable[[Path, str], str | None]


@dataclass(frozen=True)
class Case:
    name: str
    klass: int
    expect: str  # "refused" or "accepted"
    argv: tuple[str, ...] = ()
    files: Mapping[str, Content] = field(default_factory=dict)
    # The refusal must name this (a regular expression; {d} is the case's directory, escaped).
    names: str = r"cluster\.yaml:\d+:"
    # Run the command again with --json: stdout must then be one JSON object, with nothing leaked in it.
    json_twin: bool = True
    # The spec to render when the command accepted (relative to {d}); None renders nothing.
    renders: str | None = None
    # Text no rendered file may hold (the hostile value, where it must not land).
    harmful: tuple[str, ...] = ()
    # Text no output may hold, beyond SECRET.
    secrets: tuple[str, ...] = ()
    # A check of its own for what was accepted (or refused: a link's target untouched is checked either way).
    check: Check | None = None
    # Instead of a command line: a function of the case's directory; a UsageError is its refusal.
    call: Callable[[Path], Any] | None = None
    # The case's directory below the temporary one (a name with a space, for class 9).
    where: str = "lab"


# --- specs ------------------------------------------------------------------------------------------------------

DELETE = object()


def spec_with(*changes: tuple[str, Any], base: dict[str, Any] | None = None) -> str:
    """BASE (or ``base``) with each dotted path set to its value (DELETE removes it), as YAML text."""
    data = copy.deepcopy(BASE if base is None else base)
    for dotted, value in changes:
        parts: list[Any] = [int(part) if part.isdigit() else part for part in dotted.split(".")]
        holder: Any = data
        for part in parts[:-1]:
            holder = holder.setdefault(part, {}) if isinstance(holder, dict) else holder[part]
        if value is DELETE:
            del holder[parts[-1]]
        elif isinstance(holder, list) and parts[-1] == len(holder):
            holder.append(value)
        else:
            holder[parts[-1]] = value
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def spec_case(
    name: str,
    klass: int,
    expect: str,
    *changes: tuple[str, Any],
    text: str | None = None,
    files: Mapping[str, Content] | None = None,
    strict: bool = False,
    names: str = r"cluster\.yaml:\d+:",
    harmful: tuple[str, ...] | None = None,
    secrets: tuple[str, ...] = (),
    check: Check | None = None,
    base: dict[str, Any] | None = None,
) -> Case:
    """`spec check` of BASE with ``changes`` (text and --json); when accepted, `render` too, and its files checked.

    By default the hostile string values themselves are what no rendered file may hold.
    """
    if harmful is None:
        harmful = tuple(value for _path, value in changes if isinstance(value, str) and len(value) >= 3)
    return Case(
        name=name,
        klass=klass,
        expect=expect,
        argv=("spec", "check", "{d}/cluster.yaml", *(["--strict"] if strict else [])),
        files={"cluster.yaml": spec_with(*changes, base=base) if text is None else text, **(files or {})},
        names=names,
        renders="cluster.yaml",
        harmful=harmful,
        secrets=secrets,
        check=check,
    )


# Where class 1 puts its paths: one share on /shared, and every node path field inside it.
SHARED: dict[str, Any] = copy.deepcopy(BASE)
SHARED["nfs"]["exports"] = [{"path": "/srv/shared", "mount": "/shared"}]
SHARED["slurm"]["state_save_location"] = "/shared/slurm/state"
SHARED["slurm"]["health_check"] = {"disks": [{"path": "/scratch", "min_free_mb": 10}]}
SHARED["modules"] = {"lmod": True, "path": "/shared/modules"}
SHARED["pytorch"] = {"install": True, "location": "shared", "prefix": "/shared/sw", "examples_dir": "/shared/ex"}

NODE_PATH_FIELDS = [
    "nfs.exports.0.path",
    "nfs.exports.0.mount",
    "slurm.state_save_location",
    "modules.path",
    "pytorch.prefix",
    "pytorch.examples_dir",
    "slurm.health_check.disks.0.path",
]
# A path that leaves the place it names, by field (each field's own valid parent).
DOT_PATHS = {
    "nfs.exports.0.path": "/srv/shared/../../etc",
    "nfs.exports.0.mount": "/shared/../etc",
    "slurm.state_save_location": "/shared/slurm/../../etc",
    "modules.path": "/shared/./modules",
    "pytorch.prefix": "/shared/../etc",
    "pytorch.examples_dir": "/shared/ex/..",
    "slurm.health_check.disks.0.path": "/scratch/../etc",
}
# Directories gpuclus' roles chown, chmod, export or mount over: a system directory there is refused.
SYSTEM_DIRECTORY_FIELDS = ["nfs.exports.0.path", "nfs.exports.0.mount", "slurm.state_save_location"]


def class_1_paths() -> list[Case]:
    cases = [
        spec_case(f"dot-dot-in-{path}", 1, "refused", (path, value), base=SHARED) for path, value in DOT_PATHS.items()
    ]
    cases += [
        spec_case(f"{value}-in-{path}", 1, "refused", (path, value), base=SHARED, harmful=())
        for path in SYSTEM_DIRECTORY_FIELDS
        for value in ("/etc", "/usr", "/var/lib", "/")
    ]
    cases += [
        spec_case("pytorch-prefix-beside-the-share", 1, "refused", ("pytorch.prefix", "/sharedX/sw"), base=SHARED),
        spec_case(
            "export-options-mount-point-dot-dot",
            1,
            "refused",
            ("nfs.exports.0.options", "rw,mp=/shared/../etc"),
            base=SHARED,
        ),
        spec_case(
            "dots-inside-a-name-are-fine", 1, "accepted", ("pytorch.prefix", "/shared/..x"), base=SHARED, harmful=()
        ),
        spec_case(
            "hidden-directory-is-fine", 1, "accepted", ("modules.path", "/shared/.modules"), base=SHARED, harmful=()
        ),
        users_check_case("users-shell-dot-dot", 1, "refused", user_fields={"shell": "/bin/../tmp/sh"}),
    ]
    return cases


# --- class 2: reserved names ---------------------------------------------------------------------------------------

RESERVED = [
    "localhost", "Localhost", "all", "ALL", "ungrouped", "gpu", "GPU", "cluster", "login", "compute",
    "controller", "nfs_server", "monitoring", "backup_controller", "default", "DEFAULT",
]  # fmt: skip


def with_node(name: str, address: str = "10.0.0.30") -> tuple[str, Any]:
    """A third node, plain compute, sized: the change that adds it to BASE's node list."""
    return ("nodes.2", {"name": name, "address": address, "roles": ["compute"], "cpus": 8, "memory_mb": 16000})


def class_2_reserved() -> list[Case]:
    # Without the partition's node list, the third node joins the default partition too.
    unlisted = ("slurm.partitions.0.nodes", DELETE)
    cases = [spec_case(f"node-named-{name}", 2, "refused", with_node(name), unlisted, harmful=()) for name in RESERVED]
    cases += [
        spec_case(f"partition-named-{name}", 2, "refused", ("slurm.partitions.0.name", name), harmful=())
        for name in ("DEFAULT", "default", "Default")
    ]
    cases += [
        spec_case("node-named-gpu03-is-fine", 2, "accepted", with_node("gpu03"), unlisted, harmful=()),
        spec_case("partition-named-batch-is-fine", 2, "accepted", ("slurm.partitions.0.name", "batch"), harmful=()),
        init_case("init-controller-localhost", 2, "refused", "--controller", "localhost=10.0.0.10"),
        *(
            users_add_options_case(f"users-add-{user}", 2, "refused", user)
            for user in ("root", "slurm", "munge", "nobody")
        ),
        # The admin user: its account is gpuclus' own; the spec refuses the file only once it is written.
        users_add_options_case("users-add-the-admin-user", 2, "refused", "ubuntu"),
        users_add_options_case("users-add-uid-0", 2, "refused", "dave", "--uid", "0"),
        users_add_options_case("users-add-gid-0", 2, "refused", "dave", "--gid", "0"),
        users_add_options_case("users-add-uid-of-nobody", 2, "refused", "dave", "--uid", "65534"),
        users_add_options_case("users-add-group-sudo", 2, "refused", "dave", "--group", "sudo"),
        users_add_options_case("users-add-dave-is-fine", 2, "accepted", "dave"),
        init_case("init-compute-named-all", 2, "refused", "--compute", "all=10.0.0.11"),
    ]
    return cases


# --- class 3: look-alikes -------------------------------------------------------------------------------------------

# Pattern-checked fields and their valid value in BASE: each gets its first few look-alike spellings.
LOOKALIKE_FIELDS = {
    "cluster.name": "lab",
    "cluster.admin_user": "ubuntu",
    "nodes.0.name": "head",
    "nodes.0.address": "10.0.0.10",
    "slurm.version": "22.05.8",
    "slurm.partitions.0.name": "gpu",
    "slurm.partitions.0.max_time": "1-00:00:00",
    "nvidia.driver.branch": "550",
    "nvidia.cuda.version": "12.4",
    "nfs.exports.0.path": "/srv/home",
    "nfs.client_options": "rw,hard",
    "nodes.1.gpus.model": "h100",
}


def class_3_lookalikes() -> list[Case]:
    cases = []
    for path, valid in LOOKALIKE_FIELDS.items():
        for index, value in enumerate(list(lookalikes(valid))[:3]):
            cases.append(spec_case(f"lookalike-{path}-{index}", 3, "refused", (path, value)))
    cases += [
        init_case("init-name-arabic-digit", 3, "refused", "--name", "lab\u0661"),
        init_case("init-gpu-model-fullwidth", 3, "refused", "--gpu-model", "h\uff11\uff10\uff10"),
        init_case("init-controller-address-devanagari", 3, "refused", "--controller", "head=10.0.0.\u0967\u0966"),
        users_check_case("users-uid-fullwidth", 3, "refused", user_fields={"uid": "\uff12\uff10\uff10\uff11"}),
        users_check_case("users-name-cyrillic", 3, "refused", user_fields={"name": "\u0430lice"}),
    ]
    return cases


# --- class 4: numeric host names --------------------------------------------------------------------------------

NUMERIC = ["0x7f000001", "2130706433", "127.1", "0177.0.0.1", "0x7f.1", "0"]


def class_4_numeric() -> list[Case]:
    cases = [spec_case(f"node-name-{name}", 4, "refused", ("nodes.0.name", name), harmful=()) for name in NUMERIC]
    cases += [
        spec_case(f"node-address-{name}", 4, "refused", ("nodes.0.address", name), harmful=()) for name in NUMERIC[:5]
    ]
    cases += [
        spec_case(
            "webhook-host-numeric",
            4,
            "refused",
            ("monitoring", {"alertmanager": True, "alert_receiver": {"webhook_url": "http://2130706433/hook"}}),
            harmful=(),
        ),
        spec_case(
            "smarthost-numeric",
            4,
            "refused",
            (
                "monitoring",
                {
                    "alertmanager": True,
                    "alert_receiver": {
                        "email_to": "a@example.org",
                        "email_from": "b@example.org",
                        "smarthost": "0x7f000001:25",
                    },
                },
            ),
            harmful=(),
        ),
        spec_case(
            "pytorch-index-url-numeric",
            4,
            "refused",
            ("pytorch", {"install": True, "index_url": "http://2130706433/simple"}),
            harmful=(),
        ),
        spec_case("node-name-x7f000001-is-a-name", 4, "accepted", ("nodes.0.name", "x7f000001"), harmful=()),
        spec_case("node-name-0b101-is-a-name", 4, "accepted", ("nodes.0.name", "0b101"), harmful=()),
        init_case("init-controller-numeric-name", 4, "refused", "--controller", "0x7f000001=10.0.0.10"),
        init_case("init-controller-numeric-address", 4, "refused", "--controller", "head=2130706433"),
        init_case(
            "init-hosts-file-numeric",
            4,
            "refused",
            "--from-hosts",
            "{d}/hosts",
            files={"hosts": "10.0.0.10 head\n2130706433 gpu01\n"},
            flags=HOSTS_FLAGS,
            names=r"hosts:2:",
        ),
    ]
    return cases


# --- class 5: combinations --------------------------------------------------------------------------------------

GENERATED_SECRET = ".gpuclus/secrets/slurmdbd_db_password"
SECRETS = {GENERATED_SECRET: Private(f"{SECRET}\n"), ".gpuclus/secrets/grafana.deb": Private(SECRET)}
DIRECTORY = {
    "uri": ["ldaps://ldap.example.org"],
    "base_dn": "dc=example,dc=org",
    "bind_dn": "cn=reader,dc=example,dc=org",
    "bind_password_file": "reader.password",
}
USERS_FILE = """\
apiVersion: gpuclus/v1
kind: Users
accounts: [{name: nlp}]
users:
  - {name: alice, uid: 2001, account: nlp}
"""
# Every control file field a spec may point at one of gpuclus' own secrets, with the rest of what it needs.
CONTROL_FILE_CHANGES: dict[str, list[tuple[str, Any]]] = {
    "users.file": [("users", {"file": GENERATED_SECRET})],
    "users.directory.bind_password_file": [
        ("users", {"file": "users.yaml", "directory": {**DIRECTORY, "bind_password_file": GENERATED_SECRET}})
    ],
    "users.directory.ca_cert_file": [
        ("users", {"file": "users.yaml", "directory": {**DIRECTORY, "ca_cert_file": GENERATED_SECRET}})
    ],
    "monitoring.grafana_package": [("monitoring.grafana_package", ".gpuclus/secrets/grafana.deb")],
    "monitoring.alert_receiver.webhook_url_file": [
        ("monitoring", {"alertmanager": True, "alert_receiver": {"webhook_url_file": GENERATED_SECRET}})
    ],
    "containers.credentials_file": [("containers", {"credentials_file": GENERATED_SECRET})],
}
CONTROL_FILES = {"users.yaml": USERS_FILE, "reader.password": Private("s3cret\n"), **SECRETS}


def class_5_combinations() -> list[Case]:
    cases = [
        spec_case(f"squash-{options}", 5, "refused", ("nfs.exports.0.options", options), strict=True, harmful=())
        for options in (
            "rw,sync,all_squash,anonuid=0",
            "rw,all_squash,anongid=0",
            "rw,sync,anonuid=0",
            "rw,all_squash,no_all_squash,anonuid=0",
        )
    ]
    cases += [
        spec_case(
            "squash-to-root-warns-without-strict",
            5,
            "accepted",
            ("nfs.exports.0.options", "rw,sync,all_squash,anonuid=0"),
            harmful=(),
            check=lambda d, out: None if "export-squash-to-root" in out else "no export-squash-to-root warning",
        ),
        spec_case(
            "squash-to-nobody-is-fine",
            5,
            "accepted",
            ("nfs.exports.0.options", "rw,all_squash,anonuid=65534,anongid=65534"),
            harmful=(),
        ),
    ]
    cases += [
        spec_case(f"secret-as-{field_name}", 5, "refused", *changes, files=CONTROL_FILES, harmful=())
        for field_name, changes in CONTROL_FILE_CHANGES.items()
    ]
    bind = lambda value: ("users", {"file": "users.yaml", "directory": {**DIRECTORY, "bind_password_file": value}})  # noqa: E731
    cases += [
        spec_case(
            "secret-by-dot-dot",
            5,
            "refused",
            bind("site/../" + GENERATED_SECRET),
            files={**CONTROL_FILES, "site": Directory()},
            harmful=(),
        ),
        spec_case("secret-by-dot-slash", 5, "refused", bind("./" + GENERATED_SECRET), files=CONTROL_FILES, harmful=()),
        spec_case(
            "secret-by-absolute-path", 5, "refused", bind("{d}/" + GENERATED_SECRET), files=CONTROL_FILES, harmful=()
        ),
        spec_case(
            "secret-by-link",
            5,
            "refused",
            bind("innocent.password"),
            files={**CONTROL_FILES, "innocent.password": Link("{d}/" + GENERATED_SECRET)},
            harmful=(),
        ),
        spec_case("own-bind-password-is-fine", 5, "accepted", bind("reader.password"), files=CONTROL_FILES, harmful=()),
    ]
    return cases


# --- class 6: what refusals print ----------------------------------------------------------------------------------

ANOTHER_OWNER = r"cluster\.yaml: a symlink \(owner uid \d+\) to a file of another owner"
SPEC_HEAD = "apiVersion: gpuclus/v1\ncluster: {name: lab, admin_user: ubuntu}\n"
NODES = "nodes:\n  - {name: head, address: 10.0.0.10, roles: [controller, login]}\n"


def class_6_printing() -> list[Case]:
    secret_spec = SPEC_HEAD + f"password: {SECRET}\n" + NODES + f"slurm: {{port: {SECRET}}}\n"
    # A spec that is a link (of another owner) to a secret, or to any other file.
    cases = [
        spec_case(
            f"spec-is-a-link-to-{kind}",
            6,
            "refused",
            text="",
            files={"cluster.yaml": Link(f"{{d}}/{target}", other_owner=True), target: secret_spec},
            names=ANOTHER_OWNER,
        )
        for kind, target in (("a-secret", ".gpuclus/secrets/notes.yaml"), ("another-file", "elsewhere/notes.yaml"))
    ]
    cases += [
        spec_case("esc-in-a-comment", 6, "refused", text=SPEC_HEAD + "# \x1b]0;owned\x07\x1b[2J\n" + NODES),
        spec_case("esc-in-a-value", 6, "refused", text=SPEC_HEAD + NODES + 'slurm: {cluster_name: "a\x1b[2Jb"}\n'),
        spec_case("c1-csi-in-a-value", 6, "refused", text=SPEC_HEAD + NODES + 'slurm: {cluster_name: "a\u009b2Jb"}\n'),
        spec_case(
            "bidi-override-in-a-name", 6, "refused", text=SPEC_HEAD.replace("name: lab", 'name: "lab\u202egpu"') + NODES
        ),
        spec_case(
            "bell-and-nul",
            6,
            "refused",
            text=SPEC_HEAD + NODES + 'slurm: {cluster_name: "a\x07\x00b"}\n',
            names=r"cluster\.yaml: binary data",
        ),
        spec_case(
            "escaped-esc-in-a-string", 6, "refused", text=SPEC_HEAD + NODES + 'slurm: {cluster_name: "a\\e[2Jb"}\n'
        ),
        # The 1.9 MB line, in text only: YAML takes seconds to read it, and --json runs the same reading.
        replace(
            spec_case(
                "long-line-with-an-error",
                6,
                "refused",
                text=SPEC_HEAD + NODES + "slurm: {cluster_name: " + "a" * 1_900_000 + ", bogus: 1}\n",
            ),
            json_twin=False,
        ),
        spec_case("long-comment-is-fine", 6, "accepted", text=spec_with() + "# " + "a" * 200_000 + "\n", harmful=()),
        Case(
            "missing-spec-with-esc-in-its-name",
            6,
            "refused",
            ("spec", "check", "{d}/no\x1b]0;owned\x07such.yaml"),
            names=r"no\\x1b\]0;owned\\x07such\.yaml",
        ),
        users_check_case("users-file-is-a-link-to-a-secret", 6, "refused", link=".gpuclus/secrets/env"),
        users_check_case("users-file-with-esc", 6, "refused", user_fields={"shell": "/bin/sh\x1b[2J"}),
        init_case("init-name-with-esc", 6, "refused", "--name", "lab\x1b[2J"),
        init_case(
            "init-hosts-file-is-a-secret",
            6,
            "refused",
            "--from-hosts",
            "{d}/" + GENERATED_SECRET,
            files=SECRETS,
            flags=HOSTS_FLAGS,
            names=r"slurmdbd_db_password: inside gpuclus' own state directory",
        ),
        init_case(
            "init-hosts-file-links-to-a-secret",
            6,
            "refused",
            "--from-hosts",
            "{d}/hosts",
            files={**SECRETS, "hosts": Link("{d}/" + GENERATED_SECRET)},
            flags=HOSTS_FLAGS,
            names=r"hosts: inside gpuclus' own state directory",
        ),
        init_case(
            "init-hosts-file-with-esc",
            6,
            "refused",
            "--from-hosts",
            "{d}/hosts",
            files={"hosts": "10.0.0.10 head\x1b[2J\n"},
            flags=HOSTS_FLAGS,
            names=r"hosts",
        ),
    ]
    key_files = {
        "password": f"{SECRET}\n",
        "env-file": f"# comment\nDB_PASSWORD={SECRET}\n",
        "second-line": f"{DAVE_KEY}\nssh-ed25519 {SECRET}\n",
        "options": f'command="{SECRET}" {DAVE_KEY}\n',
        "comment-braces": f"{DAVE_KEY} {{{{{SECRET}}}}}\n",
        "private-key": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SECRET}\n-----END OPENSSH PRIVATE KEY-----\n",
        "esc": f"{DAVE_KEY} \x1b[2J{SECRET}\n",
    }
    cases += [
        users_add_case(
            f"key-file-{kind}-in-secrets", 6, "refused", {f".gpuclus/secrets/{kind}": text}, f".gpuclus/secrets/{kind}"
        )
        for kind, text in key_files.items()
    ]
    cases.append(users_add_case("key-file-is-fine", 6, "accepted", {"dave.pub": f"# laptop\n{DAVE_KEY}\n"}, "dave.pub"))
    # A users file the spec names, which its author may not be able to read (/etc/shadow, checked through
    # sudo): the spec's finding gives its first error by code and line, quoting none of its keys or values.
    for kind, text in {
        "value": f"apiVersion: gpuclus/v1\nkind: Users\naccounts: {SECRET}\n",
        "key": f"apiVersion: gpuclus/v1\nkind: Users\naccounts: []\n{SECRET}: 1\n",
        "name": USERS_FILE.replace("alice", SECRET + "!"),
        "plain-text": f"root:{SECRET}:20228:0:99999:7:::\n",
    }.items():
        cases.append(
            spec_case(
                f"users-file-quotes-no-{kind}",
                6,
                "refused",
                ("users", {"file": "/{d}/root-only/users.yaml"}),
                files={"root-only/users.yaml": Private(text)},
            )
        )
    return cases


# --- class 7: unbounded reads -------------------------------------------------------------------------------------

# A refusal of the whole file, before any line of it is read.
FILE_LEVEL = r"cluster\.yaml: "
DEEP_MAPPING = "slurm: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n"
# Nine levels of ten aliases each: a billion strings once expanded, a few hundred bytes of YAML.
ALIAS_BOMB = "".join(
    f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]\n" if level else 'l0: &l0 "lol"\n'
    for level in range(9)
)


def class_7_unbounded() -> list[Case]:
    cases = [
        spec_case("spec-is-a-fifo", 7, "refused", text="", files={"cluster.yaml": Fifo()}, names=FILE_LEVEL),
        spec_case(
            "spec-is-dev-zero", 7, "refused", text="", files={"cluster.yaml": Link("/dev/zero")}, names=FILE_LEVEL
        ),
        spec_case("spec-is-a-directory", 7, "refused", text="", files={"cluster.yaml": Directory()}, names=FILE_LEVEL),
        spec_case(
            "spec-is-binary",
            7,
            "refused",
            text="",
            files={"cluster.yaml": b"\xff\xfe" + SECRET.encode()},
            names=FILE_LEVEL,
        ),
        spec_case(
            "spec-over-the-size-bound",
            7,
            "refused",
            text=spec_with() + ("#" + "a" * 1023 + "\n") * 2100,
            names=FILE_LEVEL,
        ),
        spec_case("deep-sequence", 7, "refused", text=SPEC_HEAD + NODES + "slurm: " + DEEP + "\n"),
        spec_case("deep-mapping", 7, "refused", text=SPEC_HEAD + NODES + DEEP_MAPPING),
        spec_case("huge-integer-port", 7, "refused", text=SPEC_HEAD + NODES + f"slurm: {{port: {HUGE_INTEGER}}}\n"),
        spec_case(
            "huge-integer-cpus", 7, "refused", text=spec_with(("nodes.0.cpus", 424242)).replace("424242", HUGE_INTEGER)
        ),
        spec_case("huge-float", 7, "refused", text=SPEC_HEAD + NODES + "network: {link_gbps: 1e99999}\n"),
        spec_case("alias-bomb", 7, "refused", text=SPEC_HEAD + NODES + ALIAS_BOMB),
        spec_case("hostlist-of-a-hundred-million", 7, "refused", ("nodes.1.name", "gpu[00000001-99999999]")),
        spec_case("hostlist-of-many-ranges", 7, "refused", ("nodes.1.name", "gpu[1-9]" + "[0-9]" * 6)),
        spec_case(
            "users-file-is-a-fifo", 7, "refused", ("users", {"file": "users.yaml"}), files={"users.yaml": Fifo()}
        ),
        spec_case(
            "users-file-is-dev-zero",
            7,
            "refused",
            ("users", {"file": "zero.yaml"}),
            files={"zero.yaml": Link("/dev/zero")},
        ),
        spec_case(
            "bind-password-is-a-fifo",
            7,
            "refused",
            ("users", {"file": "users.yaml", "directory": DIRECTORY}),
            files={"users.yaml": USERS_FILE, "reader.password": Fifo()},
        ),
        spec_case(
            "webhook-url-file-is-a-fifo",
            7,
            "refused",
            ("monitoring", {"alertmanager": True, "alert_receiver": {"webhook_url_file": "hook.url"}}),
            files={"hook.url": Fifo()},
        ),
        Case(
            "users-check-fifo",
            7,
            "refused",
            ("users", "check", "{d}/users.yaml"),
            files={"users.yaml": Fifo()},
            names=r"users\.yaml",
        ),
        Case(
            "users-check-deep",
            7,
            "refused",
            ("users", "check", "{d}/users.yaml"),
            files={"users.yaml": "apiVersion: gpuclus/v1\nkind: Users\naccounts: " + DEEP + "\n"},
            names=r"users\.yaml:\d+:",
        ),
        users_check_case("users-check-huge-uid", 7, "refused", user_fields={"uid": 424242}, huge=True),
        init_case(
            "init-hosts-fifo",
            7,
            "refused",
            "--from-hosts",
            "{d}/hosts",
            files={"hosts": Fifo()},
            flags=HOSTS_FLAGS,
            names=r"hosts",
        ),
        init_case(
            "init-hosts-dev-zero", 7, "refused", "--from-hosts", "/dev/zero", flags=HOSTS_FLAGS, names=r"/dev/zero"
        ),
        init_case(
            "init-hosts-huge",
            7,
            "refused",
            "--from-hosts",
            "{d}/hosts",
            files={"hosts": "10.0.0.10 head\n" * 200_000},
            flags=HOSTS_FLAGS,
            names=r"hosts",
        ),
        init_case(
            "init-output-is-a-fifo",
            7,
            "refused",
            "-o",
            "{d}/new.yaml",
            files={"new.yaml": Fifo()},
            output=False,
            names=r"new\.yaml",
        ),
        render_case("render-output-file-is-a-fifo", 7, "refused", {"out/ansible.cfg": Fifo()}, names=r"ansible\.cfg"),
        render_case(
            "render-manifest-is-deep",
            7,
            "refused",
            {"out/.gpuclus-render.json": '{"format": 1, "files": ' + DEEP + "}"},
            names=r"gpuclus-render\.json",
        ),
        render_case(
            "render-manifest-is-a-fifo",
            7,
            "refused",
            {"out/.gpuclus-render.json": Fifo()},
            names=r"gpuclus-render\.json",
        ),
    ]
    for kind, content in {
        "fifo": Fifo(),
        "dev-zero": Link("/dev/zero"),
        "huge": (DAVE_KEY + "\n") * 10_000,
        "binary": b"\xff\xfe" + SECRET.encode(),
        "directory": Directory(),
        "empty": "",
    }.items():
        cases.append(users_add_case(f"key-file-{kind}", 7, "refused", {"key.pub": content}, "key.pub"))
    for kind, content in {
        "fifo": Fifo(),
        "dev-zero": Link("/dev/zero"),
        "huge": " " * (17 * 1024 * 1024) + "{}",
        "deep": DEEP,
        "huge-integer": '{"n": ' + HUGE_INTEGER + "}",
        "not-an-object": "[1, 2]",
        "missing-fields": '{"id": "20260302T000000Z-bad"}',
        "directory": Directory(),
    }.items():
        cases.append(runs_list_case(f"run-record-{kind}", content))
    for kind, content in {"fifo": Fifo(), "deep": DEEP, "dev-zero": Link("/dev/zero")}.items():
        listed = runs_list_case(f"runs-show-{kind}", content)
        shown = ("runs", "show", "20260302T000000Z", "--spec", "{d}/cluster.yaml")
        cases.append(replace(listed, expect="refused", argv=shown, names="no single run matches", check=None))
    cases.append(Case("users-check-dev-stdin", 7, "refused", ("users", "check", "/dev/stdin"), names="/dev/stdin"))
    return cases


# --- class 8: arguments read as options ---------------------------------------------------------------------------


def login(tmp: Path, *, user: str = "gpuclus", address: str = "10.0.0.1", command: tuple[str, ...] = ()) -> list[str]:
    from gpuclus.ssh.openssh import login_argv

    return login_argv("ssh", key_file=tmp / "id", known_hosts=tmp / "kh", user=user, address=address, command=command)


def options_before_the_end(argv: list[str]) -> list[str]:
    return argv[: argv.index("--")] if "--" in argv else argv


def class_8_options() -> list[Case]:
    no_hostile_option = lambda d, out: (  # noqa: E731
        "a hostile word before '--'"
        if any(HOSTILE_OPTION in word for word in options_before_the_end(json.loads(out)))
        else None
    )
    return [
        Case(
            "ssh-user-is-an-option",
            8,
            "refused",
            call=lambda d: login(d, user=HOSTILE_OPTION),
            names="not a destination",
        ),
        Case(
            "ssh-address-is-an-option",
            8,
            "refused",
            call=lambda d: login(d, address=HOSTILE_OPTION),
            names="not a destination",
        ),
        Case("ssh-address-dash-l", 8, "refused", call=lambda d: login(d, address="-lroot"), names="not a destination"),
        Case(
            "ssh-command-word-is-an-option",
            8,
            "accepted",
            call=lambda d: login(d, command=(HOSTILE_OPTION, "-t")),
            check=no_hostile_option,
        ),
        Case(
            "image-source-is-an-option",
            8,
            "refused",
            ("image", "build", "-o", "{d}/img.sqsh", "--", HOSTILE_OPTION),
            names="starts with '-'",
        ),
        Case(
            "image-source-privileged",
            8,
            "refused",
            ("image", "build", "-o", "{d}/img.sqsh", "--", "--privileged"),
            names="starts with '-'",
        ),
        Case(
            "image-source-volume",
            8,
            "refused",
            ("image", "build", "-o", "{d}/img.sqsh", "--", "-v/:/host"),
            names="starts with '-'",
        ),
        Case(
            "image-engine-is-an-option",
            8,
            "refused",
            ("image", "build", "{d}/root", "-o", "{d}/img.sqsh", "--engine", "-v /:/host"),
            files={"root": Directory()},
            names="--engine",
        ),
        Case(
            "image-source-missing-dir",
            8,
            "refused",
            ("image", "build", "../no-such-root", "-o", "{d}/img.sqsh"),
            names="no-such-root",
        ),
        Case(
            "image-source-is-a-fifo",
            8,
            "refused",
            ("image", "build", "{d}/root", "-o", "{d}/img.sqsh"),
            files={"root": Fifo()},
            names="root",
        ),
        spec_case("admin-user-is-an-option", 8, "refused", ("cluster.admin_user", "-oProxyCommand=x")),
        spec_case("node-name-is-an-option", 8, "refused", ("nodes.0.name", "-oProxyCommand=x")),
        spec_case("node-address-is-an-option", 8, "refused", ("nodes.0.address", "-oProxyCommand=x")),
        # Harmless: gpuclus passes a partition as --partition=NAME, never as a word of its own.
        spec_case("partition-name-with-a-dash-is-fine", 8, "accepted", ("slurm.partitions.0.name", "-p"), harmful=()),
        spec_case("gpu-model-is-an-option", 8, "refused", ("nodes.1.gpus.model", "--gres")),
        init_case("init-admin-user-is-an-option", 8, "refused", "--admin-user", "-oProxyCommand=x"),
        init_case("init-controller-is-an-option", 8, "refused", "--controller", "-oProxyCommand=x"),
        Case(
            "users-add-name-is-an-option",
            8,
            "refused",
            ("users", "add", "--account", "nlp", "--spec", "{d}/cluster.yaml", "--dry-run", "--", HOSTILE_OPTION),
            files=USERS_SETUP,
            names=r"users\.yaml|" + "-oProxyCommand",
        ),
        Case(
            "users-add-shell-is-an-option",
            8,
            "refused",
            ("users", "add", "dave", "--account", "nlp", "--shell", "-c", "--spec", "{d}/cluster.yaml", "--dry-run"),
            files=USERS_SETUP,
            names=r"users\.yaml",
        ),
    ]


# --- class 9: the rendered files and where they go ---------------------------------------------------------------

THEIRS = "someone else's file\n"
VICTIM = {"elsewhere/victim.txt": THEIRS, "elsewhere-dir": Directory()}


def known_hosts_read_back_whole(directory: Path, output: str) -> str | None:
    """ansible.cfg's ssh_args, split as Ansible splits them, name the known_hosts file by its whole path."""
    import shlex

    config = (directory / "out" / "ansible.cfg").read_text()
    line = next(line for line in config.splitlines() if line.startswith("ssh_args = "))
    words = shlex.split(line.removeprefix("ssh_args = "))
    values = [word.split("=", 1)[1] for word in words if word.startswith("UserKnownHostsFile=")]
    if len(values) != 1:
        return f"UserKnownHostsFile given {len(values)} times: {words}"
    # What ssh_config reads from the value: one quoted path, \\ and \" escaped, %% a '%'.
    quoted = values[0]
    if not (quoted.startswith('"') and quoted.endswith('"')):
        return f"UserKnownHostsFile not quoted: {quoted!r}"
    path = quoted[1:-1].replace('\\"', '"').replace("\\\\", "\\").replace("%%", "%")
    expected = str(directory / ".gpuclus" / "ssh" / "known_hosts")
    return None if path == expected else f"UserKnownHostsFile reads as {path!r}, not {expected!r}"


def class_9_output() -> list[Case]:
    # Spec directories with awkward names: ansible.cfg holds these, read back whole (no refusal: None); those
    # it cannot hold in any quoting are refused by render, naming why.
    cases = [
        Case(
            f"spec-dir-with-{kind}",
            9,
            "accepted" if refusal is None else "refused",
            ("render", "{d}/cluster.yaml", "-o", "{d}/out"),
            files={"cluster.yaml": spec_with()},
            where=where,
            names=refusal or Case.names,
            check=known_hosts_read_back_whole if refusal is None else None,
        )
        for kind, where, refusal in (
            ("space", "my lab", None),
            ("tilde", "my lab ~", None),
            ("spaces-and-tab-free-words", "a  b c", None),
            ("quotes", 'it\'s "100%" a\\b', "cannot hold"),
            ("percent", "lab%d", "cannot hold"),
            ("dollar-brace", "lab${HOME}", r"\$\{"),
            ("newline", "lab\nx", "control character"),
        )
    ]
    for name, link, target in (
        ("hosts-file", "out/inventory/hosts.yml", "{d}/elsewhere/victim.txt"),
        ("ansible-cfg", "out/ansible.cfg", "{d}/elsewhere/victim.txt"),
        ("manifest", "out/.gpuclus-render.json", "{d}/elsewhere/victim.txt"),
        ("group-vars-file", "out/inventory/group_vars/all/slurm.yml", "{d}/elsewhere/victim.txt"),
        ("output-dir", "out", "{d}/elsewhere-dir"),
        ("inventory-dir", "out/inventory", "{d}/elsewhere-dir"),
        ("group-vars-dir", "out/inventory/group_vars", "{d}/elsewhere-dir"),
        ("dangling", "out/ansible.cfg", "{d}/elsewhere/not-yet"),
    ):
        for force in (False, True):
            label = f"render-link-as-{name}" + ("-force" if force else "")
            cases.append(
                render_case(label, 9, "refused", {link: Link(target)}, names="is a symbolic link", force=force)
            )
    cases += [
        init_case(
            "init-output-is-a-link",
            9,
            "refused",
            "-o",
            "{d}/new.yaml",
            files={"new.yaml": Link("{d}/elsewhere/victim.txt")},
            output=False,
            force=True,
            names="symbolic link",
        ),
        Case(
            "schema-output-is-a-link",
            9,
            "refused",
            ("spec", "schema", "-o", "{d}/schema.json"),
            files={**VICTIM, "schema.json": Link("{d}/elsewhere/victim.txt")},
            names="symbolic link",
        ),
    ]
    return cases


# --- class 10: the webhook URL -------------------------------------------------------------------------------------

URL = f"https://hooks.chat.example.org/services/{TOKEN}?channel=gpu"


def class_10_webhook() -> list[Case]:
    receiver = lambda **fields: ("monitoring", {"alertmanager": True, "alert_receiver": fields})  # noqa: E731
    return [
        spec_case(
            "webhook-url-is-rendered-as-a-path",
            10,
            "accepted",
            receiver(webhook_url=URL),
            harmful=(TOKEN,),
            secrets=(TOKEN,),
        ),
        spec_case(
            "webhook-url-invalid-is-masked",
            10,
            "refused",
            receiver(webhook_url=f"ftp://hooks.example.org/{TOKEN}"),
            harmful=(TOKEN,),
        ),
        spec_case(
            "webhook-url-with-a-space-is-masked",
            10,
            "refused",
            receiver(webhook_url=f"https://hooks.example.org/{TOKEN} x"),
            harmful=(TOKEN,),
        ),
        spec_case(
            "webhook-url-and-file",
            10,
            "refused",
            receiver(webhook_url=URL, webhook_url_file="hook.url"),
            files={"hook.url": Private(URL)},
            harmful=(TOKEN,),
        ),
        spec_case(
            "webhook-url-file-readable-by-all",
            10,
            "refused",
            receiver(webhook_url_file="hook.url"),
            files={"hook.url": URL + "\n"},
            harmful=(TOKEN,),
            secrets=(TOKEN,),
        ),
        spec_case(
            "webhook-url-file-is-fine",
            10,
            "accepted",
            receiver(webhook_url_file="hook.url"),
            files={"hook.url": Private(URL + "\n")},
            harmful=(TOKEN,),
            secrets=(TOKEN,),
        ),
        spec_case(
            "webhook-url-file-dot-dot-to-a-secret",
            10,
            "refused",
            receiver(webhook_url_file="x/../" + GENERATED_SECRET),
            files={**SECRETS, "x": Directory()},
            harmful=(TOKEN,),
        ),
    ]


# --- the commands other than `spec check` ------------------------------------------------------------------------


def public_key(body: bytes) -> str:
    kind = "ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind.encode() + struct.pack(">I", len(body)) + body
    return f"{kind} {base64.b64encode(blob).decode()}"


DAVE_KEY = public_key(b"\x04" * 32) + " dave@laptop"
USERS_SPEC = spec_with(("users", {"file": "users.yaml"}))
USERS_SETUP: dict[str, Content] = {"cluster.yaml": USERS_SPEC, "users.yaml": USERS_FILE}


def users_add_case(name: str, klass: int, expect: str, files: Mapping[str, Content], key: str) -> Case:
    return Case(
        name,
        klass,
        expect,
        ("users", "add", "dave", "--account", "nlp", "--key", "{d}/" + key, "--spec", "{d}/cluster.yaml", "--dry-run"),
        files={**USERS_SETUP, **files},
        names="--key {d}/" + key.replace(".", r"\."),
    )


def users_add_options_case(name: str, klass: int, expect: str, *args: str) -> Case:
    """`users add` (dry run) with the options ``args``: the user's name first."""
    return Case(
        name,
        klass,
        expect,
        ("users", "add", *args, "--account", "nlp", "--spec", "{d}/cluster.yaml", "--dry-run"),
        files=USERS_SETUP,
        names=r"users\.yaml",
    )


def users_check_case(
    name: str,
    klass: int,
    expect: str,
    *,
    user_fields: Mapping[str, Any] | None = None,
    link: str | None = None,
    huge: bool = False,
) -> Case:
    """`users check` of USERS_FILE with alice's fields changed, or of a link to a secret there; ``huge``
    writes 424242 as an integer of 5,000 digits (which yaml cannot dump)."""
    if link is not None:
        files: dict[str, Content] = {
            "users.yaml": Link("{d}/" + link, other_owner=True),
            link: f"# env\nDB_PASSWORD={SECRET}\n",
        }
        names = r"users\.yaml: a symlink \(owner uid \d+\) to a file of another owner"
    else:
        data = yaml.safe_load(USERS_FILE)
        data["users"][0].update(user_fields or {})
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        files = {"users.yaml": text.replace("424242", HUGE_INTEGER) if huge else text}
        names = r"users\.yaml:\d+:"
    return Case(name, klass, expect, ("users", "check", "{d}/users.yaml"), files=files, names=names)


INIT_FLAGS = ("--name", "lab", "--admin-user", "ubuntu", "--gpus-per-node", "1", "--no-wizard")
CONTROLLER = ("--controller", "head=10.0.0.10")
HOSTS_FLAGS = ("--name", "lab", "--admin-user", "ubuntu", "--gpus-per-node", "1", "--no-wizard")


def init_case(
    name: str,
    klass: int,
    expect: str,
    *args: str,
    files: Mapping[str, Content] | None = None,
    flags: tuple[str, ...] | None = None,
    output: bool = True,
    force: bool = False,
    names: str = r"new\.yaml|--",
) -> Case:
    """`gpuclus init` with the valid flags, ``args`` overriding (a later --name wins); the spec it writes is
    rendered and checked when it accepts."""
    if flags is None:
        flags = INIT_FLAGS + (CONTROLLER if "--controller" not in args else ())
    argv = ("init", *flags, *args, *(("-o", "{d}/new.yaml") if output else ()), *(("--force",) if force else ()))
    return Case(
        name,
        klass,
        expect,
        argv,
        files={**VICTIM, **(files or {})},
        names=names,
        renders="new.yaml",
        harmful=tuple(arg for arg in args if len(arg) >= 3 and not arg.startswith(("-", "{d}"))),
    )


def render_case(
    name: str, klass: int, expect: str, files: Mapping[str, Content], *, names: str, force: bool = False
) -> Case:
    """`render` of BASE into {d}/out, where ``files`` were put first."""
    return Case(
        name,
        klass,
        expect,
        ("render", "{d}/cluster.yaml", "-o", "{d}/out", *(("--force",) if force else ())),
        files={"cluster.yaml": spec_with(), **VICTIM, **files},
        names=names,
    )


def runs_list_case(name: str, content: Content) -> Case:
    """`runs list` over one good run record and one broken one: the broken one is skipped, never read whole."""
    return Case(
        name,
        7,
        "accepted",
        ("runs", "list", "--spec", "{d}/cluster.yaml"),
        files={
            "cluster.yaml": spec_with(),
            ".gpuclus/runs/20260301T120000Z-good/record.json": GOOD_RECORD,
            ".gpuclus/runs/20260302T000000Z-bad/record.json": content,
        },
        check=lambda d, out: None if "20260302T000000Z" not in out else "the broken record was listed",
    )


GOOD_RECORD = ""  # filled in below, from the record class itself


def _good_record() -> str:
    from gpuclus.deploy.records import RunRecord

    record = RunRecord(
        "20260301T120000Z-good", "/lab/cluster.yaml", "5" * 64, ["base"], None, False, 1e9, "0.1.0", status="successful"
    )
    return json.dumps(record.as_dict())


GOOD_RECORD = _good_record()


def all_cases() -> list[Case]:
    cases = [
        *class_1_paths(),
        *class_2_reserved(),
        *class_3_lookalikes(),
        *class_4_numeric(),
        *class_5_combinations(),
        *class_6_printing(),
        *class_7_unbounded(),
        *class_8_options(),
        *class_9_output(),
        *class_10_webhook(),
    ]
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, duplicates
    return cases
