"""The files a spec names on the control machine, as the checks read them: how a path is shown, secrets read safely."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file
from gpuclus.spec.checks.view import SpecView
from gpuclus.yamldoc.findings import Finding, Loc, error


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
