"""Slurm-style hostlist expressions: ``gpu[01-04,07]`` and ``10.0.[1-2].[11-14]``.

Expansion follows Slurm's rules: a range keeps the zero padding of its lower
bound (``[01-12]`` gives ``01``..``12``, ``[1-12]`` gives ``1``..``12``) and
several bracket groups expand as a cartesian product, leftmost group slowest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclus.yamldoc.grammar import ascii_grammar

# A generous ceiling that still stops `gpu[0-99999999]` from eating memory.
MAX_HOSTS = 100_000

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
# ASCII digits only: int() reads any script's digits, and a range written in Arabic-Indic ones would
# expand to gpu01, gpu02, names the spec never showed.
_TERM = re.compile(ascii_grammar(r"^([0-9]+)(?:-([0-9]+))?$"))


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded; the message says why."""


def _expand_group(body: str, expression: str) -> list[str]:
    if not body:
        raise HostlistError(f"empty brackets in {expression!r}")
    values: list[str] = []
    for term in body.split(","):
        match = _TERM.match(term.strip())
        if match is None:
            raise HostlistError(f"bad range {term!r} in {expression!r}: use numbers like [01-04] or [1,3,5-7]")
        low_text, high_text = match.group(1), match.group(2)
        width = len(low_text)
        low = int(low_text)
        high = int(high_text) if high_text is not None else low
        if high < low:
            raise HostlistError(f"range {term!r} in {expression!r} runs backwards")
        if len(values) + high - low + 1 > MAX_HOSTS:
            raise HostlistError(f"{expression!r} names more than {MAX_HOSTS} hosts")
        values.extend(str(number).zfill(width) for number in range(low, high + 1))
    return values


def expand(expression: str) -> list[str]:
    """Expand one hostlist expression into host strings, in order.

    A plain name expands to itself. Raises HostlistError with a readable
    message for unbalanced brackets, bad ranges or too many hosts.
    """
    if expression.count("[") != expression.count("]"):
        raise HostlistError(f"unbalanced brackets in {expression!r}")
    pieces: list[list[str]] = []
    position = 0
    for match in _BRACKET.finditer(expression):
        pieces.append([expression[position : match.start()]])
        pieces.append(_expand_group(match.group(1), expression))
        position = match.end()
    tail = expression[position:]
    if "[" in tail or "]" in tail:
        raise HostlistError(f"nested or unbalanced brackets in {expression!r}")
    pieces.append([tail])

    total = 1
    for piece in pieces:
        total *= len(piece)
        if total > MAX_HOSTS:
            raise HostlistError(f"{expression!r} names more than {MAX_HOSTS} hosts")

    results = [""]
    for piece in pieces:
        results = [prefix + value for prefix in results for value in piece]
    return results


def is_range(expression: str) -> bool:
    """True when the expression has a bracket group (names more than a literal)."""
    return "[" in expression or "]" in expression


def expand_list(expressions: str) -> list[str]:
    """Expand a comma-separated list of expressions (``head,gpu[01-02]``).

    Commas inside brackets belong to the range, not to the list.
    """
    items: list[str] = []
    depth = 0
    current = ""
    for char in expressions:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    hosts: list[str] = []
    for item in items:
        item = item.strip()
        if not item:
            raise HostlistError(f"empty entry in host list {expressions!r}")
        hosts.extend(expand(item))
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"host list {expressions[:60]!r}... names more than {MAX_HOSTS} hosts")
    return hosts


# The last run of ASCII digits: a look-alike digit is no number to fold into a range.
_NUMBERED = re.compile(r"^(.*?)([0-9]+)([^0-9]*)$")


def compress(hosts: Iterable[str]) -> str:
    """Fold host names into a compact Slurm hostlist (``gpu[01-03,05],head``).

    Names are grouped by prefix, suffix and digit width of their last number;
    the result is deterministic (groups in first-seen order, numbers sorted),
    and ``expand_list(compress(x))`` returns the same set of names.
    """
    names = list(dict.fromkeys(hosts))
    parsed = [(host, _NUMBERED.match(host)) for host in names]
    # A zero-padded number fixes its group's width; an unpadded number of that
    # same length (dgx10 beside dgx01) reads the same at that width and joins it.
    padded_widths = {
        (m.group(1), m.group(3), len(m.group(2)))
        for _, m in parsed
        if m is not None and m.group(2).startswith("0") and len(m.group(2)) > 1
    }
    groups: dict[tuple[str, str, int], list[int]] = {}
    order: list[tuple[str, str, int] | str] = []
    for host, match in parsed:
        if match is None:
            order.append(host)
            continue
        prefix, digits, suffix = match.groups()
        key = (prefix, suffix, len(digits))
        if key not in padded_widths:
            key = (prefix, suffix, 0)  # unpadded: 9 and 10 share one range
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))

    parts: list[str] = []
    for entry in order:
        if isinstance(entry, str):
            parts.append(entry)
            continue
        prefix, suffix, width = entry
        numbers = sorted(set(groups[entry]))
        if len(numbers) == 1:
            parts.append(f"{prefix}{str(numbers[0]).zfill(width)}{suffix}")
            continue
        spans: list[str] = []
        start = previous = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == previous + 1:
                previous = number
                continue
            low, high = str(start).zfill(width), str(previous).zfill(width)
            spans.append(low if start == previous else f"{low}-{high}")
            if number is not None:
                start = previous = number
        parts.append(f"{prefix}[{','.join(spans)}]{suffix}")
    return ",".join(parts)
