"""Stand-in nodes for validate's config stage: each node's files, units, mounts and clock as data.

``FakeCluster.answer`` plays the controller's side of one survey line (see
gpuclus.validate.checks.config.survey): it finds the node the line goes to,
builds the request gpuclus builds for it, and prints what the survey script
prints on a node in that state. A test changes one node's state (a file
edited, a unit stopped) to break one thing.

The file texts are what the roles' templates render for the sandbox's spec
(val-head: controller, NFS server with ganesha, monitoring and login;
val-gpu01/02: compute with 2 fake GPUs; all podman containers sharing one
kernel and clock). They are written from roles/*/templates, not recorded.
test_validate_config.py runs the real script on this machine once and holds
this emulation to it.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field

from validate_stubs import COMPUTE, HEAD, SANDBOX_SPEC, load, target

from gpuclus.spec.services import GRAFANA_SKIPPED
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.checks.config import expected
from gpuclus.validate.checks.config.survey import Request, request_for

# When the deploy wrote the files, and its stamp a little later (a full deploy writes the stamp last).
DEPLOYED_AT = 1_795_500_000
STAMPED_AT = DEPLOYED_AT + 120
# A hand edit after the deploy.
EDITED_AT = DEPLOYED_AT + 86_400
# The controller's clock at the first exchange, and how long the SSH connection takes (the first answer).
NOW = 1_795_526_723.25
CONNECT_S = 0.180
ROUND_TRIP_S = 0.0021

HOSTS = """\
# managed by gpuclus — edits are overwritten (base role; add lines with base_hosts_extra)
127.0.0.1 localhost
::1 localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters

# cluster nodes: one line per node, from the spec (gpuclus_nodes)
10.213.0.10 val-head
10.213.0.11 val-gpu01
10.213.0.12 val-gpu02
"""

SLURM_CONF = """\
# managed by gpuclus — edits are overwritten
#
# Slurm configuration of cluster val, identical on every node. Built
# from the gpuclus inventory: node CPUs and memory from cluster.yaml, or from
# `slurmd -C` on each compute node (RealMemory less 2%).
AccountingStorageHost=10.213.0.10
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
AccountingStorageType=accounting_storage/slurmdbd
AuthType=auth/munge
ClusterName=val
CredType=cred/munge
DefMemPerCPU=11811
Epilog=/etc/slurm/epilog.d/*
GresTypes=gpu
InactiveLimit=0
JobAcctGatherFrequency=30
JobAcctGatherType=jobacct_gather/cgroup
JobCompType=jobcomp/none
KillWait=30
MinJobAge=300
MpiDefault=pmix
ProctrackType=proctrack/cgroup
Prolog=/etc/slurm/prolog.d/*
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmctldHost=val-head(10.213.0.10)
SlurmctldHost=val-gpu01(10.213.0.11)
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmctldPort=6817
SlurmctldTimeout=10
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdPidFile=/run/slurmd.pid
SlurmdPort=6818
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmdTimeout=300
SlurmUser=slurm
StateSaveLocation=/srv/nfs/shared/slurm/state
SwitchType=switch/none
TaskPlugin=task/affinity,task/cgroup
Waittime=0

# Compute nodes
NodeName=val-gpu01 NodeAddr=10.213.0.11 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 \
RealMemory=23622 Gres=gpu:2 State=UNKNOWN
NodeName=val-gpu02 NodeAddr=10.213.0.12 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 \
RealMemory=23622 Gres=gpu:2 State=UNKNOWN

# Partitions
PartitionName=gpu Nodes=val-gpu[01-02] Default=YES MaxTime=UNLIMITED State=UP
"""

CGROUP_CONF = """\
# managed by gpuclus — edits are overwritten
#
# Confine each job to the cores, memory and devices (GPUs) it was given.
# CgroupPlugin is left to Slurm's autodetection (cgroup v1 or v2).
ConstrainCores=yes
ConstrainDevices=yes
ConstrainRAMSpace=yes
"""

GRES_CONF_FAKE = """\
# managed by gpuclus — edits are overwritten
#
# Device nodes listed by hand: the GPUs are fake (no driver).
AutoDetect=off
Name=gpu File=/dev/nvidia[0-1]
"""

# Not a real key: 1024 bytes of text standing in for one. It must never show in any result.
MUNGE_KEY = hashlib.sha512(b"the sandbox's munge key").hexdigest() * 8

# What the base role writes the same into chrony.conf on the time server and on its clients.
_CHRONY_SHARED = """\
confdir /etc/chrony/conf.d
driftfile /var/lib/chrony/chrony.drift
keyfile /etc/chrony/chrony.keys
logdir /var/log/chrony
maxupdateskew 100.0
# Step the clock at start-up when it is more than 1 s off, then only slew.
makestep 1 3
leapsectz right/UTC
# No clock control here (chronyd -x, see the options file): no rtcsync.
"""

CHRONY_TIME_SERVER = (
    """\
# managed by gpuclus — edits are overwritten (base role)
# val-head is the cluster's time server: it follows the
# upstream sources below and serves time to the cluster's nodes.
pool pool.ntp.org iburst maxsources 4
# Without any reachable upstream source it serves its own clock, so the
# nodes still agree with each other.
local stratum 10
allow 10.213.0.11
allow 10.213.0.12

"""
    + _CHRONY_SHARED
)

CHRONY_CLIENT = (
    """\
# managed by gpuclus — edits are overwritten (base role)
# Every node follows the cluster's time server, val-head.
server 10.213.0.10 iburst prefer

"""
    + _CHRONY_SHARED
)

CHRONY_OPTIONS_CONTAINER = """\
# managed by gpuclus — edits are overwritten (base role)
# Options for chronyd, read by its systemd unit.
# -x: no clock control. This node is a container sharing its host's kernel
# (or base_chrony_clock_control is "disabled"): chronyd still measures and
# serves time but never sets or slews the clock.
DAEMON_OPTS="-F 1 -x"
"""

GANESHA_CONF = """\
# managed by gpuclus — edits are overwritten
#
# nfs-ganesha (user-space NFS server, FSAL VFS) for cluster val.
# One EXPORT per entry of gpuclus_nfs_exports; the /etc/exports-style options
# are mapped onto access type, squash, anonymous ids and security flavours.
# nfs-ganesha is restarted when this file changes.

NFS_CORE_PARAM {
    Protocols = 3, 4;
}

NFSV4 {
    Grace_Period = 90;
    Lease_Lifetime = 60;
}

EXPORT {
    Export_Id = 1;
    Path = "/srv/nfs/shared";
    Pseudo = "/srv/nfs/shared";
    Protocols = 3, 4;
    Transports = TCP;
    # Nobody but the CLIENT list below.
    Access_Type = None;
    FSAL {
        Name = VFS;
    }
    CLIENT {
        Clients = 10.213.0.11, 10.213.0.12;
        Access_Type = RW;
        Squash = Root_Squash;
        SecType = sys;
    }
}
"""

ENABLED_ACTIVE = ("loaded", "enabled", "active")
HEAD_UNITS = dict.fromkeys(
    (
        "chrony",
        "munge",
        "slurmctld",
        "slurmdbd",
        "mariadb",
        "nfs-ganesha",
        "prometheus-node-exporter",
        "gpuclus-slurm-metrics.timer",
        "prometheus",
        "prometheus-alertmanager",
    ),
    ENABLED_ACTIVE,
)
COMPUTE_UNITS = dict.fromkeys(("chrony", "munge", "slurmd", "prometheus-node-exporter"), ENABLED_ACTIVE)


@dataclass
class FakeNode:
    files: dict[str, str]  # path -> text
    units: dict[str, tuple[str, str, str]]  # unit -> (LoadState, UnitFileState, ActiveState)
    mtimes: dict[str, int] = field(default_factory=dict)  # path -> mtime; DEPLOYED_AT when absent
    markers: set[str] = field(default_factory=set)  # files that exist, for Request.markers
    virt: str = "podman"
    chrony: str | None = "0.000000451 seconds fast of NTP time"
    offset_s: float = 0.0  # its clock minus the controller's
    # /proc/mounts lines (source, point, fstype) before a touch, and those a touch adds (an automount).
    mounts: list[tuple[str, str, str]] = field(default_factory=list)
    mounted_on_touch: list[tuple[str, str, str]] = field(default_factory=list)
    touch_status: dict[str, int] = field(default_factory=dict)  # mount point -> stat's exit status
    sudo: bool = True  # `sudo -n` works (the admin user's passwordless sudo)
    reachable: bool = True
    stops_after: str | None = None  # the survey is cut off after the first line starting with this

    def edit(self, path: str, text: str, at: int = EDITED_AT) -> None:
        """A hand edit: new text, a new mtime (after the deploy stamp)."""
        self.files[path] = text
        self.mtimes[path] = at


def sandbox_nodes() -> dict[str, FakeNode]:
    """The healthy, deployed sandbox."""
    common = {
        "/etc/hosts": HOSTS,
        "/etc/default/chrony": CHRONY_OPTIONS_CONTAINER,
        expected.DEPLOY_STAMP: '{"render_sha256": "ab12...", "gpuclus_version": "0.9.0"}\n',
    }
    slurm = {"/etc/slurm/slurm.conf": SLURM_CONF, "/etc/munge/munge.key": MUNGE_KEY}
    head = FakeNode(
        {**common, **slurm, "/etc/chrony/chrony.conf": CHRONY_TIME_SERVER, "/etc/ganesha/ganesha.conf": GANESHA_CONF},
        # Grafana's repository is out of the sandbox's reach: the deploy skipped it and says so on the node.
        dict(HEAD_UNITS),
        markers={GRAFANA_SKIPPED},
    )
    nodes = {HEAD: head}
    for name in COMPUTE:
        nodes[name] = FakeNode(
            {
                **common,
                **slurm,
                "/etc/chrony/chrony.conf": CHRONY_CLIENT,
                "/etc/slurm/cgroup.conf": CGROUP_CONF,
                "/etc/slurm/gres.conf": GRES_CONF_FAKE,
            },
            dict(COMPUTE_UNITS),
        )
    # The first compute node is the backup controller (from 3 nodes on).
    nodes[COMPUTE[0]].units["slurmctld"] = ENABLED_ACTIVE
    for node in nodes.values():
        node.mtimes[expected.DEPLOY_STAMP] = STAMPED_AT
    return nodes


_SALT = re.compile(r"file_state munge\.key ([0-9a-f]{32})")


class FakeCluster:
    """Answers survey lines from the nodes' state; records the requests it answered."""

    def __init__(self, spec_text: str = SANDBOX_SPEC, nodes: dict[str, FakeNode] | None = None) -> None:
        self.spec_text = spec_text
        self.nodes = nodes if nodes is not None else sandbox_nodes()
        self.requests: dict[str, Request] = {}
        loaded = load(spec_text)
        assert loaded.spec is not None and loaded.topology is not None
        self.spec, self.topology = loaded.spec, loaded.topology
        self._rules = expected.file_rules(loaded.spec, loaded.topology)

    def node(self, name: str) -> FakeNode:
        return self.nodes[name]

    def request(self, name: str, command: str) -> Request:
        # What gpuclus asks this node (the same pure function), with the salt the line carries.
        salt = _SALT.search(command)
        node = self.topology.by_name()[name]
        return request_for(self.spec, self.topology, node, self._rules, salt.group(1) if salt else "")

    def answer(self, command: str) -> CommandResult:
        name = target(command)
        node = self.nodes[name]
        if not node.reachable:
            return CommandResult(255, "", f"ssh: connect to host {name} port 22: Connection timed out\n")
        request = self.request(name, command)
        self.requests[name] = request
        text = survey_output(request, node)
        if node.stops_after is not None:
            kept = []
            for line in text.splitlines(keepends=True):
                kept.append(line)
                if line.startswith(node.stops_after):
                    break
            return CommandResult(124, "".join(kept), "\n(gpuclus: the command did not finish in time and was cut off)")
        return CommandResult(0, text, "")


def survey_output(request: Request, node: FakeNode) -> str:
    """What the survey script (under the clock driver) prints on ``node`` for ``request``."""
    out = []
    for sample in range(4):
        before = NOW + sample * 0.01
        after = before + (CONNECT_S if sample == 0 else ROUND_TRIP_S)
        # The node reads its clock when the line arrives: late in the first exchange, mid-way in the others.
        seen = before + (CONNECT_S - 0.0009 if sample == 0 else ROUND_TRIP_S / 2)
        out.append(f"clock\t{before:.6f}\t{seen + node.offset_s:.9f}\t{after:.6f}\n")
    out.append(_file_line("stamp", (expected.DEPLOY_STAMP,), node, salt="", blank=""))
    for rule in request.files:
        if rule.root_only and not node.sudo:
            out.append(f"file\t{rule.key}\t-\tunreadable\tsudo -n was refused\n")
            continue
        blank = request.node if rule.names_its_node else ""
        out.append(_file_line(rule.key, rule.paths, node, request.salt if rule.secret else "", blank))
    for rule in request.shown:
        path = next((path for path in rule.paths if path in node.files), None)
        if path is not None:
            out.append(f"begin\t{rule.key}\n")
            out += [f"|{line}\n" for line in node.files[path].splitlines()]
            out.append(f"end\t{rule.key}\n")
    out.append(f"virt\t{node.virt}\n")
    if node.chrony:
        out.append(f"chrony\t{node.chrony}\n")
    for unit in request.units:
        load_state, file_state, active = node.units.get(unit, ("not-found", "", "inactive"))
        out.append(f"unit\t{unit}\tLoadState={load_state} UnitFileState={file_state} ActiveState={active} \n")
    out += [f"exists\t{marker}\n" for marker in request.markers if marker in node.markers]
    if request.mounts:
        mounted = list(node.mounts)
        for mount in request.mounts:
            status = node.touch_status.get(mount.point, 0)
            out.append(f"touch\t{mount.point}\t{status}\n")
            if status == 0:
                mounted += [entry for entry in node.mounted_on_touch if entry[1] == mount.point]
        points = {mount.point for mount in request.mounts}
        out += [f"mount\t{point}\t{fstype}\t{source}\n" for source, point, fstype in mounted if point in points]
    hosts = node.files.get("/etc/hosts", "")
    for name in request.names:
        out.append(f"name\t{name}\t{''.join(f'{address} ' for address in resolve(hosts, name))}\n")
    out.append("done\n")
    return "".join(out)


def _file_line(key: str, paths: tuple[str, ...], node: FakeNode, salt: str, blank: str) -> str:
    path = next((path for path in paths if path in node.files), None)
    if path is None:
        return f"file\t{key}\t-\tmissing\n"
    text = node.files[path].replace(blank, "@node@") if blank else node.files[path]
    digest = hashlib.sha256((salt + text).encode()).hexdigest()
    return f"file\t{key}\t{path}\t{digest}\t{node.mtimes.get(path, DEPLOYED_AT)}\n"


def resolve(hosts: str, name: str) -> list[str]:
    """What `getent ahostsv4 NAME` prints first on each line, from /etc/hosts alone (the first line naming it)."""
    for line in hosts.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) > 1 and name in words[1:] and re.fullmatch(r"[\d.]+", words[0]):
            return [words[0]] * 3  # STREAM, DGRAM and RAW
    return []


def healthy_cluster() -> FakeCluster:
    return FakeCluster(SANDBOX_SPEC, copy.deepcopy(sandbox_nodes()))
