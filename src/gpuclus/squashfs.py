"""Squashfs container images without a registry: a root file system (a directory,
or a local podman/docker image exported to one) packed with the system's mksquashfs.

The result is what Pyxis takes as ``srun --container-image=/path/img.sqsh`` and
what ``enroot create`` imports. Both unpack it as the job's user and map that
user to root inside the container, so:

- ownership in the image does not matter to them; ``-all-root`` makes the file
  the same whoever built it (no builder uid leaks into it), as enroot's own
  imports do;
- extended attributes are left out (``-no-xattrs``): an unprivileged unpack
  cannot set security.* attributes (file capabilities) and warns about each;
- compression is gzip: every kernel squashfs driver, squashfuse and
  squashfs-tools release reads it. zstd (and lz4) need squashfs-tools >= 4.4 on
  every node that unpacks the image and a squashfuse or kernel built with
  them; an image that some compute node cannot read fails only when a job
  lands there, which is the worst time to learn it;
- ``-noappend``: the temporary file is always a fresh image, never appended to;
- ``-mkfs-time 0`` (squashfs-tools >= 4.4, which also sorts and packs
  reproducibly): the same tree gives the same bytes. File times are kept as
  they are: clamping them would make every .pyc in the image look stale.

Before mksquashfs runs, the tree is checked for what Pyxis and enroot need:
/bin/sh (symbolic links resolved the way they resolve inside the container),
/etc/passwd and /etc/group (enroot rewrites them; they must exist). The image
is written to a temporary file beside the target and renamed over it at the
end: a failure or Ctrl-C leaves no half-written image behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuclus.errors import GpuclusError, UsageError

COMPRESSION = "gzip"
# The files Pyxis/enroot need in an image, and what each is for (in the refusal).
REQUIRED = (
    ("/bin/sh", "the shell enroot starts the job's command with"),
    ("/etc/passwd", "enroot adds the job's user to it"),
    ("/etc/group", "enroot adds the job's group to it"),
)
INSTALL_HINT = (
    "install squashfs-tools: `apt-get install squashfs-tools` (Debian/Ubuntu) "
    "or `dnf install squashfs-tools` (RHEL/Rocky/Fedora)"
)
_MAX_LINKS = 40  # as the kernel's path walk
Say = Callable[[str], None]


class ImageError(GpuclusError):
    """Building the image failed (mksquashfs, the engine export); exit 1."""


@dataclass(frozen=True)
class BuildResult:
    image: str  # absolute path of the written image
    source: str
    source_kind: str  # "directory", "podman image" or "docker image"
    files: int  # entries packed (files, directories, links, ...)
    source_bytes: int  # sum of the regular files' sizes
    bytes: int  # size of the image
    compression: str
    mksquashfs_version: str | None
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 1)}


# Checking a root file system ---------------------------------------------------------------


def resolve_in_root(root: Path, path: str) -> Path | None:
    """Where ``path`` leads inside ``root``, following symbolic links as a process chrooted there would.

    Absolute link targets start again at ``root`` and ``..`` stops at it, so
    nothing resolves outside the tree. None when a component is missing, a
    non-directory is walked through, or links loop.
    """
    pending = deque(path.split("/"))
    walked: list[str] = []
    hops = 0
    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            if walked:
                walked.pop()
            continue
        candidate = root.joinpath(*walked, name)
        try:
            mode = candidate.lstat().st_mode
        except OSError:  # missing, or a parent that is not a directory
            return None
        if stat.S_ISLNK(mode):
            hops += 1
            if hops > _MAX_LINKS:
                return None
            target = str(candidate.readlink())
            if target.startswith("/"):
                walked = []
            pending.extendleft(reversed(target.split("/")))
            continue
        walked.append(name)
    return root.joinpath(*walked)


def missing_in_root(root: Path) -> list[str]:
    """What Pyxis/enroot need and ``root`` lacks, one precise phrase each (empty: all there)."""
    problems: list[str] = []
    for path, purpose in REQUIRED:
        found = resolve_in_root(root, path)
        entry = root / path.lstrip("/")
        if found is None:
            if entry.is_symlink():
                problems.append(
                    f"{path} (a symbolic link to {entry.readlink()} that does not resolve inside the image; {purpose})"
                )
            else:
                problems.append(f"{path} ({purpose})")
            continue
        mode = found.lstat().st_mode
        if not stat.S_ISREG(mode):
            problems.append(f"{path} (is not a regular file; {purpose})")
        elif path == "/bin/sh" and not mode & 0o111:
            problems.append(f"{path} (is not executable; {purpose})")
    return problems


def check_root(root: Path) -> None:
    problems = missing_in_root(root)
    if problems:
        raise UsageError(
            f"{root} cannot be a Pyxis/enroot image; it lacks: {'; '.join(problems)}",
            "add them to the tree (a static busybox as /bin/sh, minimal passwd and group files), "
            "or build from a full image (`gpuclus image build IMAGE -o FILE.sqsh`)",
        )


def tree_size(root: Path) -> tuple[int, int]:
    """(entries, bytes of regular files) under ``root``, links not followed."""
    entries = 0
    total = 0
    for directory, subdirs, names in os.walk(root):
        base = Path(directory)
        for name in (*subdirs, *names):
            entries += 1
            with contextlib.suppress(OSError):
                status = (base / name).lstat()
                if stat.S_ISREG(status.st_mode):
                    total += status.st_size
    return entries, total


# mksquashfs ------------------------------------------------------------------------------------


def find_mksquashfs() -> str:
    found = shutil.which("mksquashfs")
    if found is None:
        raise UsageError("mksquashfs is not installed (it writes the squashfs image)", INSTALL_HINT)
    return found


def mksquashfs_version(binary: str) -> tuple[str | None, tuple[int, int]]:
    """("4.5.1", (4, 5)) from `mksquashfs -version`; (None, (0, 0)) when it does not say."""
    try:
        result = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None, (0, 0)
    match = re.search(r"version\s+((\d+)\.(\d+)[\w.-]*)", result.stdout + result.stderr)
    if match is None:
        return None, (0, 0)
    return match.group(1), (int(match.group(2)), int(match.group(3)))


def mksquashfs_argv(binary: str, root: Path, target: Path, version: tuple[int, int]) -> list[str]:
    argv = [binary, str(root), str(target), "-noappend", "-all-root", "-no-xattrs", "-comp", COMPRESSION]
    argv.append("-no-progress")
    if version >= (4, 4):
        argv += ["-mkfs-time", "0"]
    return argv


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _squash(argv: list[str]) -> None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as problem:
        raise ImageError(f"could not run {argv[0]}: {problem.strerror or problem}", INSTALL_HINT) from None
    if result.returncode != 0:
        detail = _last_line(result.stderr) or _last_line(result.stdout) or f"exit {result.returncode}"
        raise ImageError(
            f"mksquashfs failed: {detail}",
            "check free space and permissions where the image is written, and that every file in the source "
            "is readable by you",
        )


# Writing the image ------------------------------------------------------------------------------


def check_target(target: Path, source_dir: Path | None, force: bool) -> None:
    """Refuse (UsageError, exit 2) a target that is not a new regular file or one --force may replace."""
    from gpuclus.fileio import check_output_path

    check_output_path(target)
    if target.exists() and not force:
        raise UsageError(f"{target} already exists; not overwriting the image", "pass --force to replace it")
    if source_dir is not None:
        parent = target.parent.resolve()
        if parent == source_dir or source_dir in parent.parents:
            raise UsageError(
                f"{target} is inside the source directory {source_dir}; the image would pack itself",
                "write the image outside the tree",
            )


def write_image(root: Path, target: Path, say: Say) -> tuple[str | None, int]:
    """Pack ``root`` into ``target`` atomically; returns (mksquashfs version, image bytes)."""
    binary = find_mksquashfs()
    version_text, version = mksquashfs_version(binary)
    handle, temporary_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    temporary = Path(temporary_name)
    try:
        say(f"mksquashfs {version_text or '(version unknown)'}: packing with {COMPRESSION}")
        _squash(mksquashfs_argv(binary, root, temporary, version))
        # Every user whose job runs the image reads it (mkstemp made it 0600).
        temporary.chmod(0o644)
        with temporary.open("rb") as stream:
            os.fsync(stream.fileno())
        size = temporary.stat().st_size
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return version_text, size


# Sources ----------------------------------------------------------------------------------------


def is_directory_source(source: str) -> bool:
    """A directory, or a path that names one (refused later when it does not exist)."""
    path = Path(source)
    if path.is_dir():
        return True
    if path.exists() or path.is_symlink():
        raise UsageError(
            f"{source} is not a directory (a root file system) nor an image reference",
            "for a tarball: mkdir ROOT && tar -xf FILE -C ROOT, then build from ROOT",
        )
    if source.startswith(("/", "./", "../", "~")):
        raise UsageError(f"{source}: no such directory", "SOURCE is a root file system directory or a local image")
    if source.startswith("-"):
        # The engine would read it as one of its own options (`create --privileged`, `-v /:/host`): no image
        # name starts with '-'.
        raise UsageError(
            f"{source!r} starts with '-': not an image name, and no such directory",
            f"for a directory of that name write ./{source}",
        )
    return False


def _remove_tree(path: Path) -> None:
    """rmtree that also removes read-only directories an image brought along (unpacked as a user)."""
    shutil.rmtree(path, ignore_errors=True)
    if not path.exists():
        return
    with contextlib.suppress(OSError):
        path.chmod(0o700)
    for directory, subdirs, _names in os.walk(path):
        # Before os.walk descends into them: it must list them.
        # os.walk lists links to directories among them: never chmod what a link points to (the host's /usr).
        for child in (Path(directory) / name for name in subdirs):
            if not child.is_symlink():
                with contextlib.suppress(OSError):
                    child.chmod(0o700)
    shutil.rmtree(path, ignore_errors=True)


def _empty_dev(root: Path) -> None:
    """Drop what the engine put in /dev (console, pts, shm): the runtime mounts its own /dev, and
    device nodes in an image make an unprivileged unsquashfs (enroot create) complain or fail."""
    dev = root / "dev"
    if dev.is_symlink() or not dev.is_dir():
        return
    for entry in dev.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            _remove_tree(entry)
        else:
            entry.unlink()


@contextlib.contextmanager
def exported_image(reference: str, engine_choice: str, say: Say) -> Iterator[tuple[Path, str]]:
    """The local image ``reference`` unpacked into a temporary directory: (root, engine kind).

    `<engine> create` (never pulling) + `<engine> export | tar -x`; the
    container and the directory are removed afterwards, also on failure or Ctrl-C.
    """
    from gpuclus.sandbox.engine import engine_message
    from gpuclus.sandbox.hostprep import pick_engine

    try:
        engine = pick_engine(engine_choice, install=False, say=say).engine  # type: ignore[arg-type]
    except GpuclusError as problem:
        raise UsageError(
            f"{reference!r} is not a directory, and reading it as an image needs a container engine: {problem.message}",
            "pass a root file system directory instead, or install podman (apt-get install podman)",
        ) from None
    scratch = Path(tempfile.mkdtemp(prefix="gpuclus-image-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    container: str | None = None
    try:
        say(f"exporting {engine.kind} image {reference}")
        # --pull=never: a local image only; a registry is not what this tool is for.
        # A command is given so that images without CMD can be created too (it never runs).
        created = subprocess.run(
            [engine.binary, "create", "--pull=never", reference, "/bin/sh"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if created.returncode != 0:
            raise UsageError(
                f"{engine.kind} has no local image {reference!r}: {engine_message(created.stderr) or 'create failed'}",
                f"`{engine.kind} images` lists the local images; pull or build it first, or pass a directory",
            )
        container = _last_line(created.stdout)
        root = scratch / "rootfs"
        root.mkdir()
        with subprocess.Popen([engine.binary, "export", container], stdout=subprocess.PIPE) as export:
            unpacked = subprocess.run(
                ["tar", "-x", "--numeric-owner", "-C", str(root), "-f", "-"],
                stdin=export.stdout,
                capture_output=True,
                text=True,
                check=False,
            )
            exported = export.wait()
        if exported != 0:
            raise ImageError(f"{engine.kind} export of {reference} failed (exit {exported})")
        if unpacked.returncode != 0:
            raise ImageError(f"unpacking the export of {reference} failed: {_last_line(unpacked.stderr)}")
        _empty_dev(root)
        yield root, engine.kind
    finally:
        if container:
            subprocess.run([engine.binary, "rm", "--force", container], capture_output=True, timeout=120, check=False)
        _remove_tree(scratch)


def build(source: str, target: Path, *, force: bool, engine_choice: str, say: Say) -> BuildResult:
    """Check the target, find the root file system, check it, pack it; see the module docstring."""
    started = time.monotonic()
    directory = is_directory_source(source)
    source_dir = Path(source).resolve() if directory else None
    check_target(target, source_dir, force)
    with contextlib.ExitStack() as stack:
        if source_dir is not None:
            root, kind = source_dir, "directory"
            check_root(root)
            find_mksquashfs()
        else:
            # A missing mksquashfs is refused before a long export.
            find_mksquashfs()
            root, engine_kind = stack.enter_context(exported_image(source, engine_choice, say))
            kind = f"{engine_kind} image"
            check_root(root)
        files, source_bytes = tree_size(root)
        say(f"{kind} {source}: {files} entries, {source_bytes / 2**20:.1f} MiB")
        version, size = write_image(root, target, say)
    return BuildResult(
        image=str(target.resolve()),
        source=source,
        source_kind=kind,
        files=files,
        source_bytes=source_bytes,
        bytes=size,
        compression=COMPRESSION,
        mksquashfs_version=version,
        seconds=time.monotonic() - started,
    )
