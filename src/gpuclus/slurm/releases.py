"""Whether Slurm can go from one version to another in place (slurm.schedmd.com/upgrades.html).

A major release is year.month (23.11); daemons and the state files they
write are read by the next two major releases, and from 24.11 on by the next
three. A larger jump needs a stop at a release in between, and no downgrade
of a major release is supported at all (the state files and the accounting
database are converted forward only).
"""

from __future__ import annotations

import re

# Every major release, in order: the 9-month cycle up to 24.05, 6 months after.
_KNOWN = tuple(
    "17.02 17.11 18.08 19.05 20.02 20.11 21.08 22.05 23.02 23.11 24.05 24.11 25.05 25.11 26.05 26.11".split()  # noqa: SIM905
)
_MAJOR = re.compile(r"^(\d+)\.(\d+)")
# The first release that reads three older ones instead of two.
_THREE_BEHIND_FROM = "24.11"


def major(version: str) -> str | None:
    """'22.05' for '22.05.8' or '22.05.8-4+deb12u1'; None when it is not a Slurm version."""
    found = _MAJOR.match(version.strip())
    return f"{int(found.group(1)):02d}.{int(found.group(2)):02d}" if found else None


def _index(release: str) -> int | None:
    if release in _KNOWN:
        return _KNOWN.index(release)
    year, month = (int(part) for part in release.split("."))
    last_year, _ = (int(part) for part in _KNOWN[-1].split("."))
    if year > last_year and month in (5, 11):
        # Past the list: the 6-month cycle (May and November) goes on.
        return len(_KNOWN) - 1 + (year - last_year) * 2 - (1 if month == 5 else 0)
    return None


def jump_problem(installed: str, target: str) -> str | None:
    """Why Slurm cannot be upgraded in place from ``installed`` to ``target``, or None when it can."""
    releases = _two_releases(installed, target, "→")
    if releases is None or isinstance(releases, str):
        return releases
    (old, old_index), (new, new_index) = releases
    if new_index < old_index:
        return f"Slurm {installed} → {target} is a downgrade; Slurm converts its state and database forward only"
    reach = 3 if new_index >= _KNOWN.index(_THREE_BEHIND_FROM) else 2
    if new_index - old_index > reach:
        # The furthest release the installed one can reach in one step.
        stops = _KNOWN[old_index + 1 : new_index]
        middle = next(
            (release for release in reversed(stops) if _KNOWN.index(release) - old_index <= _reach_of(release)),
            stops[0] if stops else new,
        )
        return (
            f"Slurm {new} reads the state of the {reach} major releases before it, and {old} is "
            f"{new_index - old_index} behind; upgrade to a {middle} release first"
        )
    return None


def _two_releases(first: str, second: str, joint: str) -> tuple[tuple[str, int], tuple[str, int]] | str | None:
    """Both versions' major releases with their places in the release order; None when they are the same
    release, and the problem when one cannot be read or is not a release gpuclus knows."""
    one, two = major(first), major(second)
    if one is None or two is None:
        return f"cannot read a Slurm release from {first!r} {joint} {second!r}"
    if one == two:
        return None
    one_index, two_index = _index(one), _index(two)
    if one_index is None or two_index is None:
        return f"{one if one_index is None else two} is not a Slurm major release gpuclus knows"
    return (one, one_index), (two, two_index)


def _reach_of(release: str) -> int:
    return 3 if _KNOWN.index(release) >= _KNOWN.index(_THREE_BEHIND_FROM) else 2


def mix_problem(controller: str, node: str) -> str | None:
    """Why a node whose Slurm is ``node`` cannot join a controller running ``controller``, or None when it can.

    slurmctld talks to the daemons and commands of its own major release and of
    the releases it reads in an upgrade (two before it, three from 24.11 on);
    a node newer than slurmctld is never accepted.
    """
    releases = _two_releases(controller, node, "and")
    if releases is None or isinstance(releases, str):
        return releases
    (ours, our_index), (theirs, their_index) = releases
    if their_index > our_index:
        return f"its Slurm {theirs} is newer than the controller's {ours}; slurmctld must be the newest"
    behind = our_index - their_index
    if behind > _reach_of(ours):
        return (
            f"its Slurm {theirs} is {behind} major releases behind the controller's {ours}, "
            f"which talks to the {_reach_of(ours)} before it at most"
        )
    return None
