"""validate's config stage: drift since the deploy, named per node, on stand-in nodes.

The checks run against a real Context over ``validate_stubs.StubRemote``; the
survey lines are answered by ``config_survey_stubs.FakeCluster``, whose nodes
hold the files the roles render for the sandbox. A test edits one node's state
the way an admin would by hand and expects the check to name that node and
that file, name or unit, with `gpuclus deploy` as the repair. One test runs the
real survey script on this machine, through the real clock driver, and holds
the stand-in's answers to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from config_survey_stubs import (
    CGROUP_CONF,
    GRES_CONF_FAKE,
    HOSTS,
    MUNGE_KEY,
    SLURM_CONF,
    FakeCluster,
    FakeNode,
    healthy_cluster,
    survey_output,
)
from validate_stubs import COMPUTE, GPU01, GPU02, HEAD, SANDBOX_SPEC, StubRemote, context, fail, healthy_remote, load

from gpuclus.spec.services import GRAFANA_SKIPPED
from gpuclus.validate.checks import config
from gpuclus.validate.checks.config import clock, expected, files, names, services
from gpuclus.validate.checks.config.expected import FileRule, Mount
from gpuclus.validate.checks.config.survey import (
    CLOCK_DRIVER,
    MEMO_KEY,
    SCRIPT_MARK,
    ClockSample,
    NodeSurvey,
    Request,
    parse_survey,
    survey,
    survey_script,
    timed,
)
from gpuclus.validate.context import Context, Options
from gpuclus.validate.registry import STAGES, all_checks
from gpuclus.validate.results import Level, NodeResult, Outcome, Status
from gpuclus.validate.runner import run_checks

KERNEL_SPEC = SANDBOX_SPEC.replace("server_impl: ganesha", "server_impl: kernel")


def stub(cluster: FakeCluster | None = None) -> tuple[StubRemote, FakeCluster]:
    """The healthy sandbox's controller session with the survey answered by ``cluster``."""
    cluster = cluster if cluster is not None else healthy_cluster()
    return healthy_remote().prefer(SCRIPT_MARK, cluster.answer), cluster


def run(check: str, cluster: FakeCluster, **kwargs: object) -> Outcome:
    remote, _ = stub(cluster)
    ctx = context(remote, text=cluster.spec_text, **kwargs)  # type: ignore[arg-type]
    return next(item for item in config.CHECKS if item.id == check).run(ctx)


def rows(outcome: Outcome) -> dict[str, NodeResult]:
    return {row.node: row for row in outcome.nodes}


def failing(outcome: Outcome) -> dict[str, str]:
    return {row.node: row.message for row in outcome.nodes if row.status is Status.FAIL}


# =====================================================================================
# the stage
# =====================================================================================


def test_the_stage_runs_right_after_cluster_needs_no_slurm_and_all_but_mounts_are_quick() -> None:
    assert STAGES[:3] == ("cluster", "config", "launch")
    assert [check.id for check in config.CHECKS] == [
        "config.files",
        "config.names",
        "config.clock",
        "config.mounts",
        "config.services",
    ]
    assert not any(check.needs_slurm for check in config.CHECKS)
    levels = {check.id: check.level for check in config.CHECKS}
    assert levels.pop("config.mounts") is Level.STANDARD
    assert set(levels.values()) == {Level.QUICK}
    ids = [check.id for check in all_checks()]
    assert ids.index("cluster.gres") + 1 == ids.index("config.files")


def test_a_healthy_sandbox_passes_every_check_in_one_survey_round() -> None:
    remote, cluster = stub()
    ctx = context(remote)
    outcomes = {check.id: check.run(ctx) for check in config.CHECKS}
    statuses = {check: outcome.overall for check, outcome in outcomes.items()}
    assert statuses == {
        "config.files": Status.PASS,
        "config.names": Status.PASS,
        "config.clock": Status.PASS,
        "config.mounts": Status.SKIP,  # ganesha: nothing is mounted
        "config.services": Status.PASS,
    }
    # One line per node for the whole stage, each under the clock driver; the others reach their node over SSH.
    lines = remote.matching(SCRIPT_MARK)
    assert len(lines) == 3
    assert all(line.startswith("python3 -c ") for line in lines)
    assert set(cluster.requests) == {HEAD, GPU01, GPU02}
    files_rows = rows(outcomes["config.files"])
    assert files_rows[GPU01].message == (
        "7 file(s) agree with their peers and the spec: /etc/hosts, /etc/slurm/slurm.conf, /etc/munge/munge.key, "
        "/etc/slurm/cgroup.conf, /etc/slurm/gres.conf, /etc/chrony/chrony.conf, /etc/default/chrony"
    )
    assert "/etc/ganesha/ganesha.conf" in files_rows[HEAD].message
    assert set(rows(outcomes["config.clock"])) == set(COMPUTE)  # the controller is the reference
    assert rows(outcomes["config.services"])[HEAD].message.endswith(
        "; no grafana-server: the deploy skipped it on purpose (/var/lib/gpuclus/grafana.skipped)"
    )


def test_what_each_node_is_asked_follows_the_roles() -> None:
    remote, cluster = stub()
    survey(context(remote))
    head, gpu = cluster.requests[HEAD], cluster.requests[GPU01]
    assert [rule.key for rule in head.files] == [
        "hosts",
        "slurm.conf",
        "munge.key",
        "chrony.conf",
        "chrony.options",
        "exports",
    ]
    assert [rule.key for rule in gpu.files] == [
        "hosts",
        "slurm.conf",
        "munge.key",
        "cgroup.conf",
        "gres.conf",
        "chrony.conf",
        "chrony.options",
    ]
    # The controller prints the files compared with the spec; every compute node its own gres.conf.
    assert [rule.key for rule in head.shown] == ["hosts", "slurm.conf", "chrony.conf", "exports"]
    assert [rule.key for rule in gpu.shown] == ["gres.conf", "chrony.conf"]
    assert head.names == gpu.names == [HEAD, GPU01, GPU02]
    assert cluster.requests[GPU02].units == [
        "chrony",
        "chronyd",
        "munge",
        "slurmd",
        "prometheus-node-exporter",
        "node_exporter",
    ]
    # The first compute node is also the backup controller: it runs slurmctld too.
    assert gpu.units == [
        "chrony",
        "chronyd",
        "munge",
        "slurmctld",
        "slurmd",
        "prometheus-node-exporter",
        "node_exporter",
    ]
    assert "slurmctld" in head.units and "nfs-ganesha" in head.units and "grafana-server" in head.units
    assert head.markers == [GRAFANA_SKIPPED]
    assert head.mounts == gpu.mounts == []
    # The munge key: through sudo, with a salt of this run (the same for every node of the run).
    line = remote.matching(SCRIPT_MARK, GPU01)[0]
    assert "sudo -n sh -c" in line and "munge.key" in line
    assert head.salt == gpu.salt and len(head.salt) == 32


def test_each_run_salts_the_secrets_hashes_anew() -> None:
    salts = set()
    for _ in range(2):
        remote, cluster = stub()
        survey(context(remote))
        salts.add(cluster.requests[GPU01].salt)
    assert len(salts) == 2


# =====================================================================================
# config.files
# =====================================================================================


def test_cgroup_conf_edited_on_one_of_two_compute_nodes_is_named_by_the_deploy_stamp() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).edit("/etc/slurm/cgroup.conf", CGROUP_CONF + "# tuned by hand\n")
    outcome = run("config.files", cluster)
    assert failing(outcome) == {
        GPU01: "/etc/slurm/cgroup.conf differs from val-gpu02's copy, unchanged since the last deploy; "
        "it was changed after this node's last deploy"
    }
    assert rows(outcome)[GPU02].status is Status.PASS
    assert rows(outcome)[GPU01].value == 1
    assert outcome.hint is not None and outcome.hint.startswith("`gpuclus deploy` writes every file")


def test_two_copies_that_disagree_with_no_way_to_tell_fail_both() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).edit("/etc/slurm/cgroup.conf", CGROUP_CONF + "# one\n")
    cluster.node(GPU02).edit("/etc/slurm/cgroup.conf", CGROUP_CONF + "# two\n")
    assert failing(run("config.files", cluster)) == {
        GPU01: "/etc/slurm/cgroup.conf differs from the copy on val-gpu02 and no majority says which is right",
        GPU02: "/etc/slurm/cgroup.conf differs from the copy on val-gpu01 and no majority says which is right",
    }


def test_without_deploy_stamps_a_tie_is_not_broken_by_guessing() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).edit("/etc/slurm/cgroup.conf", CGROUP_CONF + "# one\n")
    for name in COMPUTE:
        del cluster.node(name).files[expected.DEPLOY_STAMP]
    assert set(failing(run("config.files", cluster))) == {GPU01, GPU02}


def test_a_hosts_line_added_on_one_node_differs_from_the_controllers_copy_and_misdirects_its_name() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU02).edit("/etc/hosts", f"192.0.2.1 {GPU01}\n" + HOSTS)
    assert failing(run("config.files", cluster)) == {
        GPU02: "/etc/hosts differs from val-head's copy; it was changed after this node's last deploy"
    }
    outcome = run("config.names", cluster)
    assert failing(outcome) == {GPU02: "val-gpu01 resolves to 192.0.2.1; the spec says 10.213.0.11"}
    assert rows(outcome)[GPU02].value == 1
    assert outcome.hint is not None and "`gpuclus deploy` writes /etc/hosts from the spec again" in outcome.hint


def test_the_same_hand_edit_on_every_node_is_caught_against_the_spec() -> None:
    cluster = healthy_cluster()
    edited = HOSTS.replace("10.213.0.12 val-gpu02", "10.213.0.99 val-gpu02")
    for node in cluster.nodes.values():
        node.edit("/etc/hosts", edited)
    outcome = run("config.files", cluster)
    # Every node holds the controller's copy, and that copy is not the spec's.
    assert failing(outcome) == dict.fromkeys(
        [HEAD, GPU01, GPU02], "/etc/hosts val-gpu02 is listed as 10.213.0.99, the spec says 10.213.0.12"
    )


def test_slurm_conf_read_against_the_spec() -> None:
    cluster = healthy_cluster()
    edited = (
        SLURM_CONF.replace("ClusterName=val", "ClusterName=other")
        .replace("NodeAddr=10.213.0.12", "NodeAddr=10.213.0.99")
        .replace("# Partitions", "NodeName=val-gpu03 NodeAddr=10.213.0.13 CPUs=2\n# Partitions")
    )
    for node in cluster.nodes.values():
        node.edit("/etc/slurm/slurm.conf", edited)
    problems = failing(run("config.files", cluster))
    assert set(problems) == {HEAD, GPU01, GPU02}
    assert problems[GPU01] == (
        "/etc/slurm/slurm.conf ClusterName is other, the spec says val; "
        "/etc/slurm/slurm.conf NodeName=val-gpu02 has NodeAddr=10.213.0.99, the spec says 10.213.0.12; "
        "/etc/slurm/slurm.conf NodeName=val-gpu03 is not a compute node in the spec"
    )


def test_slurm_conf_problems_name_a_missing_node_and_controller() -> None:
    loaded = load()
    assert loaded.spec is not None and loaded.topology is not None
    text = SLURM_CONF.replace("SlurmctldHost=val-head(10.213.0.10)", "SlurmctldHost=val-head")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("NodeName=val-gpu01"))
    assert expected.slurm_conf_problems(text, loaded.spec, loaded.topology) == [
        "SlurmctldHost is val-head, val-gpu01(10.213.0.11), "
        "the spec says val-head(10.213.0.10), val-gpu01(10.213.0.11)",
        "no NodeName line for val-gpu01",
    ]


def test_a_replaced_munge_key_is_named_without_showing_the_key_or_any_hash() -> None:
    cluster = healthy_cluster()
    replaced = hashlib.sha512(b"another key").hexdigest() * 8
    cluster.node(GPU01).edit("/etc/munge/munge.key", replaced)
    remote, _ = stub(cluster)
    loaded = load()
    assert loaded.spec is not None and loaded.topology is not None
    report = run_checks(
        remote, loaded.spec, loaded.topology, config.CHECKS, level=Level.QUICK, selected=list(loaded.topology.nodes)
    )
    (failure,) = report.failures()
    assert (failure["check"], failure["node"]) == ("config.files", GPU01)
    assert failure["message"] == (
        "/etc/munge/munge.key differs from the controller's (val-head); it was changed after this node's last deploy"
    )
    shown = json.dumps(report.as_dict())
    salt = cluster.requests[GPU01].salt
    for key in (MUNGE_KEY, replaced):
        assert key[:16] not in shown
        for digest in (hashlib.sha256(key.encode()), hashlib.sha256((salt + key).encode())):
            assert digest.hexdigest()[:12] not in shown
    assert salt not in shown


def test_a_key_sudo_cannot_read_is_named_as_such() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU02).sudo = False
    assert failing(run("config.files", cluster)) == {GPU02: "/etc/munge/munge.key cannot be read (sudo -n was refused)"}


def test_a_missing_file_is_named() -> None:
    cluster = healthy_cluster()
    del cluster.node(GPU02).files["/etc/slurm/gres.conf"]
    assert failing(run("config.files", cluster)) == {GPU02: "/etc/slurm/gres.conf is missing"}


def test_gres_conf_claiming_other_gpus_than_the_spec_is_named_on_each_node() -> None:
    cluster = healthy_cluster()
    for name in COMPUTE:
        cluster.node(name).edit("/etc/slurm/gres.conf", GRES_CONF_FAKE.replace("[0-1]", "[0-3]"))
    assert failing(run("config.files", cluster)) == {
        GPU01: "/etc/slurm/gres.conf lists 4 GPU(s); the spec gives val-gpu01 2",
        GPU02: "/etc/slurm/gres.conf lists 4 GPU(s); the spec gives val-gpu02 2",
    }


def test_gres_conf_is_compared_among_peers_with_the_nodes_own_name_blanked() -> None:
    # A node without GPUs: the template names the node in a comment; peers still agree.
    text = SANDBOX_SPEC.replace("gpus: {count: 2, fake: true}", "cpus: 2")
    cluster = FakeCluster(text)
    for name in COMPUTE:
        cluster.node(name).files["/etc/slurm/gres.conf"] = (
            f"# managed by gpuclus — edits are overwritten\n#\n# {name} has no GPUs.\nAutoDetect=off\n"
        )
    gres = "/etc/slurm/gres.conf"
    assert cluster.node(GPU01).files[gres] != cluster.node(GPU02).files[gres]
    outcome = run("config.files", cluster)
    assert outcome.overall is Status.PASS, failing(outcome)
    # A hand edit beyond the name is still one.
    cluster.node(GPU02).edit(gres, cluster.node(GPU02).files[gres] + "Name=gpu File=/dev/nvidia0\n")
    assert set(failing(run("config.files", cluster))) == {GPU02}


def test_gres_conf_problems_with_a_model_and_nvml() -> None:
    loaded = load(SANDBOX_SPEC.replace("gpus: {count: 2, fake: true}", "gpus: {count: 2, model: h100}"))
    assert loaded.topology is not None
    node = loaded.topology.by_name()[GPU01]
    typed = "AutoDetect=off\nName=gpu Type=a100 File=/dev/nvidia[0-1]\n"
    assert expected.gres_conf_problems(typed, node) == ["has GPU Type=a100, the spec says h100"]
    assert expected.gres_conf_problems("AutoDetect=nvml\n", node) == []  # NVML counts for itself
    assert expected.gres_conf_problems("AutoDetect=off\n", node) == ["lists no GPUs; the spec gives val-gpu01 2"]


def test_chrony_must_follow_the_controller_which_must_serve_every_node() -> None:
    cluster = healthy_cluster()
    head = cluster.node(HEAD)
    head.edit("/etc/chrony/chrony.conf", head.files["/etc/chrony/chrony.conf"].replace("allow 10.213.0.12\n", ""))
    for name in COMPUTE:
        node = cluster.node(name)
        node.edit("/etc/chrony/chrony.conf", node.files["/etc/chrony/chrony.conf"].replace("10.213.0.10", "pool.x"))
    assert failing(run("config.files", cluster)) == {
        HEAD: "/etc/chrony/chrony.conf does not allow val-gpu02 (10.213.0.12) to ask it the time",
        GPU01: "/etc/chrony/chrony.conf does not follow the controller val-head (10.213.0.10); its sources: pool.x",
        GPU02: "/etc/chrony/chrony.conf does not follow the controller val-head (10.213.0.10); its sources: pool.x",
    }


def test_chrony_clients_in_and_out_of_containers_are_not_peers() -> None:
    # rtcsync only where chronyd may set the clock: a bare-metal node's file differs from a container's.
    cluster = healthy_cluster()
    node = cluster.node(GPU02)
    node.virt = "none"
    node.files["/etc/chrony/chrony.conf"] += "rtcsync\n"
    node.files["/etc/default/chrony"] = node.files["/etc/default/chrony"].replace(" -x", "")
    assert run("config.files", cluster).overall is Status.PASS


def test_chrony_found_at_the_redhat_path_is_named_there() -> None:
    cluster = healthy_cluster()
    node = cluster.node(GPU02)
    node.files["/etc/chrony.conf"] = node.files.pop("/etc/chrony/chrony.conf")
    row = rows(run("config.files", cluster))[GPU02]
    assert row.status is Status.PASS
    assert "/etc/chrony.conf" in row.message


def test_an_export_missing_from_ganesha_conf_is_named_on_the_server() -> None:
    cluster = healthy_cluster()
    head = cluster.node(HEAD)
    conf = head.files["/etc/ganesha/ganesha.conf"]
    head.edit("/etc/ganesha/ganesha.conf", conf[: conf.index("EXPORT {")])
    assert failing(run("config.files", cluster)) == {HEAD: "/etc/ganesha/ganesha.conf does not export /srv/nfs/shared"}


def test_the_kernel_server_is_read_from_etc_exports() -> None:
    cluster = FakeCluster(KERNEL_SPEC)
    head = cluster.node(HEAD)
    del head.files["/etc/ganesha/ganesha.conf"]
    head.files["/etc/exports"] = "# managed by gpuclus\n/srv/nfs/other 10.213.0.11(rw,sync,no_subtree_check)\n"
    assert failing(run("config.files", cluster)) == {HEAD: "/etc/exports does not export /srv/nfs/shared"}
    head.files["/etc/exports"] = "/srv/nfs/shared 10.213.0.11(rw,sync,no_subtree_check)\n"
    assert run("config.files", cluster).overall is Status.PASS


def test_with_nodes_the_controller_is_still_the_reference_but_gets_no_row() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).edit("/etc/slurm/slurm.conf", SLURM_CONF + "# by hand\n")
    outcome = run("config.files", cluster, nodes=[GPU01])
    assert list(rows(outcome)) == [GPU01]
    assert failing(outcome)[GPU01].startswith("/etc/slurm/slurm.conf differs from val-head's copy")
    assert set(cluster.requests) == {HEAD, GPU01}


# =====================================================================================
# config.names
# =====================================================================================


def test_a_name_that_does_not_resolve_is_named() -> None:
    cluster = healthy_cluster()
    node = cluster.node(HEAD)
    node.edit("/etc/hosts", HOSTS.replace(f"10.213.0.11 {GPU01}\n", ""))
    outcome = run("config.names", cluster)
    assert failing(outcome) == {HEAD: "val-gpu01 does not resolve; the spec says 10.213.0.11"}


def test_a_spec_address_that_is_a_dns_name_is_compared_with_what_it_resolves_to() -> None:
    loaded = load(SANDBOX_SPEC.replace("address: 10.213.0.10", "address: head.lab.example"))
    assert loaded.topology is not None
    answer = NodeSurvey(
        names={HEAD: ("10.0.0.5",), "head.lab.example": ("10.0.0.5",), GPU01: ("10.213.0.11",), GPU02: ("10.213.0.12",)}
    )
    assert names.judge(GPU01, answer, loaded.topology).status is Status.PASS
    answer.names[HEAD] = ("10.0.0.6",)
    assert names.judge(GPU01, answer, loaded.topology).message == (
        "val-head resolves to 10.0.0.6; the spec says head.lab.example (10.0.0.5)"
    )
    answer.names["head.lab.example"] = ()
    assert names.judge(GPU01, answer, loaded.topology).message == (
        "val-head's address in the spec, head.lab.example, does not resolve"
    )
    assert expected.names_to_resolve(loaded.topology) == [HEAD, GPU01, GPU02, "head.lab.example"]


# =====================================================================================
# config.clock
# =====================================================================================


def sample(offset: float, margin: float = 0.001) -> ClockSample:
    return ClockSample(1000.0, 1000.0 + margin + offset, 1000.0 + 2 * margin)


@pytest.mark.parametrize(
    ("offset", "margin", "status"),
    [
        (0.0, 0.001, Status.PASS),
        (-0.3, 0.001, Status.PASS),
        (0.6, 0.001, Status.WARN),  # over the warning bound
        (0.45, 0.1, Status.WARN),  # may be over it: the measurement cannot tell
        (1.05, 0.1, Status.WARN),  # may be just under the failing bound
        (-1.2, 0.1, Status.FAIL),  # certainly more than 1 s behind
        (400.0, 0.2, Status.FAIL),  # past munge's credential TTL
    ],
)
def test_clock_verdict_takes_the_measurements_margin_into_account(offset: float, margin: float, status: Status) -> None:
    assert clock.verdict(sample(offset, margin)) is status


def test_a_node_whose_clock_is_two_seconds_ahead_fails_and_the_tightest_exchange_is_used() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU02).offset_s = 2.0
    outcome = run("config.clock", cluster)
    row = rows(outcome)[GPU02]
    assert row.status is Status.FAIL
    assert row.message == "+2.000 s ± 0.001 s from val-head; chrony: 0.000000451 seconds fast of NTP time"
    assert (row.value, row.expected, row.unit) == (2.0, "|offset| < 0.5", "s")
    assert rows(outcome)[GPU01].status is Status.PASS
    assert outcome.hint is not None and "chronyc tracking" in outcome.hint and "`gpuclus deploy`" in outcome.hint


def test_a_node_whose_clock_cannot_be_read_fails_and_only_the_controller_selected_skips() -> None:
    assert clock.judge(GPU01, NodeSurvey(complete=True), HEAD).status is Status.FAIL
    outcome = run("config.clock", healthy_cluster(), nodes=[HEAD])
    assert outcome.overall is Status.SKIP and "its clock is the reference" in outcome.message


def test_clock_lines_the_driver_prints_are_parsed_and_a_date_without_nanoseconds_is_ignored() -> None:
    found = parse_survey("clock\t100.000000\t100.5\t100.010000\nclock\t101.0\t1700000000.N\t101.1\ndone\n")
    assert found.clock == [ClockSample(100.0, 100.5, 100.01)]
    assert found.best_clock is not None and round(found.best_clock.offset, 3) == 0.495


# =====================================================================================
# config.mounts
# =====================================================================================


def kernel_cluster() -> FakeCluster:
    """The sandbox's spec with the kernel NFS server: the compute nodes automount /shared from val-head."""
    cluster = FakeCluster(KERNEL_SPEC)
    head = cluster.node(HEAD)
    head.files["/etc/exports"] = "/srv/nfs/shared 10.213.0.11(rw,sync,no_subtree_check)\n"
    del head.files["/etc/ganesha/ganesha.conf"]
    head.units["nfs-server"] = ("loaded", "enabled", "active")
    for name in COMPUTE:
        node = cluster.node(name)
        node.mounts = [("systemd-1", "/shared", "autofs")]
        node.mounted_on_touch = [("10.213.0.10:/srv/nfs/shared", "/shared", "nfs4")]
    return cluster


def test_automounted_exports_pass_once_touched_and_the_server_is_not_a_client() -> None:
    cluster = kernel_cluster()
    outcome = run("config.mounts", cluster)
    assert {node: row.status for node, row in rows(outcome).items()} == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert rows(outcome)[GPU01].message == "NFS-mounted: /shared"
    assert cluster.requests[GPU01].mounts == [Mount("/shared", "10.213.0.10:/srv/nfs/shared")]
    assert cluster.requests[HEAD].mounts == []


def test_mount_failures_are_named_per_node() -> None:
    cluster = kernel_cluster()
    cluster.node(GPU01).touch_status["/shared"] = 124
    cluster.node(GPU02).mounted_on_touch = [("10.9.9.9:/srv/nfs/shared", "/shared", "nfs")]
    assert failing(run("config.mounts", cluster)) == {
        GPU01: "/shared is an automount that did not mount within 5 s (no NFS mount of 10.213.0.10:/srv/nfs/shared)",
        GPU02: "/shared is mounted from 10.9.9.9:/srv/nfs/shared, the spec says 10.213.0.10:/srv/nfs/shared",
    }
    cluster.node(GPU02).mounts = []
    cluster.node(GPU02).mounted_on_touch = []
    assert failing(run("config.mounts", cluster))[GPU02] == (
        "/shared is not NFS-mounted; want 10.213.0.10:/srv/nfs/shared"
    )


def test_mounts_skip_with_ganesha_and_without_exports() -> None:
    outcome = run("config.mounts", healthy_cluster())
    assert outcome.overall is Status.SKIP
    assert outcome.message.startswith("nfs.server_impl is ganesha: gpuclus mounts nothing then")
    no_exports = SANDBOX_SPEC[: SANDBOX_SPEC.index("nfs:")] + SANDBOX_SPEC[SANDBOX_SPEC.index("nvidia:") :]
    outcome = run("config.mounts", FakeCluster(no_exports))
    assert (outcome.overall, outcome.message) == (Status.SKIP, "no NFS exports in the spec")


# =====================================================================================
# config.services
# =====================================================================================


def test_a_stopped_and_a_disabled_unit_are_named() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).units["slurmd"] = ("loaded", "enabled", "inactive")
    cluster.node(GPU02).units["prometheus-node-exporter"] = ("loaded", "disabled", "active")
    cluster.node(HEAD).units["munge"] = ("masked", "masked", "failed")
    outcome = run("config.services", cluster)
    assert failing(outcome) == {
        HEAD: "munge is masked (does not start at boot) and failed (not running); "
        "no grafana-server: the deploy skipped it on purpose (/var/lib/gpuclus/grafana.skipped)",
        GPU01: "slurmd is inactive (not running)",
        GPU02: "prometheus-node-exporter is disabled (does not start at boot)",
    }
    assert rows(outcome)[GPU01].value == 4 and rows(outcome)[GPU01].expected == "5"  # slurmctld: the backup
    assert outcome.hint is not None and "`gpuclus deploy` enables and starts" in outcome.hint


def test_redhat_unit_names_are_found_and_a_missing_unit_is_not_installed() -> None:
    cluster = healthy_cluster()
    node = cluster.node(GPU01)
    node.units["chronyd"] = node.units.pop("chrony")
    node.units["node_exporter"] = node.units.pop("prometheus-node-exporter")
    del cluster.node(GPU02).units["munge"]
    outcome = run("config.services", cluster)
    assert rows(outcome)[GPU01].message == "enabled and active: chronyd, munge, slurmctld, slurmd, node_exporter"
    assert failing(outcome) == {GPU02: "munge not installed (systemd knows no such unit)"}


def test_grafana_absent_without_the_deploys_skip_record_fails() -> None:
    cluster = healthy_cluster()
    cluster.node(HEAD).markers.clear()
    assert failing(run("config.services", cluster)) == {
        HEAD: "grafana-server not installed (systemd knows no such unit)"
    }


def test_services_per_role_from_the_spec() -> None:
    loaded = load(SANDBOX_SPEC.replace("gpus: {count: 2, fake: true}", "gpus: {count: 8}"))
    assert loaded.spec is not None and loaded.topology is not None
    by_name = loaded.topology.by_name()
    gpu = [service.name for service in expected.services_for(by_name[GPU02], loaded.spec, loaded.topology).services]
    assert gpu == ["chrony", "munge", "slurmd", "node exporter", "GPU metrics"]  # driver.install is off here
    backup = expected.services_for(by_name[GPU01], loaded.spec, loaded.topology).services
    assert [service.name for service in backup] == [
        "chrony",
        "munge",
        "slurmctld",
        "slurmd",
        "node exporter",
        "GPU metrics",
    ]
    head = expected.services_for(by_name[HEAD], loaded.spec, loaded.topology)
    assert [service.name for service in head.services] == [
        "chrony",
        "munge",
        "slurmctld",
        "slurmdbd",
        "mariadb",
        "NFS server",
        "node exporter",
        "Slurm metrics timer",
        "prometheus",
        "alertmanager",
        "grafana",
    ]


# =====================================================================================
# nodes that cannot be surveyed
# =====================================================================================


def test_an_unreachable_node_is_named_once_then_skipped_and_never_a_traceback() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU02).reachable = False
    remote, _ = stub(cluster)
    ctx = context(remote)
    outcomes = {check.id: check.run(ctx) for check in config.CHECKS}
    first = rows(outcomes["config.files"])[GPU02]
    assert first.status is Status.FAIL
    assert first.message == "val-gpu02 unreachable: ssh: connect to host val-gpu02 port 22: Connection timed out"
    assert first.hint is not None and "cannot be reached from val-head over SSH" in first.hint
    assert outcomes["config.files"].hint == ctx.unreachable_hint([GPU02])  # its only failure
    for check in ("config.names", "config.clock", "config.services"):
        row = rows(outcomes[check])[GPU02]
        assert row.status is Status.SKIP, check
        assert row.message.endswith("Connection timed out (see config.files)")
        assert rows(outcomes[check])[GPU01].status is Status.PASS
    assert GPU02 in ctx.unreachable  # later stages (launch.munge) name the same cause
    assert len(remote.matching(SCRIPT_MARK)) == 3  # one survey for the stage


def test_a_survey_cut_off_by_its_deadline_says_what_it_could_not_read() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).stops_after = "virt\t"
    remote, _ = stub(cluster)
    ctx = context(remote)
    assert rows(config.CHECKS[0].run(ctx))[GPU01].status is Status.PASS  # the files came before
    message = failing(names.names_resolve(ctx))[GPU01]
    assert message.startswith("val-head's address not read: the survey of val-gpu01 stopped early (exit 124: ")
    assert failing(services.services_running(ctx))[GPU01].startswith("chrony's unit not read: ")


def test_a_survey_that_prints_nothing_fails_with_its_error() -> None:
    remote = healthy_remote().prefer(SCRIPT_MARK, fail(127, "", "sh: 1: python3: not found\n"))
    ctx = context(remote)
    outcome = files.files_agree(ctx)
    assert failing(outcome)[HEAD] == "the survey of val-head printed nothing (exit 127: sh: 1: python3: not found)"
    assert rows(clock.clocks_agree(ctx))[GPU01].status is Status.SKIP
    assert ctx.memo[MEMO_KEY].unreachable == set()


def test_hints_name_the_spec_the_run_was_given() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).edit("/etc/slurm/cgroup.conf", "# by hand\n" + CGROUP_CONF)
    remote, _ = stub(cluster)
    loaded = load()
    assert loaded.spec is not None and loaded.topology is not None
    report = run_checks(
        remote,
        loaded.spec,
        loaded.topology,
        config.CHECKS,
        level=Level.QUICK,
        selected=list(loaded.topology.nodes),
        options=Options(spec_path=Path("sandbox.yaml")),
    )
    (failure,) = report.failures()
    assert failure["hint"].startswith("`gpuclus deploy sandbox.yaml` writes every file from the spec again")


# =====================================================================================
# the real script, on this machine
# =====================================================================================


def test_the_real_script_through_the_clock_driver_answers_as_the_stand_in_does(tmp_path: Path) -> None:
    """The survey script and CLOCK_DRIVER run here with sh and python3; the stand-in must print the same."""
    (tmp_path / "hosts").write_text(HOSTS)
    (tmp_path / "gres.conf").write_text(f"# {GPU01} has no GPUs.\nAutoDetect=off")  # no final newline
    (tmp_path / "key").write_text(MUNGE_KEY)
    rules = [
        FileRule("hosts", (str(tmp_path / "absent"), str(tmp_path / "hosts")), (GPU01,), lambda n, c: None),
        FileRule("gres.conf", (str(tmp_path / "gres.conf"),), (GPU01,), lambda n, c: None, names_its_node=True),
        FileRule("munge.key", (str(tmp_path / "key"),), (GPU01,), lambda n, c: None, secret=True),
        FileRule("root.only", (str(tmp_path / "key"),), (GPU01,), lambda n, c: None, root_only=True),
        FileRule("cgroup.conf", (str(tmp_path / "nowhere"),), (GPU01,), lambda n, c: None),
    ]
    request = Request(
        GPU01,
        rules,
        [rules[0], rules[1]],
        names=["localhost", "nonexistent.invalid"],
        mounts=[Mount("/proc", "proc")],
        units=[],
        markers=[str(tmp_path / "hosts"), str(tmp_path / "nothing")],
        salt="0123456789abcdef0123456789abcdef",
    )
    done = subprocess.run(["sh", "-c", timed(survey_script(request))], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    real = parse_survey(done.stdout)
    node = FakeNode(
        {path: Path(path).read_text() for rule in rules for path in rule.paths if Path(path).exists()},
        {},
        mtimes={path: int(Path(path).stat().st_mtime) for rule in rules for path in rule.paths if Path(path).exists()},
        markers={str(tmp_path / "hosts")},
        virt=real.virt or "none",
        chrony=real.chrony,
        mounts=[("proc", "/proc", "proc")],
        sudo=os.geteuid() == 0 and Path("/usr/bin/sudo").exists(),
    )
    node.files["/etc/hosts"] = "127.0.0.1 localhost\n"
    stand_in = parse_survey(survey_output(request, node))
    assert real.complete and stand_in.complete
    real.files.pop("stamp"), stand_in.files.pop("stamp")
    assert real.files == stand_in.files
    assert real.files["munge.key"].sha256 == hashlib.sha256((request.salt + MUNGE_KEY).encode()).hexdigest()
    assert real.contents == stand_in.contents
    assert real.contents["gres.conf"] == f"# {GPU01} has no GPUs.\nAutoDetect=off\n"
    assert real.markers == stand_in.markers == {str(tmp_path / "hosts")}
    assert real.names == stand_in.names == {"localhost": ("127.0.0.1",), "nonexistent.invalid": ()}
    assert real.touched == stand_in.touched == {"/proc": 0}
    assert real.mounts == stand_in.mounts
    # Four timed exchanges with this machine's own clock: no offset beyond the exchange itself.
    assert len(real.clock) == 4
    best = real.best_clock
    assert best is not None and abs(best.offset) <= best.uncertainty + 0.01


def test_the_driver_passes_the_childs_exit_status_and_stderr_on_as_ssh_failures_need_them() -> None:
    done = subprocess.run(
        ["python3", "-c", CLOCK_DRIVER, "sh", "-c", "echo 'ssh: connect to host x port 22: No route' >&2; exit 255"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (255, "")
    assert "No route" in done.stderr


def test_the_controller_runs_its_own_survey_without_an_ssh_hop() -> None:
    remote, _ = stub()
    ctx: Context = context(remote)
    survey(ctx)
    (own,) = [line for line in remote.matching(SCRIPT_MARK) if "StrictHostKeyChecking" not in line]
    assert own.startswith("python3 -c ") and " sh -c " in own


def test_a_gres_conf_that_differs_also_says_what_it_gets_wrong_against_the_spec() -> None:
    cluster = healthy_cluster()
    cluster.node(GPU01).edit("/etc/slurm/gres.conf", GRES_CONF_FAKE.replace("[0-1]", "[0-3]"))
    assert failing(run("config.files", cluster)) == {
        GPU01: "/etc/slurm/gres.conf differs from val-gpu02's copy, unchanged since the last deploy; it was changed "
        "after this node's last deploy; /etc/slurm/gres.conf lists 4 GPU(s); the spec gives val-gpu01 2"
    }
