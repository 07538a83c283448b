"""validate's doors stage on a stub controller session (tests/unit/validate_stubs.py).

The commands are built by the real Context as in production; the answers are
what the sandbox's nodes give (pamtester's exit codes: 0 let in, 1 refused).
The sandbox runs doors.compute-ssh for real in tests/integration/test_cluster_validate.py;
doors.job-tmp skips there (container nodes share /tmp: docs/security.md).
"""

from __future__ import annotations

import shlex

import pytest
import yaml
from validate_stubs import (
    COMPUTE,
    GPU01,
    GPU02,
    HEAD,
    PAM_DOOR_SHUT,
    SANDBOX_SPEC,
    SSH_TIMED_OUT,
    StubRemote,
    context,
    fail,
    ok,
    per_node,
    target,
)

from gpuclus.validate.checks import doors
from gpuclus.validate.registry import STAGES, all_checks
from gpuclus.validate.results import Level, Status


def spec_with(**slurm: str) -> str:
    spec = yaml.safe_load(SANDBOX_SPEC)
    spec["slurm"].update(slurm)
    return yaml.safe_dump(spec, sort_keys=False)


def test_the_stage_runs_after_accounting_and_the_door_needs_no_slurm() -> None:
    assert STAGES.index("doors") == STAGES.index("accounting") + 1
    checks = {check.id: check for check in all_checks() if check.stage == "doors"}
    assert list(checks) == ["doors.compute-ssh", "doors.job-tmp"]
    assert checks["doors.compute-ssh"].level is Level.QUICK and not checks["doors.compute-ssh"].needs_slurm
    assert checks["doors.job-tmp"].level is Level.STANDARD and checks["doors.job-tmp"].needs_slurm


# ---------------------------------------------------------------------------
# doors.compute-ssh
# ---------------------------------------------------------------------------

REFUSED_ADMIN = "refused=1\npamtester: Authentication failure\nadmitted=1\n"
OPEN_DOOR = "refused=0\npamtester: successfully acct_mgmt.\nadmitted=0\n"


def door_remote(answers: dict[str, object]) -> StubRemote:
    return StubRemote([("pamtester sshd nobody", per_node(answers))])  # type: ignore[arg-type]


def test_a_shut_door_passes_on_every_compute_node_and_asks_sshds_own_stack() -> None:
    remote = door_remote({GPU01: ok(PAM_DOOR_SHUT), GPU02: ok(PAM_DOOR_SHUT)})
    outcome = doors.compute_ssh(context(remote))
    assert outcome.overall is Status.PASS, outcome.message
    assert {row.node: row.message for row in outcome.nodes} == dict.fromkeys(
        COMPUTE, "nobody (no job) refused, gpuclus let in"
    )
    # The head is a login node: it lets users in and is not asked.
    assert sorted(target(command) for command in remote.commands) == COMPUTE
    script = shlex.split(remote.commands[0])[-1]
    assert "sudo -n pamtester sshd nobody acct_mgmt" in script
    assert "sudo -n pamtester sshd gpuclus acct_mgmt" in script


def test_a_node_that_lets_a_user_without_a_job_in_fails_with_the_repair() -> None:
    remote = door_remote({GPU01: ok(PAM_DOOR_SHUT), GPU02: ok(OPEN_DOOR)})
    outcome = doors.compute_ssh(context(remote))
    assert outcome.overall is Status.FAIL
    rows = {row.node: row for row in outcome.nodes}
    assert rows[GPU01].status is Status.PASS
    assert rows[GPU02].status is Status.FAIL
    assert rows[GPU02].message.startswith("sshd's account stack lets in nobody, who has no job here")
    assert outcome.message == f"the door is open or shut wrongly on {GPU02}"
    assert outcome.hint is not None and "gpuclus deploy --only slurm" in outcome.hint


def test_a_refused_admin_fails_naming_the_admin() -> None:
    outcome = doors.compute_ssh(context(door_remote({GPU01: ok(REFUSED_ADMIN), GPU02: ok(PAM_DOOR_SHUT)})))
    rows = {row.node: row for row in outcome.nodes}
    assert rows[GPU01].status is Status.FAIL
    assert (
        rows[GPU01].message == "sshd's account stack refuses the admin user gpuclus: a new login of theirs would fail"
    )


def test_no_pamtester_and_a_garbled_answer_fail_saying_so() -> None:
    remote = door_remote({GPU01: ok("no-pamtester\n"), GPU02: fail(1, "", "sudo: a password is required\n")})
    rows = {row.node: row for row in doors.compute_ssh(context(remote)).nodes}
    assert rows[GPU01].message == "pamtester is not installed, so the door cannot be asked"
    assert rows[GPU02].message == "could not ask sshd's account stack: sudo: a password is required"
    assert {row.status for row in rows.values()} == {Status.FAIL}


def test_an_unreachable_node_is_named_with_the_unreachable_hint() -> None:
    outcome = doors.compute_ssh(context(door_remote({GPU01: ok(PAM_DOOR_SHUT), GPU02: SSH_TIMED_OUT})))
    rows = {row.node: row for row in outcome.nodes}
    assert rows[GPU02].status is Status.FAIL and f"{GPU02} unreachable" in rows[GPU02].message
    assert outcome.hint is not None and "cannot be reached" in outcome.hint


def test_an_open_door_by_choice_skips_without_asking() -> None:
    remote = StubRemote()
    outcome = doors.compute_ssh(context(remote, spec_with(compute_ssh="open")))
    assert outcome.overall is Status.SKIP
    assert outcome.message == "slurm.compute_ssh: open: every user may log in to the compute nodes"
    assert remote.commands == []


def test_only_login_nodes_selected_skips() -> None:
    outcome = doors.compute_ssh(context(StubRemote(), nodes=[HEAD]))
    assert outcome.overall is Status.SKIP


# ---------------------------------------------------------------------------
# doors.job-tmp
# ---------------------------------------------------------------------------

PRIVATE = spec_with(job_tmp="private")
MARK = "/tmp/gpuclus-validate-t-tmp-mark"


def tmp_remote(*, node_sees: str = "absent", next_sees: str = "absent", written: str | None = None) -> StubRemote:
    def write(command: str) -> object:
        return ok(f"{written if written is not None else 'gpuclus-validate-t'}\n")

    return StubRemote(
        [
            (("srun", "echo gpuclus-validate-t >"), write),
            (("StrictHostKeyChecking", MARK), ok(f"{node_sees}\n")),
            (("srun", f"if [ -e {MARK} ]"), ok(f"{next_sees}\n")),
        ]
    )  # type: ignore[list-item]


def test_private_tmp_passes_when_neither_the_node_nor_the_next_job_sees_the_file() -> None:
    remote = tmp_remote()
    outcome = doors.job_tmp(context(remote, PRIVATE))
    assert outcome.overall is Status.PASS, outcome.message
    assert outcome.message == "each job has a /tmp of its own"
    # Written in a job, looked for outside any job over SSH, then in the next job: in that order, per node.
    kinds = ["srun" if command.startswith("timeout ") else "ssh" for command in remote.commands]
    assert kinds == ["srun", "srun", "ssh", "ssh", "srun", "srun"]
    assert sorted(target(command) for command in remote.matching("StrictHostKeyChecking")) == COMPUTE


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"node_sees": "seen"}, f"a job's {MARK} is in the node's own /tmp: jobs share it"),
        ({"next_sees": "seen"}, f"the next job still sees the last job's {MARK}: /tmp outlives jobs"),
        ({"written": ""}, f"a job could not write {MARK}: no output"),
    ],
    ids=["shared-with-the-node", "outlives-the-job", "not-written"],
)
def test_a_tmp_that_is_not_the_jobs_own_fails_with_the_plugins_settings(answers: dict[str, str], message: str) -> None:
    outcome = doors.job_tmp(context(tmp_remote(**answers), PRIVATE))
    assert outcome.overall is Status.FAIL
    assert {row.message for row in outcome.nodes} == {message}
    assert outcome.hint is not None and "JobContainerType=job_container/tmpfs" in outcome.hint


def test_shared_tmp_skips_without_a_job() -> None:
    remote = StubRemote()
    outcome = doors.job_tmp(context(remote))  # the sandbox's spec: job_tmp: shared
    assert outcome.overall is Status.SKIP
    assert outcome.message == "slurm.job_tmp: shared: jobs share each node's /tmp"
    assert remote.commands == []
