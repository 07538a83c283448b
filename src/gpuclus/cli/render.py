"""`gpuclus render`: write the Ansible inventory, group_vars and ansible.cfg for a spec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, SpecArgument, handled, load_checked_spec
from gpuclus.output import Output, plural

_STATUS_STYLE = {"written": "green", "unchanged": "dim", "removed": "yellow"}


def render(
    spec: SpecArgument = DEFAULT_SPEC,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Directory to write into. Default: 'rendered' beside the spec.",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Overwrite files that were edited by hand or not written by gpuclus."),
    ] = False,
    json_mode: JsonOption = False,
) -> None:
    """Render the Ansible inputs for a spec: inventory, group_vars and ansible.cfg.

    Writes inventory/hosts.yml, inventory/group_vars/all/*.yml and ansible.cfg
    into the output directory, plus .gpuclus-render.json, which records what
    gpuclus wrote. Rendering is pure: the same spec gives byte-identical files,
    and nothing is contacted over the network.

    A file edited by hand since the last render (or one gpuclus did not write)
    is never overwritten silently: the command writes nothing and exits 2
    unless --force is given. Put lasting changes into the spec instead.

    ansible.cfg names the spec's .gpuclus/ relative to itself and its
    known_hosts by absolute path: run ansible-playbook in the output
    directory (or point ANSIBLE_CONFIG at the file).

    Exit 0 when written, 2 for a missing spec or a refused overwrite, 3 when
    the spec has errors (they are listed).
    """
    from gpuclus.render import FileStatus, render_files, write_rendered
    from gpuclus.state import StateDir

    out = Output(json_mode=json_mode)
    with handled(out, {"file": str(spec)}):
        loaded = load_checked_spec(spec, out)
        output_dir = output if output is not None else spec.parent / "rendered"
        # ansible.cfg points at the spec's .gpuclus/ (SSH key, fact cache)
        # relative to itself, and at its known_hosts by the absolute path
        # (ssh would resolve a relative one against the directory Ansible runs in).
        state = StateDir.beside(spec)
        state_dir = os.path.relpath(state.root, output_dir.resolve())
        files = render_files(
            loaded.spec,
            loaded.topology,
            source_name=spec.name,
            state_dir=state_dir,
            known_hosts=str(state.known_hosts),
            users=loaded.users,
        )
        report = write_rendered(output_dir, files, force=force)

        nodes = len(loaded.topology.nodes)
        out.emit(
            {
                "ok": True,
                "output_dir": str(output_dir),
                "files": [{"path": item.path, "status": item.status.value} for item in report.files],
                "nodes": nodes,
            }
        )
        for item in report.files:
            style = _STATUS_STYLE[item.status.value]
            out.result(f"  [{style}]{item.status.value:<9}[/] {escape(item.path)}")
        counts = ", ".join(f"{report.count(status)} {status.value}" for status in FileStatus if report.count(status))
        out.result(
            f"[green]✓[/] rendered {plural(len(files), 'file')} for {plural(nodes, 'node')} "
            f"into {escape(str(output_dir))} ({counts})"
        )
