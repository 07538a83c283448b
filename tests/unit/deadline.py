"""A read that blocks on a regression fails the test instead of hanging the suite.

`within(seconds)` arms SIGALRM around a block: a FIFO's open() or read() that
would wait for a writer forever is interrupted, and the handler's exception
ends it (PEP 475 retries a system call only when the handler returns).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Blocked(BaseException):
    """Not an Exception, let alone an OSError (as TimeoutError is): no handler in gpuclus or in typer's
    CliRunner can mistake it for a read that failed, so a blocked test fails as blocked."""


@contextmanager
def within(seconds: int) -> Iterator[None]:
    def expired(signum: int, frame: FrameType | None) -> None:
        raise Blocked(f"still blocked after {seconds} s: a read that should have been refused waited")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
