"""status' parsers on what a deployed sandbox really printed (Slurm 22.05.8, Prometheus 2.42, systemd 252)."""

from __future__ import annotations

import pytest
from status_fake_ssh import GPU01, HEAD, HEAD_UNITS, recorded

from gpuclus.status import collect
from gpuclus.status.parse import (
    Section,
    parse_jobs,
    parse_partitions,
    parse_sections,
    parse_slurm_nodes,
    parse_targets,
    parse_units,
    skip_reason,
)
from gpuclus.status.report import ServiceState, Usage


def section(scenario: str, node: str, name: str) -> Section:
    return parse_sections(recorded(scenario, node))[name]


def test_sections_of_a_controller_answer() -> None:
    sections = parse_sections(recorded("healthy", HEAD))
    assert list(sections) == ["units", "ping", "nodes", "partitions", "jobs", "targets", "grafana_skipped"]
    assert sections["ping"] == Section(0, "Slurmctld(primary) at sts-head is UP")
    # curl's JSON ends without a newline: the exit marker still starts its own line.
    assert sections["targets"].ok and sections["targets"].text.startswith('{"status":"success"')


def test_sections_of_a_compute_node_answer() -> None:
    assert list(parse_sections(recorded("healthy", GPU01))) == ["units"]


def test_a_section_cut_off_has_no_exit_status() -> None:
    sections = parse_sections("@@gpuclus-status:units\nactive\n@@gpuclus-status-exit:0\n@@gpuclus-status:ping\nSlu")
    assert sections["units"] == Section(0, "active")
    assert sections["ping"] == Section(-1, "Slu")


def test_slurmctld_down_answers_only_the_ping() -> None:
    sections = parse_sections(recorded("slurmctld_down", HEAD))
    assert sections["ping"] == Section(1, "Slurmctld(primary) at sts-head is DOWN")
    # Each query would have waited ~9 s for the controller: the script did not ask them.
    assert not {"nodes", "partitions", "jobs"} & set(sections)
    assert sections["ping"].said("none") == "Slurmctld(primary) at sts-head is DOWN"


def test_nodes_busy() -> None:
    nodes = parse_slurm_nodes(section("healthy", HEAD, "nodes").text)
    assert list(nodes) == [GPU01]
    node = nodes[GPU01]
    assert (node.state, node.flags, node.reason) == ("allocated", (), None)
    assert node.cpus == Usage(2, 2)
    assert node.gpus == Usage(2, 2)
    assert node.partitions == ("gpu",)
    assert node.healthy and node.label == "allocated" and node.summary == "allocated"


def test_nodes_draining_with_a_reason() -> None:
    node = parse_slurm_nodes(section("draining", HEAD, "nodes").text)[GPU01]
    assert (node.state, node.flags) == ("allocated", ("drain",))
    assert node.reason == "fan replaced, testing [root@2026-11-24T13:42:57]"
    assert not node.healthy
    assert (node.label, node.summary) == ("allocated+drain", "draining")


def test_nodes_drained() -> None:
    node = parse_slurm_nodes(section("drained", HEAD, "nodes").text)[GPU01]
    assert (node.label, node.summary, node.healthy) == ("idle+drain", "drained", False)
    assert node.cpus == Usage(0, 2) and node.gpus == Usage(0, 2)
    assert node.reason is not None and node.reason.startswith("fan replaced, testing")


def test_nodes_unknown_after_a_controller_restart() -> None:
    # slurmctld restarted while slurmd was stopped: no registration yet, not yet "not responding".
    node = parse_slurm_nodes(section("slurmd_stopped", HEAD, "nodes").text)[GPU01]
    assert (node.state, node.flags, node.healthy) == ("unknown", (), False)


def test_nodes_typed_gres_and_tres_fallback() -> None:
    line = (
        "NodeName=dgx01 CPUAlloc=16 CPUTot=128 Gres=gpu:h100:8(S:0-1) State=MIXED Partitions=gpu,debug "
        "CfgTRES=cpu=128,mem=2000000M,gres/gpu=8,gres/gpu:h100=8 AllocTRES=cpu=16,gres/gpu=3,gres/gpu:h100=3 "
        "Reason=(null)"
    )
    node = parse_slurm_nodes(line)["dgx01"]
    assert node.gpus == Usage(3, 8) and node.cpus == Usage(16, 128)
    assert node.partitions == ("gpu", "debug") and node.reason is None
    no_gres = parse_slurm_nodes("NodeName=n1 CPUTot=4 Gres=(null) CfgTRES=cpu=4,gres/gpu=2 State=IDLE")["n1"]
    assert no_gres.gpus == Usage(0, 2)


def test_partitions() -> None:
    partitions = parse_partitions(section("healthy", HEAD, "partitions").text)
    assert [(p.name, p.state, p.default) for p in partitions] == [("gpu", "up", True)]


def test_jobs() -> None:
    jobs = parse_jobs(section("healthy", HEAD, "jobs").text)
    assert sorted((job.job_id, job.partitions, job.state) for job in jobs) == [
        ("7", ("gpu",), "running"),
        ("8", ("gpu",), "running"),
        ("9", ("gpu",), "pending"),
    ]
    assert parse_jobs(section("drained", HEAD, "jobs").text) == []
    assert parse_jobs("7|gpu,debug|PENDING\nnot a job line\n")[0].partitions == ("gpu", "debug")


def test_units_on_the_controller() -> None:
    states = parse_units(section("healthy", HEAD, "units").text, HEAD_UNITS)
    assert states["slurmctld"] is ServiceState.ACTIVE
    # Grafana is not installed in the sandbox (its marker says why): systemd calls the unit inactive.
    assert states["grafana-server"] is ServiceState.INACTIVE
    assert [unit for unit, state in states.items() if state is not ServiceState.ACTIVE] == ["grafana-server"]


def test_units_stopped() -> None:
    states = parse_units(
        section("slurmd_stopped", GPU01, "units").text, ("slurmd", "munge", "prometheus-node-exporter")
    )
    assert states == {
        "slurmd": ServiceState.INACTIVE,
        "munge": ServiceState.ACTIVE,
        "prometheus-node-exporter": ServiceState.INACTIVE,
    }


def test_units_missing_or_odd_words_are_unknown() -> None:
    assert parse_units("active\nbogus\n", ("a", "b", "c")) == {
        "a": ServiceState.ACTIVE,
        "b": ServiceState.UNKNOWN,
        "c": ServiceState.UNKNOWN,
    }


def test_targets_healthy() -> None:
    targets = parse_targets(section("healthy", HEAD, "targets").text)
    assert [(t.job, t.instance, t.health) for t in targets] == [
        ("node", "sts-gpu01", "up"),
        ("node", "sts-head", "up"),
        ("prometheus", "sts-head", "up"),
    ]
    assert targets[0].url == "http://10.213.1.11:9100/metrics" and targets[0].last_error == ""


def test_targets_down_with_the_last_error() -> None:
    down = [t for t in parse_targets(section("slurmd_stopped", HEAD, "targets").text) if not t.healthy]
    assert [(t.instance, t.health) for t in down] == [("sts-gpu01", "down")]
    assert down[0].last_error.endswith("dial tcp 10.213.1.11:9100: connect: connection refused")


@pytest.mark.parametrize("text", ['{"status":"error"}', "[]", '{"data": {"activeTargets": 3}}'])
def test_targets_refuse_other_documents(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus targets document"):
        parse_targets(text)


def test_targets_refuse_what_is_not_json() -> None:
    with pytest.raises(ValueError):
        parse_targets("curl: (7) Failed to connect to 10.213.1.10 port 9090")


def test_grafana_skip_reason_from_the_grafana_role() -> None:
    marker = section("healthy", HEAD, collect.GRAFANA_MARKER)
    assert marker.ok
    assert marker.text.startswith("# managed by gpuclus")
    assert skip_reason(marker.text) == (
        "Grafana is not installed on sts-head: Grafana's package repository https://apt.grafana.com is not "
        "reachable from sts-head and no Grafana package file is given (monitoring.grafana_package), and "
        "monitoring.grafana_unavailable is skip."
    )


def test_grafana_skip_reason_other_shapes() -> None:
    # A one-line record (written by hand on the sandbox before the grafana role existed).
    marker = section("slurmd_stopped", HEAD, collect.GRAFANA_MARKER)
    assert skip_reason(marker.text) == (
        "the nodes cannot reach Grafana's package repository (monitoring.grafana_unavailable: skip)"
    )
    assert skip_reason('{"reason": "no repository", "at": "2026-11-24"}') == "no repository"
    assert skip_reason("# only a comment\n\n") == "no reason recorded"
    assert skip_reason("x" * 1000).endswith("…") and len(skip_reason("x" * 1000)) == 400


def test_node_not_responding_after_it_stopped() -> None:
    node = parse_slurm_nodes(section("node_down", HEAD, "nodes").text)[GPU01]
    assert (node.label, node.summary, node.healthy) == ("idle+not_responding", "idle", False)
