"""What every gpuclus probe shares: the output marker, loading PyTorch, the rendezvous from Slurm's variables.

gpuclus ships a probe as this file's text followed by the probe's own (see
``inline_command`` in this package), so a probe finds these names whether it
runs inline on a node or is imported from the package (tests, by hand).
Only the standard library here.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

MARKER = "GPUCLUS_PROBE"
# Ports 20000-39999, one per job: two probes at once on one node do not collide.
PORT_BASE = 20000
PORT_SPAN = 20000


def emit(payload: dict[str, Any]) -> None:
    print(f"{MARKER} {json.dumps(payload, sort_keys=True)}", flush=True)


def load_torch() -> tuple[Any, str | None]:
    """(torch, None) when torch can drive a GPU here, else (None or torch, an error code)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None, "no-torch"
    if getattr(torch.version, "cuda", None) is None:
        return torch, "no-torch-cuda"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return torch, "cuda-unavailable"
    return torch, None


def first_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: 'gpu[01-04,07],login1' → 'gpu01'."""
    text = nodelist.strip()
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", text)
    if not match:
        return text
    prefix, ranges, suffix = match.group(1), match.group(2), match.group(3)
    if ranges is None:
        return prefix + suffix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first + suffix


def rendezvous(env: Mapping[str, str]) -> dict[str, Any]:
    """rank, world, local rank, master address and port from Slurm's (or torchrun's) variables."""
    rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", "1")))
    local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "0")))
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    address = env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else "127.0.0.1")
    if env.get("MASTER_PORT"):
        port = int(env["MASTER_PORT"])
    else:
        port = PORT_BASE + int(env.get("SLURM_JOB_ID", "0")) % PORT_SPAN
    return {"rank": rank, "world": world, "local": local, "address": address, "port": port}


def run_distributed(probe: str, work: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> int:
    """One rank of a multi-process probe: find the rendezvous, load torch, run ``work``, rank 0 reports.

    Missing torch is an answer (exit 0); a crash is reported with its rank (exit 1).
    """
    where = rendezvous(os.environ)
    torch, error = load_torch()
    if error:
        emit({"probe": probe, "error": error, "rank": where["rank"]})
        return 0
    try:
        result = work(torch, where)
    except Exception as exc:
        emit({"probe": probe, "error": f"{type(exc).__name__}: {exc}"[:400], "rank": where["rank"]})
        return 1
    if where["rank"] == 0:
        emit(result)
    return 0
