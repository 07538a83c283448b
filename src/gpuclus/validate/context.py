"""What a check gets: the spec's view of the cluster, the controller session, Slurm helpers.

Checks never build srun or sbatch lines themselves: ``Context.srun``,
``Context.srun_each`` and ``Context.sbatch`` give every job the run's job name
and two time bounds, so nothing validate starts can outlive it (see
``Validation.cleanup``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import TIMED_OUT, Remote
from gpuclus.spec.models import ClusterSpec, Containers, Role
from gpuclus.spec.topology import Node, SlurmPartition, Topology, slurm_partitions
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.results import NodeResult, Status


@dataclass(frozen=True)
class Options:
    """Run-wide settings from the command line."""

    # What the Pyxis check runs; a local squashfs path works on offline clusters. The CLI
    # passes --container-image, else the spec's containers.validate_image (whose default this is).
    container_image: str = Containers.model_fields["validate_image"].default
    # How long a job may wait for its nodes before it counts as failed.
    queue_wait_s: int = 30
    # The spec on the command line: hints name it in the gpuclus commands they suggest.
    spec_path: Path | None = None


@dataclass
class Context:
    spec: ClusterSpec
    topology: Topology
    remote: Remote
    job_name: str
    selected: list[Node]  # the nodes --nodes asked for (all by default), in spec order
    options: Options = field(default_factory=Options)
    # Filled by checks for later ones (the scontrol view, the launch results).
    memo: dict[str, Any] = field(default_factory=dict)
    # Jobs of this run that ended well: the accounting check expects them in sacct.
    jobs_succeeded: int = 0

    # --- the cluster as the spec describes it ------------------------------
    @property
    def controller(self) -> Node:
        controller = self.topology.controller
        assert controller is not None  # a checked spec has exactly one
        return controller

    @property
    def compute(self) -> list[Node]:
        """Selected nodes that run Slurm jobs."""
        return [node for node in self.selected if node.has(Role.COMPUTE)]

    @property
    def gpu_nodes(self) -> list[Node]:
        return [node for node in self.compute if node.gpus is not None]

    @property
    def partitions(self) -> list[SlurmPartition]:
        return slurm_partitions(self.spec, self.topology)

    def partition_for(self, nodes: list[Node]) -> str | None:
        """A partition holding all ``nodes`` (the default one first), or None."""
        names = {node.name for node in nodes}
        ordered = sorted(self.partitions, key=lambda partition: not partition.default)
        for partition in ordered:
            if names <= set(partition.nodes):
                return partition.name
        return None

    # --- commands ---------------------------------------------------------------
    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        return self.remote.run(command, timeout)

    def slurm_nodes(self, refresh: bool = False) -> dict[str, dict[str, str]]:
        """`scontrol show node` parsed, once per run unless ``refresh``."""
        if refresh or "scontrol_nodes" not in self.memo:
            result = self.run("scontrol --oneliner show node", timeout=30)
            self.memo["scontrol_nodes"] = slurm.parse_nodes(result.stdout) if result.exit_status == 0 else {}
        nodes: dict[str, dict[str, str]] = self.memo["scontrol_nodes"]
        return nodes

    def srun(self, command: str, nodes: list[Node], *, time_limit_s: int = 60, **options: Any) -> CommandResult:
        """One job over ``nodes`` (one task per node unless options say otherwise)."""
        line = slurm.srun_command(
            command,
            job_name=self.job_name,
            time_limit_s=time_limit_s,
            nodes=[node.name for node in nodes],
            partition=self.partition_for(nodes),
            queue_wait_s=self.options.queue_wait_s,
            **options,
        )
        result = self.run(line, timeout=time_limit_s + self.options.queue_wait_s + 60)
        self.jobs_succeeded += result.exit_status == 0
        return result

    def srun_each(
        self,
        command: str | Callable[[Node], str],
        nodes: list[Node],
        *,
        time_limit_s: int = 60,
        options: Callable[[Node], dict[str, Any]] | None = None,
    ) -> dict[str, CommandResult]:
        """One single-node job per node, all at once: a dead node cannot hide the others' answers."""
        lines = {}
        for node in nodes:
            text = command(node) if callable(command) else command
            lines[node.name] = slurm.srun_command(
                text,
                job_name=self.job_name,
                time_limit_s=time_limit_s,
                nodes=[node.name],
                partition=self.partition_for([node]),
                queue_wait_s=self.options.queue_wait_s,
                **(options(node) if options else {}),
            )
        results = self.remote.run_many(lines, timeout=time_limit_s + self.options.queue_wait_s + 60)
        self.jobs_succeeded += sum(result.exit_status == 0 for result in results.values())
        return results

    def sbatch(
        self,
        script: str,
        nodes: list[Node],
        *,
        workdir: str,
        time_limit_s: int = 300,
        script_host: Node | None = None,
        **options: Any,
    ) -> CommandResult:
        """Submit ``script`` as a batch job over ``nodes`` and wait for it to end (``sbatch --wait``).

        sbatch reads the script on the controller; a script that only exists
        on the nodes (a node-local install) is read on ``script_host`` over SSH
        and handed to sbatch on stdin. The job runs in ``workdir``, which must
        exist on the batch host.
        """
        reader = script_host if script_host is not None and script_host.name != self.controller.name else None
        line = slurm.sbatch_command(
            None if reader else script,
            job_name=self.job_name,
            time_limit_s=time_limit_s,
            workdir=workdir,
            nodes=[node.name for node in nodes],
            partition=self.partition_for(nodes),
            queue_wait_s=self.options.queue_wait_s,
            **options,
        )
        if reader is not None:
            line = f"{ssh_line(reader.name, f'cat {shlex.quote(script)}')} | {line}"
        result = self.run(line, timeout=time_limit_s + self.options.queue_wait_s + 60)
        self.jobs_succeeded += result.exit_status == 0
        return result

    def launchable(self, nodes: list[Node]) -> tuple[list[Node], list[NodeResult]]:
        """Split ``nodes`` into those a job can start on and SKIP results for those launch.srun found dead.

        Later checks then blame the node once, in launch.srun, instead of
        waiting out a queue for it in every check.
        """
        failed: set[str] = self.memo.get("launch_failed", set())
        usable = [node for node in nodes if node.name not in failed]
        skips = [
            NodeResult(node.name, Status.SKIP, "no job can start there (see launch.srun)")
            for node in nodes
            if node.name in failed
        ]
        return usable, skips

    # --- nodes that cannot be reached ---------------------------------------------
    @property
    def unreachable(self) -> dict[str, str]:
        """Nodes an SSH hop from the controller could not reach in this run, with ssh's words."""
        found: dict[str, str] = self.memo.setdefault("unreachable", {})
        return found

    def unreachable_hint(self, names: list[str]) -> str:
        nodes = ", ".join(names) or "the node"
        return (
            f"{nodes} cannot be reached from {self.controller.name} over SSH: start it or fix its network "
            "(the error says which), then `gpuclus preflight` checks SSH to every node; "
            "this check's own hint applies once it answers"
        )

    def name_unreachable(self, results: list[NodeResult]) -> tuple[list[NodeResult], list[str]]:
        """FAIL rows of nodes SSH could not reach, with that cause added and a hint about the node.

        Returns the rows and the names so marked: a check whose failures are all
        such nodes gives the unreachable hint, not its own.
        """
        marked = []
        rows = []
        for row in results:
            cause = self.unreachable.get(row.node)
            if row.status is Status.FAIL and cause is not None:
                message = f"{row.message}; {row.node} unreachable: {cause}"
                row = replace(row, message=message, hint=self.unreachable_hint([row.node]))
                marked.append(row.node)
            rows.append(row)
        return rows, marked

    def ssh_each(
        self,
        command: str | Callable[[Node], str],
        nodes: list[Node],
        timeout: float = 30.0,
        *,
        around: Callable[[str], str] | None = None,
    ) -> dict[str, CommandResult]:
        """Run ``command`` on each node through the controller's SSH trust (for what must not need Slurm).

        ``command`` may depend on the node. ``around`` rewrites each whole line
        the controller runs (the ssh hop included), for what must be measured
        on the controller's side of the hop: the config stage times it to read
        each node's clock. It must keep ssh's exit status and stderr.

        A node whose SSH hop fails (ssh's own error, exit 255, or no answer in
        time) is remembered in ``unreachable``, so later checks name that cause.
        """
        lines = {}
        for node in nodes:
            text = command(node) if callable(command) else command
            line = text if node.name == self.controller.name else ssh_line(node.name, text)
            lines[node.name] = around(line) if around is not None else line
        results = self.remote.run_many(lines, timeout=timeout)
        for node in nodes:
            if node.name == self.controller.name:
                continue
            cause = ssh_failure(results[node.name])
            if cause is not None:
                self.unreachable[node.name] = cause
        return results


def ssh_line(node: str, command: str) -> str:
    """``command`` run on ``node`` from the controller, through the SSH trust the deploy set up."""
    return (
        "ssh -o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=yes "
        f"{shlex.quote(node)} {shlex.quote(command)}"
    )


# ssh exits 255 for its own errors (connect, resolve, host key, login), else with the command's status.
SSH_ERROR = 255


def ssh_failure(result: CommandResult) -> str | None:
    """Why an ``ssh NODE CMD`` from the controller did not reach NODE, or None when it did."""
    if result.exit_status == TIMED_OUT and not result.stdout.strip():
        return "no answer over SSH in time"
    if result.exit_status != SSH_ERROR:
        return None
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    said = next((line for line in lines if line.startswith("ssh:") or "Permission denied" in line), None)
    if said is None and lines:
        said = lines[-1]
    return said or "ssh exited 255"
