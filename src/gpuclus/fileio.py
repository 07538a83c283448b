"""Reading and writing files the user names, safely.

Reading: only regular files, and never more than a limit, whatever the file
claims to be (a device or a FIFO never ends; /proc files say their size is 0).
Writing: to a temporary file, then a rename over the target, so a crash never
leaves a file half-written; and never over something that is not a regular
file, since a rename would silently swap a device or a FIFO for a file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from gpuclus.errors import UsageError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words that fit 'PATH is ...'."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


class NotRegularFileError(Exception):
    """The path names a directory, device, FIFO or socket, not a regular file."""

    def __init__(self, path: Path, mode: int) -> None:
        self.kind = _kind(mode)
        self.is_directory = stat.S_ISDIR(mode)
        self.is_symlink = stat.S_ISLNK(mode)
        super().__init__(f"{path} is {self.kind}")


class FileTooLargeError(Exception):
    """The file holds more than ``limit`` bytes; ``size`` is its st_size when that says so, else None."""

    def __init__(self, path: Path, limit: int, size: int | None) -> None:
        self.limit = limit
        self.size = size
        super().__init__(f"{path} holds more than {limit} bytes")


def read_regular_file(path: Path, limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    A symlink is followed, unless ``follow_symlinks`` is false: then it is
    refused like a FIFO (NotRegularFileError with ``is_symlink``), which tells
    a caller, without a race, whether the bytes are those of the file named.
    Raises NotRegularFileError, FileTooLargeError, or the OSError of the
    failed stat, open or read (FileNotFoundError, PermissionError, ...).
    """
    # The type is checked before opening: opening a FIFO waits for a writer,
    # and opening some devices (a tape, a serial line) does something.
    _require_regular(path, (path.stat() if follow_symlinks else path.lstat()).st_mode)
    # O_NONBLOCK: should a FIFO be put in its place since the stat, open
    # returns at once and the fstat below refuses it.
    flags = os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            # A symlink put in its place since the lstat.
            raise NotRegularFileError(path, stat.S_IFLNK) from None
        raise
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


# gpuclus' own JSON files (run records, the render manifest, in-sync.json) are a few levels deep; json's
# parser recurses once per level, so a file nested thousands deep would end in a RecursionError.
MAX_JSON_DEPTH = 32
# A string runs to its closing quote or, unclosed, to the end of the text: the pattern always matches where it
# starts, so each character is scanned once (one that could fail would be tried again from every later quote).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


class JsonTooDeepError(ValueError):
    """JSON nested deeper than any file gpuclus writes."""


def parse_json(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text as data; nesting deeper than ``max_depth`` is refused before json recurses into it.

    Every problem with the content is a ValueError: bytes that are not UTF-8
    (UnicodeDecodeError), malformed JSON, an integer of more digits than
    Python converts, or JsonTooDeepError.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if _json_depth(text) > max_depth:
        raise JsonTooDeepError(f"nested more than {max_depth} levels deep")
    return json.loads(text)


def read_json_file(path: Path, limit: int, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A JSON file read as read_regular_file reads, parsed as parse_json parses (the errors of both)."""
    return parse_json(read_regular_file(path, limit), max_depth=max_depth)


def read_text_or_none(path: Path, limit: int) -> str | None:
    """A UTF-8 text file read as read_regular_file reads; None where it cannot be read as one.

    For files gpuclus only looks into when they are there and sound (the host's apt sources, os-release):
    missing, unreadable, special, too large or not UTF-8 all mean "nothing to learn here".
    """
    try:
        return read_regular_file(path, limit).decode("utf-8")
    except (OSError, UnicodeDecodeError, NotRegularFileError, FileTooLargeError):
        return None


def read_text_file(path: Path, limit: int, *, hint: str) -> str:
    """A UTF-8 text file read as read_regular_file reads; every problem but absence is a one-line UsageError.

    For the files gpuclus keeps under .gpuclus/ (a key, known_hosts, a copy of
    rendered files), which another process could replace with a FIFO, a device
    or a huge file. FileNotFoundError passes through: what absence means is
    the caller's. The error names the file and what is wrong, never its content.
    """
    try:
        data = read_regular_file(path, limit)
    except NotRegularFileError as exc:
        raise UsageError(f"{path} is {exc.kind}, not a file gpuclus can read", hint) from None
    except FileTooLargeError:
        raise UsageError(f"{path} holds more than {limit} bytes, far more than gpuclus writes there", hint) from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or type(exc).__name__})", hint) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text, not a file gpuclus wrote", hint) from None


def _json_depth(text: str) -> int:
    # Brackets inside strings do not nest, so strings are taken out first.
    depth = deepest = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub('""', text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def refuse_non_regular_target(path: Path) -> None:
    """Raise UsageError when ``path`` exists and is not a regular file.

    A symlink is judged by what it points to; check_output_path refuses one
    before asking, and gpuclus' own files are held to refuse_link_or_special.
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


def refuse_link_or_special(path: Path) -> None:
    """Raise UsageError when ``path`` exists as a symlink or as anything but a regular file.

    For the files gpuclus keeps itself (rendered files, .gpuclus/ state, a
    spec or users file it edits): a link planted there would have gpuclus
    write, chmod or trust a file somewhere else, so it is never followed.
    """
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise UsageError(
            f"{path} is a symbolic link; gpuclus does not write through links",
            f"it points to {os.path.realpath(path)}: replace the link with that file, or remove it, then run the "
            "command again",
        )
    if not stat.S_ISREG(mode):
        raise UsageError(
            f"{path} is {_kind(mode)}, not a regular file; not replacing it",
            "move it away: gpuclus writes a regular file there",
        )


def make_directories(base: Path, directory: Path, mode: int | None = None) -> Path:
    """Create ``directory`` and every directory between it and ``base`` that is missing.

    ``base`` (which must exist) is where the caller's own tree starts; from
    there down, a component that exists as a symlink or as anything but a
    directory is refused (UsageError) rather than followed. With ``mode``,
    each component below ``base`` is set to it without following a link.
    """
    current = base
    for part in directory.relative_to(base).parts:
        current = current / part
        _make_directory(current, mode)
    return directory


def _make_directory(path: Path, mode: int | None) -> None:
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o777 if mode is None else mode)
    kind = path.lstat().st_mode
    if stat.S_ISLNK(kind):
        raise UsageError(
            f"{path} is a symbolic link; gpuclus does not write through links",
            f"remove the link (rm {path}) and run the command again: gpuclus makes a directory there",
        )
    if not stat.S_ISDIR(kind):
        raise UsageError(f"{path} is {_kind(kind)}, not a directory", "move it away: gpuclus makes a directory there")
    if mode is not None:
        chmod_no_follow(path, mode)


def chmod_no_follow(path: Path, mode: int) -> None:
    """chmod ``path`` itself: a symlink in its place is refused (UsageError), never followed.

    Linux has no lchmod; opening with O_NOFOLLOW and changing the descriptor
    leaves no moment in which a link swapped in could redirect the change.
    """
    # Judged before opening: opening a device or a FIFO can do something.
    if not stat.S_ISDIR(path.lstat().st_mode):
        refuse_link_or_special(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link put there since the lstat
            refuse_link_or_special(path)
        raise
    try:
        kind = os.fstat(descriptor).st_mode
        if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
            refuse_link_or_special(path)
        os.fchmod(descriptor, mode)
    finally:
        os.close(descriptor)


def write_text_atomic(path: Path, text: str, mode: int = 0o644, *, make_parents: bool = True) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it.

    Raises UsageError, having written nothing, when ``path`` is a symlink or
    not a regular file (see refuse_link_or_special).
    """
    refuse_link_or_special(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # The mode is set on the descriptor: the name could be swapped by then.
        os.fchmod(handle, mode)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
