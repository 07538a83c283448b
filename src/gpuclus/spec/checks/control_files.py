"""The files a spec names on the control machine, as the checks read them: how a path is shown, secrets read safely,
and none of them inside gpuclus' own state directory."""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file
from gpuclus.spec.checks.view import RegisteredCheck, SpecView, registrar
from gpuclus.state import STATE_DIR_NAME
from gpuclus.yamldoc.findings import Finding, Loc, error

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)

# Every spec field naming a file or directory on the control machine whose content gpuclus hands to the nodes
# (or, for users.file, reads and renders): absolute, or relative to the spec's directory.
CONTROL_FILE_FIELDS: tuple[Loc, ...] = (
    ("containers", "artifacts_dir"),
    ("containers", "credentials_file"),
    ("monitoring", "grafana_package"),
    ("monitoring", "dcgm_exporter_package"),
    ("monitoring", "alert_receiver", "webhook_url_file"),
    ("pytorch", "wheelhouse"),
    ("users", "file"),
    ("users", "directory", "bind_password_file"),
    ("users", "directory", "ca_cert_file"),
)
# Of those, the directories, by the endings of the files in them that a role sends on (release packages and
# tarballs, wheels).
_DIRECTORY_FIELDS = {("containers", "artifacts_dir"): (".deb", ".rpm", ".tar.gz"), ("pytorch", "wheelhouse"): (".whl",)}


def shown(path: Path) -> str:
    # The hint names the directory a relative path ended up at, which is what the admin has to check.
    return str(path.absolute())


def read_secret_file(
    view: SpecView,
    value: str,
    loc: Loc,
    *,
    code: str,
    max_bytes: int,
    too_large: str,
    what: str,
    wanted: str,
    holds: str,
) -> tuple[bytes | None, list[Finding]]:
    """A file of secrets the spec names: its bytes (None when it cannot be read) and the findings about it.

    ``code`` prefixes the codes (-missing, -grammar for a file over ``max_bytes``, -open for a mode that lets
    others in); the messages name the field, never the content.
    """
    label = ".".join(str(part) for part in loc)
    path = view.control_path(value)
    try:
        mode = path.stat().st_mode
        data = read_regular_file(path, max_bytes)
    except FileNotFoundError:
        hint = f"it resolves to {shown(path)} (a relative path is relative to the spec's directory)"
        return None, [error(f"{code}-missing", f"{label} {value!r} does not exist", loc, hint=hint)]
    except NotRegularFileError as exc:
        message = f"{label} {value!r} is {exc.kind}, not a file"
        return None, [error(f"{code}-missing", message, loc, hint=f"it resolves to {shown(path)}; name {what}")]
    except FileTooLargeError:
        return None, [error(f"{code}-grammar", f"{label} {too_large}", loc, hint=f"name {wanted}")]
    except OSError as exc:
        hint = f"let the user running gpuclus read {shown(path)}, and no one else"
        return None, [error(f"{code}-missing", f"{label} {value!r} cannot be read ({exc.strerror})", loc, hint=hint)]
    if not stat.S_IMODE(mode) & 0o077:
        return data, []
    message = f"{label} can be read or written by other users (mode {stat.S_IMODE(mode):04o}); it holds {holds}"
    return data, [error(f"{code}-open", message, loc, hint=f"chmod 600 {shlex.quote(shown(path))}")]


def named_control_files(view: SpecView) -> Iterator[tuple[Loc, str]]:
    """(loc, value) of every control-machine path the spec sets, in a part whose structure is sound."""
    for loc in CONTROL_FILE_FIELDS:
        value: Any = view.spec
        for name in loc:
            value = getattr(value, str(name), None)
        if isinstance(value, str) and view.is_whole(loc):
            yield loc, value


@_check()
def control_files_in_state_dir(view: SpecView) -> list[Finding]:
    """No input file is, or leads to, a file of gpuclus' own state (.gpuclus/ beside the spec).

    .gpuclus/ holds gpuclus' SSH key and the cluster's generated secrets (munge key, database and Grafana
    passwords); a field that named one would hand it on: bind_password_file set to the database password
    sends that to the LDAP server, a wheel linked to the munge key copies it to every node. Judged on the
    path as written (normalised) and with its links followed, since either can lead there.
    """
    state = _state_dirs(view)
    findings = []
    for loc, value in named_control_files(view):
        path = view.control_path(value)
        candidates = [path]
        if loc in _DIRECTORY_FIELDS and path.is_dir() and not _within(path, state):
            candidates.extend(entry for entry in _entries(path) if entry.name.endswith(_DIRECTORY_FIELDS[loc]))
        reached = next((candidate for candidate in candidates if _within(candidate, state)), None)
        if reached is None:
            continue
        label = ".".join(str(part) for part in loc)
        what = "is" if reached == path else f"holds {reached.name}, which is"
        findings.append(
            error(
                "control-file-in-state-dir",
                f"{label} {value!r} {what} inside gpuclus' own state directory {shown(state[0])} (SSH key, "
                "generated secrets), whose files are never inputs",
                loc,
                hint="name a file of its own outside .gpuclus/ (keep a password in a 0600 file beside the spec)",
            )
        )
    return findings


def _state_dirs(view: SpecView) -> tuple[Path, ...]:
    """The spec's .gpuclus/ as written and as state.StateDir.beside finds it (the directory's links resolved)."""
    written = Path(os.path.normpath(view.spec_dir.absolute() / STATE_DIR_NAME))
    return (written, view.spec_dir.resolve() / STATE_DIR_NAME)


def _within(path: Path, directories: tuple[Path, ...]) -> bool:
    """True when ``path``, normalised or with its links followed, is one of ``directories`` or lies inside one."""
    seen = [Path(os.path.normpath(path.absolute()))]
    with contextlib.suppress(OSError, RuntimeError):  # a loop of links: reading it fails too
        seen.append(path.resolve())  # follows every link that exists, as reading the file would
    return any(candidate.is_relative_to(directory) for candidate in seen for directory in directories)


def _entries(directory: Path) -> list[Path]:
    """The entries of ``directory`` a role may send on (sorted); none when it cannot be listed."""
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []
