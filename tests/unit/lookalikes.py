"""Characters of other scripts that read like ASCII ones: what the look-alike tests (issue 40) swap in.

`\\d` matches any script's digits in pydantic's Rust engine and in Python's re alike, and int() reads them;
re.IGNORECASE folds the Kelvin sign onto 'k' and the long s onto 's'. A grammar that takes one of these
where it means an ASCII character lets a value through that is not what it looks like.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

# The zero of other scripts' digits: Arabic-Indic, fullwidth, Devanagari, mathematical bold.
DIGIT_ZEROS = [0x0660, 0xFF10, 0x0966, 0x1D7CE]
# Cyrillic letters drawn like Latin ones, and the letters Unicode case folding maps onto ASCII: the long s
# (U+017F) is 's', the Kelvin sign (U+212A) is 'k', the dotless i (U+0131) upper-cases to 'I'.
CYRILLIC = dict(
    zip(
        "aceopxyABCEHKMOPTX",
        "\u0430\u0441\u0435\u043e\u0440\u0445\u0443\u0410\u0412\u0421\u0415\u041d\u041a\u041c\u041e\u0420\u0422\u0425",
        strict=True,
    )
)
FOLDS_TO_ASCII = {"s": "\u017f", "k": "\u212a", "K": "\u212a", "i": "\u0131"}

# One of each, for generators that mix them into other text.
LOOKALIKE_CHARACTERS = [
    *(chr(zero + 3) for zero in DIGIT_ZEROS),
    "\uff21",  # fullwidth A
    *CYRILLIC.values(),
    *FOLDS_TO_ASCII.values(),
]


def lookalikes(value: str) -> Iterator[str]:
    """``value`` with one ASCII character swapped for a non-ASCII one that reads the same.

    The first digit becomes each script's digit of that value; the first letter its fullwidth form (and
    its Cyrillic twin where there is one); the first 's', 'k', 'K' and 'i' the letter that folds onto it.
    """
    digit = next((index for index, char in enumerate(value) if char.isascii() and char.isdigit()), None)
    if digit is not None:
        for zero in DIGIT_ZEROS:
            yield value[:digit] + chr(zero + int(value[digit])) + value[digit + 1 :]
    letter = next((index for index, char in enumerate(value) if char.isascii() and char.isalpha()), None)
    if letter is not None:
        char = value[letter]
        yield value[:letter] + chr(ord(char) - 0x21 + 0xFF01) + value[letter + 1 :]
        if char in CYRILLIC:
            yield value[:letter] + CYRILLIC[char] + value[letter + 1 :]
    for ascii_char, folded in FOLDS_TO_ASCII.items():
        if ascii_char in value:
            yield value.replace(ascii_char, folded, 1)


def pattern_paths(schema: dict[str, Any]) -> Iterator[str]:
    """Every field of a pydantic JSON schema that carries a pattern, as a dotted path ([] for list items,
    {key} and {value} for a mapping's keys and values): what the look-alike tests must each cover."""
    return _paths_with_a_pattern(schema, schema.get("$defs", {}), "")


def _paths_with_a_pattern(node: dict[str, Any], defs: dict[str, Any], path: str) -> Iterator[str]:
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    if "pattern" in node:
        yield path
    for key, child in node.get("properties", {}).items():
        yield from _paths_with_a_pattern(child, defs, f"{path}.{key}".lstrip("."))
    if isinstance(node.get("items"), dict):
        yield from _paths_with_a_pattern(node["items"], defs, path + "[]")
    # A mapping whose keys have a grammar: JSON Schema puts the keys' pattern over the values' schema.
    for value_schema in node.get("patternProperties", {}).values():
        yield path + ".{key}"
        yield from _paths_with_a_pattern(value_schema, defs, path + ".{value}")
    for child in node.get("anyOf", []) + node.get("allOf", []):
        yield from _paths_with_a_pattern(child, defs, path)


def libc_reads_as_address(name: str) -> bool:
    """Whether the C library's resolver reads ``name`` as an IPv4 number (0x7f000001, 127.1): the oracle the
    numeric-host-name tests judge gpuclus' own rule against."""
    try:
        socket.inet_aton(name)
    except OSError:
        return False
    return True
