"""Ctrl-C at random moments of a fresh deploy of the real roles: nothing survives, and a re-deploy converges.

Issue 12 item 2, on a sandbox of its own (fresh nodes, so the first deploy
runs base's apt transaction): `gpuclus deploy` is interrupted ATTEMPTS times,
first during base's package install (where the issue saw two orphaned
ansible-playbook processes), then after a random number of tasks. Each time:
exit 130 within seconds, the record says "interrupted" with the phase and the
hosts, and no ansible-playbook, worker, ssh client or ssh ControlPersist
master started by that run is left on this machine. While the first one runs,
a second deploy is refused naming its PID (the lock). Then a deploy succeeds,
the next one changes nothing, and Slurm and Prometheus run on the controller.

Slow (a fresh deploy is minutes); integration only (`.ci/run`, as root).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import default_signals, run_log

from gpuclus.deploy import processes
from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.ssh.client import SshTarget, run_once
from gpuclus.state import StateDir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CLUSTER = "itflt"
NODES = {f"{CLUSTER}-head", f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02"}
GPUCLUS = [sys.executable, "-m", "gpuclus"]
ATTEMPTS = 3
APT_TASK = "Install the base packages (apt"  # roles/base/tasks/install.yml
STOP_LIMIT_S = 30  # Ansible's own stop (about a second), 5 s grace, the kill, the record
MARKER = uuid.uuid4().hex  # in the environment of every process a deploy of this module starts


def gpuclus(*args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUCLUS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "GPUCLUS_TEST_MARKER": MARKER},
    )


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("faults") / "sandbox.yaml"
    # GPUCLUS_TEST_SUBNET fixes the subnet: .ci/run makes this sandbox while another lane makes its own.
    subnet = os.environ.get("GPUCLUS_TEST_SUBNET")
    up = gpuclus(
        "sandbox",
        "up",
        "--name",
        CLUSTER,
        "--nodes",
        "3",
        "--gpus-per-node",
        "2",
        "--spec",
        str(path),
        *(("--subnet", subnet) if subnet else ()),
    )
    try:
        assert up.returncode == 0, up.stderr
        yield path
    finally:
        gpuclus("sandbox", "down", "--spec", str(path))


def live_processes() -> dict[int, str]:
    """Running processes (zombies left out) and their command lines, as the runner's own /proc reader sees them."""
    return {pid: processes.command_line(pid) for pid, info in processes.all_processes().items() if info.alive}


def carries_marker(pid: int) -> bool:
    try:
        return f"GPUCLUS_TEST_MARKER={MARKER}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def run_processes(state: StateDir) -> dict[int, str]:
    """ansible-playbook (main, workers), ssh clients and anything else of this module's deploys."""
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


def on_head(spec: Path, command: str) -> str:
    state = StateDir.beside(spec)
    status = json.loads(gpuclus("sandbox", "status", "--spec", str(spec), "--json").stdout)
    head = next(node for node in status["nodes"] if node["name"].endswith("-head"))
    result = run_once(SshTarget(head["address"], ADMIN_USER, state.private_key, state.known_hosts), command)
    assert result.exit_status == 0, f"{command}: {result.stdout}{result.stderr}"
    return result.stdout


def interrupt_at(
    spec: Path, moment: Callable[[str], bool], extra_delay: float, check_lock: bool
) -> dict[str, Any] | None:
    """Deploy, SIGINT it when ``moment(log)`` holds (plus ``extra_delay``); None if it ended first."""
    state = StateDir.beside(spec)
    runs = state.root / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    earlier_masters = {pid for pid, command in live_processes().items() if command.endswith(" [mux]")}
    process = subprocess.Popen(
        [*GPUCLUS, "deploy", str(spec), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GPUCLUS_TEST_MARKER": MARKER},
        preexec_fn=default_signals,
    )
    paths: set[str] = set()
    try:
        deadline = time.monotonic() + 900
        while process.poll() is None and not moment(run_log(state, before)):
            assert time.monotonic() < deadline, "the moment never came"
            paths |= control_paths(state)
            if check_lock and "TASK [" in run_log(state, before):
                second = gpuclus("deploy", str(spec), "--json", timeout=120)
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
    # ... nor the ssh masters it started (those of an earlier, finished run may stay their 60 s).
    assert masters(paths) - earlier_masters == set(), (paths, masters(paths))
    report: dict[str, Any] = json.loads(out)
    assert report["status"] == "interrupted", report
    assert report["interrupted"] is not None
    assert set(report["interrupted"]["hosts"]) <= NODES | {"localhost"}, report["interrupted"]
    shown = gpuclus("runs", "show", report["id"], "--spec", str(spec))
    assert "interrupted" in shown.stdout, shown.stdout
    return report


def test_ctrl_c_at_random_moments_leaves_nothing_running_and_a_redeploy_converges(spec: Path) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    print(f"\nrandom seed {seed}")
    interrupted = []
    for attempt in range(ATTEMPTS):
        if attempt == 0:
            # Where the issue saw orphans: base's one apt transaction on fresh nodes.
            report = interrupt_at(spec, lambda log: APT_TASK in log, rng.uniform(0.5, 8), check_lock=True)
            assert report is not None, "the first deploy of fresh nodes ended before its apt step was interrupted"
            assert report["interrupted"]["phase"] == "base", report["interrupted"]
        else:
            tasks = rng.randint(1, 60)
            report = interrupt_at(spec, lambda log, n=tasks: log.count("TASK [") >= n, rng.uniform(0, 3), False)
        print(f"attempt {attempt}: {report['interrupted'] if report else 'ended before the moment'}")
        if report is not None:
            interrupted.append(report)
    assert interrupted

    final = gpuclus("deploy", str(spec), "--json")
    assert final.returncode == 0, final.stdout[-4000:] + final.stderr[-4000:]
    assert json.loads(final.stdout)["status"] == "successful"
    again = gpuclus("deploy", str(spec), "--json")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert json.loads(again.stdout)["changed"] == 0, "the re-deploy after the interruptions did not converge"
    on_head(spec, "systemctl is-active slurmctld slurmdbd prometheus prometheus-node-exporter")
    states = on_head(spec, "sinfo --noheader --Node --format='%N %t'")
    assert {line.split()[1] for line in states.splitlines() if line.strip()} == {"idle"}, states
