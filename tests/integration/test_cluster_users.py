"""Users and Slurm accounts on the deployed sandbox (issue 19): one users file, logins, limits, fairshare.

The spec is given `users: {file: users.yaml}` beside it (and a 1-minute
PriorityCalcPeriod, so fairshare moves within the test), with three users
whose key pairs this test makes. `gpuclus deploy --only slurm,users` turns on
Slurm's enforcement and writes the accounts. Then, for real:
- each user logs in over SSH with their own key (gpuclus' SSH client, host keys
  checked) and has the same uid everywhere: alice, an admin, on every node; bob
  on the login node, and on a compute node only while his job runs there, into
  that job (pam_slurm_adopt: its cgroup, only its GPU's device node; his
  leftover process ends with the job); a job's output lands in its user's home;
- alice, capped at 1 GPU, gets her second GPU job PENDING with Slurm's
  AssocGrpGRES while the first runs; a local user the file does not know
  cannot submit;
- after alice's usage her fairshare is below carol's, who ran nothing;
- a second users phase changes nothing;
- bob marked removed: his running job is cancelled, his submissions refused,
  his logins refused, while alice still logs in.
The spec is restored afterwards. The accounts and associations stay, and so
does slurm.conf's enforcement until the next slurm phase; gpuclus' admin user
has an association (root account), so the tests after this one run jobs as
before.

Integration only (`.ci/run`, as root): it uses the session's deployed sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import GPU1, GPU2, HEAD, Cluster, gpuclus

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget, connect, run
from gpuclus.state import StateDir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

NODES = (HEAD, GPU1, GPU2)


def users_text(keys: dict[str, str], *, bob_removed: bool, carol_admin: bool = False) -> str:
    return f"""\
apiVersion: gpuclus/v1
kind: Users
qos:
  - name: debug
    priority: 100
    max_wall: "30"
accounts:
  - name: lab
    fairshare: 2
    qos: [normal, debug]
  - name: nlp
groups:
  - name: datasets
    gid: 3000
users:
  - name: alice
    uid: 2001
    groups: [datasets]
    ssh_keys: ["{keys["alice"]}"]
    account: lab
    gpus: 1
    admin: true
  - name: bob
    uid: 2002
    gid: 2102
    ssh_keys: ["{keys["bob"]}"]
    account: lab
    removed: {str(bob_removed).lower()}
  - name: carol
    uid: 2003
    ssh_keys: ["{keys["carol"]}"]
    account: nlp
    admin: {str(carol_admin).lower()}
"""


def deploy_users(cluster: Cluster, phases: str = "users") -> dict[str, Any]:
    started = time.monotonic()
    result = gpuclus("deploy", str(cluster.spec), "--only", phases, "--json")
    print(f"\n{phases} phase(s) of 3 nodes: {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["status"] == "successful"
    return report


def as_user(cluster: Cluster, node: str, user: str, key: Path, command: str) -> CommandResult:
    """``command`` as ``user`` on ``node`` over SSH with the user's own key."""
    target = SshTarget(cluster.addresses[node], user, key, StateDir.beside(cluster.spec).known_hosts)
    client = connect(target)
    try:
        return run(client, command, timeout=60)
    finally:
        client.close()


def login(cluster: Cluster, node: str, user: str, key: Path) -> str:
    """`id -un; id -u; id -Gn` as ``user`` on ``node``, logged in with the user's own key."""
    result = as_user(cluster, node, user, key, "id -un; id -u; id -Gn")
    assert result.exit_status == 0, result.stderr
    return result.stdout


def job_states(cluster: Cluster, user: str) -> dict[str, tuple[str, str]]:
    """The user's jobs in the queue: id -> (state, reason)."""
    lines = cluster.on(HEAD, f"squeue --noheader --user={user} --format='%i %T %r'").stdout.splitlines()
    return {words[0]: (words[1], words[2]) for words in (line.split() for line in lines) if len(words) == 3}


def wait_for(what: str, probe: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(3)


def fairshare(cluster: Cluster) -> dict[str, float]:
    """sshare's FairShare factor of each user association (1.0: no usage against its shares)."""
    rows = cluster.on(HEAD, "sshare --all --parsable2 --noheader --format=User,FairShare").stdout.splitlines()
    return {user.strip(): float(value) for user, _, value in (row.partition("|") for row in rows) if user.strip()}


# Where Enroot keeps each user's containers (the enroot role's default).
ENROOT_DATA = "/var/lib/enroot/data"
GPU_JOB = "sbatch --parsable --gres=gpu:1 --time=5 --output=/dev/null --wrap 'sleep 240'"


def test_users_log_in_everywhere_run_within_their_limits_and_a_removed_one_is_shut_out(
    deployed: Cluster, tmp_path: Path
) -> None:
    keys: dict[str, str] = {}
    for name in ("alice", "bob", "carol"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test", "-f", str(tmp_path / name)],
            check=True,
        )
        keys[name] = (tmp_path / f"{name}.pub").read_text().strip()
    key = {name: tmp_path / name for name in keys}
    users_file = deployed.spec.parent / "users.yaml"
    original = deployed.spec.read_text()
    assert "\nslurm:\n" in original
    users_file.write_text(users_text(keys, bob_removed=False))
    deployed.spec.write_text(
        original.replace("\nslurm:\n", "\nslurm:\n  priority_calc_period: 1\n", 1) + "users:\n  file: users.yaml\n"
    )
    try:
        checked = gpuclus("spec", "check", str(deployed.spec))
        assert checked.returncode == 0, checked.stdout + checked.stderr

        first = deploy_users(deployed, "slurm,users")
        assert first["changed"] > 0
        for node in NODES:
            entries = deployed.on(node, "getent passwd alice bob carol; getent group datasets").stdout.split()
            assert entries == [
                "alice:x:2001:2001::/home/alice:/bin/bash",
                "bob:x:2002:2102::/home/bob:/bin/bash",
                "carol:x:2003:2003::/home/carol:/bin/bash",
                "datasets:x:3000:alice",
            ], f"{node}: {entries}"
            assert login(deployed, node, "alice", key["alice"]).split() == ["alice", "2001", "alice", "datasets"]
        assert login(deployed, HEAD, "bob", key["bob"]).split() == ["bob", "2002", "bob"]
        # The compute nodes (not login nodes) let in only a user with a job there (slurm.compute_ssh: jobs):
        # bob has none; alice is an admin, and gpuclus' admin user logs in afresh for every command.
        for node in (GPU1, GPU2):
            with pytest.raises(SshFailure):
                login(deployed, node, "bob", key["bob"])
            assert deployed.on(node, "id -un").stdout.strip() == ADMIN_USER

        # A job's output lands in its user's home, on the node that ran it.
        ran = as_user(
            deployed, HEAD, "carol", key["carol"], "cd && sbatch --wait --parsable -o out.txt --wrap 'id -un; pwd'"
        )
        assert ran.exit_status == 0, ran.stderr
        outputs = [
            deployed.on(node, "sudo cat /home/carol/out.txt 2>/dev/null || true").stdout for node in (GPU1, GPU2)
        ]
        assert "carol\n/home/carol\n" in outputs, outputs

        # alice may hold one GPU: her second GPU job waits on her association's GrpTRES.
        ids = [as_user(deployed, HEAD, "alice", key["alice"], GPU_JOB).stdout.strip() for _ in range(2)]
        assert all(job.isdigit() for job in ids), ids
        wait_for(
            "alice's first GPU job RUNNING, her second PENDING with AssocGrpGRES",
            lambda: job_states(deployed, "alice") == {ids[0]: ("RUNNING", "None"), ids[1]: ("PENDING", "AssocGrpGRES")},
            60,
        )
        # bob's job runs beside it (his own cap is unset), until he is removed below.
        bobs = as_user(deployed, HEAD, "bob", key["bob"], GPU_JOB).stdout.strip()
        wait_for("bob's job RUNNING", lambda: job_states(deployed, "bob").get(bobs, ("",))[0] == "RUNNING", 60)
        # While it runs bob may log in to its node, into the job: his session is in the job's extern step
        # (its cgroup), and what he leaves running there ends with the job (below). The other node still
        # refuses him.
        bobs_node = deployed.on(HEAD, f"squeue --noheader --jobs={bobs} --format=%N").stdout.strip()
        assert bobs_node in (GPU1, GPU2), bobs_node
        # The session sees only the job's GPU: opening its device node reaches the device (no driver on the
        # sandbox: ENXIO), the other is refused by the job's devices cgroup (EPERM).
        adopted = as_user(
            deployed,
            bobs_node,
            "bob",
            key["bob"],
            'cat /proc/self/cgroup; for d in /dev/nvidia[0-9]*; do echo "$d: $(head -c1 $d 2>&1 >/dev/null)"; done;'
            " echo bob > /tmp/bob-mark && echo tmp-written;"
            f" if [ -d {ENROOT_DATA} ]; then mkdir -p {ENROOT_DATA}/user-2002/pyxis_{bobs}.0/usr; fi;"
            " nohup sleep 3000 >/dev/null 2>&1 &",
        )
        assert adopted.exit_status == 0, adopted.stderr
        assert f"/job_{bobs}/step_extern" in adopted.stdout, adopted.stdout
        index = deployed.on(HEAD, f"scontrol show job -d {bobs} | grep -o 'IDX:[0-9]*'").stdout.split(":")[-1].strip()
        devices = dict(line.split(": ", 1) for line in adopted.stdout.splitlines() if line.startswith("/dev/nvidia"))
        reached = sorted(device for device, error in devices.items() if "No such device or address" in error)
        refused = sorted(device for device, error in devices.items() if "Operation not permitted" in error)
        assert reached == [f"/dev/nvidia{index}"] and len(refused) == len(devices) - 1, adopted.stdout
        with pytest.raises(SshFailure):
            login(deployed, GPU2 if bobs_node == GPU1 else GPU1, "bob", key["bob"])
        # The sandbox's nodes share the node's /tmp (slurm.job_tmp: shared; sandbox.yaml says why: a job's
        # private /tmp cannot be pinned inside a container on Linux 6.18), so no job_container.conf, and
        # bob's file is in the node's /tmp. The private /tmp is rendered and checked in
        # tests/unit/roles/test_job_hygiene.py, and needs the virtual-machine nodes to run.
        assert "tmp-written" in adopted.stdout, adopted.stdout
        look = "sudo cat /tmp/bob-mark; if test -e /etc/slurm/job_container.conf; then echo conf; fi"
        seen = deployed.on(bobs_node, look)
        assert seen.stdout.split() == ["bob"], seen.stdout
        deployed.on(bobs_node, "sudo rm -f /tmp/bob-mark")
        # A process of bob's outside any job (started by an admin, as a leftover of an open node would be):
        # the job epilog ends it once bob has no job left here.
        deployed.on(bobs_node, "sudo -u bob nohup sleep 3001 >/dev/null 2>&1 &")
        assert deployed.on(bobs_node, "pgrep -u bob -f 'sleep 3001'", check=False).exit_status == 0

        # A local user the users file does not know has no association: Slurm refuses the job.
        deployed.on(HEAD, "sudo useradd --uid 2900 --create-home mallory")
        try:
            refused = deployed.on(HEAD, "sudo -u mallory sbatch --wrap true", check=False)
        finally:
            deployed.on(HEAD, "sudo userdel --remove mallory")
        assert refused.exit_status != 0 and "Invalid account" in refused.stderr, refused.stderr

        # Fairshare: alice's usage (recomputed every minute) lowers her factor below carol's.
        wait_for(
            "alice's fairshare below carol's after her usage",
            lambda: (shares := fairshare(deployed)).get("alice", 1.0) < shares.get("carol", 0.0),
            180,
        )
        print(f"\nfairshare after usage: {fairshare(deployed)}")

        again = deploy_users(deployed)
        changed = {host: stats["changed"] for host, stats in again["hosts"].items() if stats["changed"]}
        assert changed == {}, f"a second users phase changed something: {changed}"

        users_file.write_text(users_text(keys, bob_removed=True))
        deploy_users(deployed)
        # Cancelled: Slurm may still list it while its node finishes the job (COMPLETING) for a moment.
        wait_for("bob's cancelled job gone from the queue", lambda: bobs not in job_states(deployed, "bob"), 60)
        ended = deployed.on(HEAD, f"sacct --noheader --allocations --jobs={bobs} --format=State%30").stdout.split()
        assert ended[:1] == ["CANCELLED"], f"bob's job {bobs}: {ended}"
        wait_for(
            f"bob's leftover process on {bobs_node} ended with his job",
            lambda: deployed.on(bobs_node, "pgrep -u bob -f 'sleep 3000'", check=False).exit_status == 1,
            60,
        )
        wait_for(
            f"bob's process outside the job on {bobs_node} ended by the job epilog",
            lambda: deployed.on(bobs_node, "pgrep -u bob -f 'sleep 3001'", check=False).exit_status == 1,
            60,
        )
        # The epilog removed the Enroot container his job left, and said what it did.
        left = f"{ENROOT_DATA}/user-2002/pyxis_{bobs}.0"
        assert deployed.on(bobs_node, f"sudo ls -d {left} 2>/dev/null", check=False).stdout.strip() == ""
        said = deployed.on(bobs_node, "sudo journalctl --no-pager -o cat -t gpuclus-job-hygiene").stdout
        assert f"job {bobs} (bob): ended the processes left outside any job" in said, said
        if deployed.on(bobs_node, f"test -d {ENROOT_DATA}", check=False).exit_status == 0:
            assert f"job {bobs} (bob): removed the Enroot container pyxis_{bobs}.0" in said, said
        refused = deployed.on(HEAD, "sudo -u bob sbatch --wrap true", check=False)
        assert refused.exit_status != 0 and "Invalid account" in refused.stderr, refused.stderr
        for node in (HEAD, GPU1):
            with pytest.raises(SshFailure):
                login(deployed, node, "bob", key["bob"])
            assert login(deployed, node, "alice", key["alice"]).split()[:2] == ["alice", "2001"]
        kept = deployed.on(GPU2, "getent passwd bob; test -d /home/bob && echo home-kept").stdout.split()
        assert kept == ["bob:x:2002:2102::/home/bob:/usr/sbin/nologin", "home-kept"]
        # The compute nodes' access list follows the users file in the users phase too: made an admin by a
        # users-only deploy, carol gets in to a compute node where she has no job.
        with pytest.raises(SshFailure):
            login(deployed, GPU1, "carol", key["carol"])
        users_file.write_text(users_text(keys, bob_removed=True, carol_admin=True))
        deploy_users(deployed)
        assert login(deployed, GPU1, "carol", key["carol"]).split()[:2] == ["carol", "2003"]
    finally:
        deployed.on(HEAD, "for user in alice bob carol; do sudo scancel --user=$user; done", check=False)
        deployed.spec.write_text(original)
        users_file.unlink(missing_ok=True)
