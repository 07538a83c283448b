"""`gpuclus image build`: a squashfs container image for Pyxis and enroot, without a registry."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpuclus.cli.common import JsonOption, handled
from gpuclus.errors import UsageError
from gpuclus.output import Output

app = typer.Typer(
    help="Container images for Pyxis/enroot jobs without a registry (squashfs files).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.command("build")
def build(
    source: Annotated[
        str,
        typer.Argument(
            help="A root file system directory, or a local podman/docker image (e.g. localhost/app:1).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The squashfs file to write (e.g. /shared/images/app.sqsh).", show_default=False
        ),
    ],
    force: Annotated[bool, typer.Option("--force", help="Replace the file if it exists.")] = False,
    engine: Annotated[
        str,
        typer.Option(
            "--engine", help="For an image SOURCE: auto, podman or docker (auto prefers podman).", metavar="ENGINE"
        ),
    ] = "auto",
    json_mode: JsonOption = False,
) -> None:
    """Write a squashfs image that `srun --container-image=/path/FILE.sqsh` (Pyxis) and `enroot create` run.

    SOURCE is a directory holding a root file system, or a local podman/docker
    image, which is exported to a temporary directory (`create` + `export`,
    never pulled) and removed afterwards. The tree must hold /bin/sh,
    /etc/passwd and /etc/group (Pyxis/enroot need them); it is refused,
    naming what is missing, before anything is written. The system's
    mksquashfs (squashfs-tools) packs it with gzip, every file owned by root,
    without extended attributes, so every node can unpack it. The image is
    written to a temporary file beside FILE and renamed at the end: a failure
    or Ctrl-C leaves nothing half-written.

    Put FILE at the same path on every compute node (the NFS share), and name
    it with a path starting with '/' or './': Pyxis reads a bare name as a
    registry image. Then: `gpuclus validate --container-image=/path/FILE.sqsh`.

    Exit 0 when written, 1 when mksquashfs or the export failed, 2 for a bad
    SOURCE, a tree missing what Pyxis needs, a refused overwrite or a missing
    mksquashfs, 130 when interrupted.
    """
    from gpuclus.squashfs import build as build_image

    out = Output(json_mode=json_mode)
    with handled(out, {"image": str(output)}):
        if engine not in {"auto", "podman", "docker"}:
            raise UsageError(f"--engine {engine!r}: use auto, podman or docker")
        result = build_image(
            source, output, force=force, engine_choice=engine, say=lambda text: out.note(f"[dim]==>[/] {escape(text)}")
        )
        out.emit({"ok": True, **result.as_dict()})
        out.result(
            f"[green]✓[/] wrote {escape(result.image)} ({result.bytes / 2**20:.1f} MiB, {result.compression}, "
            f"{result.files} entries from {result.source_bytes / 2**20:.1f} MiB) in {result.seconds:.1f} s"
        )
        quoted = escape(shlex.quote(result.image))
        out.result(
            # /bin/sh and a builtin: all an image build accepts is sure to have (no cat, no os-release).
            f"  use it: srun --container-image={quoted} /bin/sh -c 'echo hello from the image'   |   "
            f"gpuclus validate --container-image={quoted}"
        )
        out.result("  (the file must be at this path on every compute node, e.g. on the NFS share)")
