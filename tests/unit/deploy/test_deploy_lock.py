"""One deploy at a time per spec directory: a second `deploy` or `plan --check` is refused naming the holder.

The lock is a flock on .gpuclus/deploy.lock, which the kernel releases when
its holder dies, kill -9 included. Real processes throughout: a holder in a
child process, a real deploy running Ansible (tests/unit/live_deploy.py), the
real CLI refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_deploy import NODES, Workspace, make_workspace, wait_for

from gpuclus.deploy.lock import LOCK_FILE, deploy_lock
from gpuclus.errors import UsageError

DEPLOY = ("deploy", "--no-preflight", "--only", "base")

HOLDER = """
import sys, time
from pathlib import Path
from gpuclus.deploy.lock import deploy_lock
from gpuclus.state import StateDir

with deploy_lock(StateDir.beside(Path(sys.argv[1]))):
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    found = make_workspace(tmp_path)
    yield found
    found.kill_leftovers()


def hold(workspace: Workspace) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(workspace.spec)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_deploy_and_plan_check_are_refused_naming_the_holder(workspace: Workspace) -> None:
    holder = hold(workspace)
    try:
        refused = workspace.run(*DEPLOY, str(workspace.spec))
        assert refused.returncode == 2, refused.stderr
        assert f"PID {holder.pid}" in refused.stderr
        assert "another gpuclus deploy or plan --check is running for this spec directory" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 2  # the error and its hint
        checked = workspace.run("plan", str(workspace.spec), "--check", "--json")
        assert checked.returncode == 2, checked.stderr
        assert f"PID {holder.pid}" in checked.stdout  # --json: the error is the JSON object
        # Refused before anything else: no preflight, no run directory.
        assert workspace.records() == []
        # plan without --check runs no Ansible and needs no lock.
        assert workspace.run("plan", str(workspace.spec), "--local").returncode == 0
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL gave the holder no chance to unlock: the kernel did.
    freed = workspace.run(*DEPLOY, str(workspace.spec), GPUCLUS_TEST_SLEEP="0")
    assert freed.returncode == 0, freed.stderr
    assert [record["status"] for record in workspace.records()] == ["successful"]


def test_a_running_deploy_refuses_a_second_one_and_the_lock_is_free_after_it(workspace: Workspace) -> None:
    first = workspace.start(*DEPLOY, str(workspace.spec))
    try:
        wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=first)
        second = workspace.run(*DEPLOY, str(workspace.spec), "--json")
        assert second.returncode == 2, second.stderr
        assert f"PID {first.pid}" in second.stdout
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 130
    lock = workspace.state.root / LOCK_FILE
    assert lock.read_text() == ""  # the PID goes with the lock
    assert oct(lock.stat().st_mode & 0o777) == "0o600"
    again = workspace.run(*DEPLOY, str(workspace.spec), GPUCLUS_TEST_SLEEP="0")
    assert again.returncode == 0, again.stderr


def test_ansible_left_by_a_killed_gpuclus_is_named_before_a_new_run_starts_beside_it(workspace: Workspace) -> None:
    # kill -9 gives gpuclus no chance to stop Ansible: its processes live on,
    # and the lock alone would let a new deploy run beside them.
    first = workspace.start(*DEPLOY, str(workspace.spec))
    wait_for("a sleep on every node", lambda: len(workspace.sleeping()) == len(NODES), process=first)
    first.kill()
    first.communicate()
    left = wait_for(
        "the orphaned ansible-playbook",
        lambda: [pid for pid, command in workspace.processes().items() if "ansible-playbook" in command],
    )
    refused = workspace.run(*DEPLOY, str(workspace.spec))
    assert refused.returncode == 2, refused.stderr
    assert "ansible-playbook of an earlier run is still running" in refused.stderr
    assert all(str(pid) in refused.stderr for pid in left)
    workspace.kill_leftovers()
    wait_for("the orphans to end", lambda: not workspace.processes())
    again = workspace.run(*DEPLOY, str(workspace.spec), GPUCLUS_TEST_SLEEP="0")
    assert again.returncode == 0, again.stderr


def test_the_lock_in_process_refuses_a_second_holder_and_is_released(tmp_path: Path) -> None:
    workspace = make_workspace(tmp_path)
    with deploy_lock(workspace.state):
        assert (workspace.state.root / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        # A second open file description is refused even in the same process (flock semantics).
        with pytest.raises(UsageError, match=f"PID {os.getpid()}"), deploy_lock(workspace.state):
            pass
    with deploy_lock(workspace.state):
        pass
