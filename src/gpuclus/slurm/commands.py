"""Slurm command lines and parsers: pure functions, tested on recorded output.

validate, status, upgrade, nodes and users read Slurm's answers through these.

Every job validate starts carries one job name (``gpuclus-validate-<id>``):
that is how the accounting check finds them in sacct and how the clean-up at
the end (or on Ctrl-C) cancels whatever is still queued or running.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpuclus.errors import GpuclusError
from gpuclus.hints import gpuclus_command
from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.ssh.client import CommandResult

# Slack between Slurm's own time limit and the `timeout` around srun, so that
# Slurm normally ends an overdue job and timeout only catches a stuck srun.
_TIMEOUT_SLACK_S = 30


def srun_command(
    command: str,
    *,
    job_name: str,
    time_limit_s: int,
    nodes: list[str] | None = None,
    partition: str | None = None,
    ntasks_per_node: int = 1,
    gres: str | None = None,
    gpus_per_node: int | None = None,
    queue_wait_s: int | None = None,
    extra: tuple[str, ...] = (),
    shell: str = "sh",
) -> str:
    """An srun line bounded twice: Slurm's --time and a `timeout` around srun itself.

    ``command`` is a shell command run by ``sh -c`` in every task (``shell``
    names another, e.g. ``/bin/sh`` by its path in a container image).
    """
    words = ["srun", f"--job-name={job_name}", f"--time={_minutes(time_limit_s)}"]
    if partition:
        words.append(f"--partition={partition}")
    if nodes:
        words += [f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}"]
    if queue_wait_s is not None:
        # A node that is busy, completing a stuck job or not responding would
        # otherwise keep the job pending until the time limit.
        words.append(f"--immediate={queue_wait_s}")
    words.append(f"--ntasks-per-node={ntasks_per_node}")
    if gres:
        words.append(f"--gres={gres}")
    if gpus_per_node is not None:
        words.append(f"--gpus-per-node={gpus_per_node}")
    # Without --kill-on-bad-exit one failed task leaves the others running
    # until the time limit; a launch failure must end the step at once.
    words += ["--kill-on-bad-exit=1", "--quit-on-interrupt", *extra, shell, "-c", command]
    bounded = ["timeout", "--kill-after=10", str(time_limit_s + (queue_wait_s or 0) + _TIMEOUT_SLACK_S)]
    return shlex.join(bounded + words)


def sbatch_command(
    script: str | None,
    *,
    job_name: str,
    time_limit_s: int,
    workdir: str,
    nodes: list[str] | None = None,
    partition: str | None = None,
    ntasks_per_node: int = 1,
    gpus_per_node: int | None = None,
    queue_wait_s: int | None = None,
    extra: tuple[str, ...] = (),
) -> str:
    """An ``sbatch --wait`` line: it returns when the job ends, with the job's exit status.

    The options given here override the script's own ``#SBATCH`` lines; the
    job name is always the run's. ``--parsable`` makes sbatch print the job id
    alone (``123`` or ``123;cluster``) when it submits. sbatch has no
    ``--immediate``: the `timeout` around it covers the queue wait too, and
    ``script`` None reads the script from stdin.
    """
    words = [
        "sbatch",
        "--wait",
        "--parsable",
        f"--job-name={job_name}",
        f"--time={_minutes(time_limit_s)}",
        f"--chdir={workdir}",
    ]
    if partition:
        words.append(f"--partition={partition}")
    if nodes:
        words += [f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}"]
    words.append(f"--ntasks-per-node={ntasks_per_node}")
    if gpus_per_node is not None:
        words.append(f"--gpus-per-node={gpus_per_node}")
    words += list(extra)
    if script is not None:
        words.append(script)
    bounded = ["timeout", "--kill-after=10", str(time_limit_s + (queue_wait_s or 0) + _TIMEOUT_SLACK_S)]
    return shlex.join(bounded + words)


_JOB_ID = re.compile(r"^(\d+)(?:;\S*)?$")


def parse_job_id(text: str) -> str | None:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``), or None."""
    for line in text.splitlines():
        match = _JOB_ID.match(line.strip())
        if match:
            return match.group(1)
    return None


def _minutes(seconds: int) -> int:
    return max(1, -(-seconds // 60))


def cancel_command(job_name: str) -> str:
    """Cancel every job of this validate run that is still pending or running (ours only)."""
    return f'scancel --name={shlex.quote(job_name)} --user="$(id -un)" 2>/dev/null; true'


# --- scontrol show node -o -------------------------------------------------

# A key starts a line or follows a space; values may hold spaces (Reason=, OS=)
# and `=` after a comma (CfgTRES=cpu=2,mem=1G), so split only on " Key=".
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_/:.]*)=")


def parse_key_values(line: str) -> dict[str, str]:
    matches = list(_KEY.finditer(line))
    fields: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        fields[match.group(1)] = line[match.end() : end].strip()
    return fields


def parse_nodes(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show node -o` → {NodeName: {key: value}}."""
    nodes: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = parse_key_values(line.strip())
        if "NodeName" in fields:
            nodes[fields["NodeName"]] = fields
    return nodes


GOOD_BASE_STATES = frozenset({"IDLE", "MIXED", "ALLOCATED", "COMPLETING"})
BAD_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "NOT_RESPONDING", "MAINT", "INVALID_REG"})


@dataclass(frozen=True)
class NodeState:
    base: str
    flags: frozenset[str]

    @classmethod
    def parse(cls, text: str) -> NodeState:
        parts = [part for part in text.strip().upper().split("+") if part]
        raw = parts[0] if parts else "UNKNOWN"
        base = raw.rstrip("*~#!%$@^-")
        flags = set(parts[1:])
        if raw.endswith("*"):  # sinfo's way of saying NOT_RESPONDING
            flags.add("NOT_RESPONDING")
        return cls(base, frozenset(flags))

    @property
    def completing(self) -> bool:
        """Still cleaning up after a job: busy for new jobs for now."""
        return self.base == "COMPLETING" or "COMPLETING" in self.flags

    @property
    def usable(self) -> bool:
        return self.base in GOOD_BASE_STATES and not (self.flags & BAD_FLAGS)

    def __str__(self) -> str:
        return "+".join([self.base, *sorted(self.flags)]).lower()


def parse_gres(text: str) -> dict[str, int]:
    """Slurm's Gres field → {"gpu": 2} or {"gpu:h100": 8}; "(null)" → {}.

    Handles `gpu:2`, `gpu:h100:8(S:0-1)` and comma-separated lists.
    """
    counts: dict[str, int] = {}
    if not text or text.strip() in ("(null)", "N/A"):
        return counts
    for item in re.split(r",(?![^(]*\))", text):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = item.split(":")
        if len(parts) >= 2 and parts[-1].isdigit():
            counts[":".join(parts[:-1])] = int(parts[-1])
        elif parts and parts[0]:
            counts[":".join(parts)] = 1
    return counts


def gres_gpu_total(gres: dict[str, int]) -> int:
    return sum(count for name, count in gres.items() if name == "gpu" or name.startswith("gpu:"))


# --- sinfo -----------------------------------------------------------------

SINFO_PARTITIONS = "sinfo --noheader --format='%R|%a|%D|%N'"


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    available: str
    node_count: int
    nodes: str


def parse_partitions(text: str) -> dict[str, PartitionInfo]:
    partitions: dict[str, PartitionInfo] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        name, available, count, nodes = fields
        partitions[name] = PartitionInfo(name, available, int(count) if count.isdigit() else 0, nodes)
    return partitions


# --- srun output -------------------------------------------------------------


# Running jobs' users and allocated TRES, '|'-separated (a field suffix; the
# same in Slurm 22.05 and 24.11). tres-alloc holds the job's whole GPU count
# as gres/gpu=N (typed counts such as gres/gpu:a100=N come beside it).
SQUEUE_GPUS = "squeue --noheader --states=RUNNING --Format='UserName:|,tres-alloc:|'"


def parse_gpus_in_use(text: str) -> dict[str, int]:
    """GPUs held by each user's running jobs, from SQUEUE_GPUS' output (users without GPUs left out)."""
    held: dict[str, int] = {}
    for line in text.splitlines():
        user, _, rest = line.strip().partition("|")
        tres = rest.rstrip("|")
        for item in tres.split(","):
            name, _, value = item.partition("=")
            if name == "gres/gpu" and value.isdigit() and int(value) > 0:
                held[user] = held.get(user, 0) + int(value)
    return held


def job_failure(result: CommandResult) -> str:
    """One line on why an srun failed: srun's own error, or that it ran out of time."""
    if result.exit_status == TIMED_OUT:
        return "the job did not start or finish within its time limit (node unreachable, busy or hung)"
    return first_error_line(result.stderr, f"srun exited {result.exit_status}")


def first_error_line(stderr: str, default: str = "") -> str:
    for line in stderr.splitlines():
        if "error" in line.lower() or "fatal" in line.lower():
            return line.strip()
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else default


# --- is Slurm there at all ----------------------------------------------------


class SlurmNotDeployed(GpuclusError):
    """The controller has no Slurm (no scontrol, no slurm.conf): nothing to validate yet (exit 1)."""

    def __init__(self, controller: str, detail: str, spec: Path | None = None) -> None:
        super().__init__(
            f"Slurm is not deployed on {controller} ({detail})",
            f"run `{gpuclus_command('deploy', spec)}` first, then validate",
        )


def not_deployed(ping: CommandResult) -> str | None:
    """What `scontrol ping` says when Slurm is not installed or not configured on the controller, else None."""
    text = ping.stdout + ping.stderr
    if ping.exit_status == 127 or "command not found" in text or "scontrol: not found" in text:
        return "scontrol: command not found"
    if "slurm.conf" in text and ("No such file" in text or "unable to stat" in text or "can't stat" in text):
        return "no /etc/slurm/slurm.conf"
    return None
