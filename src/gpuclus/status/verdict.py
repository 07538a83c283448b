"""The nodes' answers → the whole picture and what is wrong with it.

A problem is anything an admin must act on: a node gpuclus cannot reach, Slurm
not answering, a Slurm node down, drained, failing or not responding, a
partition not up, a unit not active, Prometheus not answering or a target
down. No problem means exit 0, any means exit 1. Something that could not be
asked because its node is unreachable is shown as unknown, and only the
unreachable node is the problem (one cause, one line).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from gpuclus.hints import gpuclus_command
from gpuclus.slurm.commands import not_deployed
from gpuclus.ssh.client import CommandResult
from gpuclus.status import collect
from gpuclus.status.collect import NodeAnswer
from gpuclus.status.expected import GRAFANA, NODE_EXPORTER, PROMETHEUS, NodePlan
from gpuclus.status.parse import (
    Section,
    parse_jobs,
    parse_partitions,
    parse_slurm_nodes,
    parse_targets,
    parse_units,
    skip_reason,
)
from gpuclus.status.report import (
    NO_USAGE,
    ClusterStatus,
    Job,
    Monitoring,
    NodeStatus,
    Partition,
    PartitionInfo,
    Problem,
    ProblemKind,
    Service,
    ServiceState,
    SlurmAnswer,
    SlurmNode,
    Target,
    Urls,
)

# Job states always present in the counts, 0 included.
ALWAYS_COUNTED = ("pending", "running")


@dataclass(frozen=True)
class SlurmView:
    answer: SlurmAnswer
    nodes: dict[str, SlurmNode]
    partitions: list[PartitionInfo]
    jobs: list[Job]


def build(
    cluster: str,
    plans: list[NodePlan],
    answers: dict[str, NodeAnswer],
    urls: Urls,
    *,
    collected_at: str,
    duration_s: float,
    spec_path: Path | None = None,
) -> ClusterStatus:
    problems: list[Problem] = []
    for plan in plans:
        answer = answers[plan.name]
        if not answer.reachable:
            problems.append(
                Problem(
                    ProblemKind.UNREACHABLE,
                    plan.name,
                    f"{plan.name} ({plan.address}) unreachable over SSH: {answer.error}",
                    answer.hint or "",
                )
            )
    slurm = _slurm(plans, answers, problems, spec_path)
    nodes = tuple(
        NodeStatus(
            plan.name,
            plan.address,
            plan.roles,
            answers[plan.name].reachable,
            answers[plan.name].error,
            slurm.nodes.get(plan.name),
        )
        for plan in plans
    )
    if slurm.answer.answered:
        problems += _node_problems(plans, slurm.nodes, spec_path)
    partitions = tuple(_partition(info, slurm.nodes, slurm.jobs) for info in slurm.partitions)
    problems += [
        Problem(
            ProblemKind.PARTITION,
            partition.name,
            f"partition {partition.name} is {partition.state}, not up",
            f"on the controller: `scontrol update partitionname={partition.name} state=up` once that is intended",
        )
        for partition in partitions
        if partition.state != "up"
    ]
    services = tuple(service for plan in plans for service in _services(plan, answers[plan.name]))
    problems += [_service_problem(service, spec_path) for service in services if _service_is_problem(service)]
    monitoring = _monitoring(plans, answers, services, problems)
    return ClusterStatus(
        cluster=cluster,
        collected_at=collected_at,
        duration_s=duration_s,
        slurm=slurm.answer,
        nodes=nodes,
        partitions=partitions,
        jobs=count_jobs(slurm.jobs),
        services=services,
        monitoring=monitoring,
        urls=urls,
        problems=tuple(problems),
    )


# --- Slurm --------------------------------------------------------------------------------------


def _slurm(
    plans: list[NodePlan], answers: dict[str, NodeAnswer], problems: list[Problem], spec_path: Path | None
) -> SlurmView:
    controller = next((plan for plan in plans if plan.controller), None)
    if controller is None:  # a checked spec has one; an empty view rather than a crash
        return SlurmView(SlurmAnswer("", False, "no controller in the spec"), {}, [], [])
    answer = answers[controller.name]
    name = controller.name
    if not answer.reachable:
        return SlurmView(SlurmAnswer(name, False, f"{name} unreachable"), {}, [], [])
    ping = answer.sections.get(collect.PING, Section(-1, "no answer"))
    missing = not_deployed(CommandResult(ping.exit_status, ping.text, ""))
    if missing is not None:
        message = f"Slurm is not deployed on {name} ({missing})"
        problems.append(
            Problem(ProblemKind.SLURM, name, message, f"run `{gpuclus_command('deploy', spec_path)}` first")
        )
        return SlurmView(SlurmAnswer(name, False, message), {}, [], [])
    nodes = answer.sections.get(collect.NODES, Section(-1, "no answer"))
    failed = ping if not ping.ok else nodes if not nodes.ok else None
    if failed is not None:
        said = failed.said("no answer")
        if failed.exit_status == collect.TIMED_OUT:
            said = f"no answer in {collect.SLURM_TIMEOUT} s"
        message = f"slurmctld on {name} does not answer: {said}"
        problems.append(
            Problem(
                ProblemKind.SLURM,
                name,
                message,
                f"on {name}: `systemctl status slurmctld`, `journalctl -u slurmctld -n 50`",
            )
        )
        return SlurmView(SlurmAnswer(name, False, message), {}, [], [])
    partitions = answer.sections.get(collect.PARTITIONS, Section(-1, ""))
    jobs = answer.sections.get(collect.JOBS, Section(-1, ""))
    return SlurmView(
        SlurmAnswer(name, True),
        parse_slurm_nodes(nodes.text),
        parse_partitions(partitions.text) if partitions.ok else [],
        parse_jobs(jobs.text) if jobs.ok else [],
    )


def _node_problems(plans: list[NodePlan], slurm_nodes: dict[str, SlurmNode], spec_path: Path | None) -> list[Problem]:
    problems = []
    for plan in plans:
        node = slurm_nodes.get(plan.name)
        if node is None:
            if "compute" in plan.roles:
                problems.append(
                    Problem(
                        ProblemKind.NODE_MISSING,
                        plan.name,
                        f"{plan.name} is a compute node in the spec but not in Slurm's node list",
                        f"`{gpuclus_command('deploy', spec_path)}` writes slurm.conf with every compute node",
                    )
                )
            continue
        if node.healthy:
            continue
        reason = f" ({node.reason})" if node.reason else ""
        problems.append(
            Problem(
                ProblemKind.NODE_STATE, plan.name, f"{plan.name} is {node.label} in Slurm{reason}", _node_hint(node)
            )
        )
    return problems


def _node_hint(node: SlurmNode) -> str:
    resume = f"`scontrol update nodename={node.name} state=resume` on the controller"
    if node.state in ("down", "unknown") or "not_responding" in node.flags:
        # Not responding clears by itself once slurmd answers; a node marked down stays down until resumed.
        after = f"; once slurmd answers, {resume}" if node.state == "down" else ""
        return f"on {node.name}: `systemctl status slurmd munge`{after}"
    if node.summary in ("drained", "draining"):
        return f"fix the reason, then {resume}"
    return f"`scontrol show node {node.name}` on the controller says more"


def _partition(info: PartitionInfo, slurm_nodes: dict[str, SlurmNode], jobs: list[Job]) -> Partition:
    members = [node for node in slurm_nodes.values() if info.name in node.partitions]
    cpus = sum((node.cpus for node in members), NO_USAGE)
    gpus = sum((node.gpus for node in members), NO_USAGE)
    return Partition(
        name=info.name,
        state=info.state,
        default=info.default,
        nodes=tuple(node.name for node in members),
        node_states=dict(Counter(node.summary for node in members)),
        cpus=cpus,
        gpus=gpus,
        jobs=count_jobs([job for job in jobs if info.name in job.partitions]),
    )


def count_jobs(jobs: list[Job]) -> dict[str, int]:
    counts = dict.fromkeys(ALWAYS_COUNTED, 0)
    for job in jobs:
        counts[job.state] = counts.get(job.state, 0) + 1
    return counts


# --- services ---------------------------------------------------------------------------------------


def _services(plan: NodePlan, answer: NodeAnswer) -> list[Service]:
    if not answer.reachable:
        return [Service(plan.name, unit, ServiceState.UNKNOWN, "node unreachable") for unit in plan.units]
    section = answer.sections.get(collect.UNITS)
    if section is None or section.exit_status == -1:
        return [Service(plan.name, unit, ServiceState.UNKNOWN, "systemctl gave no answer") for unit in plan.units]
    states = parse_units(section.text, plan.units)
    marker = answer.sections.get(collect.GRAFANA_MARKER)
    skipped = skip_reason(marker.text) if marker is not None and marker.ok else None
    services = []
    for unit in plan.units:
        if unit == GRAFANA and skipped is not None:
            services.append(Service(plan.name, unit, ServiceState.SKIPPED, skipped))
        else:
            services.append(Service(plan.name, unit, states[unit]))
    return services


def _service_is_problem(service: Service) -> bool:
    # A node that did not answer is its own problem; its units are unknown, not down.
    return not service.state.healthy and service.detail != "node unreachable"


def _service_problem(service: Service, spec_path: Path | None) -> Problem:
    node, unit = service.node, service.unit
    detail = f" ({service.detail})" if service.detail else ""
    return Problem(
        ProblemKind.SERVICE,
        f"{node}/{unit}",
        f"{unit} on {node} is {service.state.value}{detail}",
        f"on {node}: `systemctl status {unit}`, `journalctl -u {unit} -n 50`; "
        f"`{gpuclus_command('deploy', spec_path)}` starts it again",
    )


# --- Prometheus -----------------------------------------------------------------------------------


def _monitoring(
    plans: list[NodePlan], answers: dict[str, NodeAnswer], services: tuple[Service, ...], problems: list[Problem]
) -> Monitoring | None:
    server = next((plan for plan in plans if plan.targets_url is not None), None)
    if server is None:
        return None
    answer = answers[server.name]
    if not answer.reachable:
        return Monitoring(server.name, (), f"{server.name} unreachable")
    section = answer.sections.get(collect.TARGETS, Section(-1, "no answer"))
    error: str | None = None
    targets: list[Target] = []
    if section.ok:
        try:
            targets = parse_targets(section.text)
        except ValueError as problem:
            error = f"{server.targets_url}: {problem}"
    else:
        error = f"{server.targets_url} did not answer: {section.said('no answer')}"
    if error is not None:
        prometheus_down = any(
            service.node == server.name and service.unit == PROMETHEUS and not service.state.healthy
            for service in services
        )
        if not prometheus_down:  # else the inactive unit is the problem already
            problems.append(
                Problem(
                    ProblemKind.PROMETHEUS,
                    server.name,
                    f"Prometheus on {server.name}: {error}",
                    f"on {server.name}: `systemctl status prometheus`, `journalctl -u prometheus -n 50`",
                )
            )
        return Monitoring(server.name, (), error)
    unreachable = {name for name, node_answer in answers.items() if not node_answer.reachable}
    for target in targets:
        if target.healthy:
            continue
        problems.append(_target_problem(target, unreachable))
    return Monitoring(server.name, tuple(targets))


def _target_problem(target: Target, unreachable: set[str]) -> Problem:
    error = f": {target.last_error}" if target.last_error else ""
    if target.instance in unreachable:
        hint = f"{target.instance} is unreachable (above): its exporter is down with it"
    elif target.job == "node":
        hint = f"on {target.instance}: `systemctl status {NODE_EXPORTER}` (port 9100)"
    else:
        hint = f"on {target.instance}: is the exporter behind {target.url} running?"
    return Problem(
        ProblemKind.TARGET,
        f"{target.job}/{target.instance}",
        f"scrape target {target.instance} ({target.job}) is {target.health}{error}",
        hint,
    )
