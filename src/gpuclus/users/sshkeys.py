"""One authorized_keys line, checked before it reaches a node.

A line that sshd cannot read is silently skipped there, so the user simply
cannot log in; one with options (command=, from=, ...) changes what the key
may do. gpuclus writes keys without options: each line is the key type, the
key (base64 of a blob that starts with the same type) and an optional comment.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct

from gpuclus.yamldoc.grammar import ascii_grammar

# The public key types OpenSSH's sshd accepts by default (ssh-dss is disabled since OpenSSH 7.0).
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
# What comments hold (user@host, a date, a note): no control characters (a
# newline would start a second line), and no braces or '%', which Ansible
# would read as a template when the key reaches the nodes.
_COMMENT = re.compile(ascii_grammar(r"^[A-Za-z0-9 @._+:/=,()-]{0,200}$"))


def key_problem(line: str) -> str | None:
    """Why ``line`` is not a public key line gpuclus writes, or None.

    The reason never quotes the line (only the key types gpuclus knows): it is
    printed for a line of whatever file `users add --key` was given.
    """
    if "PRIVATE KEY" in line:
        return "is a private key: give the public one (the .pub file, e.g. ~/.ssh/id_ed25519.pub)"
    if "\n" in line or "\r" in line:
        return "holds more than one line: give each key as its own list entry"
    parts = line.strip().split(maxsplit=2)
    if not parts:
        return "is empty"
    kind = parts[0]
    if kind not in KEY_TYPES:
        if any(kind.startswith(option) for option in ("command=", "from=", "no-", "restrict", "environment=")):
            return "starts with authorized_keys options: gpuclus writes keys without options"
        # The line is not quoted: it may come from any file given as --key, a secret one included.
        return (
            f"is not a public key: its first word ({len(kind)} characters of {len(line)}) is not a key type "
            f"gpuclus knows ({', '.join(KEY_TYPES[:3])}, ...)"
        )
    if len(parts) < 2:
        return f"has the type {kind} but no key after it"
    blob = _decode(parts[1])
    if blob is None:
        return "has a key that is not base64"
    if _blob_type(blob) != kind:
        return f"says {kind} but the key itself is not a {kind} key (cut short or pasted wrong?)"
    if len(parts) == 3 and not _COMMENT.fullmatch(parts[2]):
        return "has a comment with characters other than letters, digits, spaces and @._+:/=,()-"
    return None


def _decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _blob_type(blob: bytes) -> str | None:
    """The key type a public key blob names in its first SSH string (a 4-byte length, then the text)."""
    if len(blob) < 4:
        return None
    (length,) = struct.unpack(">I", blob[:4])
    if length > 64 or len(blob) < 4 + length:
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None
