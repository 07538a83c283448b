"""Reading and writing files the user names, safely.

Reading: only regular files, and never more than a limit, whatever the file
claims to be (a device or a FIFO never ends; /proc files say their size is 0).
Writing: to a temporary file, then a rename over the target, so a crash never
leaves a file half-written; and never over something that is not a regular
file, since a rename would silently swap a device or a FIFO for a file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from gpuclus.errors import UsageError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words that fit 'PATH is ...'."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


class NotRegularFileError(Exception):
    """The path names a directory, device, FIFO or socket, not a regular file."""

    def __init__(self, path: Path, mode: int) -> None:
        self.kind = _kind(mode)
        self.is_directory = stat.S_ISDIR(mode)
        super().__init__(f"{path} is {self.kind}")


class FileTooLargeError(Exception):
    """The file holds more than ``limit`` bytes; ``size`` is its st_size when that says so, else None."""

    def __init__(self, path: Path, limit: int, size: int | None) -> None:
        self.limit = limit
        self.size = size
        super().__init__(f"{path} holds more than {limit} bytes")


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (symlinks followed), at most ``limit`` of them.

    Raises NotRegularFileError, FileTooLargeError, or the OSError of the
    failed stat, open or read (FileNotFoundError, PermissionError, ...).
    """
    # The type is checked before opening: opening a FIFO waits for a writer,
    # and opening some devices (a tape, a serial line) does something.
    _require_regular(path, path.stat().st_mode)
    # O_NONBLOCK: should a FIFO be put in its place since the stat, open
    # returns at once and the fstat below refuses it.
    descriptor = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as stream:
        status = os.fstat(stream.fileno())
        _require_regular(path, status.st_mode)
        # One byte past the limit tells "at the limit" from "over it"; the size
        # the file claims is only for the message.
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(path, limit, status.st_size if status.st_size > limit else None)
    return data


def _require_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(path, mode)


def refuse_non_regular_target(path: Path) -> None:
    """Raise UsageError when ``path`` exists and is not a regular file.

    A symlink is judged by what it points to (a file written in gpuclus' own
    directories may be one); the outputs the user names are held to the
    stricter check_output_path.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise UsageError(
            f"{path} is {_kind(mode)}, not a regular file; not replacing it",
            "write to a regular file or a new name: gpuclus replaces only regular files",
        )


def check_output_path(path: Path) -> None:
    """Raise UsageError unless ``path`` can be written as a file the user asked for.

    Its directory must exist (a typo in a path should not create a tree of
    directories), and anything already there must be a regular file.
    """
    directory = path.parent
    if not directory.is_dir():
        problem = "not a directory" if directory.exists() else "no such directory"
        raise UsageError(
            f"{directory}: {problem}; not writing {path.name} there",
            f"create it first (mkdir -p {directory}), or write to another path",
        )
    _refuse_symlink(path)
    refuse_non_regular_target(path)


def _refuse_symlink(path: Path) -> None:
    # The rename would replace the link, not the file it points to, and a link
    # to a regular file can still be a system one: /dev/stdout is a link to
    # /proc/self/fd/1, a regular file whenever stdout is redirected to one.
    if path.is_symlink():
        raise UsageError(
            f"{path} is a symbolic link; not replacing it",
            f"write to the file it points to ({os.path.realpath(path)}), or remove the link first",
        )


def write_output_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file the user named on the command line (-o FILE): checked, then atomic."""
    check_output_path(path)
    write_text_atomic(path, text, mode, make_parents=False)


def write_text_atomic(path: Path, text: str, mode: int = 0o644, *, make_parents: bool = True) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it.

    Raises UsageError, having written nothing, when ``path`` is not a regular
    file (see refuse_non_regular_target).
    """
    refuse_non_regular_target(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        Path(temporary).chmod(mode)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
