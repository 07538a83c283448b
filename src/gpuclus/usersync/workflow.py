"""`gpuclus users add` and `users remove` as one call, once users/change.py has worked out the new text.

In order: write the users file (atomically, its mode kept), read the spec back
(it loads the users file it names), and run the users phase alone with the
ordinary deploy pipeline. A phase that fails leaves the file written: the next
`gpuclus deploy --only users` finishes the job. Nothing here prints: each step
goes to a UsersChangeObserver; the deploy is a parameter, so tests run it with
a fake.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from gpuclus.deploy import pipeline
from gpuclus.deploy.pipeline import DeployResult, ShowsDeploys
from gpuclus.fileio import write_text_atomic
from gpuclus.spec.load import LoadedSpec
from gpuclus.users.change import UsersChange

# The one phase a users change needs: accounts on every node, associations in Slurm.
USERS_PHASE = "users"


class UsersChangeObserver(ShowsDeploys, Protocol):
    """What a users change shows, step by step; the users phase goes through ``watch_deploy``."""

    def written(self, change: UsersChange) -> None: ...

    def deployed(self, result: DeployResult) -> None: ...


def apply_change(
    change: UsersChange,
    spec_path: Path,
    observer: UsersChangeObserver,
    *,
    load: Callable[[Path], LoadedSpec],
    deploy: pipeline.Deploy = pipeline.deploy,
) -> DeployResult:
    """Write the users file's new text, then deploy the users phase of the spec read back with it.

    ``load`` reads the spec back (the CLI's also shows its warnings); it sees the new users file, so the
    deploy renders that one.
    """
    write_text_atomic(change.path, change.new_text, mode=change.path.stat().st_mode & 0o777)
    observer.written(change)
    request = pipeline.DeployRequest(spec_path=spec_path, only=USERS_PHASE)
    result = observer.watch_deploy(request, load(spec_path), deploy)
    observer.deployed(result)
    return result
