"""What a value must look like to be safe in every file it lands in.

A spec value reaches several files on the nodes with different grammars:
a node name lands in slurm.conf, /etc/hosts and Prometheus' config; an
address in slurm.conf, /etc/hosts, /etc/exports, ganesha.conf, chrony.conf and
fstab; an export path in /etc/exports, ganesha.conf, fstab and systemd mount
unit names. The rules here are the intersection: a value that passes them
cannot add a line, a key or a client to any of those files.

Every pattern check goes through ``full_match``: ``re.match`` with a ``$``
accepts a trailing newline ("gpu01\\n"), which is exactly the character that
adds a line to a config file. Every grammar is built through ``ascii_grammar``,
so that a digit or letter of another script that looks like an ASCII one is
refused too (issue 40).
"""

from __future__ import annotations

import ipaddress
import re

# Escapes whose classes are Unicode-aware in Python's re and in pydantic's Rust engine alike: \d takes
# ARABIC-INDIC DIGIT THREE (and int() reads it as 3), \w takes LATIN SMALL LETTER LONG S, \p{..} and \X
# take whole scripts.
_UNICODE_ESCAPES = frozenset("dDwWsSbBpPX")


def ascii_grammar(source: str) -> str:
    """``source``, once it is sure to match ASCII text only, in Python's re and in pydantic's Rust engine.

    Every grammar a value is checked against is built through here. A look-alike (Arabic-Indic digits as
    a max_time, fullwidth ones as a version, the Kelvin sign as 'k') must never pass where ASCII is meant:
    it would reach slurm.conf, a package name or a path as written. So a grammar spells its classes out
    ([0-9], [A-Za-z0-9_]). Raises ValueError naming what reaches beyond ASCII.
    """
    reason = _beyond_ascii(source)
    if reason:
        raise ValueError(f"{source!r} is not ASCII-only: {reason}")
    return source


def _beyond_ascii(source: str) -> str | None:
    """What in ``source`` can match a non-ASCII character, or None."""
    in_class = False
    index = 0
    while index < len(source):
        char, following = source[index], source[index + 1 : index + 3]
        if not char.isascii():
            return f"it holds {char!r}"
        if char == "\\":
            if following[:1] in _UNICODE_ESCAPES:
                return f"\\{following[:1]} matches other scripts too"
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            if following[:1] == "^":
                return "a negated class matches every other character"
            in_class = True
            index += following[:1] == "]"  # a ']' right after '[' is a literal one, not the end
        elif char == ".":
            return "'.' outside a class matches any character"
        elif char == "(" and following[:1] == "?" and following != "?:":
            # (?i) folds the Kelvin sign onto 'k'; lookarounds are no grammar's business either.
            return "an inline flag or lookaround"
        index += 1
    return None


# A DNS label (RFC 1123): letters, digits and '-', not at either end, at most 63.
_DNS_LABEL = ascii_grammar(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
DNS_NAME_MAX = 253
# The characters and length of every address address_problem accepts (an IPv4 address, a DNS name, with
# or without the root's trailing '.'): what the roles' preflight can check without the rules above. Written
# once here; render hands it to the roles as gpuclus_patterns.address (patterns.ROLE_PATTERNS).
ADDRESS_PATTERN = ascii_grammar(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9.])?$")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
# One part of an IPv4 address as the C library's inet_aton reads it: decimal, octal (a leading 0) or hex.
_INET_ATON_PART = r"(0[xX][0-9A-Fa-f]*|[0-9]+)"

# One part of a path on a node: the characters that need no quoting in /etc/exports, fstab, ganesha.conf
# or a systemd unit name, and that no shell or config grammar gives a meaning ('#', ';', '"', '{', ',', ...);
# and at least one of them not a dot. '.' and '..' (and '...') are refused: a path is compared as written
# (is it inside the share? is it a system directory?) before any node resolves it, so /shared/../etc would
# pass as a place inside /shared and be /etc where a role chowns it. Without look-arounds (ascii_grammar
# refuses them), "not all dots" is: any dots, then one other character, then anything.
PATH_COMPONENT = ascii_grammar(r"[.]*[A-Za-z0-9_+@-][A-Za-z0-9_.+@-]*")
# An absolute path of such parts, without a trailing '/'.
ABSOLUTE_PATH_BODY = ascii_grammar(f"(/{PATH_COMPONENT})+")
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
    name: ascii_grammar(grammar)
    for name, grammar in {
        "anonuid": r"[0-9]{1,10}",
        "anongid": r"[0-9]{1,10}",
        "fsid": r"(root|[0-9]{1,10}|[0-9a-fA-F-]{32,36})",
        "sec": r"(sys|krb5|krb5i|krb5p)(:(sys|krb5|krb5i|krb5p))*",
        "mp": ABSOLUTE_PATH_BODY,
        "mountpoint": ABSOLUTE_PATH_BODY,
    }.items()
}


def full_match(pattern: str, text: str) -> bool:
    """True when ``pattern`` matches all of ``text`` (a trailing newline included), reading it as ASCII.

    re.ASCII keeps \\d to [0-9] and case folding to A-Z even for a pattern that was not built through
    ``ascii_grammar``.
    """
    return re.fullmatch(pattern, text, re.ASCII) is not None


def reads_as_ipv4(name: str) -> bool:
    """True when the resolver reads ``name`` as an IPv4 address, not as a name.

    getaddrinfo (and so ssh, slurmd, mount and every other client on the nodes) first tries inet_aton,
    which takes one to four parts, each decimal, octal or hex: 2130706433, 0x7f000001, 127.1, 0x7f.1 and
    0177.0.0.1 are all 127.0.0.1, and never reach DNS or /etc/hosts. Such a "name" slips past the rules
    for addresses (no unspecified or broadcast address) and means something else in every file it lands in.
    """
    bare = name[:-1] if name.endswith(".") else name
    return full_match(rf"{_INET_ATON_PART}(\.{_INET_ATON_PART}){{0,3}}", bare)


def numeric_name_problem(name: str) -> str | None:
    """Why ``name``, which passed a host name's grammar, is still no host name, or None."""
    if reads_as_ipv4(name):
        return "is a number, which the resolver reads as an IPv4 address (0x7f000001 and 2130706433 are 127.0.0.1)"
    return None


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
    if reads_as_ipv4(address) or full_match(r"[0-9.]+", address):
        # The resolver reads 0x7f000001, 2130706433, 127.1 and 0177.0.0.1 all as 127.0.0.1.
        return "looks like an IPv4 address but is not a valid one: write four decimal numbers 0-255, no leading zeros"
    if len(address) > DNS_NAME_MAX:
        return f"is longer than a DNS name may be ({DNS_NAME_MAX})"
    labels = address[:-1].split(".") if address.endswith(".") else address.split(".")
    for label in labels:
        if not full_match(_DNS_LABEL, label):
            return f"has an invalid DNS label {label!r}"
    return None


def host_problem(location: str) -> str | None:
    """Why the host in ``location`` is neither an IPv4 address nor a DNS name, or None if fine.

    ``location`` is a URL (scheme://HOST[:PORT][/PATH]) or HOST:PORT that a field's pattern already took:
    the pattern keeps its characters plain, this keeps its host to what ``address_problem`` takes, so a
    number the resolver reads as 127.0.0.1 or 0.0.0.0 (0x7f000001, 0) is no host there either.
    """
    _scheme, separator, rest = location.partition("://")
    host = re.split(r"[:/]", rest if separator else location, maxsplit=1)[0]
    problem = address_problem(host)
    return None if problem is None else f"has a host {host!r} that {problem}"


def export_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be an export path or mount point, or None if fine."""
    if len(path) > EXPORT_PATH_MAX:
        return f"is longer than {EXPORT_PATH_MAX} characters"
    if path == "/":
        return "is the root directory, which must never be exported or mounted over"
    if any(part and not part.strip(".") for part in path.split("/")):
        return "must not contain '.' or '..' components"
    if not full_match(ABSOLUTE_PATH_BODY, path):
        return (
            "must be an absolute path of letters, digits and '_', '.', '+', '@', '-' "
            "(no spaces, quotes, ',', ';', '#', braces or a trailing '/')"
        )
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
