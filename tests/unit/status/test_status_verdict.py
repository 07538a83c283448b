"""The health verdict: what is a problem (exit 1) and what is not (exit 0), on the sandbox's recorded answers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from status_fake_ssh import GPU01, HEAD, SPEC, FakeSsh

from gpuclus.status import collect, expected, verdict
from gpuclus.status.collect import NodeAnswer
from gpuclus.status.parse import Section
from gpuclus.status.report import ClusterStatus, ProblemKind, ServiceState, Usage

PASSWORD_FILE = Path("/c/.gpuclus/secrets/grafana_admin_password")


def answers_for(fake: FakeSsh) -> tuple[list[expected.NodePlan], dict[str, NodeAnswer]]:
    from gpuclus.spec.load import load_spec

    loaded = load_spec(SPEC)
    assert loaded.spec is not None and loaded.topology is not None
    plans = expected.plan(loaded.spec, loaded.topology)
    return plans, collect.collect(plans, "gpuclus", Path("k"), Path("kh"), runner=fake, hint_for=lambda m: "ssh hint")


def judge_answers(plans: list[expected.NodePlan], answers: dict[str, NodeAnswer]) -> ClusterStatus:
    from gpuclus.spec.load import load_spec

    loaded = load_spec(SPEC)
    assert loaded.spec is not None and loaded.topology is not None
    urls = expected.urls(loaded.spec, loaded.topology, PASSWORD_FILE)
    return verdict.build(
        "sts", plans, answers, urls, collected_at="2026-11-24T13:38:03+00:00", duration_s=0.3, spec_path=SPEC
    )


def judge(scenario: str | dict[str, str] = "healthy", unreachable: tuple[str, ...] = ()) -> ClusterStatus:
    return judge_answers(*answers_for(FakeSsh(scenario, unreachable=unreachable)))


def kinds(report: ClusterStatus) -> list[tuple[str, str]]:
    return [(problem.kind.value, problem.subject) for problem in report.problems]


def with_section(answer: NodeAnswer, name: str, section: Section | None) -> NodeAnswer:
    sections = dict(answer.sections)
    if section is None:
        sections.pop(name, None)
    else:
        sections[name] = section
    return replace(answer, sections=sections)


def test_healthy_cluster_exits_zero() -> None:
    report = judge("healthy")
    assert report.problems == ()
    assert report.ok and report.exit_code == 0
    assert report.slurm.answered
    gpu = next(node for node in report.nodes if node.name == GPU01)
    assert gpu.reachable and gpu.slurm is not None and gpu.slurm.label == "allocated"
    head = next(node for node in report.nodes if node.name == HEAD)
    assert head.slurm is None  # the controller is no Slurm node here
    assert report.jobs == {"pending": 1, "running": 2}
    [partition] = report.partitions
    assert (partition.name, partition.state, partition.default) == ("gpu", "up", True)
    assert partition.nodes == (GPU01,) and partition.node_states == {"allocated": 1}
    assert partition.cpus == Usage(2, 2) and partition.gpus == Usage(2, 2)
    assert partition.jobs == {"pending": 1, "running": 2}
    assert report.monitoring is not None and len(report.monitoring.targets) == 3


def test_grafana_skipped_on_purpose_is_not_down() -> None:
    report = judge("healthy")
    grafana = next(service for service in report.services if service.unit == "grafana-server")
    assert grafana.state is ServiceState.SKIPPED
    assert grafana.detail.startswith("Grafana is not installed on sts-head: Grafana's package repository")


def test_grafana_inactive_without_its_marker_is_a_problem() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    answers[HEAD] = with_section(answers[HEAD], collect.GRAFANA_MARKER, Section(1, ""))
    report = judge_answers(plans, answers)
    assert kinds(report) == [("service", f"{HEAD}/grafana-server")]
    assert report.problems[0].message == f"grafana-server on {HEAD} is inactive"
    assert report.exit_code == 1


def test_drained_and_draining_nodes_exit_one() -> None:
    for scenario, label in (("drained", "idle+drain"), ("draining", "allocated+drain")):
        report = judge(scenario)
        assert kinds(report) == [("node_state", GPU01)], scenario
        problem = report.problems[0]
        assert problem.message.startswith(f"{GPU01} is {label} in Slurm (fan replaced, testing [root@")
        assert problem.hint == f"fix the reason, then `scontrol update nodename={GPU01} state=resume` on the controller"
        assert report.exit_code == 1
    assert judge("drained").partitions[0].node_states == {"drained": 1}
    assert judge("draining").partitions[0].node_states == {"draining": 1}


def test_stopped_slurmd_and_exporter() -> None:
    report = judge({HEAD: "slurmd_stopped", GPU01: "slurmd_stopped"})
    assert kinds(report) == [
        ("node_state", GPU01),
        ("service", f"{GPU01}/slurmd"),
        ("service", f"{GPU01}/prometheus-node-exporter"),
        ("target", f"node/{GPU01}"),
    ]
    by_kind = {problem.kind: problem for problem in report.problems}
    assert by_kind[ProblemKind.NODE_STATE].hint.startswith(f"on {GPU01}: `systemctl status slurmd munge`")
    assert "`gpuclus deploy " in by_kind[ProblemKind.SERVICE].hint
    assert by_kind[ProblemKind.TARGET].message.endswith("connect: connection refused")
    assert report.exit_code == 1


def test_unreachable_node_is_one_problem_not_one_per_service() -> None:
    report = judge("healthy", unreachable=(GPU01,))
    assert kinds(report) == [("unreachable", GPU01)]
    assert report.problems[0].message == f"{GPU01} (10.213.1.11) unreachable over SSH: 10.213.1.11:22: No route to host"
    assert report.problems[0].hint == "ssh hint"
    gpu = next(node for node in report.nodes if node.name == GPU01)
    assert gpu.reachable is False and gpu.ssh_error is not None
    # Slurm's word on it still comes from the controller.
    assert gpu.slurm is not None
    assert {s.state for s in report.services if s.node == GPU01} == {ServiceState.UNKNOWN}
    assert report.exit_code == 1


def test_stopped_node() -> None:
    # Recorded after `podman stop sts-gpu01`: SSH fails, Slurm says not responding, Prometheus says down.
    report = judge({HEAD: "node_down", GPU01: "node_down"}, unreachable=(GPU01,))
    assert kinds(report) == [("unreachable", GPU01), ("node_state", GPU01), ("target", f"node/{GPU01}")]
    state = report.problems[1]
    assert state.message == f"{GPU01} is idle+not_responding in Slurm"
    # Not down (yet): Slurm clears the flag itself once slurmd answers; no resume needed.
    assert state.hint == f"on {GPU01}: `systemctl status slurmd munge`"
    target = report.problems[2]
    assert target.message.endswith("connect: no route to host")
    assert target.hint == f"{GPU01} is unreachable (above): its exporter is down with it"
    assert report.exit_code == 1


def test_unreachable_controller_still_shows_the_rest() -> None:
    report = judge("healthy", unreachable=(HEAD,))
    assert kinds(report) == [("unreachable", HEAD)]
    assert not report.slurm.answered and report.slurm.error == f"{HEAD} unreachable"
    assert report.partitions == () and all(node.slurm is None for node in report.nodes)
    assert report.monitoring is not None and report.monitoring.error == f"{HEAD} unreachable"
    # The compute node answered for itself.
    assert {s.state for s in report.services if s.node == GPU01} == {ServiceState.ACTIVE}
    assert report.exit_code == 1


def test_slurmctld_down() -> None:
    report = judge({HEAD: "slurmctld_down", GPU01: "healthy"})
    assert kinds(report)[:2] == [("slurm", HEAD), ("service", f"{HEAD}/slurmctld")]
    assert report.problems[0].message == f"slurmctld on {HEAD} does not answer: Slurmctld(primary) at {HEAD} is DOWN"
    assert not report.slurm.answered
    assert report.partitions == () and report.jobs == {"pending": 0, "running": 0}
    assert report.exit_code == 1


def test_slurm_not_deployed() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    answers[HEAD] = with_section(answers[HEAD], collect.PING, Section(127, "sh: 1: scontrol: not found"))
    report = judge_answers(plans, answers)
    slurm = report.problems[0]
    assert (slurm.kind, slurm.message) == (
        ProblemKind.SLURM,
        f"Slurm is not deployed on {HEAD} (scontrol: command not found)",
    )
    assert slurm.hint.startswith("run `gpuclus deploy ")


def test_slurm_query_timing_out() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    answers[HEAD] = with_section(answers[HEAD], collect.NODES, Section(collect.TIMED_OUT, ""))
    report = judge_answers(plans, answers)
    assert report.problems[0].message == f"slurmctld on {HEAD} does not answer: no answer in {collect.SLURM_TIMEOUT} s"


def test_prometheus_api_not_answering() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    refused = Section(7, "curl: (7) Failed to connect to 10.213.1.10 port 9090 after 0 ms: Couldn't connect to server")
    answers[HEAD] = with_section(answers[HEAD], collect.TARGETS, refused)
    report = judge_answers(plans, answers)
    assert kinds(report) == [("prometheus", HEAD)]
    assert report.monitoring is not None and report.monitoring.targets == ()
    assert "Couldn't connect to server" in (report.monitoring.error or "")


def test_prometheus_down_is_reported_once() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    units = answers[HEAD].sections[collect.UNITS].text.splitlines()
    units[4] = "failed"  # prometheus
    answers[HEAD] = with_section(answers[HEAD], collect.UNITS, Section(3, "\n".join(units)))
    answers[HEAD] = with_section(answers[HEAD], collect.TARGETS, Section(7, "curl: (7) Failed to connect"))
    assert kinds(judge_answers(plans, answers)) == [("service", f"{HEAD}/prometheus")]


def test_compute_node_missing_from_slurm_and_partition_down() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    nodes = answers[HEAD].sections[collect.NODES]
    partitions = answers[HEAD].sections[collect.PARTITIONS]
    answers[HEAD] = with_section(answers[HEAD], collect.NODES, Section(0, ""))
    answers[HEAD] = with_section(
        answers[HEAD], collect.PARTITIONS, replace(partitions, text=partitions.text.replace("State=UP", "State=DOWN"))
    )
    report = judge_answers(plans, answers)
    assert kinds(report) == [("node_missing", GPU01), ("partition", "gpu")]
    assert nodes.ok


def test_no_answer_for_units_is_a_problem() -> None:
    plans, answers = answers_for(FakeSsh("healthy"))
    answers[GPU01] = with_section(answers[GPU01], collect.UNITS, None)
    report = judge_answers(plans, answers)
    assert [problem.subject for problem in report.problems] == [
        f"{GPU01}/slurmd",
        f"{GPU01}/munge",
        f"{GPU01}/prometheus-node-exporter",
    ]
    assert report.problems[0].message == f"slurmd on {GPU01} is unknown (systemctl gave no answer)"
