"""A real `gpuclus deploy` (or `plan --check`) in a child process, with playbooks that only touch localhost.

The spec is the sandbox's three nodes; the phase playbook runs on them with
`connection: local`, so ansible-runner, ansible-playbook, its three workers
and the commands they run are all real processes on this machine, and no
node is contacted. Every one of them carries GPUCLUS_TEST_MARKER=<unique> in
its environment (ansible-runner passes gpuclus' environment on), so a test
can tell exactly which processes its run left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_specs import THREE_NODE_SPEC

from gpuclus.deploy import processes
from gpuclus.state import StateDir

NODES = ["gpu01", "gpu02", "head"]  # as the record sorts them

GATE = """---
- name: Check the inventory
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Nothing to check here
      ansible.builtin.debug:
        msg: ok
"""

BASE = """---
- name: Sleep on every node, locally
  hosts: cluster
  connection: local
  become: false
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Say hello
      ansible.builtin.debug:
        msg: hello
    - name: Sleep
      ansible.builtin.shell: "COMMAND"
      changed_when: false
      check_mode: false
"""

EMPTY = """---
- name: Nothing in this phase
  hosts: localhost
  gather_facts: false
  tasks: []
"""

SLEEP = "sleep {{ lookup('ansible.builtin.env', 'GPUCLUS_TEST_SLEEP', default='60') }}"
# A command that ignores Ctrl-C and SIGTERM (and its sleep inherits that): only SIGKILL ends it.
STUBBORN = "trap '' INT TERM; sleep 60"
# A command that leaves a daemon behind (new session, parent gone at once), the way ssh's
# ControlPersist master detaches: without a subreaper it would belong to init.
DAEMONIZING = "(setsid sleep 60 &); sleep 60"


@dataclass
class Workspace:
    spec: Path
    playbooks: Path
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def state(self) -> StateDir:
        return StateDir.beside(self.spec)

    def environment(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "GPUCLUS_PLAYBOOKS_DIR": str(self.playbooks),
            "GPUCLUS_TEST_MARKER": self.marker,
            **extra,
        }

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        """`gpuclus ARGS` in a child process with SIGINT and SIGTERM at their defaults.

        (A job started in the background by a non-interactive shell inherits
        SIGINT as ignored, and Python keeps it ignored: reset it.)
        """
        return subprocess.Popen(
            [sys.executable, "-m", "gpuclus", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.environment(**extra),
            preexec_fn=_default_signals,
        )

    def run(self, *args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuclus", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=self.environment(**extra),
        )

    def processes(self) -> dict[int, str]:
        """Live processes of this test's runs: pid -> command line."""
        return {pid: command for pid, command in _live_processes().items() if self._ours(pid, command)}

    def _ours(self, pid: int, command: str) -> bool:
        if str(self.spec.parent) in command:
            return True
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return f"GPUCLUS_TEST_MARKER={self.marker}".encode() in environ.split(b"\0")

    def sleeping(self) -> list[int]:
        """The run's `sleep 60` commands (one per node once the Sleep task runs)."""
        return [pid for pid, command in self.processes().items() if command.startswith("sleep ")]

    def playbook_main(self, parent: int) -> int | None:
        """ansible-playbook's main process (a child of gpuclus; its workers are its children)."""
        for pid, command in self.processes().items():
            if "ansible-playbook" in command and _parent(pid) == parent:
                return pid
        return None

    def kill_leftovers(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def records(self) -> list[dict[str, Any]]:
        runs = self.state.root / "runs"
        if not runs.is_dir():
            return []
        return [json.loads(path.read_text()) for path in sorted(runs.glob("*/record.json"))]


def make_workspace(directory: Path, command: str = SLEEP) -> Workspace:
    playbooks = directory / "playbooks"
    playbooks.mkdir()
    (playbooks / "preflight.yml").write_text(GATE)
    (playbooks / "base.yml").write_text(BASE.replace("COMMAND", command))
    for phase in ("nfs", "slurm", "monitoring"):
        (playbooks / f"{phase}.yml").write_text(EMPTY)
    spec = directory / "cluster.yaml"
    spec.write_text(THREE_NODE_SPEC)
    StateDir.beside(spec).ensure_ssh_key()
    return Workspace(spec, playbooks)


def wait_for(
    what: str, ready: Callable[[], Any], timeout: float = 60, process: subprocess.Popen[str] | None = None
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ready()
        if value:
            return value
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"gpuclus ended (rc {process.returncode}) before {what}:\n{out}\n{err}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _live_processes() -> dict[int, str]:
    """Running processes (zombies left out) and their command lines, as the runner's own /proc reader sees them."""
    return {pid: processes.command_line(pid) for pid, info in processes.all_processes().items() if info.alive}


def _parent(pid: int) -> int:
    info = processes.read_process(pid)
    return info.ppid if info is not None else 0
