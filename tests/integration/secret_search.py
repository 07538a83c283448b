"""Looking for secrets where they must not be: every form a value can take in a file or an output.

A value is searched as raw bytes, lower and upper hex, and base64 at each of
the three byte alignments (so also inside a larger base64 blob, as `slurp` or
a module's content argument would carry it), in overlapping fragments (so
also when it was cut short, or wrapped at 64 or 76 columns).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from pathlib import Path

FRAGMENT = 32


def encodings(value: bytes) -> dict[str, bytes]:
    """The forms a value can take in a file: raw, hex, and base64 at each alignment."""
    forms = {"raw": value, "hex": value.hex().encode(), "HEX": value.hex().upper().encode()}
    for shift in range(3):
        # `shift` bytes before the value: drop the first group (it mixes them in)
        # and the last incomplete one (it mixes in what follows).
        encoded = base64.b64encode(bytes(shift) + value)
        forms[f"base64+{shift}"] = encoded[4 if shift else 0 : (shift + len(value)) // 3 * 4]
    return forms


def needles(value: bytes) -> Iterator[tuple[str, bytes]]:
    """Overlapping fragments of every form of ``value``, each with its form's name."""
    for form, text in encodings(value).items():
        if len(text) <= FRAGMENT:
            yield form, text
            continue
        for start in range(0, len(text) - FRAGMENT + 1, FRAGMENT // 2):
            yield form, text[start : start + FRAGMENT]
        yield form, text[-FRAGMENT:]


def private_key_parts(pem: str) -> list[bytes]:
    """What is secret in an OpenSSH ed25519 private key: its seed and its body lines.

    The first body line is left out: it encodes the format's header and the
    key type, the same in every ed25519 key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_ssh_private_key(pem.encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    body = [line.strip() for line in pem.strip().splitlines()[1:-1]]
    assert len(body) >= 4, "an OpenSSH ed25519 key has several body lines"
    return [seed, *(line.encode() for line in body[1:])]


def leaks(secrets: dict[str, list[bytes]], haystacks: Iterable[tuple[str, bytes]]) -> list[str]:
    """'<secret> (<form>) in <where>' for every form of every secret found in a haystack."""
    found = set()
    searched = list(haystacks)
    for name, parts in secrets.items():
        for part in parts:
            for form, needle in needles(part):
                found.update(f"{name} ({form}) in {where}" for where, data in searched if needle in data)
    return sorted(found)


def files(root: Path, *, leaving_out: Iterable[Path] = ()) -> list[Path]:
    """Every file under ``root``, except those under (or equal to) the paths left out."""
    skipped = [path.resolve() for path in leaving_out]
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and not any(path.resolve() == s or s in path.resolve().parents for s in skipped)
    )
