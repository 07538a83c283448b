"""What a deploy would change in the rendered Ansible inputs: a diff against the last applied render."""

from __future__ import annotations

import difflib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpuclus.fileio import read_text_file, write_text_atomic
from gpuclus.state import StateDir

LAST_APPLIED = "last-applied"
# A copy of one rendered file: the largest, a 10,000-node inventory, is a few megabytes.
MAX_RENDERED_BYTES = 64 * 1024 * 1024
_REPLACED_HINT = "it is gpuclus' copy of the last deploy's render: delete .gpuclus/last-applied (plan shows all anew)"


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str  # added, removed, changed
    diff: str


def last_applied_dir(state: StateDir) -> Path:
    return state.root / LAST_APPLIED


def read_last_applied(state: StateDir) -> dict[str, str] | None:
    directory = last_applied_dir(state)
    if not directory.is_dir():
        return None
    return {
        str(path.relative_to(directory)): read_text_file(path, MAX_RENDERED_BYTES, hint=_REPLACED_HINT)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def save_last_applied(state: StateDir, rendered: dict[str, str]) -> None:
    """Replace .gpuclus/last-applied/ with ``rendered`` in one rename (never half-written)."""
    state.private_dir(state.root)
    staging = Path(tempfile.mkdtemp(prefix=".last-applied-", dir=state.root))
    for relative, text in rendered.items():
        write_text_atomic(staging / relative, text, mode=0o600)
    target = last_applied_dir(state)
    retired = state.root / ".last-applied-old"
    shutil.rmtree(retired, ignore_errors=True)
    if target.exists():
        target.rename(retired)
    staging.rename(target)
    shutil.rmtree(retired, ignore_errors=True)


def diff_renders(before: dict[str, str], after: dict[str, str]) -> list[FileChange]:
    changes = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        status = "added" if old is None else "removed" if new is None else "changed"
        text = "".join(
            difflib.unified_diff(
                (old or "").splitlines(keepends=True),
                (new or "").splitlines(keepends=True),
                fromfile=f"last-applied/{path}",
                tofile=f"planned/{path}",
            )
        )
        changes.append(FileChange(path, status, text))
    return changes
