"""Read the hosts of `gpuclus init --from-hosts`: an /etc/hosts file or a plain list.

Accepted lines (``#`` starts a comment; blank lines are ignored):

    ADDRESS NAME [ALIASES...]   /etc/hosts style
    NAME ADDRESS                a list with addresses
    NAME                        a DNS name, used as the address too

Loopback and IPv6 housekeeping entries (127.*, ::1, fe00::, ff0x::, localhost,
ip6-*) are what every /etc/hosts carries, so they are skipped and counted
rather than refused. Anything else that cannot be a node is a UsageError that
names FILE:LINE.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from gpuclus.errors import UsageError
from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file
from gpuclus.initspec.draft import HostRange, node_name_problem
from gpuclus.yamldoc.grammar import address_problem

# /etc/hosts is a few kilobytes even for large sites; refuse the wrong file early.
MAX_HOSTS_FILE_BYTES = 2 * 1024 * 1024

_SPECIAL_NAME = re.compile(r"^(localhost[46]?(\..*)?|ip6-.*|broadcasthost)$")
_ADDRESS_ATTEMPT = re.compile(r"^[0-9.]+$|:")

_PASS_A_HOSTS_FILE = "pass /etc/hosts or a list with one host per line"
FORMAT_HINT = "write 'ADDRESS NAME [ALIASES...]' (as in /etc/hosts), 'NAME ADDRESS' or 'NAME'"


@dataclass(frozen=True)
class HostLine:
    """A usable host: its node name (short), its address and where it was written."""

    name: str
    address: str
    line: int

    def as_range(self) -> HostRange:
        return HostRange(self.name, self.address, 1)


@dataclass(frozen=True)
class SkippedLine:
    line: int
    what: str
    reason: str


@dataclass(frozen=True)
class HostsFile:
    source: str
    hosts: tuple[HostLine, ...]
    skipped: tuple[SkippedLine, ...]

    def ranges(self) -> list[HostRange]:
        return [host.as_range() for host in self.hosts]

    def skipped_summary(self) -> str | None:
        """One line saying what was left out and why, or None when nothing was."""
        if not self.skipped:
            return None
        reasons: dict[str, int] = {}
        for entry in self.skipped:
            reasons[entry.reason] = reasons.get(entry.reason, 0) + 1
        detail = ", ".join(f"{count} {reason}" for reason, count in reasons.items())
        noun = "entry" if len(self.skipped) == 1 else "entries"
        return f"skipped {len(self.skipped)} {noun} of {self.source} ({detail})"


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _special_address(text: str) -> bool:
    address = _ip(text)
    if address is None:
        return False
    # fe00::/9 (ip6-localnet) counts as reserved, ff0x:: as multicast.
    return (
        address.is_loopback
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
        or (address.version == 6 and address.is_link_local)
    )


def _special_name(name: str) -> bool:
    return _SPECIAL_NAME.match(name.lower()) is not None


def parse_hosts_text(text: str, source: str) -> HostsFile:
    """Parse a hosts file's text; ``source`` names it in messages (FILE:LINE)."""
    hosts: list[HostLine] = []
    skipped: list[SkippedLine] = []
    first_line_of_name: dict[str, int] = {}
    first_line_of_address: dict[str, HostLine] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        where = f"{source}:{number}"
        name_token, address = _split_line(content.split(), where)
        if _special_address(address):
            skipped.append(SkippedLine(number, address, "loopback or special"))
            continue
        if _special_name(name_token):
            skipped.append(SkippedLine(number, name_token, "loopback or special"))
            continue
        name = _node_name(name_token, where)
        if name in first_line_of_name:
            # The resolver answers with the first line for a name, and so do we
            # (typically the IPv4 line of a host that also has an IPv6 one).
            skipped.append(SkippedLine(number, name, "repeated name"))
            continue
        previous = first_line_of_address.get(address.lower())
        if previous is not None:
            raise UsageError(
                f"{where}: address {address} is already {previous.name}'s (line {previous.line})",
                "each node needs its own address; put other names of one host as aliases on its line",
            )
        host = HostLine(name, address, number)
        first_line_of_name[name] = number
        first_line_of_address[address.lower()] = host
        hosts.append(host)
    if not hosts:
        summary = f" (all {len(skipped)} entries are loopback, special or repeated)" if skipped else ""
        raise UsageError(f"{source}: no hosts to use{summary}", FORMAT_HINT)
    return HostsFile(source, tuple(hosts), tuple(skipped))


def _field_problem(field: str) -> str | None:
    """address_problem's words for a field of the file, without the piece of it that they quote (a DNS label)."""
    problem = address_problem(field)
    if problem is not None and problem.startswith("has an invalid DNS label"):
        return "has an invalid DNS label: letters, digits and '-' between dots, at most 63 each"
    return problem


def _split_line(tokens: list[str], where: str) -> tuple[str, str]:
    """The name token and the address of one line, in whichever order it was written."""
    first = tokens[0]
    if _ip(first) is not None:
        if len(tokens) == 1:
            raise UsageError(f"{where}: address {first} has no host name", FORMAT_HINT)
        if _ip(tokens[1]) is not None:
            raise UsageError(f"{where}: expected a host name after {first}, not another address", FORMAT_HINT)
        return tokens[1], first
    if _ADDRESS_ATTEMPT.search(first):
        # The fields are named, never quoted: the file may be any the user can read (--hosts /etc/shadow).
        raise UsageError(f"{where}: the first field {_field_problem(first) or 'is not an address'}", FORMAT_HINT)
    if len(tokens) > 2:
        raise UsageError(
            f"{where}: {len(tokens)} fields, but the first is not an address as an /etc/hosts line starts",
            FORMAT_HINT,
        )
    address = tokens[1] if len(tokens) == 2 else first
    problem = _field_problem(address)
    if problem is not None:
        raise UsageError(f"{where}: the address field {problem}", FORMAT_HINT)
    return first, address


def _node_name(token: str, where: str) -> str:
    """The short name (first label of a FQDN) a node is called in Slurm."""
    problem = _field_problem(token)
    if problem is not None:
        raise UsageError(f"{where}: the host name field {problem}", FORMAT_HINT)
    name = token.rstrip(".").split(".", 1)[0]
    problem = node_name_problem(name)
    if problem is not None:
        raise UsageError(f"{where}: node name {name!r} {problem}", "fix the name in the file")
    return name


def read_hosts_file(path: Path) -> HostsFile:
    """Read and parse ``path``; every way it can fail is a UsageError (exit 2)."""
    raw = _read_hosts_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (bad byte at offset {exc.start})", "pass a text file") from None
    return parse_hosts_text(text, str(path))


def _read_hosts_bytes(path: Path) -> bytes:
    """The file's bytes; only a regular file of at most MAX_HOSTS_FILE_BYTES is read."""
    try:
        return read_regular_file(path, MAX_HOSTS_FILE_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", _PASS_A_HOSTS_FILE) from None
    except NotRegularFileError as exc:
        raise UsageError(f"{path}: is {exc.kind}, not a hosts file", _PASS_A_HOSTS_FILE) from None
    except FileTooLargeError:
        raise UsageError(
            f"{path}: over {MAX_HOSTS_FILE_BYTES // (1024 * 1024)} MiB, far too large for a hosts file",
            _PASS_A_HOSTS_FILE,
        ) from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied", "run as a user who can read it") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
