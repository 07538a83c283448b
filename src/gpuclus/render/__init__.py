"""Render a checked spec into the files Ansible reads: pure, deterministic, offline.

``context`` turns the spec into template data, ``files`` renders the templates
under templates/render/ into text, and ``writer`` puts that text on disk
without clobbering hand edits. Nothing here touches the network, and nothing
imports typer or rich: the CLI reports what the writer did.
"""

from __future__ import annotations

from gpuclus.render.files import RENDERED_FILES, render_files
from gpuclus.render.writer import MANIFEST_NAME, FileResult, FileStatus, WriteReport, write_rendered

__all__ = [
    "MANIFEST_NAME",
    "RENDERED_FILES",
    "FileResult",
    "FileStatus",
    "WriteReport",
    "render_files",
    "write_rendered",
]
