"""Stage "cluster": Slurm's own view of the cluster against the spec."""

from __future__ import annotations

from gpuclus.slurm import commands as slurm
from gpuclus.validate.check import Check
from gpuclus.validate.context import Context
from gpuclus.validate.results import Level, NodeResult, Outcome, Status

USABLE = "idle|mixed|allocated"
RESUME_HINT = "fix the cause, then `sudo scontrol update nodename=NODE state=resume` on the controller"


def slurmctld_answers(ctx: Context) -> Outcome:
    result = ctx.run("scontrol ping", timeout=30)
    missing = slurm.not_deployed(result)
    if missing is not None:  # also when the runner's own look found Slurm (--only without this check)
        raise slurm.SlurmNotDeployed(ctx.controller.name, missing, ctx.options.spec_path)
    text = (result.stdout + result.stderr).strip()
    up = result.exit_status == 0 and " is UP" in text
    return Outcome(
        status=Status.PASS if up else Status.FAIL,
        message=text.splitlines()[0] if text else f"scontrol ping exited {result.exit_status}",
        value="UP" if up else "DOWN",
        expected="UP",
        hint=f"on {ctx.controller.name}: `systemctl status slurmctld` and /var/log/slurm/slurmctld.log; "
        "`gpuclus deploy --only slurm` re-applies the configuration",
    )


def nodes_known(ctx: Context) -> Outcome:
    known = ctx.slurm_nodes()
    if not known:
        return Outcome(status=Status.FAIL, message="`scontrol show node` listed no nodes")
    expected = {node.name for node in ctx.topology.compute}
    results = [
        NodeResult(node.name, Status.PASS, "known to Slurm")
        if node.name in known
        else NodeResult(node.name, Status.FAIL, "in the spec but not in slurm.conf")
        for node in ctx.compute
    ]
    if len(ctx.selected) == len(ctx.topology.nodes):  # extras only make sense against the whole spec
        results += [
            NodeResult(name, Status.FAIL, "known to Slurm but not in the spec")
            for name in sorted(known)
            if name not in expected
        ]
    missing = sum(result.status is Status.FAIL for result in results)
    return Outcome(
        results,
        message=f"{len(known)} Slurm node(s), {len(expected)} compute node(s) in the spec"
        + (f", {missing} differ" if missing else ""),
        hint="slurm.conf differs from the spec: `gpuclus deploy --only slurm` renders it again",
    )


def node_states(ctx: Context) -> Outcome:
    # Fresh: a launch failure in an earlier check may just have marked a node down.
    known = ctx.slurm_nodes(refresh=True)
    results = []
    for node in ctx.compute:
        fields = known.get(node.name)
        if fields is None:
            results.append(NodeResult(node.name, Status.SKIP, "not known to Slurm (see cluster.nodes-known)"))
            continue
        state = slurm.NodeState.parse(fields.get("State", "UNKNOWN"))
        reason = fields.get("Reason", "")
        if state.usable:
            results.append(NodeResult(node.name, Status.PASS, str(state), str(state), USABLE))
        else:
            message = str(state) + (f": {reason}" if reason and reason != "(null)" else "")
            results.append(NodeResult(node.name, Status.FAIL, message, str(state), USABLE))
    return Outcome(results, hint=RESUME_HINT + "; `sinfo -R` lists the reasons")


def partitions_up(ctx: Context) -> Outcome:
    result = ctx.run(slurm.SINFO_PARTITIONS, timeout=30)
    found = slurm.parse_partitions(result.stdout)
    problems = []
    for partition in ctx.partitions:
        info = found.get(partition.name)
        if info is None:
            problems.append(f"{partition.name}: missing")
        elif info.available != "up":
            problems.append(f"{partition.name}: {info.available}")
    names = ", ".join(partition.name for partition in ctx.partitions)
    return Outcome(
        status=Status.FAIL if problems or result.exit_status != 0 else Status.PASS,
        message="; ".join(problems) if problems else f"up: {names}",
        value=len(ctx.partitions) - len(problems),
        expected=f"{len(ctx.partitions)} up",
        hint="`scontrol update partitionname=NAME state=up`, or `gpuclus deploy --only slurm` if one is missing",
    )


def gres_matches_spec(ctx: Context) -> Outcome:
    known = ctx.slurm_nodes()
    results = []
    for node in ctx.compute:
        fields = known.get(node.name)
        if fields is None:
            results.append(NodeResult(node.name, Status.SKIP, "not known to Slurm"))
            continue
        gres = slurm.parse_gres(fields.get("Gres", ""))
        have = slurm.gres_gpu_total(gres)
        want = node.gpu_count
        model = node.gpus.model if node.gpus else None
        expected = f"{want}" + (f" x {model}" if model else "")
        problems = []
        if have != want:
            problems.append(f"Slurm has gpu:{have}, the spec says {want}")
        if model and want and f"gpu:{model}" not in gres:
            problems.append(f"GRES type {model} missing (Gres={fields.get('Gres')})")
        status = Status.FAIL if problems else Status.PASS
        state = slurm.NodeState.parse(fields.get("State", "UNKNOWN"))
        hint = None
        if problems and not state.usable:
            # A node that is down or never registered: its state is the first thing to fix, not the spec.
            problems.append(f"Slurm reports the node {state}")
            hint = f"{node.name} is {state} in Slurm (see cluster.node-states): bring it back first; " + GRES_HINT
        results.append(
            NodeResult(node.name, status, "; ".join(problems) or fields.get("Gres", ""), have, expected, "GPUs", hint)
        )
    return Outcome(results, hint=GRES_HINT)


GRES_HINT = "`gpuclus deploy --only slurm` renders slurm.conf and gres.conf from the spec again"


CHECKS = [
    Check("cluster.slurmctld", Level.QUICK, "slurmctld answers", slurmctld_answers, needs_slurm=False),
    Check("cluster.nodes-known", Level.QUICK, "every spec node is a Slurm node and back", nodes_known),
    Check("cluster.node-states", Level.QUICK, "nodes idle, mixed or allocated", node_states),
    Check("cluster.partitions", Level.QUICK, "partitions exist and are up", partitions_up),
    Check("cluster.gres", Level.QUICK, "GPU GRES per node matches the spec", gres_matches_spec),
]
