"""What a workload job printed, judged: pure functions, tested on recorded and synthetic output.

Rank 0 of each job template prints one ``GPUCLUS_RESULT {json}`` line. A
training result passes when the loss fell, every replica holds the same
weights and the world is the size the job asked for, on the device it was
meant to use. A job without that line failed; its crash text (a Python
exception, srun's error) is the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuclus.fileio import parse_json
from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.results import Status

MARKER = "GPUCLUS_RESULT"
ENV_MARKER = "GPUCLUS_ENV"
# The mpi-allreduce template's exit status when the node has no mpicc.
MPI_MISSING_EXIT = 2


def parse_marked(text: str, marker: str = MARKER) -> dict[str, Any] | None:
    """The last ``MARKER {json}`` object in ``text`` (anywhere on its line: torchrun may prefix it), or None."""
    found = None
    for line in text.splitlines():
        at = line.find(marker + " ")
        if at < 0:
            continue
        try:
            payload = parse_json(line[at + len(marker) + 1 :])
        except ValueError:  # not JSON, nested past the bound, or an integer past Python's limit
            continue
        if isinstance(payload, dict):
            found = payload
    return found


# A Python exception line ("RuntimeError: ...", "torch.distributed.DistNetworkError: ..."), maybe "[rank1]:" first.
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\]:?\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b.*)$")
# A program's own error line: "train_ddp.py: error: ...", "gpuclus_launch: error: ...", "srun: error: ...".
_SAID_ERROR = re.compile(r"^\S+: (?:error|fatal): ")
# srun's echo of a task's exit, which only repeats that something failed.
_TASK_EXIT = re.compile(r"task \d+: (?:Exited with exit code|Killed|Terminated)")
# torchrun's summary after a failed rank: "exitcode  : 2 (pid: 7562)" under "Root Cause".
_ROOT_EXIT = re.compile(r"Root Cause.*?exitcode\s*:\s*(-?\d+)", re.DOTALL)
_CHILD_FAILED = "ChildFailedError"


def crash_line(result: CommandResult) -> str:
    """One line on why a job gave no result: the rank's exception, a program's error line, srun's, or the timeout.

    torchrun ends every failed run with its own ChildFailedError; the rank's
    exception (or argparse's "error:" line) before it is the cause.
    """
    if result.exit_status == TIMED_OUT:
        return slurm.job_failure(result)
    text = f"{result.stdout}\n{result.stderr}"
    lines = [line.strip() for line in text.splitlines()]
    exceptions = [match.group(1).strip() for line in lines if (match := _EXCEPTION.match(line))]
    causes = [line for line in exceptions if _CHILD_FAILED not in line]
    if causes:
        return causes[-1][:300]
    said = [line for line in lines if _SAID_ERROR.match(line) and not _TASK_EXIT.search(line)]
    if said:
        return said[0][:300]
    root = _ROOT_EXIT.search(text)
    if root is not None:
        return f"torchrun: a training process failed with exit code {root.group(1)} and printed no error"
    return slurm.first_error_line(result.stderr, f"exit {result.exit_status}, no {MARKER} line")[:300]


@dataclass(frozen=True)
class Expect:
    """What a training job must report."""

    nodes: int
    world_size: int | None  # None: whatever the template chose, as long as every node has the same ranks
    device: str  # cuda or cpu


@dataclass(frozen=True)
class Verdict:
    status: Status
    message: str
    value: float | None = None  # samples/s for training, the bus bandwidth for MPI


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def loss_trend(payload: dict[str, Any]) -> str:
    first, last = payload.get("loss_first"), payload.get("loss_last")
    if not isinstance(first, int | float) or not isinstance(last, int | float):
        losses = [value for value in payload.get("losses", []) if isinstance(value, int | float)]
        if not losses:
            return "no loss values"
        first, last = losses[0], losses[-1]
    return f"loss {first:.3g} -> {last:.3g}"


def describe(payload: dict[str, Any]) -> str:
    """ "gloo on CPU, 2 nodes x 1 rank: loss 1.02 -> 0.31, 410 samples/s"."""
    device = "CPU" if payload.get("device") == "cpu" else "GPU"
    nodes, world = payload.get("nodes"), payload.get("world_size")
    nodes = nodes if isinstance(nodes, int) and nodes > 0 else 1
    per_node = world // nodes if isinstance(world, int) else 0
    speed = payload.get("samples_per_s")
    text = f"{payload.get('backend', '?')} on {device}, {_plural(nodes, 'node')} x {_plural(per_node, 'rank')}: "
    text += loss_trend(payload)
    if isinstance(speed, int | float):
        text += f", {speed:.0f} samples/s"
    return text


def judge_training(payload: dict[str, Any], expect: Expect) -> Verdict:
    """PASS when the loss fell, the replicas agree, and the world and device are the ones asked for."""
    said = describe(payload)
    speed = payload.get("samples_per_s")
    sps = float(speed) if isinstance(speed, int | float) else None
    world = payload.get("world_size")
    nodes = payload.get("nodes")
    if nodes != expect.nodes:
        return Verdict(Status.FAIL, f"ran on {nodes} node(s) of the {expect.nodes} it was given ({said})", sps)
    if expect.world_size is not None and world != expect.world_size:
        return Verdict(Status.FAIL, f"world size {world}, expected {expect.world_size} ({said})", sps)
    if not isinstance(world, int) or world < expect.nodes or world % expect.nodes:
        return Verdict(Status.FAIL, f"world size {world} does not fit {expect.nodes} node(s) ({said})", sps)
    if payload.get("device") != expect.device:
        wanted = "the GPUs" if expect.device == "cuda" else "the CPU"
        return Verdict(Status.FAIL, f"trained on {payload.get('device')}, not on {wanted} ({said})", sps)
    if payload.get("replicas_agree") is not True:
        return Verdict(Status.FAIL, f"the replicas hold different weights after training ({said})", sps)
    if payload.get("decreased") is not True:
        return Verdict(Status.FAIL, f"the loss did not decrease ({said})", sps)
    return Verdict(Status.PASS, said, sps)


def judge_job(result: CommandResult, expect: Expect) -> Verdict:
    """A training job's verdict from its output; no GPUCLUS_RESULT line is a FAIL with the crash text."""
    payload = parse_marked(result.stdout)
    if payload is None:
        return Verdict(Status.FAIL, crash_line(result))
    return exited_badly(judge_training(payload, expect), result.exit_status)


def exited_badly(verdict: Verdict, exit_status: int) -> Verdict:
    """A good result from a job that then failed (a rank crashed on the way out) is a FAIL."""
    if verdict.status is Status.PASS and exit_status != 0:
        return Verdict(Status.FAIL, f"{verdict.message}, but the job exited {exit_status}", verdict.value)
    return verdict


# --- the MPI all-reduce template -------------------------------------------------------------

MPI_PACKAGES = "libopenmpi-dev openmpi-bin (Debian, Ubuntu) or openmpi-devel (RHEL family)"


def mpi_missing(exit_status: int, output: str) -> str | None:
    """The template's own words when it stopped for want of mpicc (exit 2), else None."""
    if exit_status != MPI_MISSING_EXIT or "mpicc" not in output:
        return None
    lines = [line.strip() for line in output.splitlines() if "mpicc" in line]
    return lines[-1][:200]


def judge_mpi(result: CommandResult, nodes: int) -> Verdict:
    """PASS when rank 0 reports a correct all-reduce over every node of the job (and the job ended well)."""
    payload = parse_marked(result.stdout)
    if payload is None:
        return Verdict(Status.FAIL, crash_line(result))
    ranks, on = payload.get("ranks"), payload.get("nodes")
    busbw = payload.get("busbw_gbps")
    bandwidth = float(busbw) if isinstance(busbw, int | float) else None
    said = f"{ranks} rank(s) on {on} node(s)" + (f", busbw {bandwidth:.3g} Gbit/s" if bandwidth is not None else "")
    if on != nodes or not isinstance(ranks, int) or ranks < nodes:
        return Verdict(Status.FAIL, f"{said}: expected every one of the {nodes} node(s) to take part", bandwidth)
    if payload.get("correct") is not True:
        return Verdict(Status.FAIL, f"{said}: the all-reduce sum is wrong on some rank", bandwidth)
    return exited_badly(Verdict(Status.PASS, f"{said}, all-reduce correct", bandwidth), result.exit_status)


# --- the container path --------------------------------------------------------------------------

# "ModuleNotFoundError: No module named 'torch'"; sh's "exec: python: not found" (dash, bash alike).
_NO_TORCH = re.compile(r"No module named '?torch|python3?: (?:command )?not found")


def container_lacks_torch(result: CommandResult) -> bool:
    """Whether a job in the container failed because the image has no python or no PyTorch."""
    if result.exit_status == 0 or result.exit_status == TIMED_OUT:
        return False
    return _NO_TORCH.search(f"{result.stdout}\n{result.stderr}") is not None


# --- workloads.env ---------------------------------------------------------------------------


def same_release(found: str, wanted: str) -> bool:
    """torch's ``2.13.0+cpu`` against the spec's ``2.13.0`` or ``2.13`` (build tag and missing .0 ignored)."""

    def parts(version: str) -> list[str]:
        numbers = version.split("+", 1)[0].split(".")
        return [*numbers, "0", "0"][:3]

    return parts(found) == parts(wanted)
