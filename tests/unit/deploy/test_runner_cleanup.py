"""DeployRun stops Ansible and removes the artifacts that may hold secrets, however a run ends.

Real ansible-runner runs of a two-task playbook against localhost (connection
local): the second task sleeps, and the run is broken off while it does — by
the code consuming the events, by the event handler, and by SIGTERM to the
process. ansible-runner writes every event to artifacts/<id>/job_events/ and
the command line with the whole environment to artifacts/<id>/command; both
must be gone afterwards, and so must ansible-playbook (its main process,
which writes the artifacts; test_deploy_interrupt.py checks that its workers,
each in a session of its own, and the commands they run go too).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuclus.deploy.events import TaskStarted
from gpuclus.deploy.runner import DeployRun
from gpuclus.deploy.workspace import RunConfig, search_path

SLEEP_SECONDS = 30
PLAYBOOK = f"""---
- name: A run to break off
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Say something
      ansible.builtin.debug:
        msg: hello
    - name: Sleep
      ansible.builtin.command: sleep {SLEEP_SECONDS}
      changed_when: false
"""


class Boom(Exception):
    pass


def local_config(directory: Path) -> RunConfig:
    run_dir = directory / "run"
    (run_dir / "project").mkdir(parents=True, mode=0o700)
    (run_dir / "inventory").mkdir()
    (run_dir / "project" / "deploy.yml").write_text(PLAYBOOK)
    (run_dir / "inventory" / "hosts.yml").write_text(
        "all:\n  hosts:\n    localhost:\n"
        f"      ansible_connection: local\n      ansible_python_interpreter: {sys.executable}\n"
    )
    (directory / "ansible.cfg").write_text("[defaults]\n")
    return RunConfig(
        run_id="cleanup-test",
        run_dir=run_dir,
        playbook=run_dir / "project" / "deploy.yml",
        inventory=run_dir / "inventory" / "hosts.yml",
        phases=(),
        envvars={
            "PATH": search_path(),
            "ANSIBLE_CONFIG": str(directory / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(directory / "tmp"),
            "ANSIBLE_NOCOLOR": "1",
        },
        extravars={},
    )


def watch(run: DeployRun, fail_on_sleep: bool = False) -> list[int]:
    """Record the pid of ansible-playbook (every raw event carries it); optionally break the handler."""
    pids: list[int] = []
    translate = run._translator.translate

    def translating(raw: dict[str, Any]) -> Any:
        pids.append(int(raw.get("pid") or 0))
        event = translate(raw)
        if fail_on_sleep and isinstance(event, TaskStarted) and event.task == "Sleep":
            raise Boom("the handler broke")
        return event

    run._translator.translate = translating  # type: ignore[method-assign]
    return pids


def running(pid: int, config: RunConfig) -> bool:
    """Whether ansible-playbook with this pid is still alive (a reused pid names another command)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return str(config.inventory) in command and state != "Z"


def assert_cleaned_up(run: DeployRun, started: float, pids: list[int]) -> None:
    assert run.artifacts.is_dir(), "the run never started"
    assert (run.artifacts / "stdout").exists()  # the log stays (it serves output_tail)
    assert not (run.artifacts / "job_events").exists()
    assert not (run.artifacts / "command").exists()
    main = {pid for pid in pids if pid}
    assert len(main) == 1, main
    assert not running(main.pop(), run.config), "ansible-playbook is still running"
    assert time.monotonic() - started < SLEEP_SECONDS - 5, "the run was not broken off"


def test_an_exception_in_the_consumer_stops_ansible_and_removes_the_artifacts(tmp_path: Path) -> None:
    run = DeployRun(local_config(tmp_path))
    pids = watch(run)
    started = time.monotonic()
    events = run.events()
    with pytest.raises(Boom):
        for event in events:
            if isinstance(event, TaskStarted) and event.task == "Sleep":
                time.sleep(1)
                # The files exist while the run is on; they go with it.
                assert (run.artifacts / "job_events").is_dir() and (run.artifacts / "command").exists()
                raise Boom
    events.close()  # what pipeline.execute does when its loop raises
    assert_cleaned_up(run, started, pids)


def test_an_exception_in_the_event_handler_is_raised_by_events_after_the_cleanup(tmp_path: Path) -> None:
    run = DeployRun(local_config(tmp_path))
    pids = watch(run, fail_on_sleep=True)
    started = time.monotonic()
    with pytest.raises(Boom, match="the handler broke"):
        for _event in run.events():
            pass
    assert_cleaned_up(run, started, pids)


SIGTERM_SCRIPT = """
import pickle, sys
from gpuclus.deploy.events import TaskStarted
from gpuclus.deploy.runner import DeployRun, RunTerminated

run = DeployRun(pickle.loads(open(sys.argv[1], "rb").read()))
pids = []
translate = run._translator.translate
run._translator.translate = lambda raw: pids.append(raw.get("pid")) or translate(raw)
try:
    for event in run.events():
        if isinstance(event, TaskStarted) and event.task == "Sleep":
            print(pids[-1], flush=True)
except RunTerminated:
    sys.exit(143)
"""


def test_sigterm_during_a_run_stops_ansible_and_removes_the_artifacts(tmp_path: Path) -> None:
    config = local_config(tmp_path)
    (tmp_path / "config.pickle").write_bytes(pickle.dumps(config))
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, str(tmp_path / "config.pickle")],
        stdout=subprocess.PIPE,
        text=True,
        # SIGTERM's default action, whatever this test runner's is.
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        pid = int(process.stdout.readline())
        time.sleep(1)
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143
    assert_cleaned_up(DeployRun(config), started, [pid])
