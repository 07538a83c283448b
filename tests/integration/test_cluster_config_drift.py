"""validate's config stage on the deployed sandbox: hand edits after the deploy are named per node and file.

Two edits an admin might make by hand, on two different nodes: a comment
appended to one compute node's cgroup.conf, and a line at the top of another
node's /etc/hosts that sends a third node's name elsewhere. `validate --only
config` must fail naming exactly those nodes, files and name, with `gpuclus
deploy` as the repair, and pass again once the saved originals are back. No
deploy here: the files are restored by copying the originals back (`cp -p`
writes into the file, which also suits an /etc/hosts the engine bind-mounts).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from cluster_helpers import GPU1, GPU2, HEAD, Cluster, gpuclus

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]

CGROUP_CONF = "/etc/slurm/cgroup.conf"
HOSTS = "/etc/hosts"
# Where the originals wait while the files are edited (on the node that was edited).
SAVED_CGROUP = "/var/tmp/gpuclus-drift-cgroup.conf"
SAVED_HOSTS = "/var/tmp/gpuclus-drift-hosts"
# TEST-NET-1 (RFC 5737): an address no node has.
BOGUS_ADDRESS = "192.0.2.1"


def validate_config(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    result = gpuclus("validate", str(cluster.spec), "--only", "config", "--json", timeout=300)
    try:
        return result.returncode, json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"validate printed no JSON (exit {result.returncode}): {result.stdout[-2000:]}{result.stderr}")


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {check["id"]: check["status"] for check in report["checks"]}


def test_hand_edits_after_the_deploy_are_named_and_pass_again_once_undone(deployed: Cluster) -> None:
    cluster = deployed
    code, report = validate_config(cluster)
    assert (code, report["failures"]) == (0, []), report["failures"]
    # The sandbox serves NFS with ganesha: nothing is mounted, so config.mounts says why it skips.
    assert statuses(report) == {
        "config.files": "pass",
        "config.names": "pass",
        "config.clock": "pass",
        "config.mounts": "skip",
        "config.services": "pass",
    }
    nodes = {node["node"] for check in report["checks"] for node in check["nodes"]}
    assert nodes == {HEAD, GPU1, GPU2}  # every node of the spec, not only the compute nodes

    cluster.on(GPU1, f"sudo cp -p {CGROUP_CONF} {SAVED_CGROUP}")
    cluster.on(GPU2, f"sudo cp -p {HOSTS} {SAVED_HOSTS}")
    try:
        cluster.on(GPU1, f"echo '# tuned by hand' | sudo tee -a {CGROUP_CONF} >/dev/null")
        # First in the file, so it wins the lookup; written in place, not renamed over.
        cluster.on(GPU2, f"{{ echo '{BOGUS_ADDRESS} {GPU1}'; cat {SAVED_HOSTS}; }} | sudo tee {HOSTS} >/dev/null")

        code, report = validate_config(cluster)
        assert code == 1
        failures = {(failure["check"], failure["node"]): failure for failure in report["failures"]}
        assert set(failures) == {("config.files", GPU1), ("config.files", GPU2), ("config.names", GPU2)}
        assert failures[("config.files", GPU1)]["message"].startswith(f"{CGROUP_CONF} differs from {GPU2}'s copy")
        assert failures[("config.files", GPU2)]["message"].startswith(f"{HOSTS} differs from {HEAD}'s copy")
        # getent lists every address the hosts file gives the name: the bogus line's and the managed one.
        names = failures[("config.names", GPU2)]["message"]
        assert names.startswith(f"{GPU1} resolves to ") and BOGUS_ADDRESS in names, names
        assert names.endswith(f"; the spec says {cluster.addresses[GPU1]}"), names
        for failure in failures.values():
            assert f"`gpuclus deploy {cluster.spec}`" in failure["hint"], failure
    finally:
        cluster.on(GPU1, f"sudo cp -p {SAVED_CGROUP} {CGROUP_CONF} && sudo rm -f {SAVED_CGROUP}")
        cluster.on(GPU2, f"sudo cp -p {SAVED_HOSTS} {HOSTS} && sudo rm -f {SAVED_HOSTS}")

    code, report = validate_config(cluster)
    assert (code, report["failures"]) == (0, []), report["failures"]
