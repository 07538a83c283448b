"""Stage "launch": munge authentication between nodes, jobs start everywhere, GRES devices exist, MPI."""

from __future__ import annotations

import re
import shlex
import time

from gpuclus.slurm import commands as slurm
from gpuclus.spec import hostlist
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, NodeResult, Outcome, Status, skipped

# A credential made on the controller, decoded on the node through SSH (not
# Slurm: when munge is broken, Slurm cannot start the job that would test it).
_UNMUNGE = "unmunge 2>&1 | head -n 1"


def munge_decodes(ctx: Context) -> Outcome:
    credential = ctx.run("munge -n", timeout=20)
    if credential.exit_status != 0 or not credential.stdout.strip():
        return Outcome(
            status=Status.FAIL,
            message=f"munge -n on {ctx.controller.name}: {slurm.first_error_line(credential.stderr, 'failed')}",
            hint=f"on {ctx.controller.name}: `systemctl status munge`",
        )
    token = credential.stdout.strip()
    nodes = [node for node in ctx.selected if node.name != ctx.controller.name]
    answers = ctx.ssh_each(f"printf '%s\\n' {shlex.quote(token)} | {_UNMUNGE}", nodes)
    results = []
    cut_off = [node.name for node in nodes if node.name in ctx.unreachable]
    for node in nodes:
        answer = answers[node.name]
        first = (answer.stdout.strip().splitlines() or [""])[0]
        if node.name in cut_off:
            # ssh never got there: nothing is known about its munge key.
            message = f"{node.name} unreachable: {ctx.unreachable[node.name]}"
            results.append(NodeResult(node.name, Status.FAIL, message, hint=ctx.unreachable_hint([node.name])))
        elif answer.exit_status == 0 and "Success" in first:
            results.append(NodeResult(node.name, Status.PASS, "credential from the controller decodes"))
        else:
            detail = first or slurm.first_error_line(answer.stderr, f"exit {answer.exit_status}")
            results.append(NodeResult(node.name, Status.FAIL, detail))
    munge_failed = any(r.status is Status.FAIL and r.node not in cut_off for r in results)
    return Outcome(
        results,
        hint=_MUNGE_HINT if munge_failed or not cut_off else ctx.unreachable_hint(cut_off),
    )


_MUNGE_HINT = (
    "every node needs the controller's /etc/munge/munge.key (0400 munge) and a running munged: "
    "`gpuclus deploy --only slurm` puts the key back; clocks must agree within a few minutes"
)


def _hostname_command() -> str:
    return 'echo "$SLURMD_NODENAME"'


def srun_everywhere(ctx: Context) -> Outcome:
    """One job over every compute node per partition; per-node jobs only to find who broke it.

    Nodes Slurm already reports unusable are blamed without a job: one would
    only wait in the queue for them.
    """
    if not ctx.compute:
        return skipped("no compute nodes selected")
    results: dict[str, NodeResult] = {}
    messages = []
    for whole_group in _partition_groups(ctx):
        group = _usable_or_blamed(ctx, whole_group, results)
        if not group:
            continue
        answer = ctx.srun(_hostname_command(), group, time_limit_s=60)
        seen = set(answer.stdout.split())
        if answer.exit_status == 0 and seen >= {node.name for node in group}:
            for node in group:
                results[node.name] = NodeResult(node.name, Status.PASS, f"srun -N{len(group)} reached it")
            continue
        messages.append(slurm.first_error_line(answer.stderr, f"srun exited {answer.exit_status}"))
        # Who is at fault: nodes the failed launch got marked, then a one-node
        # job on each of the others, all at once, once they are done cleaning
        # up after the failed job.
        _wait_for_completing(ctx, group)
        candidates = _usable_or_blamed(ctx, group, results)
        single = ctx.srun_each(_hostname_command(), candidates, time_limit_s=60)
        for node in candidates:
            one = single[node.name]
            if one.exit_status == 0 and node.name in one.stdout.split():
                results[node.name] = NodeResult(node.name, Status.PASS, "a one-node job ran")
            else:
                results[node.name] = NodeResult(node.name, Status.FAIL, slurm.job_failure(one))
    ctx.memo["launch_failed"] = {name for name, result in results.items() if result.status is Status.FAIL}
    # A job that failed because the node is gone (munge's SSH hop found that) is not slurmd's fault: say so.
    rows, cut_off = ctx.name_unreachable([results[node.name] for node in ctx.compute if node.name in results])
    slurmd_hint = (
        "on the failing node: `systemctl status slurmd munge` and /var/log/slurm/slurmd.log; "
        "then `sudo scontrol update nodename=NODE state=resume` on the controller"
    )
    others_failed = any(row.status is Status.FAIL and row.node not in cut_off for row in rows)
    return Outcome(
        rows,
        message="; ".join(messages),
        hint=slurmd_hint if others_failed or not cut_off else ctx.unreachable_hint(cut_off),
    )


# After a failed multi-node job the healthy nodes stay COMPLETING (busy) for
# a while, as slurmctld retries the dead one; a new job would only queue.
COMPLETING_WAIT_S = 60.0


def _wait_for_completing(ctx: Context, nodes: list[Node]) -> None:
    deadline = time.monotonic() + COMPLETING_WAIT_S
    while time.monotonic() < deadline:
        states = ctx.slurm_nodes(refresh=True)
        busy = []
        for node in nodes:
            state = slurm.NodeState.parse(states.get(node.name, {}).get("State", ""))
            if state.completing and not (state.flags & slurm.BAD_FLAGS):
                busy.append(node)
        if not busy:
            return
        time.sleep(2)


def _usable_or_blamed(ctx: Context, nodes: list[Node], results: dict[str, NodeResult]) -> list[Node]:
    """The nodes Slurm reports usable right now; a FAIL naming the state for each of the others."""
    states = ctx.slurm_nodes(refresh=True)
    usable = []
    for node in nodes:
        fields = states.get(node.name, {})
        state = slurm.NodeState.parse(fields.get("State", "UNKNOWN"))
        if state.usable:
            usable.append(node)
            continue
        reason = fields.get("Reason", "")
        detail = f"Slurm reports it {state}" + (f" ({reason})" if reason and reason != "(null)" else "")
        results[node.name] = NodeResult(node.name, Status.FAIL, detail, str(state), "a job runs")
    return usable


def _partition_groups(ctx: Context) -> list[list[Node]]:
    """The selected compute nodes split by partition, each node in the first partition that has it."""
    groups: dict[str, list[Node]] = {}
    for node in ctx.compute:
        partition = ctx.partition_for([node]) or ""
        groups.setdefault(partition, []).append(node)
    return list(groups.values())


# `slurmd -G` prints the GRES the node's slurmd would register, gres.conf
# merged in (on stderr, as log lines); every File= it names must be a
# character device on the node. When one is missing it waits ~20 s for it and
# then says "fatal: can't stat gres.conf file /dev/nvidiaN" instead.
# Slurm 24.11's `slurmd -G`, run inside a job, asks the node's slurmstepd
# something it does not know ("Unrecognized request: 50"), the step daemon hangs
# up, and the next write kills slurmd -G with SIGPIPE (exit 141) before it
# prints the GRES lines: 24 of 80 runs on a Debian 13 sandbox node. With SIGPIPE
# ignored the write fails instead and the lines come: 80 of 80. The three tries
# stay for anything else that makes it print nothing.
_GRES_PROBE = (
    "trap '' PIPE; for try in 1 2 3; do "
    'gres=$(PATH=$PATH:/usr/sbin slurmd -G 2>&1 | grep -E "Gres Name=gpu|can\'t stat gres.conf"); '
    "[ -n \"$gres\" ] && break; done; printf '%s\\n' \"$gres\"; echo '--devices--'; "
    'for f in /dev/nvidia[0-9]*; do [ -c "$f" ] && echo "$f"; done; true'
)
_FILE_FIELD = re.compile(r"\bFile=(\S+)")
_MISSING_FILE = re.compile(r"can't stat gres\.conf file (\S+?):?(?:\s|$)")


def gres_devices_exist(ctx: Context) -> Outcome:
    if not ctx.gpu_nodes:
        return skipped("no GPU nodes selected")
    nodes, unlaunchable = ctx.launchable(ctx.gpu_nodes)
    answers = ctx.srun_each(_GRES_PROBE, nodes, time_limit_s=60)
    # Where no job starts, a bad gres.conf is a likely cause (slurmd refuses
    # to start on a missing device file): ask over SSH instead, unless SSH
    # already could not reach the node in this run.
    dead_names = {result.node for result in unlaunchable}
    dead = [node for node in ctx.gpu_nodes if node.name in dead_names and node.name not in ctx.unreachable]
    answers.update(ctx.ssh_each(_GRES_PROBE, dead, timeout=60))
    results = []
    for node in ctx.gpu_nodes:
        answer = answers.get(node.name)
        if (answer is None or answer.exit_status != 0) and node.name in ctx.unreachable:
            # Not gres.conf's fault: nothing reached the node (munge or the probe found that).
            message = f"{node.name} unreachable, GRES not checked: {ctx.unreachable[node.name]}"
            results.append(NodeResult(node.name, Status.SKIP, message))
            continue
        if answer is None:
            continue
        if answer.exit_status != 0:
            results.append(NodeResult(node.name, Status.FAIL, "probe job failed: " + slurm.job_failure(answer)))
            continue
        claimed, present = parse_gres_probe(answer.stdout)
        absent = [device for device in claimed if device not in present]
        if absent:
            message = f"gres.conf lists {', '.join(absent)}, not present on the node"
            results.append(NodeResult(node.name, Status.FAIL, message, len(claimed), f"<= {len(present)}", "devices"))
        elif len(claimed) != node.gpu_count:
            message = f"slurmd sees {len(claimed)} GPU device(s), the spec says {node.gpu_count}"
            results.append(NodeResult(node.name, Status.FAIL, message, len(claimed), str(node.gpu_count), "devices"))
        else:
            message = f"{len(claimed)} device(s), all present"
            results.append(NodeResult(node.name, Status.PASS, message, len(claimed), str(node.gpu_count), "devices"))
    return Outcome(
        results,
        hint="gres.conf must list only devices the node has: `gpuclus deploy --only slurm` renders it from the "
        "spec; correct gpus.count in the spec if the node really has fewer GPUs",
    )


def parse_gres_probe(text: str) -> tuple[list[str], set[str]]:
    """(device files slurmd's GRES config names, device files present) from _GRES_PROBE's output."""
    config, _, devices = text.partition("--devices--")
    claimed: list[str] = []
    for pattern in (_FILE_FIELD, _MISSING_FILE):
        for match in pattern.finditer(config):
            for device in hostlist.expand_list(match.group(1)):
                if device not in claimed:
                    claimed.append(device)
    return claimed, {line.strip() for line in devices.splitlines() if line.strip()}


# An MPI hello that also proves the ranks talk: an all-reduce of rank+1
# must give n(n+1)/2 on every rank.
_MPI_HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int rank, size, mine, sum = 0;
    char host[256] = "";
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host - 1);
    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("gpuclus-mpi rank=%d size=%d sum=%d host=%s\n", rank, size, sum, host);
    MPI_Finalize();
    return 0;
}
"""
_MPI_LINE = re.compile(r"gpuclus-mpi rank=(\d+) size=(\d+) sum=(\d+) host=(\S+)")


def mpi_hello(ctx: Context) -> Outcome:
    """Build an MPI hello on every compute node (when it has mpicc), run it across them with PMIx or PMI-2."""
    nodes, results = ctx.launchable(ctx.compute)
    if len(nodes) < 2:
        return Outcome(results, message="needs two compute nodes that can start jobs", status=Status.SKIP)
    build_dir = f"/var/tmp/{ctx.job_name}-mpi"
    source = shlex.quote(_MPI_HELLO)
    build = (
        f"command -v mpicc >/dev/null 2>&1 || {{ echo no-mpicc; exit 0; }}; mkdir -p {build_dir} && "
        f"printf '%s' {source} > {build_dir}/hello.c && mpicc -o {build_dir}/hello {build_dir}/hello.c && echo built"
    )
    built = ctx.srun_each(build, nodes, time_limit_s=120)
    have = [node for node in nodes if built[node.name].stdout.strip().endswith("built")]
    lacking = [node for node in nodes if "no-mpicc" in built[node.name].stdout]
    try:
        if len(lacking) == len(nodes):
            return Outcome(results, message="no MPI on the compute nodes (mpicc not found)", status=Status.SKIP)
        for node in nodes:
            if node in lacking:
                results.append(NodeResult(node.name, Status.FAIL, "no mpicc here, while other nodes have MPI"))
            elif node not in have:
                results.append(
                    NodeResult(
                        node.name,
                        Status.FAIL,
                        "building the MPI hello failed: "
                        + slurm.first_error_line(built[node.name].stderr, "mpicc failed"),
                    )
                )
        if len(have) < 2:
            return Outcome(results, message="fewer than two nodes could build the MPI hello")
        plugins = ctx.run("srun --mpi=list 2>&1", timeout=30).stdout
        plugin = next((name for name in ("pmix", "pmi2") if re.search(rf"\b{name}\b", plugins)), None)
        if plugin is None:
            return Outcome(
                results,
                status=Status.FAIL,
                message=f"Slurm offers neither pmix nor pmi2 (srun --mpi=list: {' '.join(plugins.split())[:200]})",
                hint="install Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins carries mpi_pmix)",
            )
        answer = ctx.srun(f"{build_dir}/hello", have, time_limit_s=120, extra=(f"--mpi={plugin}",))
        results += _judge_mpi(have, answer)
        return Outcome(
            results,
            message=f"--mpi={plugin} over {len(have)} node(s)",
            value=plugin,
            hint="`srun --mpi=pmix -N2 ./hello` by hand; the MPI library must be built with the same PMIx "
            "(Debian's openmpi is) and the nodes must reach each other on all ports",
        )
    finally:
        ctx.srun_each(f"rm -rf {build_dir}", nodes, time_limit_s=60)


def _judge_mpi(nodes: list[Node], answer: CommandResult) -> list[NodeResult]:
    size = len(nodes)
    want_sum = size * (size + 1) // 2
    lines = {match.group(4).split(".")[0]: match for match in _MPI_LINE.finditer(answer.stdout)}
    results = []
    for node in nodes:
        match = lines.get(node.name)
        if match is None:
            detail = slurm.first_error_line(answer.stderr, f"no output from its rank (srun exit {answer.exit_status})")
            results.append(NodeResult(node.name, Status.FAIL, detail, None, f"rank of {size}"))
        elif int(match.group(2)) != size or int(match.group(3)) != want_sum:
            message = f"rank {match.group(1)} saw size {match.group(2)}, all-reduce sum {match.group(3)}"
            results.append(NodeResult(node.name, Status.FAIL, message, int(match.group(3)), str(want_sum)))
        else:
            message = f"rank {match.group(1)} of {size}, all-reduce correct"
            results.append(NodeResult(node.name, Status.PASS, message, int(match.group(3)), str(want_sum)))
    return results


CHECKS = [
    Check("launch.munge", Level.QUICK, "munge credentials decode on every node", munge_decodes, needs_slurm=False),
    Check("launch.srun", Level.QUICK, "srun -N<all> hostname reaches every compute node", srun_everywhere),
    Check("launch.gres-devices", Level.QUICK, "GRES device files exist on GPU nodes", gres_devices_exist),
    Check("launch.mpi", Level.STANDARD, "an MPI hello across the compute nodes (when MPI is installed)", mpi_hello),
]
