"""apt-get run by `sandbox up` waits while another apt holds a lock (two lanes, unattended-upgrades).

A stand-in script plays apt-get (the real one would change this machine): it
answers as apt does when the lists' lock is held, a given number of times.
"""

from __future__ import annotations

import time
from pathlib import Path

from gpuclus.sandbox.hostprep import run_apt

LOCKED = (
    "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)\\n"
    "E: Unable to lock directory /var/lib/apt/lists/"
)


def stand_in_apt(tmp_path: Path, locked_times: int, then: str = "exit 0") -> list[str]:
    tries = tmp_path / "tries"
    script = tmp_path / "apt-get"
    script.write_text(
        f"""#!/bin/sh
n=$(cat {tries} 2>/dev/null || echo 0)
echo $((n + 1)) > {tries}
if [ "$n" -lt {locked_times} ]; then printf '{LOCKED}\\n' >&2; exit 100; fi
{then}
"""
    )
    script.chmod(0o755)
    return [str(script), "update", "-qq"]


def tries(tmp_path: Path) -> int:
    return int((tmp_path / "tries").read_text())


def test_a_held_lists_lock_is_waited_for(tmp_path: Path) -> None:
    result = run_apt(stand_in_apt(tmp_path, locked_times=2), deadline=time.monotonic() + 30, pause=0.05)
    assert result.returncode == 0
    assert tries(tmp_path) == 3


def test_the_wait_ends_at_the_deadline_with_apt_s_own_message(tmp_path: Path) -> None:
    result = run_apt(stand_in_apt(tmp_path, locked_times=1000), deadline=time.monotonic() + 0.3, pause=0.05)
    assert result.returncode == 100
    assert "Unable to lock directory /var/lib/apt/lists/" in result.stderr
    assert 2 <= tries(tmp_path) < 1000


def test_another_failure_is_not_retried(tmp_path: Path) -> None:
    argv = stand_in_apt(tmp_path, locked_times=0, then="echo 'E: Unable to locate package nosuch' >&2; exit 100")
    result = run_apt(argv, deadline=time.monotonic() + 30, pause=0.05)
    assert result.returncode == 100
    assert "Unable to locate package" in result.stderr
    assert tries(tmp_path) == 1
