"""`gpuclus sandbox up|down|status|ssh`: local container nodes to try gpuclus on."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gpuclus.cli.common import JsonOption, handled
from gpuclus.errors import UsageError
from gpuclus.output import Output

if TYPE_CHECKING:
    from gpuclus.sandbox.lifecycle import UpResult

app = typer.Typer(
    help="Local container nodes (systemd + sshd) to try and test gpuclus without hardware.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

DEFAULT_SPEC = Path("sandbox.yaml")
SpecOption = Annotated[
    Path,
    typer.Option(
        "--spec",
        help="The sandbox's spec file; its state lives in .gpuclus/ beside it.",
    ),
]
EngineOption = Annotated[
    str,
    typer.Option("--engine", help="auto, podman or docker. auto prefers podman (no daemon).", metavar="ENGINE"),
]


def _engine_choice(value: str) -> str:
    if value not in {"auto", "podman", "docker"}:
        raise UsageError(f"--engine {value!r}: use auto, podman or docker")
    return value


@app.command("up")
def up(
    name: Annotated[
        str,
        typer.Option(
            "--name",
            help="Cluster name; nodes are NAME-head, NAME-gpu01, ...",
            envvar="GPUCLUS_SANDBOX_NAME",
            show_envvar=True,
        ),
    ] = "sandbox",
    nodes: Annotated[
        int,
        typer.Option(
            "--nodes",
            help="Nodes: one controller, the rest compute. On a sandbox that is up here (2 nodes or more), "
            "a new count adds or removes compute nodes.",
        ),
    ] = 3,
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", help="Fake GPUs (device nodes, no driver) per compute node.")
    ] = 2,
    engine: EngineOption = "auto",
    subnet: Annotated[
        str | None,
        typer.Option(
            "--subnet",
            help="IPv4 subnet for the nodes; default: a free /24 of 10.213.0.0/16.",
            envvar="GPUCLUS_SANDBOX_SUBNET",
            show_envvar=True,
        ),
    ] = None,
    install: Annotated[
        bool,
        typer.Option(
            "--install/--no-install",
            help="Install podman, runc and debootstrap with apt when missing, and raise the host's inotify"
            " instances for many nodes (--no-install refuses instead, naming the command).",
        ),
    ] = True,
    mirror: Annotated[
        str | None,
        typer.Option(
            "--mirror",
            envvar="GPUCLUS_SANDBOX_MIRROR",
            show_envvar=True,
            help="Debian mirror URL to build the node image from; default: the one in this host's apt sources.",
            metavar="URL",
        ),
    ] = None,
    artifacts: Annotated[
        Path | None,
        typer.Option(
            "--artifacts",
            help="Directory on this host with Enroot's and Pyxis' release sources (enroot-<v>-src.tar.gz, "
            "pyxis-<v>-src.tar.gz): the spec then turns the containers phase on and builds them from there. "
            "Default: containers off. A later `up` here must pass the same directory.",
            metavar="DIR",
        ),
    ] = None,
    wheelhouse: Annotated[
        Path | None,
        typer.Option(
            "--wheelhouse",
            envvar="GPUCLUS_SANDBOX_WHEELHOUSE",
            show_envvar=True,
            help="Directory on this host with the wheels for the nodes' PyTorch environment (torch 2.13.0 for "
            "Python 3.11 and its dependencies; scripts/wheelhouse.sh fills one): the spec then turns on Lmod, "
            "a node-local PyTorch environment built from it, and the job templates. Default: off. A later `up` "
            "here must pass the same directory.",
            metavar="DIR",
        ),
    ] = None,
    os_name: Annotated[
        str | None,
        typer.Option(
            "--os",
            envvar="GPUCLUS_SANDBOX_OS",
            show_envvar=True,
            help="The nodes' OS: debian12 (Slurm 22.05) or debian13 (Slurm 24.11). Default: debian12, or what "
            "the sandbox that is up here runs.",
            metavar="OS",
        ),
    ] = None,
    compute_os: Annotated[
        str | None,
        typer.Option(
            "--compute-os",
            help="The compute nodes' OS when it differs from the head's (a mixed sandbox), e.g. "
            "--os debian13 --compute-os debian12. Debian 12's and 13's Slurm cannot form one cluster: "
            "`up` says so and deploy's preflight leaves those compute nodes out. Default: --os.",
            metavar="OS",
        ),
    ] = None,
    spec: SpecOption = DEFAULT_SPEC,
    json_mode: JsonOption = False,
) -> None:
    """Start sandbox nodes and write a spec for them (sandbox.yaml).

    Builds a node image per OS (--os, --compute-os) with debootstrap the first
    time (about a minute; cached by content hash afterwards) from the Debian mirror in this
    host's apt sources, whose apt settings (proxy, credentials) the nodes also
    get; on a host without a Debian mirror (Ubuntu, say) pass --mirror or set
    GPUCLUS_SANDBOX_MIRROR. It then starts the nodes as privileged
    systemd containers on a private network, installs gpuclus' SSH key for the
    admin user 'gpuclus', records each node's host key in gpuclus' known_hosts,
    and checks that SSH and sudo work on every node. Each compute node gets a
    tiny squashfs test image for Pyxis on its own disk, at
    /var/lib/gpuclus-sandbox/images/test.sqsh; with --artifacts DIR the spec
    turns Enroot and Pyxis on, built from the release sources in DIR.
    Running it again is a no-op that reports the nodes; an interrupted run is
    completed by the next.

    Run again with another --nodes (2 nodes or more before and after), it
    grows or shrinks the sandbox: the head and the compute nodes that stay are left as
    they are, new compute nodes get the next names and addresses and are set
    up as above, the highest-numbered ones are removed, and the spec is
    rewritten for the new count. It changes containers, not the cluster: run
    `gpuclus deploy` after adding nodes, and take nodes out of Slurm
    (`gpuclus nodes remove`) before shrinking, since removing a container
    does not. Other changes (--gpus-per-node, --subnet, to or from 1 node)
    need `gpuclus sandbox down` first.

    Needs root. Exit 0 when every node answers over SSH, 1 when a step failed,
    2 for bad options or a missing prerequisite.
    """
    from gpuclus.sandbox.lifecycle import UpOptions
    from gpuclus.sandbox.lifecycle import up as sandbox_up

    out = Output(json_mode=json_mode)
    with handled(out):
        options = UpOptions(
            spec_path=spec,
            cluster=name,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            engine=_engine_choice(engine),  # type: ignore[arg-type]
            subnet=subnet,
            install=install,
            mirror=mirror,
            artifacts=artifacts,
            wheelhouse=wheelhouse,
            os=os_name,
            compute_os=compute_os,
        )
        result = sandbox_up(options, lambda text: out.note(f"[dim]==>[/] {escape(text)}"))
        if json_mode:
            out.emit({"ok": True, **result.as_dict()})
            return
        for note in result.notes:
            out.warn(note)
        _print_nodes(out, [(s.name, s.role, s.os, s.address, s.gpus, s.state, s.ssh) for s in result.nodes])
        _print_reshape(out, result)
        verb = "up" if result.changed else "already up, nothing to do"
        out.result(
            f"[green]✓[/] sandbox {escape(result.cluster)} {verb} in {result.seconds:.1f} s "
            f"({result.engine}, {result.subnet}); spec: {escape(result.spec)}"
        )
        if result.added_nodes:
            # The new containers are bare nodes until a deploy puts the cluster on them.
            out.result(f"  next: gpuclus deploy {escape(result.spec)}")
        else:
            out.result(
                f"  next: gpuclus spec check {escape(result.spec)}   |   "
                f"gpuclus sandbox ssh {escape(result.nodes[0].name)}"
            )


@app.command("down")
def down(
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The sandbox to remove, from any directory (`gpuclus sandbox list` names them); "
            "default: the sandbox recorded beside --spec.",
        ),
    ] = None,
    purge: Annotated[bool, typer.Option("--purge", help="Also remove the cached node image(s).")] = False,
    engine: EngineOption = "auto",
    spec: SpecOption = DEFAULT_SPEC,
    json_mode: JsonOption = False,
) -> None:
    """Remove the sandbox's nodes, network and NFS volume (the cached image stays unless --purge).

    Without --name: what `up` made from this directory (also after an
    interrupted `up`); a sandbox of the same name run from another directory
    is left alone. With --name: that sandbox, wherever it was started from
    (its directory's record of it goes too). Taking down a sandbox that is not
    there is fine (exit 0). The spec file is left in place; `up` rewrites it.
    """
    from gpuclus.sandbox.lifecycle import down as sandbox_down

    out = Output(json_mode=json_mode)
    with handled(out):
        result = sandbox_down(
            spec,
            cluster=name,
            purge=purge,
            engine_choice=_engine_choice(engine),
            say=lambda t: out.note(f"[dim]==>[/] {escape(t)}"),
        )
        if json_mode:
            out.emit({"ok": True, **result.as_dict()})
            return
        if not (result.removed_nodes or result.removed_network or result.removed_volumes or result.removed_images):
            out.result(
                f"nothing to remove: no sandbox named {escape(name)!r} on this host"
                if name
                else "nothing to remove: no sandbox is up here"
            )
        else:
            out.result(
                f"[green]✓[/] removed {len(result.removed_nodes)} node(s)"
                + (", the network" if result.removed_network else "")
                + (f", {len(result.removed_volumes)} volume(s)" if result.removed_volumes else "")
                + (f", {len(result.removed_images)} image(s)" if result.removed_images else "")
            )
        for where in result.elsewhere:
            out.note(f"left alone: {escape(_elsewhere(result.cluster, where))}")
        for where in result.removed_from:
            out.note(f"it ran from {escape(where or 'a directory an older gpuclus did not record')}")


@app.command("list")
def list_(
    json_mode: JsonOption = False,
) -> None:
    """Show every sandbox on this host, from any directory: name, OS, nodes, directory, state.

    Found by the labels on what `up` made (podman, and docker when its daemon
    runs). State: running (every node), stopped (none), partial (some), or
    leftovers (a network or volume without nodes). `gpuclus sandbox down
    --name NAME` removes one from anywhere. Exit 0, also when there is none.
    """
    from gpuclus.sandbox.listing import installed_engines, list_sandboxes

    out = Output(json_mode=json_mode)
    with handled(out):
        summaries = list_sandboxes(installed_engines())
        if json_mode:
            out.emit({"ok": True, "sandboxes": [summary.as_dict() for summary in summaries]})
            return
        if not summaries:
            out.result("no sandbox on this host")
            return
        table = Table(box=None, pad_edge=False)
        for column in ("name", "os", "nodes", "subnet", "engine", "state"):
            table.add_column(column)
        # The directory is what `down` there needs: wrapped, never cut short.
        table.add_column("directory", overflow="fold")
        for summary in summaries:
            colour = "green" if summary.state == "running" else "yellow"
            table.add_row(
                escape(summary.name),
                "+".join(summary.oses) or "-",
                f"{summary.running}/{len(summary.nodes)}",
                summary.subnet or "-",
                summary.engine,
                f"[{colour}]{summary.state}[/]",
                escape(summary.directory or "(not recorded: made by an older gpuclus)"),
            )
        out.out.print(table)


@app.command("status")
def status(
    spec: SpecOption = DEFAULT_SPEC,
    json_mode: JsonOption = False,
) -> None:
    """Show each sandbox node: role, address, container state, and whether SSH works.

    Only the containers that `up` made from this directory count: a node of a
    sandbox with the same name run from another directory shows as missing.
    Exit 0 when every node runs and answers over SSH, 1 otherwise (also when
    no sandbox is up here).
    """
    from gpuclus.sandbox.lifecycle import status as sandbox_status

    out = Output(json_mode=json_mode)
    with handled(out):
        record, nodes, elsewhere = sandbox_status(spec)
        healthy = bool(nodes) and all(node.state == "running" and node.ssh for node in nodes)
        if json_mode:
            out.emit(
                {
                    "ok": healthy,
                    "cluster": record.cluster if record else None,
                    "engine": record.engine if record else None,
                    "subnet": record.subnet if record else None,
                    "nodes": [vars(node) for node in nodes],
                    "elsewhere": elsewhere,
                }
            )
        elif record is None:
            out.result(f"no sandbox is up here (no {escape(str(spec.parent / '.gpuclus' / 'sandbox.json'))})")
        else:
            _print_nodes(out, [(n.name, n.role, n.os, n.address, n.gpus, n.state, n.ssh) for n in nodes])
            for node in nodes:
                if node.detail:
                    out.warn(f"{node.name}: {node.detail}")
            for where in elsewhere:
                out.warn(
                    f"{escape(_elsewhere(record.cluster, where))} is not this directory's: its nodes are not shown"
                )
        if not healthy:
            raise typer.Exit(1)


@app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def ssh(
    ctx: typer.Context,
    node: Annotated[str, typer.Argument(help="Node name (e.g. sandbox-head).")],
    spec: SpecOption = DEFAULT_SPEC,
) -> None:
    """Open a shell on a sandbox node over SSH, as the admin user, with gpuclus' key.

    Extra arguments run as a command instead: `gpuclus sandbox ssh sandbox-head -- sinfo`.
    Only a node that `up` made from this directory is reached.
    """
    from gpuclus.sandbox.image import ADMIN_USER
    from gpuclus.sandbox.lifecycle import node_address
    from gpuclus.ssh.openssh import login_argv

    out = Output(json_mode=False)
    with handled(out):
        state, address = node_address(spec, node)
        client = shutil.which("ssh")
        if client is None and ctx.args:
            # No OpenSSH client here: run the command over paramiko instead.
            from gpuclus.ssh.client import SshTarget, run_once

            result = run_once(
                SshTarget(address, ADMIN_USER, state.private_key, state.known_hosts), shlex.join(ctx.args), timeout=600
            )
            sys.stdout.write(result.stdout)
            sys.stderr.write(result.stderr)
            raise typer.Exit(result.exit_status)
        if client is None:
            raise UsageError("the ssh client is not installed", "apt-get install openssh-client")
        argv = login_argv(
            client,
            key_file=state.private_key,
            known_hosts=state.known_hosts,
            user=ADMIN_USER,
            address=address,
            command=ctx.args,
        )
        os.execv(client, argv)


def _print_reshape(out: Output, result: UpResult) -> None:
    """One line per compute node that this `up` added to, or removed from, a sandbox that was up."""
    addresses = {node.name: node.address for node in result.nodes}
    for name in result.added_nodes:
        out.result(f"added node {escape(name)} at {addresses[name]}")
    for name in result.removed_nodes:
        out.result(f"removed node {escape(name)}")


def _elsewhere(cluster: str | None, where: str | None) -> str:
    if where is not None:
        return f"the sandbox named {cluster!r} that runs from {where}"
    return f"a sandbox named {cluster!r} made by an older gpuclus from a directory this one's record does not name"


def _print_nodes(out: Output, rows: list[tuple[str, str, str, str, int, str, bool | None]]) -> None:
    table = Table(box=None, pad_edge=False)
    for column in ("node", "role", "os", "address", "gpus", "state", "ssh"):
        table.add_column(column)
    for name, role, os_name, address, gpus, state, reachable in rows:
        mark = "-" if reachable is None else ("[green]ok[/]" if reachable else "[red]failed[/]")
        colour = "green" if state == "running" else "red"
        table.add_row(
            escape(name), role, os_name, address, f"{gpus} (fake)" if gpus else "0", f"[{colour}]{state}[/]", mark
        )
    if not out.json_mode:
        out.out.print(table)
