"""Ctrl-C at random moments of a fresh deploy of the real roles: nothing survives, and a re-deploy converges.

Issue 12 item 2, on the session's cluster: with this module in the session,
the session fixture (conftest.deployed) interrupts the first deploy of its
fresh nodes three times before deploying them for real (interruptions.py):
first during base's package install (where the issue saw two orphaned
ansible-playbook processes), then after a random number of tasks. Each time:
exit 130 within seconds, the record says "interrupted" with the phase and the
hosts, and no ansible-playbook, worker, ssh client or ssh ControlPersist
master started by that run is left on this machine; while the first one
runs, a second deploy is refused naming its PID (the lock). Then the
fixture's deploy succeeds, the next one changes nothing, and Slurm and
Prometheus run on the controller with every node idle.

.ci/run runs it in the Debian 13 lane (a sandbox of its own cost a whole
fresh deploy more); `pytest tests/integration/test_deploy_faults.py` runs it
on Debian 12 nodes.
"""

from __future__ import annotations

import os

import pytest
from cluster_helpers import HEAD, Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root for privileged containers"),
]


def test_ctrl_c_at_random_moments_leaves_nothing_running_and_a_redeploy_converges(deployed: Cluster) -> None:
    interruptions = deployed.interruptions
    assert interruptions is not None, "the session fixture interrupted no deploy"
    assert interruptions.problem == "", interruptions.problem
    assert interruptions.reports and interruptions.reports[0] is not None, interruptions.reports
    assert interruptions.reports[0]["interrupted"]["phase"] == "base", interruptions.reports[0]["interrupted"]
    # The deploy after the interruptions finished every phase, and the next one changed nothing.
    assert deployed.first["status"] == "successful", deployed.first
    assert deployed.second["changed"] == 0, "the re-deploy after the interruptions did not converge"
    deployed.on(HEAD, "systemctl is-active slurmctld slurmdbd prometheus prometheus-node-exporter")
    states = deployed.on(HEAD, "sinfo --noheader --Node --format='%N %t'").stdout
    assert {line.split()[1] for line in states.splitlines() if line.strip()} == {"idle"}, states
