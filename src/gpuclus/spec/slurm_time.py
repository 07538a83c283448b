"""Slurm time limits (MaxTime, MaxWall) as minutes.

Slurm takes "minutes", "minutes:seconds", "hours:minutes:seconds",
"days-hours", "days-hours:minutes" and "days-hours:minutes:seconds", and keeps
limits in whole minutes (seconds round up). UNLIMITED and INFINITE are no limit.
"""

from __future__ import annotations

import math

NO_LIMIT = frozenset({"UNLIMITED", "INFINITE"})


def wall_minutes(text: str) -> int | None:
    """Minutes of a Slurm time limit the spec's MAX_TIME_PATTERN accepted; None for no limit."""
    if text.upper() in NO_LIMIT:
        return None
    days = 0
    rest = text
    if "-" in text:
        day_text, rest = text.split("-", 1)
        days = int(day_text)
        # After "days-" the fields are hours[:minutes[:seconds]].
        parts = [int(part) for part in rest.split(":")] + [0, 0]
        hours, minutes, seconds = parts[0], parts[1], parts[2]
    else:
        parts = [int(part) for part in rest.split(":")]
        if len(parts) == 1:
            hours, minutes, seconds = 0, parts[0], 0
        elif len(parts) == 2:
            hours, minutes, seconds = 0, parts[0], parts[1]
        else:
            hours, minutes, seconds = parts[0], parts[1], parts[2]
    return days * 24 * 60 + hours * 60 + minutes + math.ceil(seconds / 60)
