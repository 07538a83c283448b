"""Where gpuclus' own files (templates, playbooks, roles, requirements.yml) are.

From a source checkout or an editable install they sit at the top of the
repository; a wheel carries them under gpuclus/_data/ (see pyproject.toml).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The directory ``name`` (templates, playbooks, roles), wherever it was installed.

    GPUCLUS_PLAYBOOKS_DIR replaces the playbooks: the deploy engine's tests run
    it with tiny playbooks of their own.
    """
    override = os.environ.get("GPUCLUS_PLAYBOOKS_DIR") if name == "playbooks" else None
    if override:
        return Path(override).resolve()
    return _installed_dir(name)


def data_file(name: str) -> Path:
    """The file ``name`` (requirements.yml) of the repository's top, wherever it was installed."""
    return _installed(name, directory=False)


@cache
def _installed_dir(name: str) -> Path:
    return _installed(name, directory=True)


def _installed(name: str, *, directory: bool) -> Path:
    # The wheel's copy first: an installed gpuclus must never pick up the files
    # of a checkout it happens to sit in.
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent.parent / name):
        if candidate.is_dir() if directory else candidate.is_file():
            return candidate
    what = f"{name}/ directory" if directory else f"{name} file"
    raise FileNotFoundError(f"gpuclus installation is missing its {what} (looked beside {_PACKAGE})")


def templates_dir() -> Path:
    return data_dir("templates")
