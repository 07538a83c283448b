"""The unit tests' shared helper modules (role_templates, validate_stubs, deploy_specs, ...) live in this folder.

The tests sit in sub-folders that mirror src/gpuclus (spec/, validate/, deploy/, ...; roles/ for the Ansible
roles), and pytest puts a test file's own folder on sys.path, not its parent: this one is added here, once, so
``from role_templates import ...`` reads the same in every sub-folder.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HELPERS = str(Path(__file__).resolve().parent)
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)


@pytest.fixture(autouse=True)
def _no_fingerprint_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests reach no node: a deploy run in-process reads no node's fingerprint over SSH (every node
    answers none, so none is recorded); tests of deploy/in_sync.py pass their own reader."""
    from gpuclus.deploy import in_sync

    monkeypatch.setattr(in_sync, "read_fingerprints", lambda loaded, spec_path, names: dict.fromkeys(names))


@pytest.fixture(autouse=True, scope="session")
def _gpuclus_click_command_built_once() -> Iterator[None]:
    """typer's CliRunner builds the click command tree from the app on every invoke, most of a short command's
    time; gpuclus' app is the same object in every test, so its tree is built once (other apps as typer does)."""
    import click
    import typer
    import typer.testing

    from gpuclus.cli.main import app

    build = typer.testing._get_command
    command = build(app)

    def built(typer_app: typer.Typer) -> click.Command:
        return command if typer_app is app else build(typer_app)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", built)
        yield
