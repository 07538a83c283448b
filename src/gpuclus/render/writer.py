"""Put rendered files on disk without silently losing someone's edits.

The manifest ``.gpuclus-render.json`` in the output directory records the
sha256 of every file gpuclus wrote there. On the next write a file that no
longer matches its recorded hash was edited by hand, and a file gpuclus never
recorded is someone else's; either is a conflict unless it already holds the
new text. Conflicts are all found before anything is written, so a refused
write changes nothing. The manifest is written last: a crash part way leaves
the old manifest, and the files written so far read as edits on the next run,
which is the safe side to err on.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from gpuclus.errors import UsageError
from gpuclus.fileio import (
    FileTooLargeError,
    NotRegularFileError,
    make_directories,
    read_json_file,
    read_regular_file,
    write_text_atomic,
)

MANIFEST_NAME = ".gpuclus-render.json"
MANIFEST_FORMAT = 1
# A manifest lists a handful of paths and digests; anything much larger is not one.
MAX_MANIFEST_BYTES = 1024 * 1024
# Far above any file render writes (a 10,000-node inventory is a few MiB): a larger one in the output
# directory is not gpuclus', and is never read whole.
MAX_RENDERED_BYTES = 64 * 1024 * 1024


class FileStatus(enum.StrEnum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    REMOVED = "removed"


@dataclass(frozen=True)
class FileResult:
    path: str  # relative to the output directory, with '/'
    status: FileStatus


@dataclass(frozen=True)
class WriteReport:
    output_dir: Path
    files: tuple[FileResult, ...]

    def count(self, status: FileStatus) -> int:
        return sum(1 for result in self.files if result.status is status)

    @property
    def changed(self) -> bool:
        return any(result.status is not FileStatus.UNCHANGED for result in self.files)


@dataclass
class WritePlan:
    """What a write would do; built without touching the disk beyond reading."""

    output_dir: Path
    manifest_text: str
    write: dict[str, str] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    conflicts: dict[str, str] = field(default_factory=dict)  # path -> why

    def report(self) -> WriteReport:
        results = [FileResult(path, FileStatus.WRITTEN) for path in self.write]
        results += [FileResult(path, FileStatus.UNCHANGED) for path in self.unchanged]
        results += [FileResult(path, FileStatus.REMOVED) for path in self.remove]
        return WriteReport(self.output_dir, tuple(sorted(results, key=lambda result: result.path)))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def manifest_text(files: Mapping[str, str]) -> str:
    manifest = {"format": MANIFEST_FORMAT, "files": {path: sha256_text(text) for path, text in files.items()}}
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def plan_write(output_dir: Path, files: Mapping[str, str], *, force: bool = False) -> WritePlan:
    """Compare ``files`` (relative path -> text) with what ``output_dir`` holds.

    Conflicts are recorded, not raised; ``force`` turns them into writes and
    removals (except where a directory sits in a file's place).
    """
    for path in files:
        _check_relative(path, "rendered file")
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"{output_dir} exists and is not a directory", "choose another output directory with -o")
    _refuse_linked_output_dir(output_dir)
    plan = WritePlan(output_dir, manifest_text(files))
    # Links are refused before anything is read or written, even with --force:
    # following one would read, replace or delete a file outside the directory.
    _refuse_link(output_dir / MANIFEST_NAME)
    recorded = _read_manifest(output_dir, force=force)

    for path, text in files.items():
        target = output_dir / path
        _refuse_blocked_parents(output_dir, target)
        _refuse_link(target)
        if not target.exists():
            plan.write[path] = text
            continue
        if not target.is_file():
            raise UsageError(
                f"{target} is in the way: it is not a regular file",
                "move it away; gpuclus render writes a file there",
            )
        current = _current_bytes(target)
        if current == text.encode("utf-8"):
            plan.unchanged.append(path)
            continue
        why = _conflict(path, current, recorded)
        if why and not force:
            plan.conflicts[path] = why
        else:
            plan.write[path] = text

    for path in sorted(set(recorded) - set(files)):
        target = output_dir / path
        _refuse_blocked_parents(output_dir, target)
        _refuse_link(target)
        if not target.is_file():
            continue  # already gone; nothing to report
        why = _conflict(path, _current_bytes(target), recorded)
        if why and not force:
            plan.conflicts[path] = f"{why}, and gpuclus no longer renders it"
        else:
            plan.remove.append(path)
    return plan


def write_rendered(output_dir: Path, files: Mapping[str, str], *, force: bool = False) -> WriteReport:
    """Write ``files`` into ``output_dir`` and record them in the manifest.

    Raises UsageError, having written nothing, when a file was edited by hand
    or is not gpuclus' (unless ``force``). Files an earlier render wrote and
    this one does not produce are removed.
    """
    _make_output_dir(output_dir)
    plan = plan_write(output_dir, files, force=force)
    if plan.conflicts:
        listed = ", ".join(f"{path} ({why})" for path, why in sorted(plan.conflicts.items()))
        raise UsageError(
            f"not overwriting {len(plan.conflicts)} file(s) in {output_dir} changed outside gpuclus: {listed}",
            "pass --force to overwrite, or move your edits into cluster.yaml",
        )
    try:
        for path, text in plan.write.items():
            make_directories(output_dir, (output_dir / path).parent)
            write_text_atomic(output_dir / path, text, make_parents=False)
        for path in plan.remove:
            (output_dir / path).unlink()
            _prune_empty_parents(output_dir, output_dir / path)
        manifest = output_dir / MANIFEST_NAME
        if not manifest.is_file() or _current_bytes(manifest) != plan.manifest_text.encode("utf-8"):
            write_text_atomic(manifest, plan.manifest_text)
    except OSError as problem:
        # A full or read-only filesystem: each file is replaced atomically, so
        # none is half written; the next render finishes the set.
        raise UsageError(
            f"{output_dir}: cannot write the rendered files ({problem.strerror or problem})",
            "free space or choose another directory with -o, then render again",
        ) from None
    return plan.report()


def _make_output_dir(output_dir: Path) -> None:
    # /proc/x, /sys/x or a read-only mount: a usage error naming the path,
    # not an internal error.
    _refuse_linked_output_dir(output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return  # not a directory: plan_write says so
    except OSError as problem:
        raise UsageError(
            f"{output_dir}: cannot create the output directory ({problem.strerror or problem})",
            "choose a directory you can write to with -o",
        ) from None


def _current_bytes(target: Path) -> bytes | None:
    """What ``target`` holds now, through the bounded reader; None when it is larger than any rendered file."""
    try:
        return read_regular_file(target, MAX_RENDERED_BYTES)
    except FileTooLargeError:
        return None


def _conflict(path: str, current: bytes | None, recorded: Mapping[str, str]) -> str | None:
    if path not in recorded:
        return "not written by gpuclus"
    if current is None:
        return f"larger than any file gpuclus renders ({MAX_RENDERED_BYTES // (1024 * 1024)} MiB)"
    if hashlib.sha256(current).hexdigest() != recorded[path]:
        return "edited by hand"
    return None


def _check_relative(path: str, what: str) -> None:
    # Manifest paths decide what gets deleted: one pointing outside the output
    # directory must never be followed.
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or path == MANIFEST_NAME or "\\" in path:
        raise ValueError(f"{what} path {path!r} is not a plain relative path inside the output directory")


def _read_manifest(output_dir: Path, *, force: bool) -> dict[str, str]:
    manifest = output_dir / MANIFEST_NAME
    if not manifest.exists():
        return {}
    try:
        # A FIFO or device in its place would hang an unbounded read; JSON nested thousands deep, json's parser.
        data: Any = read_json_file(manifest, MAX_MANIFEST_BYTES)
        recorded = data["files"]
        if data.get("format") != MANIFEST_FORMAT or not isinstance(recorded, dict):
            raise ValueError("unknown manifest format")
        for path, digest in recorded.items():
            _check_relative(path, "manifest")
            if not isinstance(digest, str):
                raise ValueError("digest is not text")
    except (
        OSError,
        NotRegularFileError,
        FileTooLargeError,
        UnicodeDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
    ) as problem:
        if force:
            return {}
        raise UsageError(
            f"{manifest} is not a manifest gpuclus can read ({problem})",
            "pass --force to overwrite the directory, or delete the manifest",
        ) from None
    return dict(recorded)


def _refuse_linked_output_dir(output_dir: Path) -> None:
    # The default directory sits beside the spec, where whoever can write
    # there could plant a link to a directory of someone else's.
    if output_dir.is_symlink():
        raise UsageError(
            f"{output_dir} is a symbolic link; gpuclus does not render through links",
            f"pass the directory it points to with -o ({output_dir.resolve()}), or remove the link",
        )


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise UsageError(
            f"{path} is a symbolic link; gpuclus render does not write through links",
            f"remove the link (rm {path}) and render again",
        )


def _refuse_blocked_parents(output_dir: Path, target: Path) -> None:
    # A file where a directory must go would fail half way through writing;
    # a link there would have the files written into another directory.
    for parent in reversed(target.relative_to(output_dir).parents):
        blocker = output_dir / parent
        _refuse_link(blocker)
        if blocker.exists() and not blocker.is_dir():
            raise UsageError(
                f"{blocker} is in the way: gpuclus render needs a directory there",
                "move it away, or choose another output directory with -o",
            )


def _prune_empty_parents(output_dir: Path, removed: Path) -> None:
    parent = removed.parent
    while parent != output_dir and output_dir in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            return  # not empty: someone else's files live there
        parent = parent.parent
