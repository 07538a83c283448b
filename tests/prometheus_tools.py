"""Where the tests find Debian's prometheus and promtool binaries on this machine.

scripts/prometheus_tools.sh unpacks them (never installs them) into
.cache/prometheus-tools/bin; scripts/test.sh runs it before pytest. A test that
needs them calls `require(...)`: under CI their absence fails the test (a CI
run must not pass by skipping the rule and query tests); elsewhere it skips,
naming the script to run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS_DIR = REPO / ".cache" / "prometheus-tools" / "bin"


def find(name: str) -> Path | None:
    """`name` (prometheus or promtool) from GPUCLUS_PROMETHEUS_TOOLS, the repo cache, or PATH."""
    for directory in (os.environ.get("GPUCLUS_PROMETHEUS_TOOLS"), str(TOOLS_DIR)):
        if directory and (Path(directory) / name).is_file():
            return Path(directory) / name
    found = shutil.which(name)
    return Path(found) if found else None


def require(name: str) -> Path:
    path = find(name)
    if path is not None:
        return path
    message = f"{name} not found: run `bash scripts/prometheus_tools.sh` (unpacks Debian's prometheus package)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
