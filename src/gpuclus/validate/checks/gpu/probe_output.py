"""What a probe job printed: its figures, or why it gave none.

The probes (gpuclus.validate.probes) print one ``GPUCLUS_PROBE {json}`` line
per result. A probe that cannot measure for want of PyTorch (or python3) is
SKIP, with the hint to install it; any other missing result is FAIL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuclus.fileio import parse_json
from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.ssh.client import CommandResult
from gpuclus.validate import probes
from gpuclus.validate.results import Status

TORCH_HINT = "install python3-torch or PyTorch with CUDA for the performance probes"
CUDA_UNAVAILABLE = "PyTorch cannot use the GPUs (torch.cuda.is_available() is false)"
CUDA_HINT = (
    "PyTorch's CUDA build must suit the driver (`nvidia-smi` shows the newest CUDA it supports, "
    "`python3 -c 'import torch; print(torch.version.cuda)'` the one PyTorch needs)"
)

# A probe's "error" codes that mean "nothing to measure with here", not "broken".
_SKIP_ERRORS = {
    "no-torch": "PyTorch is not installed on the node (python3 cannot import torch)",
    "no-torch-cuda": "PyTorch on the node is a CPU-only build",
    "no-python": "python3 is not installed on the node",
}


def parse_probe_output(text: str) -> list[dict[str, Any]]:
    """Every ``GPUCLUS_PROBE {json}`` payload in a job's output, in order (bad JSON is left out)."""
    payloads = []
    for line in text.splitlines():
        at = line.find(probes.MARKER + " ")
        if at < 0:
            continue
        try:
            payload = parse_json(line[at + len(probes.MARKER) + 1 :])
        except ValueError:  # not JSON, nested past the bound, or an integer past Python's limit
            continue
        if isinstance(payload, dict):
            payloads.append(payload)
    return payloads


@dataclass(frozen=True)
class ProbeError:
    status: Status
    message: str


def probe_error(payloads: list[dict[str, Any]], result: CommandResult) -> ProbeError | None:
    """Why a probe gave no figures (SKIP for a missing PyTorch, FAIL otherwise), or None when it did."""
    errors = [payload for payload in payloads if "error" in payload]
    if payloads and not errors:
        return None
    if not payloads:
        said = slurm.first_error_line(result.stderr, "") or (result.stdout.strip().splitlines() or [""])[-1]
        if result.exit_status == TIMED_OUT:
            return ProbeError(Status.FAIL, "the probe did not finish within its time limit")
        return ProbeError(Status.FAIL, f"the probe printed no result (exit {result.exit_status}): {said}".rstrip(": "))
    code = str(errors[0]["error"])
    if code in _SKIP_ERRORS:
        return ProbeError(Status.SKIP, f"{_SKIP_ERRORS[code]}: {TORCH_HINT}")
    if code == "cuda-unavailable":
        return ProbeError(Status.FAIL, CUDA_UNAVAILABLE)
    rank = f" (rank {errors[0]['rank']})" if "rank" in errors[0] else ""
    return ProbeError(Status.FAIL, f"probe failed{rank}: {code}")
