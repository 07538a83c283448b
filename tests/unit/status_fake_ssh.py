"""FakeSsh: stands in for gpuclus.status.collect.run_script, so status runs without nodes.

Each node's answer is the real output of status' own script on a deployed
2-node sandbox (sts-head, sts-gpu01; Debian 12, Slurm 22.05.8, Prometheus 2.42),
recorded in tests/unit/data/status/<scenario>/<node>.txt with the spec it was
recorded with (data/status/sandbox.yaml):

  healthy          every service active, Grafana skipped by the deploy (the grafana role's skip record,
                   /var/lib/gpuclus/grafana.skipped), 2 jobs running and 1 pending
  draining         sts-gpu01 drained while its jobs run (ALLOCATED+DRAIN, with a reason)
  drained          the same once the jobs were cancelled (IDLE+DRAIN)
  slurmd_stopped   slurmd and the node exporter stopped on sts-gpu01, slurmctld restarted since:
                   UNKNOWN, the target down
  slurmctld_down   slurmctld stopped on sts-head: `scontrol ping` says DOWN and nothing more is asked
  node_down        sts-gpu01 stopped altogether (podman stop), 4 minutes later: IDLE+NOT_RESPONDING,
                   the target down (no route to host); only sts-head answered (the fake raises for sts-gpu01)

slurmd_stopped, slurmctld_down and node_down were recorded with a one-line skip record written by hand,
before the grafana role existed; healthy, draining and drained with the role's own text.

The fake checks that a recorded answer answers the questions the script asks
(its sections are a subset of the script's), so the recordings cannot drift
from the script unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget
from gpuclus.status.parse import SECTION

DATA = Path(__file__).resolve().parent / "data" / "status"
SPEC = DATA / "sandbox.yaml"
HEAD, GPU01 = "sts-head", "sts-gpu01"
# The units the sandbox spec puts on its head node, in the order status shows them.
HEAD_UNITS = (
    "slurmctld",
    "slurmdbd",
    "munge",
    "prometheus-node-exporter",
    "prometheus",
    "prometheus-alertmanager",
    "grafana-server",
)
ADDRESSES = {"10.213.1.10": HEAD, "10.213.1.11": GPU01}
NO_ROUTE = "10.213.1.11:22: No route to host"


def recorded(scenario: str, node: str) -> str:
    return (DATA / scenario / f"{node}.txt").read_text()


def sections_in(text: str) -> list[str]:
    return re.findall(re.escape(SECTION) + r"(\w+)", text)


class FakeSsh:
    """Answers each node's script with a recording: one scenario for all nodes, or one per node."""

    def __init__(
        self, scenario: str | dict[str, str] = "healthy", *, unreachable: Iterable[str] = (), error: str = NO_ROUTE
    ) -> None:
        self.scenarios = scenario if isinstance(scenario, dict) else dict.fromkeys(ADDRESSES.values(), scenario)
        self.unreachable = set(unreachable)
        self.error = error
        self.scripts: dict[str, str] = {}
        self.targets: list[SshTarget] = []

    def __call__(self, target: SshTarget, script: str) -> CommandResult:
        node = ADDRESSES[target.address]
        self.targets.append(target)
        self.scripts[node] = script
        if node in self.unreachable:
            raise SshFailure(self.error)
        text = recorded(self.scenarios[node], node)
        unasked = set(sections_in(text)) - set(sections_in(script))
        assert not unasked, f"the recording of {node} answers what the script does not ask: {unasked}"
        return CommandResult(0, text, "")
