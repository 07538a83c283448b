"""Probe scripts validate runs on GPU nodes (stdlib + torch only), and how they are shipped there.

Each probe is a Python file that needs only common.py: gpuclus reads both from
the package, joins them, compresses them and runs them on the node as
``python3 -c '<loader>' ARGS``, so nothing has to be installed there but
python3 and PyTorch. A probe prints one
line ``GPUCLUS_PROBE {json}`` (rank 0 only for multi-process probes) and
leaves the judging to gpuclus.validate.checks.gpu.
"""

from __future__ import annotations

import base64
import importlib.resources
import shlex
import zlib

from gpuclus.validate.probes.common import MARKER as MARKER

PROBES = ("gpu_probe.py", "nccl_probe.py", "ddp_probe.py")
FILES = (*PROBES, "common.py")


def source(name: str) -> str:
    """The text of one probe file shipped in this package."""
    if name not in FILES:
        raise ValueError(f"unknown probe {name!r}")
    return importlib.resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def shipped(name: str) -> str:
    """What runs on the node: common.py's text, then the probe's (its __future__ import moved to the top)."""
    body = source(name).replace("from __future__ import annotations\n", "", 1)
    return source("common.py") + "\n" + body


def inline_command(name: str, args: list[str] | tuple[str, ...] = ()) -> str:
    """A shell command running probe ``name`` with ``args`` through ``python3 -c``.

    Without python3 on the node it prints the probe's own no-python marker,
    so the check can tell "not installed" from "crashed".
    """
    packed = base64.b64encode(zlib.compress(shipped(name).encode(), 9)).decode()
    loader = f'import base64,zlib;exec(zlib.decompress(base64.b64decode("{packed}")))'
    run = shlex.join(["python3", "-c", loader, *args])
    missing = shlex.quote(f'{MARKER} {{"error": "no-python"}}')
    return f"if command -v python3 >/dev/null 2>&1; then {run}; else echo {missing}; fi"
