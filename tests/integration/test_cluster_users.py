"""The users phase on the deployed sandbox (issue 19, part 1): the users file's users on every node.

The spec is given `users: {file: users.yaml}` beside it, with two users whose
key pairs this test makes. `gpuclus deploy --only users` creates them; each
logs in over SSH with their own key on every node (gpuclus' SSH client, host
keys checked against the cluster's known_hosts) and has the same uid there;
a second run changes nothing; bob marked removed can no longer log in while
alice still can. The spec is restored afterwards (the accounts stay on the
nodes, bob locked), so the tests after this one see the cluster they expect.

Integration only (`.ci/run`, as root): it uses the session's deployed sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import GPU1, GPU2, HEAD, Cluster, gpuclus

from gpuclus.ssh.client import SshFailure, SshTarget, connect, run
from gpuclus.state import StateDir

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

NODES = (HEAD, GPU1, GPU2)


def users_text(keys: dict[str, str], *, bob_removed: bool) -> str:
    return f"""\
apiVersion: gpuclus/v1
kind: Users
accounts:
  - name: lab
groups:
  - name: datasets
    gid: 3000
users:
  - name: alice
    uid: 2001
    groups: [datasets]
    ssh_keys: ["{keys["alice"]}"]
    account: lab
    admin: true
  - name: bob
    uid: 2002
    gid: 2102
    ssh_keys: ["{keys["bob"]}"]
    account: lab
    removed: {str(bob_removed).lower()}
"""


def deploy_users(cluster: Cluster) -> dict[str, Any]:
    started = time.monotonic()
    result = gpuclus("deploy", str(cluster.spec), "--only", "users", "--json")
    print(f"\nusers phase of 3 nodes: {time.monotonic() - started:.0f} s")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["status"] == "successful"
    return report


def login(cluster: Cluster, node: str, user: str, key: Path) -> str:
    """`id -un; id -u` as ``user`` on ``node`` over SSH with the user's own key."""
    target = SshTarget(cluster.addresses[node], user, key, StateDir.beside(cluster.spec).known_hosts)
    client = connect(target)
    try:
        result = run(client, "id -un; id -u; id -Gn", timeout=30)
    finally:
        client.close()
    assert result.exit_status == 0, result.stderr
    return result.stdout


def test_users_from_the_users_file_log_in_on_every_node_and_a_removed_one_cannot(
    deployed: Cluster, tmp_path: Path
) -> None:
    keys: dict[str, str] = {}
    for name in ("alice", "bob"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test", "-f", str(tmp_path / name)],
            check=True,
        )
        keys[name] = (tmp_path / f"{name}.pub").read_text().strip()
    users_file = deployed.spec.parent / "users.yaml"
    original = deployed.spec.read_text()
    users_file.write_text(users_text(keys, bob_removed=False))
    deployed.spec.write_text(original + "users:\n  file: users.yaml\n")
    try:
        checked = gpuclus("spec", "check", str(deployed.spec))
        assert checked.returncode == 0, checked.stdout + checked.stderr

        first = deploy_users(deployed)
        assert first["changed"] > 0
        for node in NODES:
            entries = deployed.on(node, "getent passwd alice bob; getent group datasets").stdout.split()
            assert entries == [
                "alice:x:2001:2001::/home/alice:/bin/bash",
                "bob:x:2002:2102::/home/bob:/bin/bash",
                "datasets:x:3000:alice",
            ], f"{node}: {entries}"
            assert login(deployed, node, "alice", tmp_path / "alice").split() == ["alice", "2001", "alice", "datasets"]
            assert login(deployed, node, "bob", tmp_path / "bob").split() == ["bob", "2002", "bob"]

        again = deploy_users(deployed)
        changed = {host: stats["changed"] for host, stats in again["hosts"].items() if stats["changed"]}
        assert changed == {}, f"a second users phase changed something: {changed}"

        users_file.write_text(users_text(keys, bob_removed=True))
        deploy_users(deployed)
        for node in (HEAD, GPU1):
            with pytest.raises(SshFailure):
                login(deployed, node, "bob", tmp_path / "bob")
            assert login(deployed, node, "alice", tmp_path / "alice").split()[:2] == ["alice", "2001"]
        kept = deployed.on(GPU2, "getent passwd bob; test -d /home/bob && echo home-kept").stdout.split()
        assert kept == ["bob:x:2002:2102::/home/bob:/usr/sbin/nologin", "home-kept"]
    finally:
        deployed.spec.write_text(original)
        users_file.unlink(missing_ok=True)
