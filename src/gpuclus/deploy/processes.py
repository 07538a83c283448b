"""The processes a run started, found through /proc, and the means to end all of them.

ansible-playbook does not keep its processes in one group: ansible-runner
starts it in a session of its own (pexpect's pty), each worker calls setsid(),
the commands a worker runs stay in the worker's session, and ssh's
ControlPersist master daemonizes. Killing one process group (what
ansible-runner's cancel does) leaves the rest behind with parent PID 1.

So while a run is on, gpuclus is a *child subreaper* (prctl
PR_SET_CHILD_SUBREAPER): an orphan anywhere below it is re-parented to gpuclus
instead of to init, and the run's processes are simply gpuclus' descendants
that did not exist before the run. Linux only; elsewhere there is no /proc and
these functions find nothing (ansible-runner's own group kill still applies).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    state: str  # R, S, D, T, Z, ... (proc(5), /proc/PID/stat field 3)

    @property
    def alive(self) -> bool:
        # A zombie has ended; it only waits for its parent to read its status.
        return self.state not in {"Z", "X"}


def read_process(pid: int) -> ProcessInfo | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')'.
    fields = text.rsplit(")", 1)[-1].split()
    if len(fields) < 2:
        return None
    return ProcessInfo(pid, int(fields[1]), fields[0])


def all_processes() -> dict[int, ProcessInfo]:
    found: dict[int, ProcessInfo] = {}
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return found
    for entry in entries:
        if entry.name.isdigit():
            info = read_process(int(entry.name))
            if info is not None:
                found[info.pid] = info
    return found


def descendants(pid: int) -> dict[int, ProcessInfo]:
    """Every process below ``pid`` (children, their children, ...), zombies included."""
    table = all_processes()
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: dict[int, ProcessInfo] = {}
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        if child in found or child == pid:
            continue
        found[child] = table[child]
        stack.extend(children.get(child, []))
    return found


def command_line(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def send(pids: Iterable[int], signum: int) -> None:
    """Signal each process; one that ended meanwhile (or is not ours) is skipped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if int(libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return bool(flag.value)


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Orphans below this process come back to it (not to init) while the block runs."""
    already = _is_subreaper()
    if not already:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        if not already:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


class ProcessTree:
    """The processes below this one that a run started: what was not there at the start."""

    def __init__(self) -> None:
        self.root = os.getpid()
        self._before = set(descendants(self.root))

    def members(self) -> dict[int, ProcessInfo]:
        return {pid: info for pid, info in descendants(self.root).items() if pid not in self._before}

    def alive(self) -> list[int]:
        return sorted(pid for pid, info in self.members().items() if info.alive)

    def children_running(self, marker: str) -> list[int]:
        """This process' own children in the run whose command line holds ``marker``."""
        return [
            pid
            for pid, info in self.members().items()
            if info.ppid == self.root and info.alive and marker in command_line(pid)
        ]

    def kill(self, *, term_seconds: float, deadline_seconds: float = 10.0) -> list[int]:
        """SIGTERM everything left, wait up to ``term_seconds``, then SIGKILL until none is left.

        New processes forked meanwhile are found on the next look (orphans come
        back to this process). Returns what still lived at the end (only when
        it was not ours to kill, or ``deadline_seconds`` ran out).
        """
        started = time.monotonic()
        termed: set[int] = set()
        while True:
            left = self.alive()
            elapsed = time.monotonic() - started
            if not left or elapsed > deadline_seconds:
                return left
            if elapsed < term_seconds:
                send([pid for pid in left if pid not in termed], signal.SIGTERM)
                termed.update(left)
            else:
                send(left, signal.SIGKILL)
            time.sleep(0.05)

    def reap(self) -> None:
        """Collect the exit status of the run's ended processes that were handed to this one."""
        for pid, info in self.members().items():
            if info.ppid == self.root and not info.alive:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
