"""Ask every node at once: one SSH connection and one script per node, answers as marked sections.

Connections use gpuclus' key and known_hosts and never learn a host key
(RejectPolicy, like plan). A node that cannot be reached is an answer too
(``reachable=False`` with SSH's words and a hint), never an exception.

Threads are daemon threads: on Ctrl-C the command returns at once instead of
waiting for a slow node's deadline (its connection dies with the process).
"""

from __future__ import annotations

import queue
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuclus.spec.services import GRAFANA_SKIPPED
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget
from gpuclus.status.expected import NodePlan
from gpuclus.status.parse import EXIT, SECTION, SQUEUE_FORMAT, Section, parse_sections

CONNECT_TIMEOUT = 5.0
# The whole script on one node; each Slurm command has its own, shorter bound.
SCRIPT_TIMEOUT = 30.0
MAX_PARALLEL = 32  # nodes asked at once
SLURM_TIMEOUT = 15
TIMED_OUT = 124  # coreutils' timeout, when a Slurm command ran past SLURM_TIMEOUT
CURL_TIMEOUT = 10

# Section names (the keys of NodeAnswer.sections).
UNITS = "units"
PING = "ping"
NODES = "nodes"
PARTITIONS = "partitions"
JOBS = "jobs"
TARGETS = "targets"
GRAFANA_MARKER = "grafana_skipped"


def _section(name: str, command: str) -> str:
    # A newline before the exit marker: curl's JSON does not end with one. $rc stays for the next line.
    return f"echo '{SECTION}{name}'; {command} 2>&1; rc=$?; printf '\\n{EXIT}%s\\n' \"$rc\""


def script(node: NodePlan) -> str:
    """The one shell script a node runs: each question a section, each with its exit status."""
    parts = []
    if node.units:
        parts.append(_section(UNITS, "systemctl is-active " + " ".join(shlex.quote(unit) for unit in node.units)))
    if node.controller:
        # `scontrol ping` answers at once when slurmctld is down, where each query would wait ~9 s
        # (MessageTimeout): ask the rest only when it is up.
        bound = f"timeout {SLURM_TIMEOUT}"
        queries = "\n".join(
            [
                _section(NODES, f"{bound} scontrol show nodes -o"),
                _section(PARTITIONS, f"{bound} scontrol show partitions -o"),
                _section(JOBS, f"{bound} squeue --noheader --all --format={shlex.quote(SQUEUE_FORMAT)}"),
            ]
        )
        parts += [_section(PING, f"{bound} scontrol ping"), f'if [ "$rc" -eq 0 ]; then\n{queries}\nfi']
    if node.targets_url is not None:
        parts.append(_section(TARGETS, f"curl -fsS --max-time {CURL_TIMEOUT} {shlex.quote(node.targets_url)}"))
    if node.grafana_marker:
        marker = shlex.quote(GRAFANA_SKIPPED)
        parts.append(_section(GRAFANA_MARKER, f"test -e {marker} && head -c 4096 -- {marker}"))
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class NodeAnswer:
    node: str
    reachable: bool
    sections: dict[str, Section] = field(default_factory=dict)
    error: str | None = None  # why the node could not be reached
    hint: str | None = None
    seconds: float = 0.0


# Runs a script on a node over SSH and returns what it printed; raises SshFailure when the node cannot be
# reached or the session breaks. Tests put a fake here.
ScriptRunner = Callable[[SshTarget, str], CommandResult]


def run_script(target: SshTarget, text: str) -> CommandResult:
    """Connect with gpuclus' key (known hosts only), run ``text`` under a deadline, disconnect."""
    from gpuclus.slurm.remote import Remote
    from gpuclus.ssh.client import connect

    remote = Remote(connect(target, timeout=CONNECT_TIMEOUT))
    try:
        return remote.run(text, timeout=SCRIPT_TIMEOUT)
    except OSError as problem:  # the session dropped under the command
        raise SshFailure(f"{target.address}: {problem or type(problem).__name__}") from None
    finally:
        remote.close()


def ask(
    node: NodePlan,
    user: str,
    key_file: Path,
    known_hosts: Path,
    runner: ScriptRunner,
    hint_for: Callable[[str], str],
) -> NodeAnswer:
    started = time.monotonic()
    target = SshTarget(node.address, user, key_file, known_hosts)
    try:
        result = runner(target, script(node))
    except SshFailure as failure:
        message = str(failure)
        return NodeAnswer(node.name, False, error=message, hint=hint_for(message), seconds=time.monotonic() - started)
    return NodeAnswer(node.name, True, parse_sections(result.stdout), seconds=time.monotonic() - started)


def collect(
    nodes: list[NodePlan],
    user: str,
    key_file: Path,
    known_hosts: Path,
    *,
    runner: ScriptRunner | None = None,
    hint_for: Callable[[str], str] = lambda message: "",
) -> dict[str, NodeAnswer]:
    """Every node's answer, asked in parallel; keyed by node name, in the order given."""
    use = runner or run_script
    answers: dict[str, NodeAnswer] = {}
    waiting = queue.SimpleQueue[NodePlan]()
    for node in nodes:
        waiting.put(node)

    def work() -> None:
        while True:
            try:
                node = waiting.get_nowait()
            except queue.Empty:
                return
            try:
                answers[node.name] = ask(node, user, key_file, known_hosts, use, hint_for)
            except Exception as problem:  # a bug or an odd paramiko error: that node's answer, not a crash
                answers[node.name] = NodeAnswer(node.name, False, error=f"{type(problem).__name__}: {problem}")

    workers = [
        threading.Thread(target=work, daemon=True, name=f"gpuclus-status-{index}")
        for index in range(min(MAX_PARALLEL, len(nodes)))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        # Ctrl-C raises KeyboardInterrupt here, in the main thread; the daemon workers die with the process.
        worker.join()
    return {node.name: answers[node.name] for node in nodes}
