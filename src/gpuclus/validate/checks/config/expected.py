"""What the spec says every node holds: the files gpuclus renders, the names it resolves, its mounts and services.

Pure: from a checked spec and its topology to rules the survey asks each node
about and the judges compare with. Who holds which file, and which copies must
be identical, follows the roles that write them:

- base: /etc/hosts on every node (the same everywhere); chrony's config, where
  the controller is the time server (its file is its own) and every other node
  follows it (one file for all of them, but rtcsync only outside containers);
  chrony's options file, which differs only in and out of containers.
- munge: /etc/munge/munge.key, the same on every Slurm node (root-only).
- slurm_common: slurm.conf on every Slurm node (the same everywhere);
  cgroup.conf and gres.conf on compute nodes only. cgroup.conf is the same
  everywhere; gres.conf depends on the node's GPUs and names the node in a
  comment, so it is compared among nodes with the same GPUs, its name blanked.
- nfs_server: /etc/exports (kernel server) or /etc/ganesha/ganesha.conf.

Where the Debian and RedHat families differ (chrony's paths, unit names), every
candidate is listed and the node's own answer picks the one that exists, as
the roles' vars/<os_family>.yml pick them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuclus.spec import hostlist, services
from gpuclus.spec.failover import backup_controller
from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.services import SLURM_ROLES, Service, nfs_server
from gpuclus.spec.topology import Node, Topology
from gpuclus.yamldoc.grammar import full_match

# roles/deploy_stamp: written last by every full deploy. A file changed after it was changed by hand
# (or by a partial deploy since), which breaks a tie between two copies.
DEPLOY_STAMP = "/var/lib/gpuclus/deployed.json"

# A judge of one node's copy: (the file's text, the node holding it) -> what differs from the spec.
ContentJudge = Callable[[str, Node], list[str]]
# Which copies must be identical: a key per node (its survey says whether it runs in a container);
# None: the node's copy has no peer and is compared with the spec only.
PeerGroup = Callable[[Node, bool], str | None]


@dataclass(frozen=True)
class FileRule:
    key: str  # stable name in the survey's output
    paths: tuple[str, ...]  # where the file is; the first that exists (the OS families differ)
    holders: tuple[str, ...]  # the nodes that must hold it, in spec order
    peers: PeerGroup
    root_only: bool = False  # read with `sudo -n` (the admin user cannot)
    secret: bool = False  # hashed with a salt of this run; neither its content nor its hash is ever shown
    names_its_node: bool = False  # the node's own name is in it: blanked before hashing
    shown_on: frozenset[str] = frozenset()  # nodes that also print it, for its judge
    judge: ContentJudge | None = None  # its content against the spec

    @property
    def path(self) -> str:
        """How a message names the file when the node's own answer does not say which path it has."""
        return self.paths[0] if len(self.paths) == 1 else f"{self.paths[0]} (or {', '.join(self.paths[1:])})"


def _everyone(node: Node, in_container: bool) -> str:
    return "every holder"


def _own(node: Node, in_container: bool) -> None:
    return None


def file_rules(spec: ClusterSpec, topology: Topology) -> list[FileRule]:
    controller = topology.controller
    assert controller is not None  # a checked spec has one
    every = tuple(node.name for node in topology.nodes)
    slurm_nodes = tuple(node.name for node in topology.nodes if node.roles & SLURM_ROLES)
    compute = tuple(node.name for node in topology.compute)
    rules = [
        FileRule("hosts", ("/etc/hosts",), every, _everyone, shown_on=frozenset({controller.name}),
                 judge=lambda text, node: hosts_problems(text, topology)),
        FileRule("slurm.conf", ("/etc/slurm/slurm.conf",), slurm_nodes, _everyone,
                 shown_on=frozenset({controller.name}),
                 judge=lambda text, node: slurm_conf_problems(text, spec, topology)),
        FileRule("munge.key", ("/etc/munge/munge.key",), slurm_nodes, _everyone, root_only=True, secret=True),
        FileRule("cgroup.conf", ("/etc/slurm/cgroup.conf",), compute, _everyone),
        FileRule("gres.conf", ("/etc/slurm/gres.conf",), compute, _same_gpus, names_its_node=True,
                 shown_on=frozenset(compute), judge=gres_conf_problems),
        # roles/base/vars: Debian and Ubuntu, then the RedHat family.
        FileRule("chrony.conf", ("/etc/chrony/chrony.conf", "/etc/chrony.conf"), every,
                 lambda node, in_container: _chrony_group(node, in_container, controller.name),
                 shown_on=frozenset(every),
                 judge=lambda text, node: chrony_problems(text, node, topology)),
        FileRule("chrony.options", ("/etc/default/chrony", "/etc/sysconfig/chronyd"), every,
                 lambda node, in_container: "in a container" if in_container else "not in a container"),
    ]  # fmt: skip
    server = nfs_server(spec, topology)
    if server is not None:
        kernel = spec.nfs.server_impl == "kernel"
        paths = ("/etc/exports",) if kernel else ("/etc/ganesha/ganesha.conf",)
        rules.append(
            FileRule(
                "exports",
                paths,
                (server.name,),
                _own,
                shown_on=frozenset({server.name}),
                judge=lambda text, node: exports_problems(text, spec, kernel=kernel),
            )
        )
    return rules


def _same_gpus(node: Node, in_container: bool) -> str:
    # gres.conf.j2 writes one file per GPU count, model and fake flag.
    if node.gpus is None:
        return "compute nodes without GPUs"
    model = f" {node.gpus.model}" if node.gpus.model else ""
    fake = " fake" if node.gpus.fake else ""
    return f"compute nodes with {node.gpus.count}{model}{fake} GPU(s)"


def _chrony_group(node: Node, in_container: bool, time_server: str) -> str | None:
    # chrony.conf.j2: the time server's file is its own; the others' differ only by rtcsync,
    # which the role writes where chronyd may set the clock (not in a container).
    if node.name == time_server:
        return None
    return "time clients in a container" if in_container else "time clients"


# --- the rendered files read back against the spec -------------------------------------------


def _lines(text: str) -> list[str]:
    """Non-empty lines with their comments (from '#') removed."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            found.append(line)
    return found


def hosts_problems(text: str, topology: Topology) -> list[str]:
    """Every spec node's name with its address, as roles/base/templates/etc/hosts.j2 writes it."""
    listed: dict[str, list[str]] = {}
    for line in _lines(text):
        address, *names = line.split()
        for name in names:
            listed.setdefault(name, []).append(address)
    problems = []
    for node in topology.nodes:
        addresses = listed.get(node.name)
        if not addresses:
            problems.append(f"{node.name} is not listed")
        elif addresses[0] != node.address:
            problems.append(f"{node.name} is listed as {addresses[0]}, the spec says {node.address}")
        elif len(set(addresses)) > 1:
            others = ", ".join(sorted(set(addresses) - {node.address}))
            problems.append(f"{node.name} is listed again as {others} (the spec says {node.address})")
    return problems


def _slurm_words(line: str) -> dict[str, str]:
    """``Key=value`` words of a slurm.conf line, keys lowercased (Slurm reads them case-insensitively)."""
    words = {}
    for word in line.split():
        key, sep, value = word.partition("=")
        if sep:
            words[key.lower()] = value
    return words


def slurm_conf_problems(text: str, spec: ClusterSpec, topology: Topology) -> list[str]:
    """The cluster name, the controller and every compute node's address, as slurm.conf.j2 writes them."""
    controller = topology.controller
    assert controller is not None
    settings: dict[str, str] = {}
    ctld_hosts: list[str] = []  # SlurmctldHost is given once per controller, the primary first
    node_addresses: dict[str, str] = {}
    for line in _lines(text):
        words = _slurm_words(line)
        if "slurmctldhost" in words:
            ctld_hosts.append(words["slurmctldhost"])
        elif "nodename" in words:
            if words["nodename"].upper() != "DEFAULT":  # Slurm's defaults line, not a node
                node_addresses[words["nodename"]] = words.get("nodeaddr", words["nodename"])
        elif "partitionname" not in words:
            settings.update(words)
    problems = []
    want_name = spec.cluster.name.lower()  # Slurm lowercases it; the role writes it so
    if settings.get("clustername") != want_name:
        problems.append(f"ClusterName is {settings.get('clustername', '(missing)')}, the spec says {want_name}")
    backup = backup_controller(topology)
    want_hosts = [f"{node.name}({node.address})" for node in (controller, backup) if node is not None]
    if ctld_hosts != want_hosts:
        problems.append(
            f"SlurmctldHost is {', '.join(ctld_hosts) or '(missing)'}, the spec says {', '.join(want_hosts)}"
        )
    for node in topology.compute:
        address = node_addresses.pop(node.name, None)
        if address is None:
            problems.append(f"no NodeName line for {node.name}")
        elif address != node.address:
            problems.append(f"NodeName={node.name} has NodeAddr={address}, the spec says {node.address}")
    problems += [f"NodeName={name} is not a compute node in the spec" for name in sorted(node_addresses)]
    return problems


def gres_conf_problems(text: str, node: Node) -> list[str]:
    """The node's GPU count and model, as gres.conf.j2 writes them (NVML autodetection counts for itself)."""
    gpu_lines = [_slurm_words(line) for line in _lines(text)]
    autodetect = {words["autodetect"].lower() for words in gpu_lines if "autodetect" in words}
    gpu_lines = [words for words in gpu_lines if words.get("name") == "gpu"]
    want = node.gpu_count
    if want == 0:
        return [f"lists GPUs ({len(gpu_lines)} Name=gpu line(s)); the spec gives {node.name} none"] if gpu_lines else []
    problems = []
    if not gpu_lines and autodetect != {"nvml"}:
        return [f"lists no GPUs; the spec gives {node.name} {want}"]
    if gpu_lines:
        counted = sum(_gres_count(words) for words in gpu_lines)
        if counted != want:
            problems.append(f"lists {counted} GPU(s); the spec gives {node.name} {want}")
    model = node.gpus.model if node.gpus else None
    if model:
        types = sorted({words.get("type", "(none)") for words in gpu_lines if words.get("type") != model})
        problems += [f"has GPU Type={kind}, the spec says {model}" for kind in types]
    return problems


def _gres_count(words: dict[str, str]) -> int:
    if "count" in words and words["count"].isdigit():
        return int(words["count"])
    try:
        return len(hostlist.expand(words.get("file", "")))
    except hostlist.HostlistError:
        return 0


def chrony_problems(text: str, node: Node, topology: Topology) -> list[str]:
    """The controller serves time to every other node; every other node follows it (chrony.conf.j2)."""
    controller = topology.controller
    assert controller is not None
    directives = [line.split() for line in _lines(text)]
    if node.name == controller.name:
        allowed = {words[1] for words in directives if len(words) > 1 and words[0] == "allow"}
        return [
            f"does not allow {other.name} ({other.address}) to ask it the time"
            for other in topology.nodes
            if other.name != node.name and other.address not in allowed
        ]
    servers = [words[1] for words in directives if len(words) > 1 and words[0] in ("server", "pool")]
    if controller.address not in servers:
        found = ", ".join(servers) or "none"
        return [f"does not follow the controller {controller.name} ({controller.address}); its sources: {found}"]
    return []


_GANESHA_PATH = re.compile(r'^\s*Path\s*=\s*"([^"]*)"\s*;', re.MULTILINE)


def exports_problems(text: str, spec: ClusterSpec, *, kernel: bool) -> list[str]:
    """Every export path of the spec, in /etc/exports (exports.j2) or a ganesha EXPORT block (ganesha.conf.j2)."""
    exported = {line.split()[0] for line in _lines(text)} if kernel else set(_GANESHA_PATH.findall(text))
    return [f"does not export {export.path}" for export in spec.nfs.exports if export.path not in exported]


# --- names, mounts and services --------------------------------------------------------------


def is_ipv4(address: str) -> bool:
    return full_match(r"\d{1,3}(\.\d{1,3}){3}", address)


def names_to_resolve(topology: Topology) -> list[str]:
    """Every spec node's name, and every address that is a DNS name (whose own answer is then the one wanted)."""
    names = [node.name for node in topology.nodes]
    return names + [node.address for node in topology.nodes if not is_ipv4(node.address) and node.address not in names]


@dataclass(frozen=True)
class Mount:
    point: str  # where the node mounts it
    source: str  # server:path, as roles/nfs_client writes it into fstab


def mounts_for(node: Node, spec: ClusterSpec, topology: Topology) -> list[Mount]:
    """The exports a node mounts: every node but the server, with the kernel server only.

    roles/nfs_client mounts (state mounted) with nfs.server_impl kernel; with
    ganesha it writes the fstab lines and mounts nothing (the sandbox's kernel
    has no NFS client).
    """
    server = nfs_server(spec, topology)
    if server is None or node.name == server.name or spec.nfs.server_impl != "kernel":
        return []
    return [Mount(export.mount_point, f"{server.address}:{export.path}") for export in spec.nfs.exports]


@dataclass(frozen=True)
class ServicePlan:
    services: list[Service] = field(default_factory=list)

    @property
    def units(self) -> list[str]:
        return [unit for service in self.services for unit in service.units]

    @property
    def markers(self) -> list[str]:
        return [service.skipped_when for service in self.services if service.skipped_when]


def services_for(node: Node, spec: ClusterSpec, topology: Topology) -> ServicePlan:
    """The units the roles enable and start on ``node``: spec/services' one answer, which status reads too."""
    return ServicePlan(services.services_for(node, spec, topology))
