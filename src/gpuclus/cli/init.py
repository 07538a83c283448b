"""`gpuclus init`: write a valid, commented cluster spec from flags, a hosts file or a wizard."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gpuclus.cli.common import DEFAULT_SPEC, JsonOption, handled, require_absent_or_force
from gpuclus.errors import SpecInvalidError, UsageError
from gpuclus.output import Output, plural
from gpuclus.yamldoc.findings import Severity

if TYPE_CHECKING:  # initspec pulls in pydantic and jinja2; importing it at start-up slows --help
    from gpuclus.initspec import SpecDraft


def init(
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Cluster name (Slurm ClusterName). Default: the output directory's name if valid, else gpu-cluster.",
            show_default=False,
        ),
    ] = None,
    admin_user: Annotated[
        str | None,
        typer.Option(
            "--admin-user",
            help="User gpuclus logs in as over SSH; needs passwordless sudo on every node. "
            "Default: $SUDO_USER, else $USER, else root.",
            show_default=False,
        ),
    ] = None,
    controller: Annotated[
        str | None,
        typer.Option(
            "--controller",
            metavar="NAME=ADDR",
            help="The node that runs slurmctld, NFS, monitoring and logins, e.g. head=10.0.0.10. "
            "With --from-hosts, NAME alone picks a host of the file.",
            show_default=False,
        ),
    ] = None,
    compute: Annotated[
        list[str] | None,
        typer.Option(
            "--compute",
            metavar="NAMES=ADDRS",
            help="GPU nodes as a hostlist pair, e.g. 'gpu[01-04]=10.0.0.[11-14]' (quote it for the shell). "
            "Repeat for more groups.",
            show_default=False,
        ),
    ] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-node",
            min=1,
            max=64,
            help="GPUs in each compute node. Default: 1.",
            show_default=False,
        ),
    ] = None,
    gpu_model: Annotated[
        str | None,
        typer.Option(
            "--gpu-model",
            help="Short GPU model, e.g. h100: the Slurm GRES type; validate looks for it in nvidia-smi's "
            "GPU name. Optional.",
            show_default=False,
        ),
    ] = None,
    from_hosts: Annotated[
        Path | None,
        typer.Option(
            "--from-hosts",
            metavar="FILE",
            help="Take the nodes from an /etc/hosts-style file (ADDR NAME [ALIASES]) or a list with one "
            "host per line (NAME, NAME ADDR or ADDR NAME). The first host is the controller unless "
            "--controller is given; localhost and ip6-* entries are skipped.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Where to write the spec; its directory must exist.")
    ] = DEFAULT_SPEC,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")] = False,
    wizard: Annotated[
        bool | None,
        typer.Option(
            "--wizard/--no-wizard",
            help="Ask for everything interactively. Default: ask when run in a terminal without "
            "--controller, --compute or --from-hosts; never ask when stdin is not a terminal.",
            show_default=False,
        ),
    ] = None,
    json_mode: JsonOption = False,
) -> None:
    """Write a cluster spec (cluster.yaml) to start from, with every section commented.

    In a terminal without node flags it asks a few questions; otherwise the
    nodes come from --controller/--compute or --from-hosts. The spec is checked
    before it is written: nothing is written when it has errors (exit 3).

    Examples:

      gpuclus init --controller head=10.0.0.10 --compute 'gpu[01-04]=10.0.0.[11-14]' --gpus-per-node 8

      mkdir lab && gpuclus init --from-hosts /etc/hosts --gpus-per-node 4 -o lab/cluster.yaml

      gpuclus init --controller ws=192.168.1.20 --gpus-per-node 2   (one machine does everything)
    """
    out = Output(json_mode=json_mode)
    # handled() reads this dict only when it reports an error, so findings added later reach --json.
    extra: dict[str, Any] = {"file": str(output)}
    with handled(out, extra):
        _init(
            out,
            extra,
            name=name,
            admin_user=admin_user,
            controller=controller,
            compute=compute or [],
            gpus_per_node=gpus_per_node,
            gpu_model=gpu_model,
            from_hosts=from_hosts,
            output=output,
            force=force,
            wizard=wizard,
        )


def _init(
    out: Output,
    extra: dict[str, Any],
    *,
    name: str | None,
    admin_user: str | None,
    controller: str | None,
    compute: list[str],
    gpus_per_node: int | None,
    gpu_model: str | None,
    from_hosts: Path | None,
    output: Path,
    force: bool,
    wizard: bool | None,
) -> None:
    from gpuclus import initspec
    from gpuclus.fileio import check_output_path, write_output_file

    # Refuse before asking anything: answering ten questions to be told "exists" is no fun.
    # The type comes first: --force cannot help with a FIFO or a missing directory.
    check_output_path(output)
    require_absent_or_force(output, force, "cluster spec")
    node_flags = controller is not None or bool(compute) or from_hosts is not None
    if wizard and node_flags:
        raise UsageError(
            "--wizard asks for the nodes itself",
            "drop --controller/--compute/--from-hosts, or drop --wizard",
        )
    use_wizard = wizard if wizard is not None else (not node_flags and sys.stdin.isatty())
    cluster_name, user = initspec.resolve_identity(name, admin_user, output, os.environ)

    if use_wizard:
        draft = initspec.run_wizard(
            _ask,
            _confirm,
            lambda text: out.err.print(f"  [yellow]{escape(text)}[/]"),
            initspec.WizardDefaults(
                name=cluster_name,
                admin_user=user,
                gpus_per_node=gpus_per_node or initspec.DEFAULT_GPUS_PER_NODE,
                gpu_model=gpu_model,
            ),
        )
    else:
        draft = _draft_from_flags(
            out, cluster_name, user, controller, compute, gpus_per_node, gpu_model, from_hosts, output
        )

    text = initspec.render_spec(draft)
    _check_before_writing(out, extra, text, output)
    require_absent_or_force(output, force, "cluster spec")
    write_output_file(output, text)
    _report(out, output, draft)


def _draft_from_flags(
    out: Output,
    name: str,
    user: str,
    controller: str | None,
    compute: list[str],
    gpus_per_node: int | None,
    gpu_model: str | None,
    from_hosts: Path | None,
    output: Path,
) -> SpecDraft:
    from gpuclus import initspec

    file_hosts: list[initspec.HostRange] = []
    if from_hosts is not None:
        _refuse_a_state_file(from_hosts)
        hosts = initspec.read_hosts_file(from_hosts)
        skipped = hosts.skipped_summary()
        if skipped:
            out.note(f"[dim]note:[/] {escape(skipped)}")
        file_hosts = hosts.ranges()
    draft = initspec.draft_from_flags(
        name=name,
        admin_user=user,
        controller=controller,
        compute=compute,
        file_hosts=file_hosts,
        file_source=str(from_hosts) if from_hosts else None,
        gpus_per_node=gpus_per_node or initspec.DEFAULT_GPUS_PER_NODE,
        gpu_model=gpu_model,
    )
    if from_hosts is not None and controller is None:
        out.note(
            f"[dim]note:[/] controller: {escape(draft.controller.name)} (the first host of "
            f"{escape(str(from_hosts))}); pass --controller NAME to pick another"
        )
    if gpus_per_node is None:
        out.note(
            f"[dim]note:[/] each GPU node gets 1 GPU (no --gpus-per-node); edit gpus.count in "
            f"{escape(str(output))} if they have more"
        )
    return draft


def _refuse_a_state_file(path: Path) -> None:
    """A hosts file inside a .gpuclus/ directory is one of gpuclus' own files, refused before it is read.

    A generated password reads like a host name: it would be printed as the controller's name and written
    into the spec, and from there into every node's /etc/hosts.
    """
    from gpuclus.state import STATE_DIR_NAME

    if STATE_DIR_NAME in path.resolve().parts[:-1]:
        raise UsageError(
            f"--from-hosts {path}: inside gpuclus' own state directory ({STATE_DIR_NAME}/), "
            "which holds keys and passwords, not hosts",
            "pass an /etc/hosts-style file of your own",
        )


def _check_before_writing(out: Output, extra: dict[str, Any], text: str, output: Path) -> None:
    """Load the text as `spec check` would; errors mean nothing is written (exit 3)."""
    from gpuclus.spec.load import load_spec_text

    loaded = load_spec_text(text, str(output))
    if loaded.ok:
        out.findings([f for f in loaded.findings if f.severity is Severity.WARNING])
        return
    errors = [f for f in loaded.findings if f.severity is Severity.ERROR]
    out.findings(errors)
    extra["findings"] = [finding.as_dict() for finding in loaded.findings]
    raise SpecInvalidError(
        f"not writing {output}: the spec would have {plural(len(errors), 'error')}",
        "the lines above are from the text gpuclus would have written; fix the names or addresses you "
        "gave and run `gpuclus init` again",
    )


def _report(out: Output, output: Path, draft: SpecDraft) -> None:
    out.emit(
        {
            "ok": True,
            "file": str(output),
            "nodes": draft.host_count,
            "gpus": draft.gpu_count,
            "controller": draft.controller.name,
        }
    )
    compute = draft.host_count - 1
    shape = (
        f"{escape(draft.controller.name)} as controller and compute node"
        if draft.workstation
        else f"{escape(draft.controller.name)} + {plural(compute, 'compute node')}"
    )
    out.note(
        f"[green]✓[/] wrote {escape(str(output))}: cluster {escape(draft.name)}, {shape}, "
        f"{plural(draft.gpu_count, 'GPU')}"
    )
    spec = escape(str(output))
    out.note("next steps:")
    out.note(f"  1. read and adjust {spec} (every section is commented)")
    out.note(f"  2. gpuclus spec check {spec}")
    out.note(f"  3. gpuclus render {spec}")


def _ask(question: str, default: str | None) -> str:
    # err=True keeps stdout free for --json; an empty default allows an empty answer.
    answer: str = typer.prompt(question, default=default, show_default=bool(default), err=True)
    return answer


def _confirm(question: str, default: bool) -> bool:
    return typer.confirm(question, default=default, err=True)
