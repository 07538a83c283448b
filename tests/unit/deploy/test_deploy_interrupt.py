"""Ctrl-C and SIGTERM stop a deploy's whole process tree, and the record says where it stopped.

Real runs: `gpuclus deploy` (and `plan --check`) in a child process, with
ansible-runner, ansible-playbook, one worker per node and a `sleep 60` per
node, all on this machine (tests/unit/live_deploy.py). Each test signals the
gpuclus process and then asserts what an admin relies on: the exit code
(130), the time it took, that no process of the run outlives gpuclus (not
ansible-playbook, nor a worker in its own session, nor the command it ran),
the record ("interrupted", with the phase, the task and the hosts) and the
phase line (✗, not ✓).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_deploy import DAEMONIZING, NODES, STUBBORN, Workspace, make_workspace, wait_for

from gpuclus.deploy.events import TaskStarted
from gpuclus.deploy.runner import GRACE_SECONDS, DeployRun

# From the signal to gpuclus' exit: Ansible stops in about a second, and what
# is left is killed after GRACE_SECONDS at most.
STOP_LIMIT = GRACE_SECONDS + 10
DEPLOY = ("deploy", "--no-preflight", "--only", "base")


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    found = make_workspace(tmp_path)
    yield found
    found.kill_leftovers()


def interrupt(
    workspace: Workspace, process: subprocess.Popen[str], signum: int = signal.SIGINT
) -> tuple[str, str, float]:
    """Send ``signum``; returns gpuclus' stdout, stderr and the seconds it took to end."""
    started = time.monotonic()
    process.send_signal(signum)
    try:
        out, err = process.communicate(timeout=STOP_LIMIT + 30)
    finally:
        process.kill()
    return out, err, time.monotonic() - started


def assert_nothing_left(workspace: Workspace) -> None:
    left = workspace.processes()
    assert left == {}, f"processes of the run outlived gpuclus: {left}"


def the_record(workspace: Workspace) -> dict[str, object]:
    (record,) = workspace.records()
    return record


MOMENTS = ["ansible-starting", "task-starting", "task-running"]


@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_at_a_random_moment_stops_everything_and_records_where(workspace: Workspace, moment: str) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    delay = random.Random(seed).uniform(*{"ansible-starting": (0, 1.0), "task-starting": (0, 0.3)}.get(moment, (1, 3)))
    why = f"(moment {moment}, delay {delay:.2f} s, seed {seed})"
    process = workspace.start(*DEPLOY, str(workspace.spec))
    if moment == "ansible-starting":
        wait_for("ansible-playbook", lambda: workspace.playbook_main(process.pid), process=process)
    else:
        wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=process)
    time.sleep(delay)
    out, err, seconds = interrupt(workspace, process)

    assert process.returncode == 130, f"{why}\n{out}\n{err}"
    assert seconds < STOP_LIMIT, why
    assert_nothing_left(workspace)
    record = the_record(workspace)
    assert record["status"] == "interrupted", why
    interrupted = record["interrupted"]
    assert isinstance(interrupted, dict)
    if moment == "ansible-starting":
        assert interrupted["phase"] in {None, "base"}, why
    else:
        assert interrupted == {"phase": "base", "task": "Sleep", "hosts": NODES}, why
        assert "✗ base interrupted" in err, err
        assert "in phase base, task 'Sleep', on gpu01, gpu02, head" in out, out
    assert "✓ base" not in err, err
    shown = workspace.run("runs", "show", str(record["id"]), "--spec", str(workspace.spec))
    assert shown.returncode == 0, shown.stderr
    assert "interrupted" in shown.stdout


def test_ctrl_c_with_json_reports_the_interrupted_record(workspace: Workspace) -> None:
    process = workspace.start(*DEPLOY, str(workspace.spec), "--json")
    wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=process)
    out, err, _ = interrupt(workspace, process)
    assert process.returncode == 130, err
    report = json.loads(out)
    assert (report["ok"], report["exit_code"], report["status"]) == (False, 130, "interrupted")
    assert report["interrupted"] == {"phase": "base", "task": "Sleep", "hosts": NODES}
    assert_nothing_left(workspace)


def test_a_second_ctrl_c_kills_at_once(workspace: Workspace) -> None:
    process = workspace.start(*DEPLOY, str(workspace.spec))
    wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=process)
    # Frozen, ansible-playbook cannot stop by itself: the first Ctrl-C would wait GRACE_SECONDS.
    main = workspace.playbook_main(process.pid)
    assert main is not None
    os.kill(main, signal.SIGSTOP)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    _out, err, _ = interrupt(workspace, process)
    seconds = time.monotonic() - started
    assert process.returncode == 130, err
    assert seconds < GRACE_SECONDS - 1, f"the second Ctrl-C took {seconds:.1f} s"
    assert "killing Ansible now" in err
    assert_nothing_left(workspace)
    assert the_record(workspace)["status"] == "interrupted"


def test_ansible_that_does_not_stop_is_killed_after_the_grace_period(workspace: Workspace) -> None:
    process = workspace.start(*DEPLOY, str(workspace.spec))
    wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=process)
    main = workspace.playbook_main(process.pid)
    assert main is not None
    os.kill(main, signal.SIGSTOP)
    _out, err, seconds = interrupt(workspace, process)
    assert process.returncode == 130, err
    assert GRACE_SECONDS <= seconds < STOP_LIMIT
    assert_nothing_left(workspace)


@pytest.mark.parametrize("command", [STUBBORN, DAEMONIZING], ids=["ignores-signals", "daemonizes"])
def test_commands_that_ignore_signals_or_daemonize_are_killed(tmp_path: Path, command: str) -> None:
    workspace = make_workspace(tmp_path, command)
    expected = len(NODES) * (2 if command == DAEMONIZING else 1)
    try:
        process = workspace.start(*DEPLOY, str(workspace.spec))
        wait_for("the sleeps", lambda: len(workspace.sleeping()) == expected, process=process)
        _out, err, seconds = interrupt(workspace, process)
        assert process.returncode == 130, err
        assert seconds < STOP_LIMIT
        assert_nothing_left(workspace)
    finally:
        workspace.kill_leftovers()


def test_sigterm_stops_everything_and_the_record_says_so(workspace: Workspace) -> None:
    process = workspace.start(*DEPLOY, str(workspace.spec))
    wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=process)
    _out, err, seconds = interrupt(workspace, process, signal.SIGTERM)
    assert process.returncode == 130, err
    assert seconds < STOP_LIMIT
    assert "terminated (SIGTERM)" in err
    assert_nothing_left(workspace)
    record = the_record(workspace)
    assert (record["status"], record["error"]) == ("interrupted", "terminated (SIGTERM)")
    assert record["interrupted"] == {"phase": "base", "task": "Sleep", "hosts": NODES}


def test_ctrl_c_stops_plan_check_too(workspace: Workspace) -> None:
    process = workspace.start("plan", str(workspace.spec), "--check", "--json")
    wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=process)
    out, err, seconds = interrupt(workspace, process)
    assert process.returncode == 130, err
    assert seconds < STOP_LIMIT
    assert json.loads(out)["error"]["exit_code"] == 130
    assert_nothing_left(workspace)
    record = the_record(workspace)
    assert (record["status"], record["check"]) == ("interrupted", True)
    assert record["interrupted"] == {"phase": "base", "task": "Sleep", "hosts": NODES}


def test_cancel_stops_the_workers_and_their_commands_in_process(workspace: Workspace) -> None:
    """The library path (no signal): DeployRun.cancel() from the code consuming the events."""
    from test_runner_cleanup import local_config

    config = local_config(workspace.spec.parent)
    config = dataclasses.replace(config, envvars={**config.envvars, "GPUCLUS_TEST_MARKER": workspace.marker})
    run = DeployRun(config)
    started = time.monotonic()
    for event in run.events():
        if isinstance(event, TaskStarted) and event.task == "Sleep":
            wait_for("the sleep", workspace.sleeping)
            run.cancel()
    assert time.monotonic() - started < STOP_LIMIT
    assert run.outcome is not None
    assert_nothing_left(workspace)
