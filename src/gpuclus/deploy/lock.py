"""One Ansible run at a time per spec directory: a flock on .gpuclus/deploy.lock.

`gpuclus deploy` and `gpuclus plan --check` take the lock before preflight and
hold it until the run is recorded. The kernel releases a flock when its holder
ends, however it ends (kill -9 included), so a lock is never stale; the file
only carries the holder's PID for the message, and is never removed (removing
a flocked file lets two processes lock two different files).

After a holder was killed with SIGKILL, ansible-playbook may still be running
(gpuclus could not stop it): a new run checks for that too and names the PIDs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator

from gpuclus.deploy import processes
from gpuclus.errors import UsageError
from gpuclus.state import StateDir

LOCK_FILE = "deploy.lock"


@contextlib.contextmanager
def deploy_lock(state: StateDir) -> Iterator[None]:
    """Hold the spec directory's lock, or raise UsageError (exit 2) naming the PID that holds it."""
    state.private_dir(state.root)
    path = state.root / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as problem:
        raise UsageError(f"cannot open the deploy lock {path}: {problem.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as problem:
            if problem.errno not in {errno.EWOULDBLOCK, errno.EAGAIN}:
                raise
            holder = _holder(fd)
            who = f"PID {holder}" if holder else "another process"
            raise UsageError(
                f"another gpuclus deploy or plan --check is running for this spec directory ({who}; lock {path})",
                f"wait for it to end, or stop it (Ctrl-C in its terminal, or `kill {holder or 'PID'}`)",
            ) from None
        leftovers = earlier_playbooks(state)
        if leftovers:
            pids = " ".join(str(pid) for pid in leftovers)
            raise UsageError(
                f"ansible-playbook of an earlier run is still running for this spec directory (PID {pids}); "
                "the gpuclus that started it was killed before it could stop it",
                f"wait for it to end, or stop it: `kill {pids}`",
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            # Emptied while still held: a PID in the file always names the holder.
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _holder(fd: int, wait: float = 1.0) -> int | None:
    """The PID the holder wrote (it writes it right after locking: wait for it a moment)."""
    deadline = time.monotonic() + wait
    while True:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if text.isdigit():
            return int(text)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def earlier_playbooks(state: StateDir) -> list[int]:
    """ansible-playbook processes (main or worker) of a run of this spec directory, still alive."""
    marker = f"{state.root.resolve() / 'runs'}{os.sep}"
    found = []
    for pid, info in processes.all_processes().items():
        if not info.alive or pid == os.getpid():
            continue
        command = processes.command_line(pid)
        if "ansible-playbook" in command and marker in command:
            found.append(pid)
    return sorted(found)
