"""The SSH session to the controller that validate, status, nodes, users and upgrades run commands through.

One connection from gpuclus.ssh.client (the only module that talks to
paramiko); commands run as separate channels on it, several at
once when a caller asks for per-node answers. Every command has a deadline
here (a channel that outlives it is closed and reported as timed out) on top
of the `timeout` the Slurm helpers wrap around srun.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpuclus.ssh.client import CommandResult, open_channel

TIMED_OUT = 124  # what coreutils' timeout returns; a command cut off here reports the same
# OpenSSH's default MaxSessions is 10 channels per connection; stay under it.
MAX_PARALLEL_CHANNELS = 8


class Remote:
    def __init__(self, client: Any) -> None:
        self._client = client

    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        """Run a shell command on the controller; never blocks past ``timeout`` seconds."""
        channel = self._open(timeout)
        try:
            channel.exec_command(command)
            return _collect(channel, time.monotonic() + timeout)
        finally:
            channel.close()

    def _open(self, timeout: float) -> Any:
        """A new channel; a session that is gone becomes an OSError, as a broken socket would."""
        return open_channel(self._client, timeout, peer="the controller")

    def run_many(self, commands: Mapping[str, str], timeout: float = 60.0) -> dict[str, CommandResult]:
        """Run several commands at once (one channel each); results keyed like ``commands``."""
        if not commands:
            return {}
        pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_CHANNELS, len(commands)))
        try:
            futures = {key: pool.submit(self.run, command, timeout) for key, command in commands.items()}
            return {key: future.result() for key, future in futures.items()}
        finally:
            # On Ctrl-C do not wait for the remote commands: the run's clean-up
            # cancels their jobs, and closing the connection ends the channels.
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self._client.close()


# sshd sends the exit status when the command's process ends, which can be
# before the last of its output has crossed the connection (and a background
# child may hold the output open longer): stopping at the exit status cut long
# outputs short now and then (a node exporter page without its last lines).
# So reading goes on to the channel's end of file, but waits no longer than
# this for it after the exit status once nothing more arrives.
AFTER_EXIT_WAIT_S = 2.0


def _collect(channel: Any, deadline: float) -> CommandResult:
    stdout, stderr = bytearray(), bytearray()
    last_news: float | None = None  # the exit status's arrival, or later output's
    while True:
        progressed = False
        while channel.recv_ready():
            stdout += channel.recv(65536)
            progressed = True
        while channel.recv_stderr_ready():
            stderr += channel.recv_stderr(65536)
            progressed = True
        now = time.monotonic()
        if channel.exit_status_ready():
            last_news = now if last_news is None or progressed else last_news
            drained = not channel.recv_ready() and not channel.recv_stderr_ready()
            ended = channel.eof_received or channel.closed or now - last_news > AFTER_EXIT_WAIT_S
            if drained and ended:
                status = channel.recv_exit_status()
                break
        if now > deadline:
            status = TIMED_OUT
            stderr += b"\n(gpuclus: the command did not finish in time and was cut off)"
            break
        if not progressed:
            time.sleep(0.02)
    return CommandResult(status, stdout.decode(errors="replace"), stderr.decode(errors="replace"))
