"""What a value must look like to be safe in every file it lands in.

A spec value reaches several files on the nodes with different grammars:
a node name lands in slurm.conf, /etc/hosts and Prometheus' config; an
address in slurm.conf, /etc/hosts, /etc/exports, ganesha.conf, chrony.conf and
fstab; an export path in /etc/exports, ganesha.conf, fstab and systemd mount
unit names. The rules here are the intersection: a value that passes them
cannot add a line, a key or a client to any of those files.

Every pattern check goes through ``full_match``: ``re.match`` with a ``$``
accepts a trailing newline ("gpu01\\n"), which is exactly the character that
adds a line to a config file.
"""

from __future__ import annotations

import ipaddress
import re

# A DNS label (RFC 1123): letters, digits and '-', not at either end, at most 63.
_DNS_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DNS_NAME_MAX = 253
# The characters and length of every address address_problem accepts (an IPv4 address, a DNS name, with
# or without the root's trailing '.'): what the roles' preflight can check without the rules above. Written
# once here; render hands it to the roles as gpuclus_patterns.address (patterns.ROLE_PATTERNS).
ADDRESS_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9.])?$"
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")

# The characters an export path or mount point may use: those that need no
# quoting in /etc/exports, fstab, ganesha.conf or a systemd unit name, and
# that no shell or config grammar gives a meaning ('#', ';', '"', '{', ',', ...).
PATH_COMPONENT = r"[A-Za-z0-9_.+@-]+"
EXPORT_PATH_MAX = 1024

# exports(5) options gpuclus passes on: flags, and options with a value and
# the value's grammar. Anything else is refused rather than guessed at, since
# the same options are mapped onto ganesha.conf keys.
EXPORT_FLAGS = frozenset(
    {
        "rw", "ro", "sync", "async", "secure", "insecure", "wdelay", "no_wdelay", "hide", "nohide",
        "crossmnt", "subtree_check", "no_subtree_check", "secure_locks", "insecure_locks", "auth_nlm",
        "no_auth_nlm", "root_squash", "no_root_squash", "all_squash", "no_all_squash", "acl", "no_acl",
        "pnfs", "no_pnfs", "security_label", "nordirplus", "mp",
    }
)  # fmt: skip
EXPORT_VALUED = {
    "anonuid": r"\d{1,10}",
    "anongid": r"\d{1,10}",
    "fsid": r"(root|\d{1,10}|[0-9a-fA-F-]{32,36})",
    "sec": r"(sys|krb5|krb5i|krb5p)(:(sys|krb5|krb5i|krb5p))*",
    "mp": r"(/[A-Za-z0-9_.+@-]+)+",
    "mountpoint": r"(/[A-Za-z0-9_.+@-]+)+",
}


def full_match(pattern: str, text: str) -> bool:
    """True when ``pattern`` matches all of ``text`` (a trailing newline included)."""
    return re.fullmatch(pattern, text) is not None


def address_problem(address: str) -> str | None:
    """Why ``address`` is neither an IPv4 host address nor a DNS name, or None if fine.

    IPv6 is refused for now: the roles do not yet bracket addresses where a
    port or a path follows (Prometheus targets, the NFS fstab source, validate's
    URLs), nor set slurm.conf's EnableIPv6. A DNS name that resolves to an IPv6
    address is the admin's own choice and is left alone.
    """
    if ":" in address or "%" in address:
        try:
            ipaddress.IPv6Address(address.split("%", 1)[0])
        except ValueError:
            return "is not a valid address (an IPv4 address or a DNS name)"
        return "is an IPv6 address, which gpuclus does not support yet; use an IPv4 address or a DNS name"
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.is_unspecified or ip.is_multicast or ip == _BROADCAST:
            return "is not the address of one host (unspecified, multicast or broadcast)"
        return None
    if full_match(r"[0-9.]+", address):
        return "looks like an IPv4 address but is not a valid one"
    if len(address) > DNS_NAME_MAX:
        return f"is longer than a DNS name may be ({DNS_NAME_MAX})"
    labels = address[:-1].split(".") if address.endswith(".") else address.split(".")
    for label in labels:
        if not full_match(_DNS_LABEL, label):
            return f"has an invalid DNS label {label!r}"
    return None


def export_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be an export path or mount point, or None if fine."""
    if len(path) > EXPORT_PATH_MAX:
        return f"is longer than {EXPORT_PATH_MAX} characters"
    if path == "/":
        return "is the root directory, which must never be exported or mounted over"
    if not full_match(f"(/{PATH_COMPONENT})+", path):
        return (
            "must be an absolute path of letters, digits and '_', '.', '+', '@', '-' "
            "(no spaces, quotes, ',', ';', '#', braces or a trailing '/')"
        )
    if any(part in {".", ".."} for part in path.split("/")):
        return "must not contain '.' or '..' components"
    return None


def export_options_problem(options: str) -> str | None:
    """Why ``options`` are not exports(5) options gpuclus can pass on, or None if fine."""
    for option in options.split(","):
        name, equals, value = option.partition("=")
        if not equals:
            if name not in EXPORT_FLAGS:
                return f"has an unknown export option {option!r}"
            continue
        grammar = EXPORT_VALUED.get(name)
        if grammar is None:
            return f"has an unknown export option {name!r}"
        if not full_match(grammar, value):
            return f"has an invalid value {value!r} for {name}"
    return None
