"""Ctrl-C at random moments of the first deploy of fresh nodes (issue 12 item 2), for the session fixture.

The session's cluster is fresh nodes that get one real deploy; interrupting
that deploy a few times first costs little more than the deploy (what an
interrupted run did, the next one keeps), where a sandbox of its own cost a
whole fresh 3-node deploy more. conftest.deployed calls
``interrupt_fresh_deploys`` between its check run on the fresh nodes and its
first deploy when test_deploy_faults.py is in the session, and keeps what
happened for that module's test to assert on; the deploy after them must
succeed and the one after that change nothing, as for every session.

Each attempt: exit 130 within seconds, the record says "interrupted" with
the phase and the hosts, and no ansible-playbook, worker, ssh client or ssh
ControlPersist master started by that run is left on this machine. While the
first one runs, a second deploy is refused naming its PID (the lock).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_helpers import GPUCLUS, default_signals, gpuclus, run_log

from gpuclus.deploy import processes
from gpuclus.state import StateDir

ATTEMPTS = 3
APT_TASK = "Install the base packages (apt"  # roles/base/tasks/install.yml
STOP_LIMIT_S = 30  # Ansible's own stop (about a second), 5 s grace, the kill, the record
MARKER = uuid.uuid4().hex  # in the environment of every process an interrupted deploy starts
MARKED = {"GPUCLUS_TEST_MARKER": MARKER}


@dataclass
class Interruptions:
    """What the interrupted deploys did: each attempt's record (None: it ended before its moment) and the
    first broken promise with the random seed, if any (the test fails with it; the fixture goes on to deploy)."""

    reports: list[dict[str, Any] | None] = field(default_factory=list)
    problem: str = ""


def live_processes() -> dict[int, str]:
    """Running processes (zombies left out) and their command lines, as the runner's own /proc reader sees them."""
    return {pid: processes.command_line(pid) for pid, info in processes.all_processes().items() if info.alive}


def carries_marker(pid: int) -> bool:
    try:
        return f"GPUCLUS_TEST_MARKER={MARKER}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def run_processes(state: StateDir) -> dict[int, str]:
    """ansible-playbook (main, workers), ssh clients and anything else of the interrupted deploys."""
    return {
        pid: command
        for pid, command in live_processes().items()
        if pid != os.getpid() and (str(state.root) in command or carries_marker(pid))
    }


def control_paths(state: StateDir) -> set[str]:
    """The ControlPath of each ssh client the run has going (its master is named after it)."""
    paths = set()
    for command in run_processes(state).values():
        if command.startswith("ssh "):
            paths.update(re.findall(r'ControlPath="?([^"\s]+)', command))
    return paths


def masters(paths: set[str]) -> set[int]:
    """ssh ControlPersist masters for these paths (OpenSSH retitles them 'ssh: PATH [mux]')."""
    return {pid for pid, command in live_processes().items() if any(command == f"ssh: {p} [mux]" for p in paths)}


def interrupt_at(
    spec: Path, nodes: set[str], moment: Callable[[str], bool], extra_delay: float, check_lock: bool
) -> dict[str, Any] | None:
    """Deploy, SIGINT it when ``moment(log)`` holds (plus ``extra_delay``); None if it ended first."""
    state = StateDir.beside(spec)
    runs = state.root / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    # Masters of an earlier, finished run (the fixture's check run) may stay their 60 s; the deploy reuses them.
    earlier_masters = {pid for pid, command in live_processes().items() if command.endswith(" [mux]")}
    process = subprocess.Popen(
        [*GPUCLUS, "deploy", str(spec), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **MARKED},
        preexec_fn=default_signals,
    )
    paths: set[str] = set()
    try:
        deadline = time.monotonic() + 900
        while process.poll() is None and not moment(run_log(state, before)):
            assert time.monotonic() < deadline, "the moment never came"
            paths |= control_paths(state)
            if check_lock and "TASK [" in run_log(state, before):
                second = gpuclus("deploy", str(spec), "--json", timeout=120, env=MARKED)
                assert second.returncode == 2, second.stdout + second.stderr
                assert f"PID {process.pid}" in json.loads(second.stdout)["error"]["message"]
                check_lock = False
            time.sleep(0.2)
        end = time.monotonic() + extra_delay
        while process.poll() is None and time.monotonic() < end:
            paths |= control_paths(state)
            time.sleep(0.1)
        if process.poll() is not None:
            out, err = process.communicate()
            assert process.returncode == 0, out + err
            return None
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
        seconds = time.monotonic() - started
    finally:
        process.kill()
    assert process.returncode == 130, out[-4000:] + err[-4000:]
    assert seconds < STOP_LIMIT_S, f"Ctrl-C took {seconds:.0f} s"
    # Nothing of the run is left: not ansible-playbook, its workers, ssh clients ...
    assert run_processes(state) == {}, run_processes(state)
    # ... nor the ssh masters it started.
    assert masters(paths) - earlier_masters == set(), (paths, masters(paths))
    report: dict[str, Any] = json.loads(out)
    assert report["status"] == "interrupted", report
    assert report["interrupted"] is not None
    assert set(report["interrupted"]["hosts"]) <= nodes | {"localhost"}, report["interrupted"]
    shown = gpuclus("runs", "show", report["id"], "--spec", str(spec), env=MARKED)
    assert "interrupted" in shown.stdout, shown.stdout
    return report


def interrupt_fresh_deploys(spec: Path, nodes: set[str]) -> Interruptions:
    """ATTEMPTS interrupted deploys of fresh nodes: first during base's package install (where the issue saw
    two orphaned ansible-playbook processes), then after a random number of tasks."""
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    print(f"\ninterrupted deploys: random seed {seed}")
    outcome = Interruptions()
    try:
        for attempt in range(ATTEMPTS):
            if attempt == 0:
                # Where the issue saw orphans: base's one apt transaction on fresh nodes.
                report = interrupt_at(spec, nodes, lambda log: APT_TASK in log, rng.uniform(0.5, 8), check_lock=True)
                assert report is not None, "the first deploy of fresh nodes ended before its apt step was interrupted"
            else:
                tasks = rng.randint(1, 60)
                report = interrupt_at(
                    spec, nodes, lambda log, n=tasks: log.count("TASK [") >= n, rng.uniform(0, 3), check_lock=False
                )
            print(f"attempt {attempt}: {report['interrupted'] if report else 'ended before the moment'}")
            outcome.reports.append(report)
    except (AssertionError, subprocess.TimeoutExpired, ValueError, KeyError) as error:
        outcome.problem = f"attempt {len(outcome.reports)} (seed {seed}): {type(error).__name__}: {error}"
    return outcome
