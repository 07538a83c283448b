"""gpuclus reset on the deployed sandbox, then a deploy from scratch (issue 17, teardown).

Named to run last: it tears the shared cluster down. Checked for real on
every node: the units are gone or stopped and disabled, the packages purged,
/etc/slurm, /etc/enroot, Pyxis' plugin, /var/lib/gpuclus (every role's
record of what it installed), the deploy stamp and the cluster's /etc/hosts
lines removed, while a file in the admin user's home and one in /shared (the
NFS export) survive. A second reset changes nothing. Then a deploy from
scratch of base, NFS and Slurm (the controller forgot what it applied; every
node's records are gone) gives a cluster where `srun -N2` runs. It deploys
only those phases for CI's time (a fresh deploy of containers and monitoring
costs minutes of both cores): the other phases' fresh deploy is the suite's
first deploy, on nodes in the state the checks above prove reset leaves. So
the cluster is not whole when the session ends; `gpuclus deploy` makes it so.
The times of the reset, the no-change reset and the redeploy are printed.
"""

from __future__ import annotations

import json
import time

from cluster_helpers import ARTIFACTS_DIR, GPU1, GPU2, HEAD, Cluster, gpuclus

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.state import StateDir

KEEP_HOME = f"/home/{ADMIN_USER}/reset-keep.txt"
KEEP_SHARED = "/shared/reset-keep.txt"
GPUCLUS_PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "munge", "prometheus", "prometheus-node-exporter", "chrony")
PRESERVED_PACKAGES = ("openssh-server", "sudo", "python3")
REDEPLOYED = "base,nfs,slurm"  # the phases the deploy from scratch runs (see above)

# One line per finding on the node: "unit X active|enabled", "pkg X", "path X".
_PROBE = (
    "for u in slurmctld slurmd slurmdbd munge prometheus prometheus-node-exporter chrony mariadb; do "
    "systemctl is-active --quiet $u && echo unit $u active; "
    "systemctl is-enabled --quiet $u 2>/dev/null && echo unit $u enabled; done; "
    "for p in " + " ".join(GPUCLUS_PACKAGES) + " enroot mariadb-server; do "
    "dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q 'install ok installed' && echo pkg $p; done; "
    "for f in /etc/slurm /etc/munge /var/lib/gpuclus /var/lib/mysql /etc/ssh/ssh_known_hosts /usr/bin/enroot "
    "/etc/enroot /opt/gpuclus /usr/local/sbin/gpuclus-healthcheck /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so; "
    "do test -e $f && echo path $f; done; true"
)


def test_reset_removes_gpuclus_keeps_user_data_and_deploy_builds_it_again(deployed: Cluster) -> None:
    deployed.on(HEAD, f"echo mine > {KEEP_HOME}")
    deployed.on(HEAD, f"echo ours | sudo tee {KEEP_SHARED} >/dev/null")
    if ARTIFACTS_DIR is not None:
        deployed.on(GPU1, "command -v enroot && test -e /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so")

    started = time.monotonic()
    done = gpuclus("reset", str(deployed.spec), "--yes", "--json")
    reset_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["full"] is True and report["changed"] > 0 and report["phases_requested"] == ["reset"]
    assert report["forgot_last_applied"] is True
    assert not (StateDir.beside(deployed.spec).root / "last-applied").exists()

    for node in (HEAD, GPU1, GPU2):
        left = deployed.on(node, _PROBE).stdout.split("\n")
        assert [line for line in left if line] == [], f"{node} still has: {left}"
        hosts = deployed.on(node, "cat /etc/hosts").stdout
        others = [name for name in (HEAD, GPU1, GPU2) if name != node]
        assert not any(name in hosts for name in others), f"{node}: /etc/hosts keeps the cluster: {hosts}"
        kept = deployed.on(node, "dpkg-query -W -f='${Package}\\n' " + " ".join(PRESERVED_PACKAGES)).stdout.split()
        assert sorted(kept) == sorted(PRESERVED_PACKAGES)
    assert deployed.on(HEAD, f"cat {KEEP_HOME}").stdout.strip() == "mine"
    assert deployed.on(HEAD, f"cat {KEEP_SHARED}").stdout.strip() == "ours"

    started = time.monotonic()
    again = gpuclus("reset", str(deployed.spec), "--yes", "--json")
    again_s = time.monotonic() - started
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert json.loads(again.stdout)["changed"] == 0, "a second reset must change nothing"

    started = time.monotonic()
    redeploy = gpuclus("deploy", str(deployed.spec), "--only", REDEPLOYED, "--json", timeout=2400)
    redeploy_s = time.monotonic() - started
    assert redeploy.returncode == 0, redeploy.stdout[-4000:] + redeploy.stderr[-4000:]
    report = json.loads(redeploy.stdout)
    assert [phase["name"] for phase in report["phases"]] == REDEPLOYED.split(",")
    # From scratch: every node had things to install and configure again.
    assert all(report["hosts"][node]["changed"] > 0 for node in (HEAD, GPU1, GPU2)), report["hosts"]
    hostnames = deployed.on(HEAD, "srun -N2 --ntasks-per-node=1 hostname", timeout=180).stdout.split()
    assert sorted(hostnames) == sorted([GPU1, GPU2])
    assert deployed.on(HEAD, f"cat {KEEP_SHARED}").stdout.strip() == "ours"
    deployed.on(HEAD, f"rm -f {KEEP_HOME}; sudo rm -f {KEEP_SHARED}")
    print(
        f"\nreset of 3 nodes {reset_s:.0f} s, no-change reset {again_s:.0f} s, "
        f"deploy from scratch of {REDEPLOYED} after it {redeploy_s:.0f} s"
    )
