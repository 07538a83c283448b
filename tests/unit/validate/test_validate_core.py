"""validate's core: Slurm helpers, the cluster/launch/storage/accounting/monitoring/containers checks,
the runner, JUnit and the SSH channel reader, on output recorded from the sandbox.

The checks run against a real Context over ``validate_stubs.StubRemote``, which
answers each command line with what the sandbox (val-head, val-gpu01,
val-gpu02 with 2 fake GPUs each) printed; broken clusters are the same
recordings with one answer replaced by what the sandbox printed when that
thing was broken. Tests using such output say "recorded" in their names.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from validate_stubs import (
    COMPUTE,
    CONTROLLER_NOW,
    GPU01,
    GPU02,
    GRES_PROBE_HEALTHY,
    GRES_PROBE_MISSING_DEVICE,
    HEAD,
    MUNGE_CREDENTIAL,
    NO_ROUTE,
    NODE_EXPORTER_HEAD,
    NODES_HEALTHY,
    PARTITIONS,
    PING_DOWN,
    READ_LIBNFS_DENIED,
    READ_NOT_NFS,
    READ_VIA_MOUNT,
    SACCT_RUN,
    SANDBOX_SPEC,
    SRUN_NODES_BUSY,
    SRUN_TASK_LAUNCH_FAILED,
    SSH_TIMED_OUT,
    TARGETS_HEALTHY,
    UNMUNGE_BAD_KEY,
    Answer,
    StubRemote,
    context,
    controller_metrics,
    fail,
    healthy_remote,
    in_turn,
    load,
    node_line,
    ok,
    per_node,
    with_state,
)

from gpuclus.slurm import commands as slurm
from gpuclus.slurm import remote as remote_module
from gpuclus.slurm.remote import TIMED_OUT, Remote, _collect
from gpuclus.ssh.client import CommandResult, SshFailure
from gpuclus.validate.check import Check
from gpuclus.validate.checks import accounting, cluster, containers, launch, monitoring, storage
from gpuclus.validate.context import Context, Options
from gpuclus.validate.junit import junit_xml, write_junit
from gpuclus.validate.registry import STAGES, all_checks
from gpuclus.validate.results import CheckResult, Level, NodeResult, Outcome, Status, skipped, worst
from gpuclus.validate.runner import Report, run_checks


def by_node(outcome: Outcome) -> dict[str, NodeResult]:
    return {result.node: result for result in outcome.nodes}


def statuses(outcome: Outcome) -> dict[str, Status]:
    return {result.node: result.status for result in outcome.nodes}


def nodelist(line: str) -> str:
    (word,) = [word for word in shlex.split(line) if word.startswith("--nodelist=")]
    return word.removeprefix("--nodelist=")


# =====================================================================================
# slurm.py: command lines
# =====================================================================================


def test_srun_command_is_bounded_twice_and_parses_back_word_for_word() -> None:
    command = "printf '%s\\n' \"$SLURMD_NODENAME\"; echo 'it''s' > /tmp/x && exit 3"
    line = slurm.srun_command(
        command,
        job_name="gpuclus-validate-ab12cd34",
        time_limit_s=61,
        nodes=[GPU01, GPU02],
        partition="gpu",
        gres="gpu:2",
        queue_wait_s=30,
    )
    words = shlex.split(line)
    # `timeout` around srun: time limit + queue wait + 30 s slack, then SIGKILL 10 s later.
    assert words[:4] == ["timeout", "--kill-after=10", str(61 + 30 + 30), "srun"]
    assert words[4:] == [
        "--job-name=gpuclus-validate-ab12cd34",
        "--time=2",  # 61 s rounds up to whole minutes
        "--partition=gpu",
        "--nodes=2",
        "--nodelist=val-gpu01,val-gpu02",
        "--immediate=30",
        "--ntasks-per-node=1",
        "--gres=gpu:2",
        "--kill-on-bad-exit=1",
        "--quit-on-interrupt",
        "sh",
        "-c",
        command,
    ]


def test_srun_command_without_nodes_partition_or_queue_wait() -> None:
    words = shlex.split(slurm.srun_command("true", job_name="j", time_limit_s=600))
    assert words == [
        "timeout",
        "--kill-after=10",
        "630",  # no queue wait: time limit + slack only
        "srun",
        "--job-name=j",
        "--time=10",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--quit-on-interrupt",
        "sh",
        "-c",
        "true",
    ]
    assert not any(word.startswith(("--immediate", "--nodelist", "--nodes", "--partition", "--gres")) for word in words)


def test_srun_command_gpus_per_node_tasks_and_extra_come_before_the_command() -> None:
    words = shlex.split(
        slurm.srun_command(
            "nvidia-smi -L",
            job_name="j",
            time_limit_s=60,
            nodes=[GPU01],
            ntasks_per_node=2,
            gpus_per_node=1,
            queue_wait_s=0,
            extra=("--container-image=ubuntu:22.04", "--mpi=pmix"),
        )
    )
    assert words[2] == "90"
    assert "--immediate=0" in words
    assert "--ntasks-per-node=2" in words and "--gpus-per-node=1" in words
    assert words[-5:] == ["--container-image=ubuntu:22.04", "--mpi=pmix", "sh", "-c", "nvidia-smi -L"]


@pytest.mark.parametrize(("seconds", "minutes"), [(0, 1), (1, 1), (59, 1), (60, 1), (61, 2), (120, 2), (600, 10)])
def test_srun_time_limit_rounds_up_to_whole_minutes(seconds: int, minutes: int) -> None:
    words = shlex.split(slurm.srun_command("true", job_name="j", time_limit_s=seconds))
    assert f"--time={minutes}" in words


def test_srun_command_survives_hostile_shell_text() -> None:
    command = "echo \"$(id -un)\" '`rm -rf /`' ; a=1 b='x y' && printf %s\\\\n \"$a\""
    words = shlex.split(slurm.srun_command(command, job_name="j", time_limit_s=60))
    assert words[-3:] == ["sh", "-c", command]


def test_cancel_command_cancels_only_this_runs_jobs_and_never_fails() -> None:
    assert (
        slurm.cancel_command("gpuclus-validate-ab12cd34")
        == 'scancel --name=gpuclus-validate-ab12cd34 --user="$(id -un)" 2>/dev/null; true'
    )
    assert slurm.cancel_command("a b").startswith("scancel --name='a b' ")


# =====================================================================================
# slurm.py: parsers on recorded output
# =====================================================================================


def test_parse_key_values_on_recorded_scontrol_line_keeps_spaces_and_equals_in_values() -> None:
    fields = slurm.parse_key_values(node_line(GPU01))
    assert fields["NodeName"] == GPU01
    assert fields["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["CfgTRES"] == "cpu=2,mem=23622M,billing=2,gres/gpu=2"
    assert fields["AllocTRES"] == ""
    assert fields["Gres"] == "gpu:2"
    assert fields["State"] == "IDLE"
    assert fields["Partitions"] == "gpu"
    assert fields["NodeAddr"] == "10.213.0.11"
    assert fields["MCS_label"] == "N/A"
    assert fields["ExtSensorsTemp"] == "n/s"
    # No key is made up from inside a value.
    assert not {"mem", "billing", "gres/gpu", "cpu"} & set(fields)


def test_parse_key_values_reason_with_spaces_and_brackets() -> None:
    line = with_state(GPU02, "IDLE+DRAIN", reason="Kill task failed [root@2026-11-21T09:01:02]")
    fields = slurm.parse_nodes(line)[GPU02]
    assert fields["State"] == "IDLE+DRAIN"
    assert fields["Reason"] == "Kill task failed [root@2026-11-21T09:01:02]"


def test_parse_nodes_on_recorded_output() -> None:
    nodes = slurm.parse_nodes("\n" + NODES_HEALTHY + "\n\n")
    assert list(nodes) == COMPUTE
    assert nodes[GPU02]["NodeAddr"] == "10.213.0.12"
    assert nodes[GPU02]["CPULoad"] == "2.72"
    assert slurm.parse_nodes("") == {}
    assert slurm.parse_nodes("No nodes in the system\n") == {}


@pytest.mark.parametrize(
    ("text", "base", "flags", "usable", "shown"),
    [
        ("IDLE", "IDLE", set(), True, "idle"),
        ("MIXED", "MIXED", set(), True, "mixed"),
        ("ALLOCATED", "ALLOCATED", set(), True, "allocated"),
        ("IDLE+DRAIN", "IDLE", {"DRAIN"}, False, "idle+drain"),
        ("DOWN+NOT_RESPONDING", "DOWN", {"NOT_RESPONDING"}, False, "down+not_responding"),
        # Recorded: slurmd stopped after a failed launch.
        (
            "IDLE+COMPLETING+NOT_RESPONDING",
            "IDLE",
            {"COMPLETING", "NOT_RESPONDING"},
            False,
            "idle+completing+not_responding",
        ),
        ("DOWN*", "DOWN", {"NOT_RESPONDING"}, False, "down+not_responding"),
        ("MIXED+DRAIN", "MIXED", {"DRAIN"}, False, "mixed+drain"),
        ("ALLOCATED+MAINT", "ALLOCATED", {"MAINT"}, False, "allocated+maint"),
        ("IDLE+CLOUD", "IDLE", {"CLOUD"}, True, "idle+cloud"),
        ("idle", "IDLE", set(), True, "idle"),
        ("", "UNKNOWN", set(), False, "unknown"),
        ("FUTURE", "FUTURE", set(), False, "future"),
    ],
)
def test_node_state_parse_and_usable(text: str, base: str, flags: set[str], usable: bool, shown: str) -> None:
    state = slurm.NodeState.parse(text)
    assert state.base == base
    assert state.flags == frozenset(flags)
    assert state.usable is usable
    assert str(state) == shown


@pytest.mark.parametrize(
    ("text", "parsed", "gpus"),
    [
        ("gpu:2", {"gpu": 2}, 2),
        ("gpu:h100:8(S:0-1)", {"gpu:h100": 8}, 8),
        ("(null)", {}, 0),
        ("", {}, 0),
        ("N/A", {}, 0),
        ("gpu:h100:4(S:0),gpu:a100:2(S:1)", {"gpu:h100": 4, "gpu:a100": 2}, 6),
        ("gpu:h100:4(S:0,1),gpu:a100:2(S:1)", {"gpu:h100": 4, "gpu:a100": 2}, 6),  # comma inside (...)
        ("gpu:2,mps:200", {"gpu": 2, "mps": 200}, 2),
        ("gpu", {"gpu": 1}, 1),
        ("gpumem:2", {"gpumem": 2}, 0),  # not a GPU count
    ],
)
def test_parse_gres(text: str, parsed: dict[str, int], gpus: int) -> None:
    assert slurm.parse_gres(text) == parsed
    assert slurm.gres_gpu_total(slurm.parse_gres(text)) == gpus


def test_parse_partitions_on_recorded_sinfo_output() -> None:
    partitions = slurm.parse_partitions(PARTITIONS)
    assert partitions == {"gpu": slurm.PartitionInfo("gpu", "up", 2, "val-gpu[01-02]")}
    text = PARTITIONS + "debug|down|n/a|\nnot a partition line\n"
    assert slurm.parse_partitions(text)["debug"] == slurm.PartitionInfo("debug", "down", 0, "")
    assert slurm.SINFO_PARTITIONS == "sinfo --noheader --format='%R|%a|%D|%N'"


def test_first_error_line() -> None:
    stderr = "srun: job 13 queued and waiting for resources\n" + SRUN_TASK_LAUNCH_FAILED.stderr
    assert slurm.first_error_line(stderr) == SRUN_TASK_LAUNCH_FAILED.stderr.strip()
    assert slurm.first_error_line("slurmd: fatal: can't stat gres.conf file /dev/nvidia2\n") == (
        "slurmd: fatal: can't stat gres.conf file /dev/nvidia2"
    )
    # No error line: the last line that says anything.
    assert slurm.first_error_line(SSH_TIMED_OUT.stderr + "\n\n") == SSH_TIMED_OUT.stderr.strip()
    assert slurm.first_error_line("", "srun exited 1") == "srun exited 1"
    assert slurm.first_error_line("  \n\n") == ""


# =====================================================================================
# Context: the lines it builds
# =====================================================================================


def test_context_srun_lines_carry_job_name_partition_and_queue_wait() -> None:
    remote = healthy_remote()
    ctx = context(remote, options=Options(queue_wait_s=45))
    ctx.srun('echo "$SLURMD_NODENAME"', ctx.compute)
    ctx.srun_each('echo "$SLURMD_NODENAME"', ctx.compute)
    lines = remote.matching("SLURMD_NODENAME")
    assert len(lines) == 3
    for line in lines:
        words = shlex.split(line)
        assert "--job-name=gpuclus-validate-t" in words
        assert "--partition=gpu" in words
        assert "--immediate=45" in words
        assert words[2] == str(60 + 45 + 30)
    assert {"--nodelist=val-gpu01,val-gpu02", "--nodelist=val-gpu01", "--nodelist=val-gpu02"} == {
        word for line in lines for word in shlex.split(line) if word.startswith("--nodelist=")
    }
    assert ctx.jobs_succeeded == 3


def test_context_ssh_each_runs_on_the_controller_directly_and_through_ssh_elsewhere() -> None:
    remote = StubRemote([("hostname", ok("x\n"))])
    ctx = context(remote)
    answers = ctx.ssh_each("hostname -s", ctx.selected)
    assert set(answers) == {HEAD, GPU01, GPU02}
    assert "hostname -s" in remote.commands  # on the controller itself, no ssh
    remote_lines = sorted(line for line in remote.commands if line.startswith("ssh "))
    assert remote_lines == [
        f"ssh -o BatchMode=yes -o ConnectTimeout=10 -o StrictHostKeyChecking=yes {node} 'hostname -s'"
        for node in COMPUTE
    ]


def test_context_slurm_nodes_is_read_once_unless_refreshed_and_empty_on_error() -> None:
    remote = StubRemote([("scontrol --oneliner show node", in_turn(ok(NODES_HEALTHY), fail(1, "", "down")))])
    ctx = context(remote)
    assert list(ctx.slurm_nodes()) == COMPUTE
    assert list(ctx.slurm_nodes()) == COMPUTE
    assert len(remote.commands) == 1
    assert ctx.slurm_nodes(refresh=True) == {}


# =====================================================================================
# cluster.*
# =====================================================================================


def test_slurmctld_up_on_recorded_ping() -> None:
    outcome = cluster.slurmctld_answers(context())
    assert outcome.overall is Status.PASS
    assert outcome.message == "Slurmctld(primary) at val-head is UP"
    assert (outcome.value, outcome.expected) == ("UP", "UP")


def test_slurmctld_down_on_recorded_ping_fails_with_hint() -> None:
    outcome = cluster.slurmctld_answers(context(healthy_remote().prefer("scontrol ping", PING_DOWN)))
    assert outcome.overall is Status.FAIL
    assert outcome.message == "Slurmctld(primary) at val-head is DOWN"
    assert outcome.value == "DOWN"
    assert outcome.hint and "on val-head" in outcome.hint and "slurmctld" in outcome.hint


def test_slurmctld_ping_without_output_names_the_exit_status() -> None:
    outcome = cluster.slurmctld_answers(context(healthy_remote().prefer("scontrol ping", fail(2))))
    assert outcome.overall is Status.FAIL
    assert outcome.message == "scontrol ping exited 2"


def test_nodes_known_on_recorded_output() -> None:
    outcome = cluster.nodes_known(context())
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert outcome.message == "2 Slurm node(s), 2 compute node(s) in the spec"


def test_nodes_known_missing_and_extra_nodes_fail() -> None:
    extra = node_line(GPU02).replace(GPU02, "val-gpu03").replace("10.213.0.12", "10.213.0.13")
    text = NODES_HEALTHY.replace(node_line(GPU02) + "\n", "") + extra + "\n"
    outcome = cluster.nodes_known(context(healthy_remote().prefer("scontrol --oneliner", ok(text))))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert (rows[GPU02].status, rows[GPU02].message) == (Status.FAIL, "in the spec but not in slurm.conf")
    assert (rows["val-gpu03"].status, rows["val-gpu03"].message) == (Status.FAIL, "known to Slurm but not in the spec")
    assert outcome.message.endswith(", 2 differ")
    assert outcome.hint and "gpuclus deploy --only slurm" in outcome.hint


def test_nodes_known_ignores_extras_when_only_some_nodes_are_selected() -> None:
    extra = node_line(GPU02).replace(GPU02, "val-gpu03")
    remote = healthy_remote().prefer("scontrol --oneliner", ok(NODES_HEALTHY + extra + "\n"))
    outcome = cluster.nodes_known(context(remote, nodes=[GPU01]))
    assert statuses(outcome) == {GPU01: Status.PASS}


def test_nodes_known_without_any_slurm_node_fails() -> None:
    outcome = cluster.nodes_known(context(healthy_remote().prefer("scontrol --oneliner", fail(1, "", "error"))))
    assert outcome.overall is Status.FAIL
    assert outcome.nodes == []
    assert "listed no nodes" in outcome.message


def test_node_states_on_recorded_output() -> None:
    outcome = cluster.node_states(context())
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert by_node(outcome)[GPU01].message == "idle"


def test_node_states_recorded_not_responding_after_a_failed_launch_fails() -> None:
    text = with_state(GPU02, "IDLE+COMPLETING+NOT_RESPONDING")
    outcome = cluster.node_states(context(healthy_remote().prefer("scontrol --oneliner", ok(text))))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == "idle+completing+not_responding"
    assert rows[GPU02].expected == cluster.USABLE
    assert outcome.hint and "state=resume" in outcome.hint and "sinfo -R" in outcome.hint


def test_node_states_drained_node_shows_its_reason_and_unknown_nodes_skip() -> None:
    text = with_state(GPU01, "IDLE+DRAIN", reason="Kill task failed [root@2026-11-21T09:01:02]")
    text = text.replace(node_line(GPU02) + "\n", "")
    outcome = cluster.node_states(context(healthy_remote().prefer("scontrol --oneliner", ok(text))))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.FAIL
    assert rows[GPU01].message == "idle+drain: Kill task failed [root@2026-11-21T09:01:02]"
    assert rows[GPU02].status is Status.SKIP


def test_node_states_reads_scontrol_afresh() -> None:
    remote = healthy_remote().prefer(
        "scontrol --oneliner", in_turn(ok(NODES_HEALTHY), ok(with_state(GPU01, "DOWN+NOT_RESPONDING")))
    )
    ctx = context(remote)
    assert cluster.nodes_known(ctx).overall is Status.PASS
    assert by_node(cluster.node_states(ctx))[GPU01].status is Status.FAIL


def test_partitions_up_on_recorded_sinfo() -> None:
    outcome = cluster.partitions_up(context())
    assert outcome.overall is Status.PASS
    assert outcome.message == "up: gpu"
    assert (outcome.value, outcome.expected) == (1, "1 up")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (ok("gpu|down|2|val-gpu[01-02]\n"), "gpu: down"),
        (ok("gpu|inact|2|val-gpu[01-02]\n"), "gpu: inact"),
        (ok("debug|up|2|val-gpu[01-02]\n"), "gpu: missing"),
        (fail(1, "", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n"), "gpu: missing"),
    ],
)
def test_partitions_down_or_missing_fail(answer: CommandResult, message: str) -> None:
    outcome = cluster.partitions_up(context(healthy_remote().prefer("sinfo", answer)))
    assert outcome.overall is Status.FAIL
    assert outcome.message == message
    assert outcome.hint and "state=up" in outcome.hint


def test_gres_matches_spec_on_recorded_output() -> None:
    outcome = cluster.gres_matches_spec(context())
    rows = by_node(outcome)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert (rows[GPU01].value, rows[GPU01].expected, rows[GPU01].unit, rows[GPU01].message) == (
        2,
        "2",
        "GPUs",
        "gpu:2",
    )


def test_gres_missing_in_slurm_fails() -> None:
    text = NODES_HEALTHY.replace(node_line(GPU02), node_line(GPU02).replace("Gres=gpu:2", "Gres=(null)"))
    outcome = cluster.gres_matches_spec(context(healthy_remote().prefer("scontrol --oneliner", ok(text))))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == "Slurm has gpu:0, the spec says 2"
    assert outcome.hint and "gres.conf" in outcome.hint


def test_gres_type_from_the_spec_model_must_be_in_slurm() -> None:
    text = SANDBOX_SPEC.replace("gpus: {count: 2, fake: true}", "gpus: {count: 2, model: h100, fake: true}")
    outcome = cluster.gres_matches_spec(context(text=text))
    assert outcome.overall is Status.FAIL
    assert by_node(outcome)[GPU01].message == "GRES type h100 missing (Gres=gpu:2)"
    typed = NODES_HEALTHY.replace("Gres=gpu:2", "Gres=gpu:h100:2(S:0)")
    outcome = cluster.gres_matches_spec(context(healthy_remote().prefer("scontrol --oneliner", ok(typed)), text))
    assert outcome.overall is Status.PASS


# =====================================================================================
# launch.munge
# =====================================================================================


def test_munge_on_recorded_output_decodes_on_every_other_node_over_ssh() -> None:
    remote = healthy_remote()
    outcome = launch.munge_decodes(context(remote))
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    lines = remote.matching("unmunge")
    assert len(lines) == 2 and all(line.startswith("ssh -o BatchMode=yes") for line in lines)
    # The credential travels as one quoted word, into unmunge on the node.
    inner = shlex.split(lines[0])[-1]
    assert inner == f"printf '%s\\n' {shlex.quote(MUNGE_CREDENTIAL.stdout.strip())} | unmunge 2>&1 | head -n 1"


def test_munge_recorded_replaced_key_fails_that_node() -> None:
    remote = healthy_remote().prefer(("unmunge", GPU02), UNMUNGE_BAD_KEY)
    outcome = launch.munge_decodes(context(remote))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert (rows[GPU02].status, rows[GPU02].message) == (Status.FAIL, "unmunge: Error: Invalid credential")
    assert outcome.hint and "munge.key" in outcome.hint


def test_munge_recorded_replaced_key_fails_also_when_the_pipeline_exits_0() -> None:
    # `unmunge | head -n 1` exits with head's status: the words decide.
    remote = healthy_remote().prefer(("unmunge", GPU02), ok(UNMUNGE_BAD_KEY.stdout))
    assert by_node(launch.munge_decodes(context(remote)))[GPU02].status is Status.FAIL


def test_munge_recorded_ssh_timeout_fails_with_ssh_words() -> None:
    remote = healthy_remote().prefer(("unmunge", GPU02), SSH_TIMED_OUT)
    rows = by_node(launch.munge_decodes(context(remote)))
    assert rows[GPU02].status is Status.FAIL
    # The node is named unreachable with ssh's own words (test_hints.py: and munge's key is not blamed).
    assert rows[GPU02].message == "val-gpu02 unreachable: ssh: connect to host val-gpu02 port 22: Connection timed out"


def test_munge_failing_on_the_controller_fails_without_asking_the_nodes() -> None:
    remote = healthy_remote().prefer(
        "munge -n", fail(1, "", 'munge: Error: Unable to access "/run/munge/munge.socket.2": No such file\n')
    )
    outcome = launch.munge_decodes(context(remote))
    assert outcome.overall is Status.FAIL
    assert outcome.nodes == []
    assert outcome.message.startswith("munge -n on val-head: munge: Error: Unable to access")
    assert outcome.hint == "on val-head: `systemctl status munge`"
    assert remote.matching("unmunge") == []


# =====================================================================================
# launch.srun
# =====================================================================================


def test_srun_on_recorded_output_passes_with_one_job_over_all_nodes() -> None:
    remote = healthy_remote()
    ctx = context(remote)
    outcome = launch.srun_everywhere(ctx)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert by_node(outcome)[GPU01].message == "srun -N2 reached it"
    assert ctx.memo["launch_failed"] == set()
    jobs = remote.matching("SLURMD_NODENAME")
    assert len(jobs) == 1
    assert {"--nodes=2", "--nodelist=val-gpu01,val-gpu02", "--immediate=30", "--kill-on-bad-exit=1"} <= set(
        shlex.split(jobs[0])
    )


def test_srun_recorded_task_launch_failure_finds_the_node_with_one_job_each() -> None:
    remote = healthy_remote()
    remote.prefer(("SLURMD_NODENAME", "--nodelist=val-gpu01 "), SRUN_TASK_LAUNCH_FAILED)
    remote.prefer(("SLURMD_NODENAME", "--nodes=2"), SRUN_TASK_LAUNCH_FAILED)
    ctx = context(remote)
    outcome = launch.srun_everywhere(ctx)
    rows = by_node(outcome)
    assert outcome.overall is Status.FAIL
    assert rows[GPU01].status is Status.FAIL
    assert rows[GPU01].message == SRUN_TASK_LAUNCH_FAILED.stderr.strip()
    assert (rows[GPU02].status, rows[GPU02].message) == (Status.PASS, "a one-node job ran")
    assert outcome.message == SRUN_TASK_LAUNCH_FAILED.stderr.strip()
    assert outcome.hint and "slurmd" in outcome.hint and "state=resume" in outcome.hint
    assert ctx.memo["launch_failed"] == {GPU01}
    assert len(remote.matching("SLURMD_NODENAME", "--nodes=1")) == 2


def test_srun_recorded_not_responding_after_the_failed_launch_is_blamed_without_another_job() -> None:
    remote = healthy_remote()
    remote.prefer(("SLURMD_NODENAME", "--nodes=2"), SRUN_TASK_LAUNCH_FAILED)
    after = with_state(GPU01, "IDLE+COMPLETING+NOT_RESPONDING")
    remote.prefer("scontrol --oneliner", in_turn(ok(NODES_HEALTHY), ok(after)))
    ctx = context(remote)
    outcome = launch.srun_everywhere(ctx)
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.FAIL
    assert rows[GPU01].message == "Slurm reports it idle+completing+not_responding"
    assert rows[GPU02].status is Status.PASS
    assert remote.matching("--nodelist=val-gpu01 ") == []
    assert len(remote.matching("--nodelist=val-gpu02 ")) == 1
    assert ctx.memo["launch_failed"] == {GPU01}


def test_srun_node_already_down_is_blamed_and_not_queued_for() -> None:
    down = with_state(GPU02, "DOWN+NOT_RESPONDING", reason="Not responding [slurm@2026-11-21T09:03:11]")
    remote = healthy_remote().prefer("scontrol --oneliner", ok(down))
    ctx = context(remote)
    outcome = launch.srun_everywhere(ctx)
    rows = by_node(outcome)
    assert (rows[GPU01].status, rows[GPU01].message) == (Status.PASS, "srun -N1 reached it")
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == "Slurm reports it down+not_responding (Not responding [slurm@2026-11-21T09:03:11])"
    assert [nodelist(line) for line in remote.matching("SLURMD_NODENAME")] == [GPU01]
    assert ctx.memo["launch_failed"] == {GPU02}


def test_srun_recorded_busy_node_fails_with_srun_words() -> None:
    remote = healthy_remote()
    remote.prefer(("SLURMD_NODENAME", "--nodelist=val-gpu02 "), SRUN_NODES_BUSY)
    remote.prefer(("SLURMD_NODENAME", "--nodes=2"), SRUN_NODES_BUSY)
    ctx = context(remote)
    rows = by_node(launch.srun_everywhere(ctx))
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].message == "srun: error: Unable to allocate resources: Requested nodes are busy"
    assert ctx.memo["launch_failed"] == {GPU02}


def test_srun_job_cut_off_by_timeout_says_so() -> None:
    remote = healthy_remote()
    remote.prefer(("SLURMD_NODENAME", "--nodelist=val-gpu02 "), fail(TIMED_OUT))
    remote.prefer(("SLURMD_NODENAME", "--nodes=2"), fail(TIMED_OUT))
    outcome = launch.srun_everywhere(context(remote))
    assert by_node(outcome)[GPU02].message.startswith("the job did not start or finish within its time limit")
    assert outcome.message == "srun exited 124"


def test_srun_that_exits_0_without_every_node_answering_is_not_a_pass() -> None:
    remote = healthy_remote().prefer(("SLURMD_NODENAME", "--nodes=2"), ok(f"{GPU01}\n"))
    outcome = launch.srun_everywhere(context(remote))
    # The per-node jobs then find both healthy.
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert len(remote.matching("SLURMD_NODENAME")) == 3


def test_srun_without_compute_nodes_selected_skips() -> None:
    remote = healthy_remote()
    outcome = launch.srun_everywhere(context(remote, nodes=[HEAD]))
    assert outcome.overall is Status.SKIP
    assert remote.commands == []


# =====================================================================================
# launch.gres-devices
# =====================================================================================


def test_parse_gres_probe_on_recorded_output() -> None:
    assert launch.parse_gres_probe(GRES_PROBE_HEALTHY) == (
        ["/dev/nvidia0", "/dev/nvidia1"],
        {"/dev/nvidia0", "/dev/nvidia1"},
    )
    assert launch.parse_gres_probe(GRES_PROBE_MISSING_DEVICE) == (["/dev/nvidia2"], {"/dev/nvidia0", "/dev/nvidia1"})
    assert launch.parse_gres_probe("--devices--\n") == ([], set())


def test_gres_devices_on_recorded_probe_output_pass() -> None:
    remote = healthy_remote()
    outcome = launch.gres_devices_exist(context(remote))
    rows = by_node(outcome)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert (rows[GPU01].message, rows[GPU01].value, rows[GPU01].expected) == ("2 device(s), all present", 2, "2")
    assert len(remote.matching("slurmd -G", "--nodes=1")) == 2
    assert not any(line.startswith("ssh ") for line in remote.commands)


def test_gres_devices_recorded_missing_device_on_a_node_launch_found_dead_is_read_over_ssh() -> None:
    remote = healthy_remote().prefer(("slurmd -G", "StrictHostKeyChecking"), ok(GRES_PROBE_MISSING_DEVICE))
    ctx = context(remote)
    ctx.memo["launch_failed"] = {GPU01}
    outcome = launch.gres_devices_exist(ctx)
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.FAIL
    assert rows[GPU01].message == "gres.conf lists /dev/nvidia2, not present on the node"
    assert rows[GPU02].status is Status.PASS
    assert outcome.hint and "gres.conf must list only devices the node has" in outcome.hint
    # No job queued for the dead node: ssh there, a job only on the other one.
    probes = remote.matching("slurmd -G")
    assert [line.split()[7] for line in probes if line.startswith("ssh ")] == [GPU01]
    assert len([line for line in probes if "--nodelist=val-gpu02" in line]) == 1
    assert not any("--nodelist=val-gpu01" in line for line in probes)


def test_gres_devices_count_differs_from_the_spec() -> None:
    one = GRES_PROBE_HEALTHY.replace("Count=2", "Count=1").replace("File=/dev/nvidia[0-1]", "File=/dev/nvidia0")
    remote = healthy_remote().prefer(("slurmd -G", "--nodelist=val-gpu02 "), ok(one))
    rows = by_node(launch.gres_devices_exist(context(remote)))
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == "slurmd sees 1 GPU device(s), the spec says 2"


def test_gres_devices_recorded_busy_node_fails_the_probe() -> None:
    remote = healthy_remote().prefer(("slurmd -G", "--nodelist=val-gpu02 "), SRUN_NODES_BUSY)
    rows = by_node(launch.gres_devices_exist(context(remote)))
    assert rows[GPU02].message == "probe job failed: " + SRUN_NODES_BUSY.stderr.strip()


def test_gres_devices_without_gpu_nodes_skips() -> None:
    text = SANDBOX_SPEC.replace("    gpus: {count: 2, fake: true}\n", "")
    remote = healthy_remote()
    outcome = launch.gres_devices_exist(context(remote, text))
    assert outcome.overall is Status.SKIP
    assert remote.commands == []


def test_recorded_failed_launch_carries_over_gres_probe_by_ssh_and_storage_skips_the_node() -> None:
    """One context through launch.srun, launch.gres-devices and storage.shared-fs, as a run goes."""
    remote = healthy_remote()
    remote.prefer(("SLURMD_NODENAME", "--nodes=2"), SRUN_TASK_LAUNCH_FAILED)
    remote.prefer(
        "scontrol --oneliner", in_turn(ok(NODES_HEALTHY), ok(with_state(GPU01, "IDLE+COMPLETING+NOT_RESPONDING")))
    )
    remote.prefer(("slurmd -G", "StrictHostKeyChecking"), ok(GRES_PROBE_MISSING_DEVICE))
    ctx = context(remote)
    assert by_node(launch.srun_everywhere(ctx))[GPU01].status is Status.FAIL
    assert ctx.memo["launch_failed"] == {GPU01}
    gres = by_node(launch.gres_devices_exist(ctx))
    assert gres[GPU01].message == "gres.conf lists /dev/nvidia2, not present on the node"
    assert gres[GPU02].status is Status.PASS
    shared = by_node(storage.shared_file_visible(ctx))
    assert (shared[GPU01].status, shared[GPU02].status) == (Status.SKIP, Status.PASS)
    # After launch.srun, no job was queued for val-gpu01 again.
    launched = [line for line in remote.commands if line.startswith("timeout ")]
    assert [line for line in launched if nodelist(line) == GPU01] == []


# =====================================================================================
# launch.mpi (synthetic output written like the hello program's and srun's)
# =====================================================================================

MPI_LIST = ok("MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\nspecific pmix plugin versions available: pmix_v3\n")


def hello(size: int = 2, total: int = 3) -> CommandResult:
    return ok(
        "".join(f"gpuclus-mpi rank={rank} size={size} sum={total} host={node}\n" for rank, node in enumerate(COMPUTE))
    )


def mpi_remote(
    *, build: Answer | None = None, plugins: CommandResult = MPI_LIST, run: Answer | None = None
) -> StubRemote:
    remote = healthy_remote()
    remote.prefer("command -v mpicc", build or ok("built\n"))
    remote.prefer(("srun", "--mpi="), run or hello())
    remote.prefer("srun --mpi=list", plugins)
    return remote


def test_mpi_without_mpicc_anywhere_skips_and_cleans_up() -> None:
    remote = healthy_remote()
    outcome = launch.mpi_hello(context(remote))
    assert outcome.overall is Status.SKIP
    assert outcome.message == "no MPI on the compute nodes (mpicc not found)"
    assert len(remote.matching("rm -rf /var/tmp/gpuclus-validate-t-mpi")) == 2


def test_mpi_hello_over_pmix_passes() -> None:
    remote = mpi_remote()
    outcome = launch.mpi_hello(context(remote))
    rows = by_node(outcome)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert rows[GPU02].message == "rank 1 of 2, all-reduce correct"
    assert (outcome.message, outcome.value) == ("--mpi=pmix over 2 node(s)", "pmix")
    (job,) = remote.matching("srun", "--mpi=pmix")
    assert shlex.split(job)[-3:] == ["sh", "-c", "/var/tmp/gpuclus-validate-t-mpi/hello"]
    assert nodelist(job) == "val-gpu01,val-gpu02"
    # The program is built on each node from source carried in the job line.
    builds = remote.matching("command -v mpicc")
    assert len(builds) == 2 and "MPI_Allreduce" in shlex.split(builds[0])[-1]
    assert len(remote.matching("rm -rf /var/tmp/gpuclus-validate-t-mpi")) == 2


def test_mpi_falls_back_to_pmi2() -> None:
    remote = mpi_remote(plugins=ok("MPI plugin types are...\n\tnone\n\tpmi2\n"))
    outcome = launch.mpi_hello(context(remote))
    assert outcome.value == "pmi2" and outcome.overall is Status.PASS
    assert remote.matching("--mpi=pmi2")


def test_mpi_without_pmix_or_pmi2_fails() -> None:
    outcome = launch.mpi_hello(context(mpi_remote(plugins=ok("MPI plugin types are...\n\tnone\n\tcray_shasta\n"))))
    assert outcome.overall is Status.FAIL
    assert (
        outcome.message
        == "Slurm offers neither pmix nor pmi2 (srun --mpi=list: MPI plugin types are... none cray_shasta)"
    )


def test_mpi_wrong_sum_and_silent_rank_fail() -> None:
    answer = fail(
        1,
        "gpuclus-mpi rank=0 size=1 sum=1 host=val-gpu01.cluster\n",
        "srun: error: val-gpu02: task 1: Exited with exit code 1\n",
    )
    rows = by_node(launch.mpi_hello(context(mpi_remote(run=answer))))
    assert (rows[GPU01].status, rows[GPU01].message) == (Status.FAIL, "rank 0 saw size 1, all-reduce sum 1")
    assert (rows[GPU02].status, rows[GPU02].message) == (
        Status.FAIL,
        "srun: error: val-gpu02: task 1: Exited with exit code 1",
    )


def test_mpi_one_node_without_mpicc_fails_that_node() -> None:
    build = per_node({GPU01: ok("built\n"), GPU02: ok("no-mpicc\n")})
    outcome = launch.mpi_hello(context(mpi_remote(build=build)))
    assert by_node(outcome)[GPU02].message == "no mpicc here, while other nodes have MPI"
    assert outcome.message == "fewer than two nodes could build the MPI hello"
    assert outcome.overall is Status.FAIL


def test_mpi_needs_two_launchable_nodes() -> None:
    remote = healthy_remote()
    ctx = context(remote)
    ctx.memo["launch_failed"] = {GPU02}
    outcome = launch.mpi_hello(ctx)
    assert outcome.overall is Status.SKIP
    assert by_node(outcome)[GPU02].status is Status.SKIP
    assert remote.commands == []


# =====================================================================================
# storage.shared-fs
# =====================================================================================


def test_storage_recorded_libnfs_read_passes_and_cleans_up() -> None:
    remote = healthy_remote()
    outcome = storage.shared_file_visible(context(remote))
    rows = by_node(outcome)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert rows[GPU01].value == "libnfs"
    assert "libnfs" in rows[GPU01].message and rows[GPU01].message.startswith("/shared:")
    assert outcome.message == "server val-head, 1 export(s)"
    # Written on the server (the controller itself: no ssh), read by a job on each node, removed.
    (write,) = remote.matching("sudo -n sh -c")
    path = re.search(r"/srv/nfs/shared/\.gpuclus-validate-[0-9a-f]{12}", write)
    assert path is not None and not write.startswith("ssh ")
    reads = remote.matching("nfs-cat")
    assert len(reads) == 2 and all("--nodes=1" in line for line in reads)
    assert f"nfs://10.213.0.10{path.group(0)}" in reads[0]
    assert f"/shared/{path.group(0).rsplit('/', 1)[1]}" in reads[0]
    assert remote.matching("sudo -n rm -f", path.group(0))


def test_storage_recorded_mount_read_passes() -> None:
    outcome = storage.shared_file_visible(context(healthy_remote().prefer("nfs-cat", READ_VIA_MOUNT)))
    row = by_node(outcome)[GPU02]
    assert (row.status, row.value, row.message) == (Status.PASS, "mount", "/shared: read through the NFS mount")


def test_storage_recorded_libnfs_permission_denied_fails_that_node() -> None:
    remote = healthy_remote().prefer(("nfs-cat", "--nodelist=val-gpu02 "), READ_LIBNFS_DENIED)
    outcome = storage.shared_file_visible(context(remote))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == (
        "the export cannot be read over NFS: Failed to mount nfs share : mount_cb: RPC error: "
        "Mount failed with error MNT3ERR_ACCES(13) Permission denied(13)"
    )
    assert outcome.hint and "gpuclus deploy --only nfs" in outcome.hint


def test_storage_recorded_not_an_nfs_mount_fails() -> None:
    remote = healthy_remote().prefer(("nfs-cat", "--nodelist=val-gpu01 "), READ_NOT_NFS)
    rows = by_node(storage.shared_file_visible(context(remote)))
    assert rows[GPU01].status is Status.FAIL
    assert rows[GPU01].message == "/shared is not an NFS mount here (fstype=ext4); the file cannot be read"


def test_storage_other_read_failures_keep_their_words() -> None:
    remote = healthy_remote().prefer(
        ("nfs-cat", "--nodelist=val-gpu01 "), fail(4, "via=none nfs-client=absent libnfs=absent\n")
    )
    remote.prefer(("nfs-cat", "--nodelist=val-gpu02 "), SRUN_NODES_BUSY)
    rows = by_node(storage.shared_file_visible(context(remote)))
    assert "neither an NFS client nor libnfs tools" in rows[GPU01].message
    assert rows[GPU02].message == "read failed (exit 1): " + SRUN_NODES_BUSY.stderr.strip()


def test_storage_skips_nodes_launch_found_dead_without_a_job() -> None:
    remote = healthy_remote()
    ctx = context(remote)
    ctx.memo["launch_failed"] = {GPU01}
    outcome = storage.shared_file_visible(ctx)
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.SKIP
    assert "no job could start there" in rows[GPU01].message
    assert rows[GPU02].status is Status.PASS
    assert outcome.overall is Status.PASS
    assert [line for line in remote.matching("nfs-cat") if GPU01 in line] == []


def test_storage_write_refused_on_the_server_fails() -> None:
    remote = healthy_remote().prefer("sudo -n sh -c", fail(1, "", "sudo: a password is required\n"))
    outcome = storage.shared_file_visible(context(remote))
    assert outcome.overall is Status.FAIL
    assert outcome.message.startswith("could not write /srv/nfs/shared/.gpuclus-validate-")
    assert outcome.message.endswith("on val-head: sudo: a password is required")
    assert remote.matching("nfs-cat") == []


def test_storage_removes_its_file_also_when_reading_breaks() -> None:
    def broken(command: str) -> CommandResult:
        raise OSError("Socket is closed")

    remote = healthy_remote().prefer("nfs-cat", broken)
    with pytest.raises(OSError, match="Socket is closed"):
        storage.shared_file_visible(context(remote))
    assert remote.matching("sudo -n rm -f")


def test_storage_without_exports_skips() -> None:
    text = SANDBOX_SPEC.replace("    - {path: /srv/nfs/shared, mount: /shared}\n", "").replace(
        "  exports:\n", "  exports: []\n"
    )
    remote = healthy_remote()
    outcome = storage.shared_file_visible(context(remote, text))
    assert outcome.overall is Status.SKIP
    assert outcome.message == "no NFS exports in the spec"
    assert remote.commands == []


def test_storage_with_only_the_server_selected_skips() -> None:
    assert storage.shared_file_visible(context(nodes=[HEAD])).overall is Status.SKIP


# --- the read script itself, run by sh with stub tools (findmnt, modinfo, nfs-cat, sleep) ---


def read_script(tmp_path: Path, content: str | None, tools: dict[str, str]) -> CommandResult:
    """Run storage's read script for a file holding ``content`` (None: absent); ``tools`` are stub scripts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for real in ("cat", "grep", "tail"):
        found = shutil.which(real)
        assert found is not None
        (bin_dir / real).symlink_to(found)
    for name, body in {"sleep": "exit 0", **tools}.items():
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    shared = tmp_path / "shared" / ".gpuclus-validate-0123456789ab"
    shared.parent.mkdir()
    if content is not None:
        shared.write_text(content + "\n")
    script = storage._READ.format(
        file=shlex.quote(str(shared)), token="feedc0de", url="nfs://10.213.0.10/srv/nfs/shared/x"
    )
    done = subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, env={"PATH": str(bin_dir)}, check=False
    )
    return CommandResult(done.returncode, done.stdout, done.stderr)


KERNEL_HAS_NFS = {"findmnt": "echo nfs4", "modinfo": "exit 0"}
KERNEL_WITHOUT_NFS = {"findmnt": "echo overlay", "modinfo": "exit 1"}
HOST_KNOWS_NFS = bool(re.search(r"\bnfs4?\b", Path("/proc/filesystems").read_text()))
needs_host_without_nfs = pytest.mark.skipif(HOST_KNOWS_NFS, reason="the script reads /proc/filesystems of this host")


def judge(answer: CommandResult) -> NodeResult:
    ctx = context()
    node = ctx.topology.by_name()[GPU01]
    return storage._judge(node, ctx.spec.nfs.exports[0], answer, ctx)


def test_read_script_reads_through_an_nfs_mount(tmp_path: Path) -> None:
    answer = read_script(tmp_path, "feedc0de", KERNEL_HAS_NFS)
    assert answer == READ_VIA_MOUNT
    assert judge(answer).status is Status.PASS


def test_read_script_on_a_local_directory_where_the_kernel_could_mount_nfs(tmp_path: Path) -> None:
    answer = read_script(tmp_path, "feedc0de", {"findmnt": "echo ext4", "modinfo": "exit 0"})
    assert answer == READ_NOT_NFS
    assert judge(answer).message == "/shared is not an NFS mount here (fstype=ext4); the file cannot be read"


@needs_host_without_nfs
def test_read_script_falls_back_to_libnfs_without_a_kernel_client(tmp_path: Path) -> None:
    answer = read_script(
        tmp_path,
        None,
        {**KERNEL_WITHOUT_NFS, "nfs-cat": 'test "$1" = nfs://10.213.0.10/srv/nfs/shared/x && echo feedc0de'},
    )
    assert answer == ok("via=libnfs\n")
    assert judge(answer).status is Status.PASS


@needs_host_without_nfs
def test_read_script_libnfs_refused_prints_what_the_recorded_output_shows(tmp_path: Path) -> None:
    error = READ_LIBNFS_DENIED.stdout.splitlines()[1]
    answer = read_script(tmp_path, None, {**KERNEL_WITHOUT_NFS, "nfs-cat": f"echo '{error}'; exit 1"})
    assert answer == READ_LIBNFS_DENIED
    assert judge(answer).message == judge(READ_LIBNFS_DENIED).message


@needs_host_without_nfs
def test_read_script_without_nfs_client_or_libnfs(tmp_path: Path) -> None:
    answer = read_script(tmp_path, None, KERNEL_WITHOUT_NFS)
    assert answer == fail(4, "via=none nfs-client=absent libnfs=absent\n")


def test_read_script_nfs_mount_without_the_file_is_not_called_not_nfs(tmp_path: Path) -> None:
    answer = read_script(tmp_path, None, KERNEL_HAS_NFS)
    assert answer.exit_status != 0
    message = judge(answer).message
    assert judge(answer).status is Status.FAIL
    assert "not an NFS mount" not in message, message


# =====================================================================================
# accounting.sacct
# =====================================================================================


def test_accounting_on_recorded_sacct_passes() -> None:
    remote = healthy_remote().prefer("sacct", ok(SACCT_RUN))
    ctx = context(remote)
    outcome = accounting.jobs_in_sacct(ctx)
    assert outcome.overall is Status.PASS
    assert outcome.message == "3 completed job(s) of this run in sacct"
    assert (outcome.value, outcome.expected, outcome.unit) == (3, ">= 1", "jobs")
    (own,) = remote.matching("sh -c true")
    assert "--nodelist=val-gpu01" in own
    (query,) = remote.matching("sacct")
    assert "--name=gpuclus-validate-t" in query and "--format=JobID,State" in query


def test_accounting_waits_for_rows_to_arrive(monkeypatch: pytest.MonkeyPatch) -> None:
    naps: list[float] = []
    monkeypatch.setattr("gpuclus.validate.checks.accounting.time.sleep", naps.append)
    remote = healthy_remote().prefer("sacct", in_turn(ok(""), ok("90|RUNNING\n"), ok(SACCT_RUN)))
    outcome = accounting.jobs_in_sacct(context(remote))
    assert outcome.overall is Status.PASS
    assert len(remote.matching("sacct")) == 3
    assert naps == [2, 2]


def test_accounting_recorded_sacct_listing_fewer_jobs_than_the_run_started_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(accounting, "WAIT_FOR_ROWS_S", 0.0)
    ctx = context(healthy_remote().prefer("sacct", ok(SACCT_RUN)))
    ctx.jobs_succeeded = 3  # earlier checks' jobs; the check's own makes 4
    outcome = accounting.jobs_in_sacct(ctx)
    assert outcome.overall is Status.FAIL
    assert outcome.message == "sacct does not list this run's jobs after 0 s: 3 of 4 listed"
    assert (outcome.value, outcome.expected) == (3, ">= 4")
    assert outcome.hint and "slurmdbd" in outcome.hint and "on val-head" in outcome.hint


def test_accounting_sacct_error_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounting, "WAIT_FOR_ROWS_S", 0.0)
    error = "sacct: error: Problem talking to the database: Connection refused"
    outcome = accounting.jobs_in_sacct(context(healthy_remote().prefer("sacct", fail(1, "", error + "\n"))))
    assert outcome.overall is Status.FAIL
    assert outcome.message.endswith(error)


def test_accounting_own_job_failing_fails() -> None:
    remote = healthy_remote().prefer(("srun", "sh -c true"), SRUN_NODES_BUSY)
    outcome = accounting.jobs_in_sacct(context(remote))
    assert outcome.overall is Status.FAIL
    assert outcome.message == "could not run a job: " + SRUN_NODES_BUSY.stderr.strip()
    assert remote.matching("sacct") == []


def test_accounting_off_in_the_spec_skips() -> None:
    remote = healthy_remote()
    text = SANDBOX_SPEC.replace("slurm:\n  accounting: true", "slurm:\n  accounting: false")
    outcome = accounting.jobs_in_sacct(context(remote, text))
    assert outcome.overall is Status.SKIP
    assert "slurm.accounting: false" in outcome.message
    assert remote.commands == []


def test_accounting_skips_when_no_node_can_start_a_job_and_avoids_dead_ones() -> None:
    remote = healthy_remote()
    ctx = context(remote)
    ctx.memo["launch_failed"] = set(COMPUTE)
    assert accounting.jobs_in_sacct(ctx).overall is Status.SKIP
    assert remote.commands == []
    ctx.memo["launch_failed"] = {GPU01}
    assert accounting.jobs_in_sacct(ctx).overall is Status.PASS
    (own,) = remote.matching("sh -c true")
    assert "--nodelist=val-gpu02" in own


# =====================================================================================
# monitoring.targets
# =====================================================================================


def targets_with(change: Callable[[list[dict[str, Any]]], None]) -> str:
    payload = json.loads(TARGETS_HEALTHY)
    change(payload["data"]["activeTargets"])
    return json.dumps(payload)


def gpu02_down(targets: list[dict[str, Any]]) -> None:
    for target in targets:
        if target["labels"]["instance"] == GPU02:
            target["health"] = "down"
            target["lastError"] = NO_ROUTE


def test_monitoring_on_recorded_targets_passes() -> None:
    remote = healthy_remote()
    outcome = monitoring.targets_up(context(remote))
    rows = by_node(outcome)
    assert statuses(outcome) == {HEAD: Status.PASS, GPU01: Status.PASS, GPU02: Status.PASS}
    assert rows[HEAD].message == "node: up; prometheus: up"
    assert outcome.message == "4 target(s) on val-head"
    assert remote.matching("curl") and "http://10.213.0.10:9090/api/v1/targets?state=active" in remote.commands[0]
    scrapes = remote.matching("%{http_code}")
    assert sorted(shlex.split(line)[-1] for line in scrapes) == [
        "http://10.213.0.10:9090/metrics",
        "http://10.213.0.10:9100/metrics",
        "http://10.213.0.11:9100/metrics",
        "http://10.213.0.12:9100/metrics",
    ]


def test_monitoring_recorded_down_target_fails_with_prometheus_error() -> None:
    remote = healthy_remote()
    remote.prefer("api/v1/targets", ok(targets_with(gpu02_down)))
    remote.prefer(("%{http_code}", "10.213.0.12"), ok("000"))
    outcome = monitoring.targets_up(context(remote))
    rows = by_node(outcome)
    assert rows[GPU01].status is Status.PASS and rows[HEAD].status is Status.PASS
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message == f"node: http://10.213.0.12:9100/metrics: Prometheus says down ({NO_ROUTE})"
    assert (rows[GPU02].value, rows[GPU02].expected) == ("down", "up")
    assert outcome.hint and "prometheus-node-exporter" in outcome.hint


def test_monitoring_recorded_exporter_stopped_since_the_last_scrape_fails_at_once() -> None:
    remote = healthy_remote().prefer(("%{http_code}", "10.213.0.11:9100"), ok("000"))
    rows = by_node(monitoring.targets_up(context(remote)))
    assert rows[GPU01].status is Status.FAIL
    assert rows[GPU01].message == (
        "node: http://10.213.0.11:9100/metrics: no answer when scraped now (exporter stopped, port closed or node down)"
    )


def test_monitoring_scrape_http_error_fails() -> None:
    remote = healthy_remote().prefer(("%{http_code}", "10.213.0.10:9090"), fail(22, "503"))
    rows = by_node(monitoring.targets_up(context(remote)))
    assert rows[HEAD].status is Status.FAIL
    assert rows[HEAD].message == "node: up; prometheus: http://10.213.0.10:9090/metrics: scraping it now gives HTTP 503"


def test_monitoring_node_without_exporter_target_fails() -> None:
    def drop_gpu02(targets: list[dict[str, Any]]) -> None:
        targets[:] = [target for target in targets if target["labels"]["instance"] != GPU02]

    outcome = monitoring.targets_up(context(healthy_remote().prefer("api/v1/targets", ok(targets_with(drop_gpu02)))))
    row = by_node(outcome)[GPU02]
    assert (row.status, row.message) == (Status.FAIL, "Prometheus has no node-exporter target for it")


def test_monitoring_only_selected_nodes_are_judged() -> None:
    remote = healthy_remote().prefer("api/v1/targets", ok(targets_with(gpu02_down)))
    outcome = monitoring.targets_up(context(remote, nodes=[GPU01]))
    assert statuses(outcome) == {GPU01: Status.PASS}


def test_monitoring_api_not_answering_fails_with_hint() -> None:
    error = "curl: (7) Failed to connect to 10.213.0.10 port 9090 after 0 ms: Couldn't connect to server"
    remote = healthy_remote().prefer("api/v1/targets", fail(7, "", error + "\n"))
    outcome = monitoring.targets_up(context(remote))
    assert outcome.overall is Status.FAIL
    assert (
        outcome.message
        == f"Prometheus API at http://10.213.0.10:9090/api/v1/targets?state=active did not answer: {error}"
    )
    assert outcome.hint and "systemctl status prometheus" in outcome.hint
    assert remote.matching("%{http_code}") == []


# Prometheus off, and with it what reads it (a spec with Grafana or Alertmanager alone is refused).
MONITORING_OFF_SPEC = (
    SANDBOX_SPEC.replace("  prometheus: true", "  prometheus: false")
    .replace("  grafana: true", "  grafana: false")
    .replace("  alertmanager: true", "  alertmanager: false")
)


def test_monitoring_off_in_the_spec_skips() -> None:
    remote = healthy_remote()
    text = MONITORING_OFF_SPEC
    outcome = monitoring.targets_up(context(remote, text))
    assert outcome.overall is Status.SKIP
    assert "monitoring.prometheus: false" in outcome.message
    assert remote.commands == []


# =====================================================================================
# monitoring.slurm_metrics (pages built by roles/slurm_metrics' collector from captured Slurm output)
# =====================================================================================


def test_fresh_slurm_metrics_pass_with_their_age() -> None:
    remote = healthy_remote()
    outcome = monitoring.slurm_metrics(context(remote))
    (row,) = outcome.nodes
    assert (row.node, row.status, row.value, row.unit) == (HEAD, Status.PASS, 12, "s")
    assert row.message == "slurm_up 1, collected 12 s ago in 0.07 s"
    (command,) = remote.matching("date +%s; curl")
    assert "http://10.213.0.10:9100/metrics" in command


@pytest.mark.parametrize(
    ("answer", "value", "words"),
    [
        (controller_metrics(age_s=400), 400, "last successful collection 400 s ago"),
        (controller_metrics(slurm_answers=False), "slurm_up 0", "could not reach slurmctld"),
        (ok(f"{CONTROLLER_NOW}\n{NODE_EXPORTER_HEAD}"), "absent", "no slurm_* series"),
        (CommandResult(7, "", "curl: (7) Failed to connect"), "no answer", "did not answer"),
    ],
)
def test_stale_or_missing_slurm_metrics_fail_naming_the_controller(
    answer: CommandResult, value: Any, words: str
) -> None:
    remote = healthy_remote().prefer("date +%s; curl", answer)
    outcome = monitoring.slurm_metrics(context(remote))
    (row,) = outcome.nodes
    assert (row.node, row.status, row.value) == (HEAD, Status.FAIL, value)
    assert words in row.message
    assert outcome.hint and HEAD in outcome.hint


def test_a_textfile_the_node_exporter_cannot_parse_is_said_with_the_missing_series() -> None:
    page = f"{CONTROLLER_NOW}\n{NODE_EXPORTER_HEAD}node_textfile_scrape_error 1\n"
    remote = healthy_remote().prefer("date +%s; curl", ok(page))
    outcome = monitoring.slurm_metrics(context(remote))
    (row,) = outcome.nodes
    assert (row.status, row.value) == (Status.FAIL, "absent")
    assert "node_textfile_scrape_error 1" in row.message
    assert outcome.hint and "journalctl -u prometheus-node-exporter" in outcome.hint


def test_slurm_metrics_skip_with_prometheus_off() -> None:
    remote = healthy_remote()
    text = MONITORING_OFF_SPEC
    assert monitoring.slurm_metrics(context(remote, text)).overall is Status.SKIP
    assert remote.commands == []


# =====================================================================================
# containers.pyxis
# =====================================================================================

# On, with a source (downloads-unverified otherwise); where Enroot came from is no matter to validate.
PYXIS_SPEC = SANDBOX_SPEC.replace(
    "  enroot: false\n  pyxis: false", "  enroot: true\n  pyxis: true\n  allow_unverified_downloads: true"
)


def test_pyxis_off_in_the_spec_skips() -> None:
    remote = healthy_remote()
    outcome = containers.pyxis_job(context(remote))
    assert outcome.overall is Status.SKIP
    assert "containers.pyxis: false" in outcome.message
    assert remote.commands == []


def test_pyxis_plugin_not_loaded_fails() -> None:
    remote = healthy_remote().prefer("srun --help", fail(1, "0\n"))
    outcome = containers.pyxis_job(context(remote, PYXIS_SPEC))
    assert outcome.overall is Status.FAIL
    assert "Pyxis SPANK plugin is not loaded" in outcome.message
    assert outcome.hint and "plugstack.conf" in outcome.hint


def pyxis_run(*answers: tuple[str, Answer], image: str = "/shared/ubuntu.sqsh") -> tuple[StubRemote, Outcome]:
    """containers.pyxis over the healthy cluster, each (node, answer) given to that node's container job."""
    remote = healthy_remote()
    remote.prefer("--container-image=", ok(f"{containers.container_probe.MARKER} container 0 1000 1\n"))
    for node, answer in answers:
        remote.prefer(("--container-image=", f"--nodelist={node} "), answer)
    remote.prefer("srun --help", ok("2\n"))
    return remote, containers.pyxis_job(context(remote, PYXIS_SPEC, options=Options(container_image=image)))


def test_pyxis_container_job_on_every_node_with_a_minimal_image() -> None:
    # A busybox-like image: /bin/sh, /etc/passwd, /etc/group and nothing else. The probe is builtins
    # only (tests/unit/validate/test_container_probe.py runs it in such a root), started as /bin/sh by its path.
    remote, outcome = pyxis_run(image="/shared/busybox.sqsh")
    rows = by_node(outcome)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.PASS}
    assert rows[GPU01].message == "/shared/busybox.sqsh: /bin/sh ran in the container (user namespace map 0 1000 1)"
    assert outcome.hint is None
    jobs = remote.matching("--container-image=")
    assert len(jobs) == 2
    for line in jobs:
        words = shlex.split(line)
        assert "--container-image=/shared/busybox.sqsh" in words
        assert words[-3:] == ["/bin/sh", "-c", containers.container_probe.PROBE]
        assert words[2] == str(containers.PULL_TIME_LIMIT_S + 30 + 30)


# What Pyxis prints when a stage of `srun --container-image` fails: its own line for the stage,
# then Enroot's log, each line prefixed by slurmstepd.
PULL_DENIED = """pyxis: importing docker image: nvcr.io#nvidia/private:1.0
slurmstepd: error: pyxis: child 4242 failed with error code: 1
slurmstepd: error: pyxis: failed to import docker image
slurmstepd: error: pyxis: printing enroot log file:
slurmstepd: error: pyxis:     [INFO] Querying registry for permission grant
slurmstepd: error: pyxis:     [INFO] Authenticating with user: <anonymous>
slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/proxy_auth returned error code: 401 Unauthorized
slurmstepd: error: pyxis: couldn't start container
slurmstepd: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1
slurmstepd: error: Failed to invoke spank plugin stack
srun: error: val-gpu02: task 0: Exited with exit code 1
"""
FILE_MISSING = """pyxis: creating container filesystem: /shared/ubuntu.sqsh
slurmstepd: error: pyxis: child 4243 failed with error code: 1
slurmstepd: error: pyxis: failed to create container filesystem
slurmstepd: error: pyxis: printing enroot log file:
slurmstepd: error: pyxis:     [ERROR] No such file or directory: /shared/ubuntu.sqsh
slurmstepd: error: pyxis: couldn't start container
srun: error: val-gpu02: task 0: Exited with exit code 1
"""
HOOK_FAILED = """pyxis: starting container ...
slurmstepd: error: pyxis: container start failed with error code: 1
slurmstepd: error: pyxis: printing enroot log file:
slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1
slurmstepd: error: pyxis: couldn't start container
srun: error: val-gpu02: task 0: Exited with exit code 1
"""
NO_SHELL = """slurmstepd: error: execve(): /bin/sh: No such file or directory
srun: error: val-gpu02: task 0: Exited with exit code 2
"""


def test_pyxis_pull_failure_is_named_with_enroots_error_and_a_pull_hint() -> None:
    _, outcome = pyxis_run((GPU02, fail(1, "", PULL_DENIED)), image="nvcr.io#nvidia/private:1.0")
    rows = by_node(outcome)
    assert statuses(outcome) == {GPU01: Status.PASS, GPU02: Status.FAIL}
    assert rows[GPU02].message == (
        "nvcr.io#nvidia/private:1.0: pull failed: URL https://nvcr.io/proxy_auth returned error code: 401 Unauthorized"
    )
    assert rows[GPU02].hint and "enroot import docker://IMAGE" in rows[GPU02].hint
    assert ".credentials" in rows[GPU02].hint
    assert outcome.hint == rows[GPU02].hint


def test_pyxis_failures_other_than_a_pull_do_not_blame_the_pull() -> None:
    _, outcome = pyxis_run((GPU02, fail(1, "", FILE_MISSING)))
    row = by_node(outcome)[GPU02]
    assert row.message == (
        "/shared/ubuntu.sqsh: unpacking the image failed: No such file or directory: /shared/ubuntu.sqsh"
    )
    assert row.hint and "on every compute node" in row.hint
    for answer in (HOOK_FAILED, NO_SHELL):
        _, outcome = pyxis_run((GPU02, fail(1, "", answer)))
        row = by_node(outcome)[GPU02]
        assert row.status is Status.FAIL and row.hint
        assert "pull" not in row.hint and "credential" not in row.hint
    assert row.message == "/shared/ubuntu.sqsh: slurmstepd: error: execve(): /bin/sh: No such file or directory"
    assert "/bin/sh" in row.hint
    _, outcome = pyxis_run((GPU02, fail(1, "", HOOK_FAILED)))
    row = by_node(outcome)[GPU02]
    assert row.message == (
        "/shared/ubuntu.sqsh: the container did not start: /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1"
    )
    assert row.hint and "enroot start" in row.hint


def test_pyxis_job_that_ran_on_the_host_fails_and_one_that_cannot_tell_warns() -> None:
    marker = containers.container_probe.MARKER
    _, outcome = pyxis_run(
        (GPU01, ok(f"{marker} host 0 0 4294967295\n")),
        (GPU02, ok(f"{marker} unknown 0 1000 1\n")),
    )
    rows = by_node(outcome)
    assert (rows[GPU01].status, rows[GPU01].message) == (
        Status.FAIL,
        "/shared/ubuntu.sqsh: the job ran on the host, not in a container",
    )
    assert rows[GPU01].hint and "plugstack.conf" in rows[GPU01].hint
    assert rows[GPU02].status is Status.WARN
    assert rows[GPU02].hint and "hidepid" in rows[GPU02].hint
    # One hint per way of failing, joined for the report's check line.
    assert outcome.hint == f"{rows[GPU01].hint}; {rows[GPU02].hint}"


def test_pyxis_job_cut_off_or_failing_before_pyxis_says_why() -> None:
    _, outcome = pyxis_run(
        (GPU01, fail(TIMED_OUT, "", "\n(gpuclus: the command did not finish in time and was cut off)")),
        (GPU02, fail(1, "", "srun: error: Unable to allocate resources: Invalid node name specified\n")),
    )
    rows = by_node(outcome)
    assert rows[GPU01].message == "/shared/ubuntu.sqsh: no answer before the time limit"
    assert rows[GPU01].hint and "enroot import" in rows[GPU01].hint
    assert rows[GPU02].message == (
        "/shared/ubuntu.sqsh: srun: error: Unable to allocate resources: Invalid node name specified"
    )
    assert rows[GPU02].hint is None  # nothing better to say than Slurm's own line


# =====================================================================================
# results.py
# =====================================================================================


def test_worst_orders_fail_warn_pass_skip() -> None:
    assert worst([]) is Status.SKIP
    assert worst([Status.SKIP]) is Status.SKIP
    assert worst([Status.SKIP, Status.PASS]) is Status.PASS
    assert worst([Status.PASS, Status.WARN, Status.SKIP]) is Status.WARN
    assert worst([Status.WARN, Status.FAIL, Status.PASS]) is Status.FAIL


def test_outcome_overall_takes_the_worst_of_nodes_and_own_status() -> None:
    assert Outcome().overall is Status.SKIP
    assert skipped("why").overall is Status.SKIP and skipped("why").message == "why"
    nodes = [NodeResult("a", Status.PASS), NodeResult("b", Status.SKIP)]
    assert Outcome(nodes).overall is Status.PASS
    assert Outcome(nodes, status=Status.WARN).overall is Status.WARN
    assert Outcome([*nodes, NodeResult("c", Status.FAIL)], status=Status.PASS).overall is Status.FAIL


def test_level_parse_and_label() -> None:
    assert Level.parse("Quick") is Level.QUICK
    assert Level.FULL.label == "full"
    assert Level.QUICK < Level.STANDARD < Level.FULL
    with pytest.raises(KeyError):
        Level.parse("deep")


def result(
    check_id: str, outcome: Outcome, level: Level = Level.QUICK, duration_s: float = 0.25, title: str = "title"
) -> CheckResult:
    return CheckResult(check_id, check_id.split(".")[0], level, title, outcome, duration_s)


FAILING = result(
    "launch.munge",
    Outcome(
        [
            NodeResult(GPU01, Status.PASS, "decodes"),
            NodeResult(GPU02, Status.FAIL, "unmunge: Error: Invalid credential"),
        ],
        hint="copy the key",
    ),
    duration_s=1.23456,
)


def test_check_result_as_dict() -> None:
    assert FAILING.status is Status.FAIL
    assert FAILING.failed_nodes == [GPU02]
    data = FAILING.as_dict()
    assert data == {
        "id": "launch.munge",
        "stage": "launch",
        "level": "quick",
        "title": "title",
        "status": "fail",
        "message": "",
        "hint": "copy the key",
        "value": None,
        "expected": None,
        "unit": None,
        "duration_s": 1.235,
        "nodes": [
            {"node": GPU01, "status": "pass", "message": "decodes", "value": None, "expected": None, "unit": None},
            {
                "node": GPU02,
                "status": "fail",
                "message": "unmunge: Error: Invalid credential",
                "value": None,
                "expected": None,
                "unit": None,
            },
        ],
    }
    json.dumps(data)
    # A hint is advice for a problem: none on PASS or SKIP.
    passing = result("cluster.slurmctld", Outcome(status=Status.PASS, hint="h", value="UP", expected="UP"))
    assert passing.as_dict()["hint"] is None
    assert result("x.y", Outcome(status=Status.WARN, hint="h")).as_dict()["hint"] == "h"


def sample_report() -> Report:
    return Report(
        cluster="val",
        level=Level.STANDARD,
        job_name="gpuclus-validate-ab12cd34",
        started="2026-11-21T08:54:00+00:00",
        duration_s=12.3456,
        results=[
            result("cluster.slurmctld", Outcome(status=Status.PASS, message="Slurmctld(primary) at val-head is UP")),
            result(
                "cluster.partitions",
                Outcome(status=Status.FAIL, message='gpu: down <&> "quoted"', hint="state=up"),
            ),
            FAILING,
            result("storage.shared-fs", skipped("no NFS exports in the spec"), Level.STANDARD),
            result(
                "monitoring.targets",
                Outcome([NodeResult(HEAD, Status.WARN, "slow"), NodeResult(GPU01, Status.PASS, "up")]),
            ),
        ],
    )


def test_report_failures_per_node_counts_and_exit_code() -> None:
    report = sample_report()
    assert not report.ok
    assert int(report.exit_code) == 1
    assert report.failures() == [
        {"check": "cluster.partitions", "node": None, "message": 'gpu: down <&> "quoted"', "hint": "state=up"},
        {
            "check": "launch.munge",
            "node": GPU02,
            "message": "unmunge: Error: Invalid credential",
            "hint": "copy the key",
        },
    ]
    assert report.per_node() == {
        GPU01: {"launch.munge": "pass", "monitoring.targets": "pass"},
        GPU02: {"launch.munge": "fail"},
        HEAD: {"monitoring.targets": "warn"},
    }
    assert report.counts() == {"pass": 1, "warn": 1, "fail": 2, "skip": 1}


def test_report_as_dict_and_a_passing_report() -> None:
    data = sample_report().as_dict()
    assert set(data) == {
        "ok",
        "exit_code",
        "cluster",
        "level",
        "job_name",
        "started",
        "duration_s",
        "counts",
        "checks",
        "failures",
        "nodes",
    }
    assert (data["ok"], data["exit_code"], data["level"], data["duration_s"]) == (False, 1, "standard", 12.346)
    assert [check["id"] for check in data["checks"]][:2] == ["cluster.slurmctld", "cluster.partitions"]
    json.dumps(data)
    report = sample_report()
    passing = Report(report.cluster, report.level, report.job_name, report.started, 1.0, report.results[:1])
    assert passing.ok and int(passing.exit_code) == 0 and passing.failures() == []
    # Warnings and skips do not fail a run.
    lenient = Report(report.cluster, report.level, report.job_name, report.started, 1.0, report.results[3:])
    assert lenient.ok


# =====================================================================================
# runner.run_checks
# =====================================================================================


def check(check_id: str, run: Callable[[Context], Outcome], needs_slurm: bool = True) -> Check:
    return Check(check_id, Level.QUICK, f"title of {check_id}", run, needs_slurm)


def passes(ctx: Context) -> Outcome:
    return Outcome(status=Status.PASS, message="fine")


def cancel_remote() -> StubRemote:
    return StubRemote([("scancel --name=", ok())])


def run(remote: Remote, checks: list[Check], **kwargs: Any) -> Report:
    loaded = load()
    assert loaded.spec is not None and loaded.topology is not None
    return run_checks(
        remote, loaded.spec, loaded.topology, checks, level=Level.QUICK, selected=list(loaded.topology.nodes), **kwargs
    )


def test_run_checks_runs_in_order_reports_progress_and_cancels_at_the_end() -> None:
    seen: list[tuple[str, str | None]] = []
    contexts: list[Context] = []

    def remember(ctx: Context) -> Outcome:
        contexts.append(ctx)
        return Outcome([NodeResult(GPU01, Status.PASS)])

    remote = cancel_remote()
    report = run(
        remote,
        [check("cluster.slurmctld", passes, needs_slurm=False), check("launch.srun", remember)],
        progress=lambda c, r: seen.append((c.id, None if r is None else r.status.value)),
    )
    assert [r.id for r in report.results] == ["cluster.slurmctld", "launch.srun"]
    assert seen == [
        ("cluster.slurmctld", None),
        ("cluster.slurmctld", "pass"),
        ("launch.srun", None),
        ("launch.srun", "pass"),
    ]
    assert re.fullmatch(r"gpuclus-validate-[0-9a-f]{8}", report.job_name)
    assert contexts[0].job_name == report.job_name
    assert [node.name for node in contexts[0].selected] == [HEAD, GPU01, GPU02]
    assert remote.commands == [slurm.cancel_command(report.job_name)]
    assert (report.cluster, report.level, report.ok) == ("val", Level.QUICK, True)
    assert all(r.duration_s >= 0 for r in report.results) and report.duration_s >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", report.started)


def test_run_checks_a_crashing_check_fails_as_internal_error_and_the_rest_still_run() -> None:
    def crashes(ctx: Context) -> Outcome:
        raise ValueError("boom")

    remote = cancel_remote()
    report = run(
        remote,
        [check("cluster.slurmctld", passes, False), check("cluster.gres", crashes), check("launch.srun", passes)],
    )
    crashed = report.results[1]
    assert crashed.status is Status.FAIL
    assert crashed.outcome.message == "internal error in the check: ValueError: boom"
    assert crashed.outcome.hint and "gpuclus bug" in crashed.outcome.hint
    assert report.results[2].status is Status.PASS
    assert remote.commands == [slurm.cancel_command(report.job_name)]


def test_run_checks_skips_slurm_checks_once_slurmctld_failed() -> None:
    ran: list[str] = []

    def down(ctx: Context) -> Outcome:
        return Outcome(status=Status.FAIL, message="Slurmctld(primary) at val-head is DOWN")

    def recording(name: str) -> Callable[[Context], Outcome]:
        def run_it(ctx: Context) -> Outcome:
            ran.append(name)
            return Outcome(status=Status.PASS)

        return run_it

    report = run(
        cancel_remote(),
        [
            check("cluster.slurmctld", down, needs_slurm=False),
            check("launch.srun", recording("srun")),
            check("launch.munge", recording("munge"), needs_slurm=False),
        ],
    )
    assert [r.status for r in report.results] == [Status.FAIL, Status.SKIP, Status.PASS]
    assert report.results[1].outcome.message == "slurmctld does not answer (cluster.slurmctld failed)"
    assert ran == ["munge"]


def test_run_checks_ctrl_c_propagates_and_the_jobs_are_still_cancelled() -> None:
    ran: list[str] = []

    def interrupted(ctx: Context) -> Outcome:
        raise KeyboardInterrupt

    def after(ctx: Context) -> Outcome:
        ran.append("after")
        return Outcome(status=Status.PASS)

    remote = cancel_remote()
    with pytest.raises(KeyboardInterrupt):
        run(
            remote,
            [check("cluster.slurmctld", passes, False), check("launch.srun", interrupted), check("launch.x", after)],
        )
    assert ran == []
    (cancel,) = remote.commands
    assert re.fullmatch(
        r"scancel --name=gpuclus-validate-[0-9a-f]{8} --user=\"\$\(id -un\)\" 2>/dev/null; true", cancel
    )


def test_run_checks_a_broken_connection_ends_the_run_as_unreachable_after_trying_to_cancel() -> None:
    def connection_lost(ctx: Context) -> Outcome:
        raise OSError("Socket is closed")

    remote = cancel_remote()
    with pytest.raises(SshFailure, match="lost the connection to the controller: Socket is closed"):
        run(remote, [check("launch.srun", connection_lost)])
    assert remote.matching("scancel") != []


def test_run_checks_survives_a_cancel_that_fails() -> None:
    def gone(command: str) -> CommandResult:
        raise OSError("Socket is closed")

    report = run(StubRemote([("scancel", gone)]), [check("cluster.slurmctld", passes, False)])
    assert report.ok


def test_run_checks_a_session_paramiko_reports_dropped_ends_the_run_as_unreachable() -> None:
    import paramiko

    class DroppedClient:
        def get_transport(self) -> DroppedClient:
            return self

        def is_active(self) -> bool:
            return True

        def open_session(self, timeout: float) -> Any:
            raise paramiko.SSHException("SSH session not active")  # what Transport.open_channel raises

        def close(self) -> None:
            pass

    def uses_the_session(ctx: Context) -> Outcome:
        return cluster.slurmctld_answers(ctx)

    with pytest.raises(SshFailure, match="lost the connection"):
        run(Remote(DroppedClient()), [check("cluster.slurmctld", uses_the_session, False)])


def test_registry_ids_are_unique_and_in_stage_order() -> None:
    checks = all_checks()
    ids = [c.id for c in checks]
    assert len(ids) == len(set(ids))
    assert [STAGES.index(c.stage) for c in checks] == sorted(STAGES.index(c.stage) for c in checks)
    core = [c.id for c in checks if c.stage != "gpu"]
    assert core == [
        "cluster.slurmctld",
        "cluster.nodes-known",
        "cluster.node-states",
        "cluster.partitions",
        "cluster.gres",
        "config.files",
        "config.names",
        "config.clock",
        "config.mounts",
        "config.services",
        "launch.munge",
        "launch.srun",
        "launch.gres-devices",
        "launch.mpi",
        "storage.shared-fs",
        "containers.pyxis",
        "workloads.env",
        "workloads.ddp",
        "workloads.sbatch",
        "workloads.fsdp",
        "workloads.mpi",
        "workloads.container",
        "workloads.scaling",
        "accounting.sacct",
        "doors.compute-ssh",
        "doors.job-tmp",
        "monitoring.targets",
        "monitoring.slurm_metrics",
        "failover.takeover",
    ]
    # What must work without Slurm does not depend on it.
    assert {c.id for c in checks if not c.needs_slurm} == {
        "cluster.slurmctld",
        "config.files",
        "config.names",
        "config.clock",
        "config.mounts",
        "config.services",
        "launch.munge",
        "storage.shared-fs",
        "doors.compute-ssh",
        "monitoring.targets",
        "monitoring.slurm_metrics",
    }


# =====================================================================================
# junit.py
# =====================================================================================


def test_junit_xml_has_a_suite_per_stage_with_failures_and_skips() -> None:
    text = junit_xml(sample_report())
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(text.split("\n", 1)[1])
    assert root.tag == "testsuites"
    assert root.get("name") == "gpuclus validate val"
    assert (root.get("tests"), root.get("failures"), root.get("skipped"), root.get("errors")) == ("5", "2", "1", "0")
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == ["cluster", "launch", "storage", "monitoring"]
    cluster_suite = suites[0]
    assert (cluster_suite.get("tests"), cluster_suite.get("failures"), cluster_suite.get("skipped")) == ("2", "1", "0")
    assert cluster_suite.get("timestamp") == "2026-11-21T08:54:00+00:00"
    cases = {case.get("name"): case for case in root.iter("testcase")}
    assert cases["cluster.slurmctld"].find("failure") is None
    assert cases["cluster.slurmctld"].get("classname") == "gpuclus.validate.cluster"
    partitions_failure = cases["cluster.partitions"].find("failure")
    assert partitions_failure is not None
    assert partitions_failure.get("message") == 'gpu: down <&> "quoted"'
    assert partitions_failure.text == 'gpu: down <&> "quoted"\nhint: state=up'
    munge_failure = cases["launch.munge"].find("failure")
    assert munge_failure is not None
    assert munge_failure.get("message") == "val-gpu02: unmunge: Error: Invalid credential"
    assert munge_failure.get("type") == "check-failed"
    assert cases["launch.munge"].get("time") == "1.235"
    skipped_element = cases["storage.shared-fs"].find("skipped")
    assert skipped_element is not None and skipped_element.get("message") == "no NFS exports in the spec"
    warn = cases["monitoring.targets"]
    assert warn.find("failure") is None and warn.find("skipped") is None
    assert warn.findtext("system-out") == "val-head: warn slow\nval-gpu01: pass up"


def test_write_junit_writes_the_same_xml(tmp_path: Path) -> None:
    target = tmp_path / "out" / "validate.xml"
    target.parent.mkdir()
    write_junit(sample_report(), target)
    assert target.read_text() == junit_xml(sample_report())
    ET.parse(target)


# =====================================================================================
# remote.py: reading a channel
# =====================================================================================


class FakeChannel:
    """What Remote uses of a paramiko Channel: output arrives in chunks, the exit status once done."""

    def __init__(
        self,
        stdout: Sequence[bytes] = (),
        stderr: Sequence[bytes] = (),
        status: int | None = 0,
        exec_error: Exception | None = None,
    ) -> None:
        self.stdout = list(stdout)
        self.stderr = list(stderr)
        self.status = status  # None: never finishes
        self.exec_error = exec_error
        self.command: str | None = None
        self.closed = False

    def exec_command(self, command: str) -> None:
        if self.exec_error is not None:
            raise self.exec_error
        self.command = command

    def recv_ready(self) -> bool:
        return bool(self.stdout)

    def recv(self, size: int) -> bytes:
        return self.stdout.pop(0)

    def recv_stderr_ready(self) -> bool:
        return bool(self.stderr)

    def recv_stderr(self, size: int) -> bytes:
        return self.stderr.pop(0)

    def exit_status_ready(self) -> bool:
        return self.status is not None

    @property
    def eof_received(self) -> bool:
        return self.status is not None and not self.stdout and not self.stderr

    def recv_exit_status(self) -> int:
        assert self.status is not None
        return self.status

    def close(self) -> None:
        self.closed = True


class FakeClient:
    def __init__(self, channel: FakeChannel) -> None:
        self.channel = channel
        self.session_timeouts: list[float] = []
        self.closed = False

    def get_transport(self) -> FakeClient:
        return self

    def is_active(self) -> bool:
        return not self.closed

    def open_session(self, timeout: float) -> FakeChannel:
        self.session_timeouts.append(timeout)
        return self.channel

    def close(self) -> None:
        self.closed = True


def test_collect_reads_all_output_before_the_exit_status() -> None:
    channel = FakeChannel([b"val-gpu01\n", b"val-gpu02\n"], [b"srun: error: ", b"\xff broken\n"], status=1)
    answer = _collect(channel, time.monotonic() + 5)
    assert answer == CommandResult(1, "val-gpu01\nval-gpu02\n", "srun: error: \ufffd broken\n")


def test_collect_past_the_deadline_is_timed_out_and_keeps_what_came() -> None:
    channel = FakeChannel([b"partial\n"], status=None)
    started = time.monotonic()
    answer = _collect(channel, started + 0.1)
    assert time.monotonic() - started < 2
    assert answer.exit_status == TIMED_OUT == 124
    assert answer.stdout == "partial\n"
    assert answer.stderr.endswith("(gpuclus: the command did not finish in time and was cut off)")


def test_remote_run_opens_one_channel_per_command_and_always_closes_it() -> None:
    channel = FakeChannel([b"Slurmctld(primary) at val-head is UP\n"])
    client = FakeClient(channel)
    remote = Remote(client)
    assert remote.run("scontrol ping", timeout=7) == CommandResult(0, "Slurmctld(primary) at val-head is UP\n", "")
    assert (channel.command, channel.closed, client.session_timeouts) == ("scontrol ping", True, [7])
    broken = FakeChannel(exec_error=OSError("Socket is closed"))
    with pytest.raises(OSError):
        Remote(FakeClient(broken)).run("scontrol ping")
    assert broken.closed
    remote.close()
    assert client.closed


def test_remote_run_never_blocks_past_its_timeout() -> None:
    channel = FakeChannel(status=None)
    answer = Remote(FakeClient(channel)).run("srun sleep 1000", timeout=0.1)
    assert answer.exit_status == TIMED_OUT
    assert "cut off" in answer.stderr
    assert channel.closed


def test_remote_run_many_keys_answers_like_the_commands() -> None:
    class EchoRemote(Remote):
        def run(self, command: str, timeout: float = 60.0) -> CommandResult:
            return ok(command.upper())

    remote = EchoRemote(client=None)
    assert remote.run_many({}) == {}
    assert remote.run_many({f"n{i}": f"cmd{i}" for i in range(12)}) == {f"n{i}": ok(f"CMD{i}") for i in range(12)}
    assert remote_module.MAX_PARALLEL_CHANNELS < 10  # OpenSSH MaxSessions


def test_monitoring_a_target_that_misses_one_scrape_is_scraped_again_with_more_time() -> None:
    # Prometheus' own /metrics on a loaded host: no answer within 5 s once, then 200.
    remote = healthy_remote().prefer(("%{http_code}", "10.213.0.10:9090"), in_turn(ok("000"), ok("200")))
    rows = by_node(monitoring.targets_up(context(remote)))
    assert rows[HEAD].status is Status.PASS, rows[HEAD].message
    again = remote.matching("%{http_code}", "10.213.0.10:9090")
    assert [("--max-time 5" in line, "--max-time 10" in line) for line in again] == [(True, False), (False, True)]
    # Targets that answered are not scraped twice.
    assert len(remote.matching("%{http_code}")) == 5


def test_monitoring_a_stopped_exporter_fails_after_the_second_scrape_too() -> None:
    remote = healthy_remote().prefer(("%{http_code}", "10.213.0.11:9100"), ok("000"))
    rows = by_node(monitoring.targets_up(context(remote)))
    assert rows[GPU01].status is Status.FAIL
    assert len(remote.matching("%{http_code}", "10.213.0.11:9100")) == 2
