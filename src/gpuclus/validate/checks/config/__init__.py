"""Stage "config": each node's view of the cluster against the spec and against its peers.

Drift made by hand after a deploy (a file edited on one node, a service
stopped, a wrong /etc/hosts line, a clock left to run) is named per node with
the file, name or unit that differs, and `gpuclus deploy` as the repair. The
stage needs no Slurm: one survey script per node over SSH (``survey``) feeds
every check, and pure judges read its answers.

``expected`` says what the spec wants on each node (files and which nodes must
hold the same copy, names, mounts, units); ``survey`` asks the nodes once per
run; ``files``, ``names``, ``clock``, ``mounts`` and ``services`` are the checks.
docs/validate.md explains each rule.
"""

from __future__ import annotations

from gpuclus.validate.check import Check
from gpuclus.validate.checks.config.clock import clocks_agree
from gpuclus.validate.checks.config.files import files_agree
from gpuclus.validate.checks.config.mounts import exports_mounted
from gpuclus.validate.checks.config.names import names_resolve
from gpuclus.validate.checks.config.services import services_running
from gpuclus.validate.results import Level

# Every check reads the same survey, so the cheap ones cost nothing more: all but the mounts are quick
# (the mounts may wait for a hung NFS server, up to MOUNT_TOUCH_S per mount point). None needs Slurm
# (needs_slurm False): they run when slurmctld is down too.
CHECKS = [
    Check("config.files", Level.QUICK, "rendered files equal their peers' and the spec", files_agree, False),
    Check("config.names", Level.QUICK, "every node resolves every cluster name as the spec says", names_resolve, False),
    Check("config.clock", Level.QUICK, "every node's clock agrees with the controller's", clocks_agree, False),
    Check("config.mounts", Level.STANDARD, "NFS clients have every export mounted", exports_mounted, False),
    Check("config.services", Level.QUICK, "gpuclus' services are enabled and active", services_running, False),
]
