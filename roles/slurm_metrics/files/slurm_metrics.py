#!/usr/bin/python3
# managed by gpuclus — edits are overwritten (role slurm_metrics)
"""Slurm's nodes, partitions, queue and scheduler, for the node exporter's textfile collector.

One run asks slurmctld four things (scontrol show nodes, scontrol show
partitions, squeue, sdiag), each with a timeout, and replaces
<textfile dir>/slurm.prom atomically with the metrics of docs/monitoring.md
("Slurm metrics"). When slurmctld does not answer, the file says slurm_up 0
and holds nothing else from Slurm. A systemd timer runs it every few seconds
on the controller.

Standard library only (Python 3.9+); the parsing and rendering functions are
importable, so they can be tested on captured outputs without Slurm.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

OUTPUT_NAME = "slurm.prom"
DEFAULT_DIRECTORY = "/var/lib/prometheus/node-exporter"

# The node states of slurm_node_state and slurm_partition_nodes, in sinfo's
# long names (docs/monitoring.md).
NODE_STATES = (
    "idle",
    "mixed",
    "allocated",
    "completing",
    "draining",
    "drained",
    "down",
    "fail",
    "maint",
    "reserved",
    "planned",
    "future",
    "unknown",
)
# The job states counted, as squeue names them; pending and running are
# written for every partition, 0 included.
JOB_STATES = ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING")
ALWAYS_JOB_STATES = ("pending", "running")
JOB_EVENTS = ("submitted", "started", "completed", "canceled", "failed")

# squeue's fields, each printed in full (size 0) and ended by the ASCII unit
# separator, which no user, account or partition name holds. No field a user
# chooses freely (job name, comment, paths) is asked for.
FIELD_END = "\x1f"
JOB_FIELDS = (
    "JobID",
    "Partition",
    "UserName",
    "Account",
    "State",
    "NumNodes",
    "NumTasks",
    "tres-alloc",
    "tres-per-job",
    "tres-per-node",
    "tres-per-task",
)

NODES_COMMAND = ("scontrol", "--all", "--details", "--oneliner", "show", "nodes")
PARTITIONS_COMMAND = ("scontrol", "--all", "--oneliner", "show", "partitions")
JOBS_COMMAND = (
    "squeue",
    "--all",
    "--noheader",
    "--states=" + ",".join(JOB_STATES),
    "--Format=" + ",".join(f"{name}:0{FIELD_END}" for name in JOB_FIELDS),
)
SDIAG_COMMAND = ("sdiag",)

MIB = 1024 * 1024

# "Reason=... [slurm@2024-05-01T10:00:00]": who set it and when, left out of the label.
REASON_STAMP = re.compile(r"\s*\[[^\[\]@]*@[^\[\]]*\]\s*\Z")
# A key of scontrol's one-line output: a word of letters, digits and a few
# signs, then "=" ("AllocNode:Sid=", "CPUs/Task=", "ReqB:S:C:T=").
KEY = re.compile(r"[A-Za-z][A-Za-z0-9_:/]*=")
# Keys whose values are free text that may hold spaces and even "Word=": only
# the keys listed may end them. The reason is printed last but for these.
FREE_TEXT_ENDS = {"Reason": ("Comment", "Extra"), "Comment": ("Extra",)}


class CommandFailed(Exception):
    """A Slurm command did not answer: slurmctld down, timeout, or the command missing."""


# ---------------------------------------------------------------- parsing


def scontrol_records(text: str) -> list[dict[str, str]]:
    """The records of `scontrol --oneliner show ...`: one dict per line, key → value.

    Values may hold spaces (OS=Linux 6.1.0 #1 SMP ...): a word without "=" is
    part of the value before it. A reason is free text: only the keys printed
    after it (Comment, Extra) end it.
    """
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record: dict[str, str] = {}
        key: str | None = None
        words: list[str] = []
        for word in line.split(" "):
            match = KEY.match(word)
            starts_key = match is not None and (
                key is None or key not in FREE_TEXT_ENDS or match.group()[:-1] in FREE_TEXT_ENDS[key]
            )
            if match is not None and starts_key:
                if key is not None:
                    record.setdefault(key, " ".join(words).strip())
                key = match.group()[:-1]
                words = [word[match.end() :]]
            elif key is not None:
                words.append(word)
        if key is not None:
            record.setdefault(key, " ".join(words).strip())
        records.append(record)
    return records


def count(text: str) -> int:
    """A count as Slurm prints it: 2, 16K, 1M (powers of 1024); 0 for anything else."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", text.strip())
    if match is None:
        return 0
    scale: int = 1024 ** " KMGT".index(match.group(2) or " ")
    return int(match.group(1)) * scale


def split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses: "gpu:2(IDX:0,1),mps:100" → two items."""
    items = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def gres_gpus(text: str) -> int:
    """GPUs in a GRES list: "gpu:2", "gpu:a100:4(S:0-1)", "gpu:a100:1(IDX:0),gpu:v100:0(IDX:N/A)",
    "gres:gpu:1" and "gres/gpu:1" (squeue's per-job/node/task requests); 0 for "(null)" or "N/A"."""
    total = 0
    for item in split_top_level(text):
        parts = item.split("(", 1)[0].split(":")
        if parts[0] == "gres":  # squeue's "gres:gpu:1" (22.05)
            parts = parts[1:]
        elif parts[0].startswith("gres/"):  # "gres/gpu:1" (later versions)
            parts = [parts[0][len("gres/") :], *parts[1:]]
        if not parts or parts[0] != "gpu":
            continue
        # gpu, gpu:2, gpu:type, gpu:type:2: a count last, or one GPU
        total += count(parts[-1]) if len(parts) > 1 and re.fullmatch(r"\d+[KMGT]?", parts[-1]) else 1
    return total


def tres_gpus(text: str) -> int | None:
    """gres/gpu of a TRES string ("cpu=2,mem=1000M,gres/gpu=2,gres/gpu:a100=2"); None when not there."""
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name.strip() == "gres/gpu":
            return count(value)
    return None


def node_state(state: str) -> tuple[str, bool]:
    """(base state in sinfo's long name, not responding) from scontrol's State=, e.g. "IDLE+DRAIN",
    "DOWN+NOT_RESPONDING", "DOWN*", "MIXED+COMPLETING+DRAIN", "IDLE+PLANNED".

    The precedence is sinfo's: maintenance, drain (draining while jobs run),
    fail, down, allocated, completing, then the base state. Flags without a
    state of their own (cloud, power saving, reboot) leave the base state.
    """
    words = [word.strip() for word in state.upper().split("+") if word.strip()]
    if not words:
        return "unknown", False
    not_responding = any(word.endswith("*") for word in words) or "NOT_RESPONDING" in words
    words = [word.rstrip("*~#!%$@^-") for word in words]
    base, flags = words[0], set(words[1:])
    base = {"ALLOC": "ALLOCATED", "MIX": "MIXED", "DRAINED": "IDLE"}.get(base, base)
    busy = base in ("ALLOCATED", "MIXED") or "COMPLETING" in flags
    if flags & {"MAINT", "MAINTENANCE"} and "DRAIN" not in flags and base not in ("ALLOCATED", "DOWN", "MIXED"):
        return "maint", not_responding
    if "DRAIN" in flags or base in ("DRAIN", "DRAINING"):
        return ("draining" if busy or base == "DRAINING" else "drained"), not_responding
    if "FAIL" in flags or base in ("FAIL", "FAILING"):
        return "fail", not_responding
    if base == "DOWN":
        return "down", not_responding
    if base == "ALLOCATED":
        return "allocated", not_responding
    if "COMPLETING" in flags or base == "COMPLETING":
        return "completing", not_responding
    if base == "IDLE":
        if "RESERVED" in flags:
            return "reserved", not_responding
        if "PLANNED" in flags:
            return "planned", not_responding
        return "idle", not_responding
    if base in ("MIXED", "FUTURE", "UNKNOWN"):
        return base.lower(), not_responding
    return "unknown", not_responding


def null(text: str | None) -> str:
    """Slurm's "(null)", "N/A" and "None" as an empty string."""
    value = (text or "").strip()
    return "" if value in ("(null)", "N/A", "None", "n/a") else value


@dataclass
class Node:
    name: str
    state: str
    not_responding: bool
    reason: str
    partitions: list[str]
    cpus_total: int
    cpus_alloc: int
    gpus_total: int
    gpus_alloc: int
    memory_total_bytes: int
    memory_alloc_bytes: int


def parse_nodes(text: str) -> list[Node]:
    """`scontrol --all --details --oneliner show nodes`."""
    nodes = []
    for record in scontrol_records(text):
        name = record.get("NodeName", "")
        if not name:
            continue
        state, not_responding = node_state(record.get("State", ""))
        gpus_total = gres_gpus(null(record.get("Gres")))
        # GresUsed (with --details) counts every allocated GPU; AllocTRES only
        # the GRES that AccountingStorageTRES tracks.
        used = null(record.get("GresUsed"))
        gpus_alloc = gres_gpus(used) if used else (tres_gpus(record.get("AllocTRES", "")) or 0)
        reason = REASON_STAMP.sub("", null(record.get("Reason")))
        nodes.append(
            Node(
                name=name,
                state=state,
                not_responding=not_responding,
                reason=reason,
                partitions=[part for part in null(record.get("Partitions")).split(",") if part],
                cpus_total=count(record.get("CPUTot", "0")),
                cpus_alloc=count(record.get("CPUAlloc", "0")),
                gpus_total=gpus_total,
                gpus_alloc=gpus_alloc,
                memory_total_bytes=count(record.get("RealMemory", "0")) * MIB,
                memory_alloc_bytes=count(record.get("AllocMem", "0")) * MIB,
            )
        )
    return nodes


def parse_partitions(text: str) -> list[str]:
    """The partition names of `scontrol --all --oneliner show partitions`, in Slurm's order."""
    return [record["PartitionName"] for record in scontrol_records(text) if record.get("PartitionName")]


@dataclass
class Job:
    partition: str
    user: str
    account: str
    state: str
    gpus: int


def job_gpus(values: dict[str, str]) -> int:
    """GPUs of a job: gres/gpu of its allocated TRES, which covers --gres=gpu:N, --gpus=N and
    --gpus-per-task alike. Where AccountingStorageTRES does not track gres/gpu, from the request:
    per job, per node times nodes, per task times tasks."""
    allocated = tres_gpus(values.get("tres-alloc", ""))
    if allocated is not None:
        return allocated
    return (
        gres_gpus(null(values.get("tres-per-job")))
        + gres_gpus(null(values.get("tres-per-node"))) * max(count(values.get("NumNodes", "1")), 1)
        + gres_gpus(null(values.get("tres-per-task"))) * max(count(values.get("NumTasks", "1")), 1)
    )


def parse_jobs(text: str) -> list[Job]:
    """squeue's lines (JOBS_COMMAND). A job pending in several partitions ("gpu,debug") counts in the first."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = dict(zip(JOB_FIELDS, (value.strip() for value in line.split(FIELD_END)), strict=False))
        state = values.get("State", "").lower()
        if not state:
            continue
        jobs.append(
            Job(
                partition=values.get("Partition", "").split(",")[0],
                user=values.get("UserName", ""),
                account=null(values.get("Account")),
                state=state,
                gpus=job_gpus(values),
            )
        )
    return jobs


# sdiag lines: (section, label) → metric. Cycle times are in microseconds.
SDIAG_VALUES = {
    ("", "Server thread count"): "slurm_scheduler_threads",
    ("", "Agent queue size"): "slurm_scheduler_agent_queue_size",
    ("", "DBD Agent queue size"): "slurm_scheduler_dbd_agent_queue_size",
    ("main", "Last cycle"): "slurm_scheduler_last_cycle_seconds",
    ("main", "Mean cycle"): "slurm_scheduler_mean_cycle_seconds",
    ("main", "Total cycles"): "slurm_scheduler_cycles_total",
    ("backfill", "Last cycle"): "slurm_scheduler_backfill_last_cycle_seconds",
    ("backfill", "Mean cycle"): "slurm_scheduler_backfill_mean_cycle_seconds",
    ("backfill", "Total cycles"): "slurm_scheduler_backfill_cycles_total",
    ("backfill", "Total backfilled jobs (since last slurm start)"): "slurm_scheduler_backfilled_jobs_total",
}
SDIAG_JOBS = {f"Jobs {event}": event for event in JOB_EVENTS}
# sdiag's section headings (lower case) and the section they open.
SDIAG_SECTIONS = (
    ("main schedule statistics", "main"),
    ("backfilling stats", "backfill"),
    ("latency", "other"),
    ("remote procedure call", "other"),
    ("pending rpc", "other"),
)


def parse_sdiag(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """(scheduler metric → value, job event → count) from sdiag's report.

    A mean cycle is printed only once there was a cycle: until then it is 0.
    """
    values: dict[str, float] = {}
    events: dict[str, float] = {}
    section = ""
    for line in text.splitlines():
        label, colon, rest = line.strip().partition(":")
        if not line.startswith(("\t", " ")):
            # An unindented line opens a section ("Main schedule statistics
            # (microseconds):", "Backfilling stats") or is a top-level figure.
            heading = line.strip().lower()
            section = next((name for start, name in SDIAG_SECTIONS if heading.startswith(start)), "")
        number = re.match(r"\s*(\d+(?:\.\d+)?)", rest)
        if not colon or number is None:
            continue
        value = float(number.group(1))
        metric = SDIAG_VALUES.get((section, label.strip()))
        if metric is not None:
            values[metric] = value / 1e6 if metric.endswith("_seconds") else value
        elif section == "" and label.strip() in SDIAG_JOBS:
            events[SDIAG_JOBS[label.strip()]] = value
    for metric in ("slurm_scheduler_mean_cycle_seconds", "slurm_scheduler_backfill_mean_cycle_seconds"):
        values.setdefault(metric, 0.0)
    return values, events


# ---------------------------------------------------------------- output


def escape(value: str) -> str:
    """A label value in the text exposition format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


@dataclass
class Family:
    name: str
    kind: str
    help: str
    samples: list[tuple[tuple[tuple[str, str], ...], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((tuple(labels.items()), value))

    def text(self) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, value in sorted(self.samples, key=lambda item: item[0]):
            rendered = ",".join(f'{name}="{escape(text)}"' for name, text in labels)
            lines.append(f"{self.name}{{{rendered}}} {sample(value)}" if labels else f"{self.name} {sample(value)}")
        return "\n".join(lines) + "\n"


@dataclass
class Snapshot:
    """What slurmctld answered in one collection."""

    nodes: list[Node]
    partitions: list[str]
    jobs: list[Job]
    scheduler: dict[str, float]
    events: dict[str, float]


HELP = {
    "slurm_up": "1 when slurmctld answered the last collection, 0 when it did not.",
    "slurm_collector_last_success_timestamp_seconds": "Unix time of the last collection that reached slurmctld.",
    "slurm_collector_duration_seconds": "How long the last collection took.",
    "slurm_node_state": "1 for the node's current base state (one series per node).",
    "slurm_node_not_responding": "1 when Slurm marks the node not responding, else 0.",
    "slurm_node_reason_info": "1 for a node with a drain or down reason (the reason, without who set it and when).",
    "slurm_node_cpus": "CPUs of the node, allocated and total.",
    "slurm_node_gpus": "GPUs (GRES gpu) of the node, allocated and total.",
    "slurm_node_memory_bytes": "Memory of the node (RealMemory), allocated and total.",
    "slurm_partition_nodes": "Nodes of the partition by base state.",
    "slurm_partition_cpus": "CPUs of the partition's nodes, allocated and total.",
    "slurm_partition_gpus": "GPUs of the partition's nodes, allocated and total.",
    "slurm_jobs": "Jobs by partition and state.",
    "slurm_user_jobs": "Jobs by user, account and state.",
    "slurm_user_gpus": "GPUs allocated to the user's running jobs.",
    "slurm_scheduler_threads": "slurmctld server thread count (sdiag).",
    "slurm_scheduler_agent_queue_size": "slurmctld agent queue size (sdiag).",
    "slurm_scheduler_dbd_agent_queue_size": "slurmctld DBD agent queue size (sdiag).",
    "slurm_scheduler_last_cycle_seconds": "Main scheduler: duration of the last cycle (sdiag).",
    "slurm_scheduler_mean_cycle_seconds": "Main scheduler: mean cycle duration (sdiag).",
    "slurm_scheduler_cycles_total": "Main scheduler: cycles since sdiag's last reset.",
    "slurm_scheduler_backfill_last_cycle_seconds": "Backfill scheduler: duration of the last cycle (sdiag).",
    "slurm_scheduler_backfill_mean_cycle_seconds": "Backfill scheduler: mean cycle duration (sdiag; 0 before a cycle).",
    "slurm_scheduler_backfill_cycles_total": "Backfill scheduler: cycles since sdiag's last reset.",
    "slurm_scheduler_backfilled_jobs_total": "Jobs started by the backfill scheduler since slurmctld started.",
    "slurm_scheduler_jobs_total": "Jobs submitted, started, completed, canceled and failed since sdiag's last reset.",
}


def family(name: str, kind: str = "gauge") -> Family:
    return Family(name, kind, HELP[name])


def render(snapshot: Snapshot | None, duration: float, last_success: float | None) -> str:
    """The exposition text. snapshot None: slurmctld did not answer (slurm_up 0 and the timestamps)."""
    families = [family("slurm_up")]
    families[0].add(0 if snapshot is None else 1)
    if last_success is not None:
        stamp = family("slurm_collector_last_success_timestamp_seconds")
        stamp.add(last_success)
        families.append(stamp)
    took = family("slurm_collector_duration_seconds")
    took.add(round(duration, 6))
    families.append(took)
    if snapshot is not None:
        families += slurm_families(snapshot)
    # A family without samples is left out, HELP and TYPE included.
    return "".join(item.text() for item in families if item.samples)


def slurm_families(snapshot: Snapshot) -> list[Family]:
    state = family("slurm_node_state")
    not_responding = family("slurm_node_not_responding")
    reason = family("slurm_node_reason_info")
    cpus = family("slurm_node_cpus")
    gpus = family("slurm_node_gpus")
    memory = family("slurm_node_memory_bytes")
    for node in snapshot.nodes:
        state.add(1, node=node.name, state=node.state)
        not_responding.add(1 if node.not_responding else 0, node=node.name)
        if node.reason:
            reason.add(1, node=node.name, reason=node.reason)
        for status, cpu, gpu, mem in (
            ("alloc", node.cpus_alloc, node.gpus_alloc, node.memory_alloc_bytes),
            ("total", node.cpus_total, node.gpus_total, node.memory_total_bytes),
        ):
            cpus.add(cpu, node=node.name, status=status)
            gpus.add(gpu, node=node.name, status=status)
            memory.add(mem, node=node.name, status=status)

    partition_nodes = family("slurm_partition_nodes")
    partition_cpus = family("slurm_partition_cpus")
    partition_gpus = family("slurm_partition_gpus")
    for partition in snapshot.partitions:
        members = [node for node in snapshot.nodes if partition in node.partitions]
        for name in NODE_STATES:
            partition_nodes.add(sum(1 for node in members if node.state == name), partition=partition, state=name)
        partition_cpus.add(sum(node.cpus_alloc for node in members), partition=partition, status="alloc")
        partition_cpus.add(sum(node.cpus_total for node in members), partition=partition, status="total")
        partition_gpus.add(sum(node.gpus_alloc for node in members), partition=partition, status="alloc")
        partition_gpus.add(sum(node.gpus_total for node in members), partition=partition, status="total")

    jobs_by_partition: dict[tuple[str, str], int] = {
        (partition, name): 0 for partition in snapshot.partitions for name in ALWAYS_JOB_STATES
    }
    jobs_by_user: dict[tuple[str, str, str], int] = {}
    gpus_by_user: dict[tuple[str, str], int] = {}
    for job in snapshot.jobs:
        jobs_by_partition[(job.partition, job.state)] = jobs_by_partition.get((job.partition, job.state), 0) + 1
        key = (job.user, job.account, job.state)
        jobs_by_user[key] = jobs_by_user.get(key, 0) + 1
        held = job.gpus if job.state == "running" else 0
        gpus_by_user[(job.user, job.account)] = gpus_by_user.get((job.user, job.account), 0) + held
    jobs = family("slurm_jobs")
    for (partition, name), number in jobs_by_partition.items():
        jobs.add(number, partition=partition, state=name)
    user_jobs = family("slurm_user_jobs")
    for (user, account, name), number in jobs_by_user.items():
        user_jobs.add(number, user=user, account=account, state=name)
    user_gpus = family("slurm_user_gpus")
    for (user, account), number in gpus_by_user.items():
        user_gpus.add(number, user=user, account=account)

    scheduler = []
    for metric in SDIAG_VALUES.values():
        if metric in snapshot.scheduler:
            item = family(metric, "counter" if metric.endswith("_total") else "gauge")
            item.add(snapshot.scheduler[metric])
            scheduler.append(item)
    events = family("slurm_scheduler_jobs_total", "counter")
    for event in JOB_EVENTS:
        if event in snapshot.events:
            events.add(snapshot.events[event], event=event)

    families = [state, not_responding, reason, cpus, gpus, memory, partition_nodes, partition_cpus, partition_gpus]
    families += [jobs, user_jobs, user_gpus, *scheduler, events]
    return families


# ---------------------------------------------------------------- running

Runner = Callable[[Iterable[str]], str]


def command_runner(timeout: float) -> Runner:
    """Run a Slurm command: its stdout, or CommandFailed (non-zero exit, timeout, not installed)."""

    def run(argv: Iterable[str]) -> str:
        words = list(argv)
        try:
            done = subprocess.run(  # a fixed argv, no shell
                words,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                env={**os.environ, "LC_ALL": "C"},
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise CommandFailed(f"{words[0]}: {error}") from error
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise CommandFailed(f"{' '.join(words)}: exit {done.returncode}: {message[-1] if message else ''}")
        return done.stdout

    return run


def collect(run: Runner) -> Snapshot:
    """Ask slurmctld; CommandFailed as soon as one command does not answer (the rest are not run)."""
    nodes = parse_nodes(run(NODES_COMMAND))
    partitions = parse_partitions(run(PARTITIONS_COMMAND))
    jobs = parse_jobs(run(JOBS_COMMAND))
    scheduler, events = parse_sdiag(run(SDIAG_COMMAND))
    return Snapshot(nodes=nodes, partitions=partitions, jobs=jobs, scheduler=scheduler, events=events)


def previous_success(path: Path) -> float | None:
    """slurm_collector_last_success_timestamp_seconds of the file the last run wrote, if any."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"^slurm_collector_last_success_timestamp_seconds (\S+)$", text, re.MULTILINE)
    if match is None:
        return None
    try:
        return float(match.group(1))
    except ValueError:
        return None


def write_atomically(path: Path, text: str) -> None:
    """Replace path with text: a hidden temporary file (not *.prom) in the same directory, fsync, rename.

    The node exporter reads either the old file or the new one, never half of one.
    """
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        temporary.chmod(0o644)
        temporary.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def collect_text(run: Runner, last_success: Callable[[], float | None], clock: Callable[[], float]) -> tuple[str, bool]:
    """One collection as exposition text, and whether slurmctld answered.

    ``last_success`` gives the previous success's time, asked only when slurmctld does not answer.
    """
    started = time.monotonic()
    try:
        snapshot: Snapshot | None = collect(run)
    except CommandFailed as error:
        print(f"slurm-metrics: slurmctld did not answer: {error}", file=sys.stderr)
        snapshot = None
    duration = time.monotonic() - started
    stamp = clock() if snapshot is not None else last_success()
    return render(snapshot, duration, stamp), snapshot is not None


def run_once(output: Path, run: Runner, clock: Callable[[], float] = time.time) -> bool:
    """One collection written to output; True when slurmctld answered."""
    text, answered = collect_text(run, lambda: previous_success(output), clock)
    write_atomically(output, text)
    return answered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output",
        type=Path,
        default=Path(DEFAULT_DIRECTORY) / OUTPUT_NAME,
        help="file to replace (default: %(default)s); its directory must exist",
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds each Slurm command may take")
    parser.add_argument("--stdout", action="store_true", help="print the metrics instead of writing a file")
    options = parser.parse_args(argv)
    run = command_runner(options.timeout)
    if options.stdout:
        text, _answered = collect_text(run, lambda: None, time.time)
        sys.stdout.write(text)
        return 0
    run_once(options.output, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
