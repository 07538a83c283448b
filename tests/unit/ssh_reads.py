"""What the OpenSSH client makes of a command line, asked of ssh itself (`ssh -G`: no connection is made)."""

from __future__ import annotations

import subprocess


def resolved(argv: list[str]) -> dict[str, str]:
    """``argv`` (its client first) as `ssh -G` resolves it, key -> value, with no ssh_config of this machine."""
    answer = subprocess.run(
        [argv[0], "-G", "-F", "/dev/null", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert answer.returncode == 0, answer.stderr
    return dict(line.partition(" ")[::2] for line in answer.stdout.splitlines())
