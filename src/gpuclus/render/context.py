"""The data templates render from: a checked spec turned into plain values.

Only dicts, lists, strings, numbers, booleans and None leave this module.
yaml.safe_dump cannot write a StrEnum, and keeping templates free of pydantic
models means every value that reaches a file is chosen here, in one place.
"""

from __future__ import annotations

import json
import posixpath
import unicodedata
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from gpuclus.errors import UsageError
from gpuclus.gpu_catalog import UNKNOWN, kind_for_model
from gpuclus.release_checksums import known_checksums
from gpuclus.release_files import group_vars_names
from gpuclus.secret_files import SECRETS_DIR_NAME, WEBHOOK_URL
from gpuclus.spec.failover import backup_controller, state_save_location
from gpuclus.spec.hostlist import compress
from gpuclus.spec.models import AlertReceiver, ClusterSpec, Containers, Role
from gpuclus.spec.slurm_time import wall_minutes
from gpuclus.spec.software import index_url, nccl_environment, requirements, software_layout
from gpuclus.spec.topology import Node, Topology, slurm_partitions
from gpuclus.templating import GENERATED_HEADER
from gpuclus.users.models import UsersFile
from gpuclus.yamldoc.patterns import ROLE_PATTERNS, ansible_form

# Inventory groups in the order hosts.yml lists them; roles map one to one.
ROLE_GROUPS: tuple[tuple[str, str], ...] = (
    (Role.CONTROLLER.value, "runs slurmctld (and slurmdbd with accounting)"),
    (Role.COMPUTE.value, "runs slurmd; Slurm schedules jobs here"),
    (Role.LOGIN.value, "where users log in and submit jobs"),
    (Role.NFS_SERVER.value, "exports the shared directories"),
    (Role.MONITORING.value, "runs Prometheus and Grafana"),
    (Role.BACKUP_CONTROLLER.value, "runs the backup slurmctld, which takes over when the controller stops answering"),
)
# The nodes whose GPUs are real: the nvidia phase's hosts. Fake GPUs (the
# sandbox) have no driver to install, so they are not in it.
GPU_GROUP = ("gpu", "has real NVIDIA GPUs; the nvidia phase installs the driver here")
# Only what a role or playbook reads is rendered: a variable without a reader
# looks configured and is not. Validate takes the network from the spec itself.

# Ansible evaluates Jinja in inventory and group_vars values when it uses them;
# a spec value carrying these would run as a template on the Ansible host.
_TEMPLATE_MARKERS = ("{{", "{%", "{#")


def build_context(
    spec: ClusterSpec, topology: Topology, *, source_name: str, state_dir: str, users: UsersFile | None = None
) -> dict[str, Any]:
    """Everything the templates under templates/render/ use, from a checked spec.

    ``source_name`` is the spec's file name (no directory) and ``state_dir``
    the .gpuclus/ directory relative to the output directory: both end up in
    the files, so anything machine-specific would break byte-identical output.
    """
    _check_source_name(source_name)
    _check_state_dir(state_dir)
    controller = topology.controller
    if controller is None:
        raise ValueError("render needs a checked spec with exactly one controller")

    # Hardware (gpus, cpus, memory_mb) reaches the roles through gpuclus_nodes
    # in cluster.yml, the one list slurm.conf and gres.conf are built from.
    hosts = [{"name": node.name, "vars": {"ansible_host": node.address}} for node in topology.nodes]
    groups = [
        {
            "name": role,
            "about": about,
            "hosts": [node.name for node in _group_members(spec, topology, Role(role))],
        }
        for role, about in ROLE_GROUPS
    ]
    groups.append({"name": GPU_GROUP[0], "about": GPU_GROUP[1], "hosts": [n.name for n in topology.real_gpu_nodes]})

    group_vars = {
        "cluster": _cluster_vars(spec, topology, controller),
        "slurm": _slurm_vars(spec, topology),
        "nfs": _nfs_vars(spec, topology),
        "monitoring": _monitoring_vars(spec, topology, state_dir=state_dir),
        "nvidia": _nvidia_vars(spec, topology),
        "containers": _containers_vars(spec, state_dir=state_dir),
        "pytorch": _pytorch_vars(spec, topology, state_dir=state_dir),
        "users": {**_users_vars(users), **_directory_vars(spec, state_dir=state_dir)},
    }
    context: dict[str, Any] = {
        "header": GENERATED_HEADER.format(source=source_name),
        "source": source_name,
        "inventory": {"admin_user": spec.cluster.admin_user, "hosts": hosts, "groups": groups},
        "group_vars": group_vars,
    }
    _refuse_templates(context["inventory"], context["group_vars"])
    return context


def _directory_vars(spec: ClusterSpec, *, state_dir: str) -> dict[str, Any]:
    """The directory the nodes read users from (sssd), or None: users.directory with its files' paths as the
    users playbook resolves them (relative to the output directory)."""
    directory = spec.users.directory
    if directory is None:
        return {"gpuclus_users_directory": None}
    return {
        "gpuclus_users_directory": {
            "uri": list(directory.uri),
            "base_dn": directory.base_dn,
            "schema": directory.schema_name,
            "bind_dn": directory.bind_dn or "",
            "bind_password_file": _from_output_dir(directory.bind_password_file, state_dir=state_dir) or "",
            "ca_cert_file": _from_output_dir(directory.ca_cert_file, state_dir=state_dir) or "",
            "start_tls": directory.start_tls,
            "id_mapping": directory.id_mapping,
            "ssh_keys_attribute": directory.ssh_keys_attribute or "",
            "allow_groups": list(directory.allow_groups),
        }
    }


def _users_vars(users: UsersFile | None) -> dict[str, Any]:
    """users.yml: the users file's users and extra groups, as the users role takes them (empty without a file).

    Every key is written out, defaults included, so the role and `gpuclus plan`
    see the whole of each user.
    """
    if users is None:
        return {"gpuclus_users": [], "gpuclus_users_groups": [], "gpuclus_slurm_qos": [], "gpuclus_slurm_accounts": []}
    return {
        "gpuclus_users": [
            {
                "name": user.name,
                "uid": user.uid,
                "gid": user.gid if user.gid is not None else user.uid,
                "groups": list(user.groups),
                "shell": user.shell,
                "ssh_keys": [" ".join(key.split()) for key in user.ssh_keys],
                "admin": user.admin,
                "removed": user.removed,
                "delete_home": user.delete_home,
                "account": user.account,
                "gpus": user.gpus,
            }
            for user in users.users
        ],
        "gpuclus_users_groups": [{"name": group.name, "gid": group.gid} for group in users.groups],
        "gpuclus_slurm_qos": [
            {
                "name": qos.name,
                "priority": qos.priority,
                "max_wall": _max_wall(qos.max_wall),
                "gpus_per_user": qos.gpus_per_user,
            }
            for qos in users.qos
        ],
        "gpuclus_slurm_accounts": [
            {
                "name": account.name,
                "description": account.description if account.description is not None else account.name,
                "fairshare": account.fairshare,
                "gpus": account.gpus,
                "max_wall": _max_wall(account.max_wall),
                "qos": list(account.qos),
            }
            for account in users.accounts
        ],
    }


def _max_wall(value: str | None) -> int | None:
    """A MaxWall as minutes (None: no limit), so the role compares it with what sacctmgr shows without parsing."""
    return None if value is None else wall_minutes(value)


def _node_record(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "address": node.address,
        "roles": sorted(role.value for role in node.roles),
        "gpus": node.gpu_count,
        "gpu_model": node.gpus.model if node.gpus else None,
        "gpu_fake": node.gpus.fake if node.gpus else False,
        "cpus": node.cpus,
        "memory_mb": node.memory_mb,
    }


# Package-manager settings every role that installs packages reads (each
# through its own <role>_apt_cache_valid_time / <role>_package_lock_timeout
# default): one value for the whole cluster instead of one per role.
APT_CACHE_VALID_SECONDS = 3600  # apt-get update only when the lists are older
PACKAGE_LOCK_TIMEOUT_SECONDS = 300  # unattended-upgrades holds the lock for minutes after boot


def _cluster_vars(spec: ClusterSpec, topology: Topology, controller: Node) -> dict[str, Any]:
    backup = backup_controller(topology)
    return {
        "gpuclus_apt_cache_valid_time": APT_CACHE_VALID_SECONDS,
        "gpuclus_package_lock_timeout": PACKAGE_LOCK_TIMEOUT_SECONDS,
        "gpuclus_cluster_name": spec.cluster.name,
        "gpuclus_patterns": {name: ansible_form(pattern) for name, pattern in sorted(ROLE_PATTERNS.items())},
        "gpuclus_admin_user": spec.cluster.admin_user,
        "gpuclus_controller": controller.name,
        "gpuclus_controller_address": controller.address,
        "gpuclus_backup_controller": backup.name if backup else None,
        "gpuclus_backup_controller_address": backup.address if backup else None,
        "gpuclus_nodes": [_node_record(node) for node in topology.nodes],
    }


# Where the slurm_health role installs the health check, and how its drain
# reasons start: the prefix tells the nodes it drained from an admin's drains.
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/gpuclus-healthcheck"
HEALTH_REASON_PREFIX = "gpuclus-health:"


def _slurm_vars(spec: ClusterSpec, topology: Topology) -> dict[str, Any]:
    partitions = [
        {
            "name": partition.name,
            "nodes": compress(partition.nodes),
            "default": partition.default,
            "max_time": partition.max_time,
        }
        for partition in slurm_partitions(spec, topology)
    ]
    return {
        "gpuclus_slurm_version": spec.slurm.version,
        "gpuclus_slurm_accounting": spec.slurm.accounting,
        "gpuclus_slurm_partitions": partitions,
        "gpuclus_slurm_health_check": _health_check_vars(spec),
        "gpuclus_slurm_state_save_location": state_save_location(spec, topology),
        "gpuclus_slurm_controller_timeout": spec.slurm.controller_timeout,
        # A users file gives Slurm accounts and limits: slurm.conf then
        # enforces them and schedules by fairshare (the spec check makes sure
        # accounting is on).
        "gpuclus_slurm_enforce_limits": spec.users.file is not None and spec.slurm.accounting,
        "gpuclus_slurm_priority_calc_period": spec.slurm.priority_calc_period,
        "gpuclus_slurm_compute_ssh": spec.slurm.compute_ssh,
        "gpuclus_slurm_job_tmp": spec.slurm.job_tmp,
    }


def _health_check_vars(spec: ClusterSpec) -> dict[str, Any]:
    health = spec.slurm.health_check
    return {
        "enabled": health.enabled,
        "program": HEALTH_CHECK_PROGRAM,
        "interval": health.interval,
        "reason_prefix": HEALTH_REASON_PREFIX,
        "disks": [{"path": floor.path, "min_free_mb": floor.min_free_mb} for floor in health.disks],
        "dcgm_diag": health.dcgm_diag,
    }


def _single(topology: Topology, role: Role) -> Node | None:
    # The checks allow at most one nfs_server and one monitoring node.
    nodes = topology.with_role(role)
    return nodes[0] if nodes else None


def _nfs_vars(spec: ClusterSpec, topology: Topology) -> dict[str, Any]:
    server = _single(topology, Role.NFS_SERVER)
    return {
        "gpuclus_nfs_server": server.name if server else None,
        "gpuclus_nfs_server_address": server.address if server else None,
        "gpuclus_nfs_server_impl": spec.nfs.server_impl,
        "gpuclus_nfs_exports": [
            {"path": export.path, "mount": export.mount_point, "options": export.options} for export in spec.nfs.exports
        ],
        "gpuclus_nfs_client_options": spec.nfs.client_options,
    }


def _group_members(spec: ClusterSpec, topology: Topology, role: Role) -> list[Node]:
    # With monitoring on and no node holding the role, the controller runs it
    # (see Topology.monitoring_server), so the playbooks find it in the group.
    if role is Role.MONITORING:
        server = _monitoring_server(spec, topology)
        return [server] if server is not None else []
    return topology.with_role(role)


def _monitoring_server(spec: ClusterSpec, topology: Topology) -> Node | None:
    if not (spec.monitoring.prometheus or spec.monitoring.grafana):
        return _single(topology, Role.MONITORING)
    return topology.monitoring_server


def _monitoring_vars(spec: ClusterSpec, topology: Topology, *, state_dir: str) -> dict[str, Any]:
    monitoring = spec.monitoring
    server = _monitoring_server(spec, topology)
    receiver = monitoring.alert_receiver
    return {
        "gpuclus_prometheus_install": monitoring.prometheus,
        "gpuclus_grafana_install": monitoring.grafana,
        "gpuclus_grafana_package": _from_output_dir(monitoring.grafana_package, state_dir=state_dir),
        "gpuclus_grafana_unavailable": monitoring.grafana_unavailable,
        "gpuclus_dcgm_exporter_package": _from_output_dir(monitoring.dcgm_exporter_package, state_dir=state_dir),
        "gpuclus_alertmanager_install": monitoring.alertmanager,
        "gpuclus_alertmanager_receiver": {
            "webhook_url_file": _webhook_url_file(receiver, state_dir=state_dir),
            "email_to": receiver.email_to if receiver else None,
            "email_from": receiver.email_from if receiver else None,
            "smarthost": receiver.smarthost if receiver else None,
        },
        "gpuclus_monitoring_server": server.name if server else None,
        "gpuclus_monitoring_server_address": server.address if server else None,
    }


def _webhook_url_file(receiver: AlertReceiver | None, *, state_dir: str) -> str | None:
    """Where the role reads the webhook URL from: never the URL itself, which often carries a token.

    A webhook_url given in the spec is kept by deploy in .gpuclus/secrets/ (0600, secret_files.py), like the
    generated secrets; webhook_url_file is the admin's own file. The rendered files, which plan prints and
    which are 0644, hold only the path.
    """
    if receiver is None:
        return None
    if receiver.webhook_url is not None:
        return posixpath.join(state_dir, SECRETS_DIR_NAME, WEBHOOK_URL)
    return _from_output_dir(receiver.webhook_url_file, state_dir=state_dir)


def _from_output_dir(path: str | None, *, state_dir: str) -> str | None:
    """A spec path on the control machine as the playbooks read it: relative to the output directory.

    The spec's paths are absolute or relative to the spec's directory; the
    playbooks resolve a relative one against the output directory (the one
    holding inventory/). ``state_dir`` is the spec's .gpuclus/ relative to the
    output directory, so the spec's directory is normpath(state_dir/..): an
    absolute path is written as it is, a relative one as
    normpath(<spec's directory>/<path>). Only strings are joined (posixpath),
    nothing is looked up, so the text is the same on any machine.
    """
    if path is None or posixpath.isabs(path):
        return path
    spec_dir = posixpath.normpath(posixpath.join(state_dir, ".."))
    return posixpath.normpath(posixpath.join(spec_dir, path))


def _nvidia_vars(spec: ClusterSpec, topology: Topology) -> dict[str, Any]:
    nvidia = spec.nvidia
    return {
        "gpuclus_nvidia_driver_install": nvidia.driver.install,
        "gpuclus_nvidia_driver_branch": nvidia.driver.branch,
        "gpuclus_nvidia_driver_source": nvidia.driver.source,
        "gpuclus_nvidia_kernel_modules": nvidia.driver.kernel_modules,
        "gpuclus_nvidia_fabric_manager": nvidia.fabric_manager,
        "gpuclus_nvidia_dcgm": nvidia.dcgm,
        "gpuclus_nvidia_gpu_generations": {node.name: gpu_generation(node) for node in topology.real_gpu_nodes},
        "gpuclus_nvidia_min_driver_branches": {node.name: min_driver_branch(node) for node in topology.real_gpu_nodes},
        "gpuclus_cuda_install": nvidia.cuda.install,
        "gpuclus_cuda_version": nvidia.cuda.version,
        "gpuclus_cuda_source": nvidia.cuda.source,
    }


def _containers_vars(spec: ClusterSpec, *, state_dir: str) -> dict[str, Any]:
    """containers.yml: Enroot and Pyxis, with the spec's paths made relative to the output directory.

    The spec's paths on the machine running gpuclus (artifacts_dir,
    credentials_file) go through _from_output_dir; the control machine's
    cache is normpath(state_dir/cache).
    """
    containers = spec.containers

    def from_output_dir(path: str | None) -> str | None:
        return _from_output_dir(path, state_dir=state_dir)

    users = containers.credentials_users or [spec.cluster.admin_user]
    return {
        "gpuclus_enroot_install": containers.enroot,
        "gpuclus_pyxis_install": containers.pyxis,
        "gpuclus_enroot_version": containers.enroot_version,
        "gpuclus_pyxis_version": containers.pyxis_version,
        **group_vars_names(containers.enroot_version, containers.pyxis_version),
        "gpuclus_containers_artifacts_dir": from_output_dir(containers.artifacts_dir),
        "gpuclus_containers_checksums": _containers_checksums(containers),
        "gpuclus_containers_allow_unverified_downloads": containers.allow_unverified_downloads,
        "gpuclus_enroot_credentials_file": from_output_dir(containers.credentials_file),
        "gpuclus_enroot_credentials_users": list(dict.fromkeys(users)),
        "gpuclus_control_cache_dir": posixpath.normpath(posixpath.join(state_dir, "cache")),
    }


def _containers_checksums(containers: Containers) -> dict[str, str]:
    """The spec's checksums, over gpuclus' own for the downloads of the pinned versions (release_checksums).

    The table's values are of GitHub's files, so they are handed on only where the nodes download: an
    artifacts directory may hold another packing of the same release, which the roles check by its own sha256.
    """
    downloads = containers.artifacts_dir is None and (containers.enroot or containers.pyxis)
    known = known_checksums(containers.enroot_version, containers.pyxis_version) if downloads else {}
    return dict(sorted({**known, **containers.checksums}.items()))


def _pytorch_vars(spec: ClusterSpec, topology: Topology, *, state_dir: str) -> dict[str, Any]:
    """pytorch.yml: Lmod, the Python environment and the job templates, every path resolved (software.py)."""
    layout = software_layout(spec)
    pytorch = spec.pytorch
    # Modulefiles for the CUDA toolkit where the nvidia phase installs one (NVIDIA's layout, /usr/local/cuda-X.Y).
    cuda = spec.nvidia.cuda
    cuda_modules = (
        [{"version": cuda.version, "root": f"/usr/local/cuda-{cuda.version}"}]
        if cuda.install and topology.real_gpu_nodes
        else []
    )
    # Who writes the modulefiles and the job templates: the NFS server into the shared tree (root on a
    # client is squashed), else every node that runs jobs into its own copy.
    server = _single(topology, Role.NFS_SERVER)
    users = topology.with_role(Role.COMPUTE) + topology.with_role(Role.LOGIN)
    writers = ([server.name] if server else []) if layout.shared else list(dict.fromkeys(node.name for node in users))
    return {
        "gpuclus_lmod_install": spec.modules.lmod,
        "gpuclus_modules_dir": layout.modules_dir,
        "gpuclus_cuda_modules": cuda_modules,
        "gpuclus_pytorch_install": pytorch.install,
        "gpuclus_pytorch_shared": layout.shared,
        "gpuclus_pytorch_env_dir": layout.env_dir,
        # Shared layout: where the NFS server writes the tree (its own paths; root on a client is squashed).
        "gpuclus_software_server_paths": {
            "modules": layout.on_server(layout.modules_dir),
            "examples": layout.on_server(layout.examples_dir),
            "prefix": layout.on_server(layout.prefix),
        }
        if layout.shared
        else None,
        "gpuclus_software_writers": writers,
        "gpuclus_pytorch_module": layout.module,
        "gpuclus_pytorch_requirements": requirements(spec),
        "gpuclus_pytorch_index_url": index_url(spec),
        "gpuclus_pytorch_wheelhouse": _from_output_dir(pytorch.wheelhouse, state_dir=state_dir),
        "gpuclus_examples_install": pytorch.install and pytorch.examples,
        "gpuclus_examples_dir": layout.examples_dir,
        "gpuclus_nccl_env": nccl_environment(spec),
    }


def gpu_generation(node: Node) -> str:
    """The node's GPU generation as the nvidia_driver role names them, from the spec's gpus.model.

    "unknown" when the spec names no model or one the catalogue lacks (the
    role then picks the proprietary modules, which drive every generation
    before Blackwell). Grace Hopper boards are "grace": they need the open
    modules, which the catalogue says per board.
    """
    model = node.gpus.model if node.gpus else None
    kind = kind_for_model(model) if model else None
    if kind is None:
        return UNKNOWN
    if kind.open_required and kind.generation == "hopper":
        return "grace"
    return kind.generation


def min_driver_branch(node: Node) -> int:
    """The oldest driver branch that drives the node's GPUs (the catalogue's; 0 for a model it does not know).

    The nvidia_driver role refuses an older branch with this number, so the minimums are written once, in the
    catalogue, for spec check and the role alike.
    """
    model = node.gpus.model if node.gpus else None
    kind = kind_for_model(model) if model else None
    return kind.min_driver_branch if kind is not None else 0


def _has_control_characters(text: str) -> bool:
    return any(unicodedata.category(char).startswith("C") for char in text)


def _check_source_name(source_name: str) -> None:
    if not source_name or "/" in source_name or "\\" in source_name:
        raise ValueError(f"source_name must be a file name without directories, not {source_name!r}")
    if _has_control_characters(source_name):
        # It lands in a comment line; a newline in it would end the comment.
        raise UsageError(
            f"the spec's file name {source_name!r} contains control characters",
            "rename the spec file (e.g. cluster.yaml)",
        )


def _check_state_dir(state_dir: str) -> None:
    if PurePosixPath(state_dir).is_absolute():
        raise ValueError(f"state_dir must be relative to the output directory, not {state_dir!r}")
    # ansible.cfg is read by configparser: '%' starts an interpolation, ';'
    # an inline comment, and a newline would end the setting.
    bad = sorted({char for char in state_dir if char in "%;" or _has_control_characters(char)})
    if bad:
        raise UsageError(
            f"the path from the output directory to the spec's .gpuclus/ ({state_dir!r}) contains "
            f"{', '.join(repr(char) for char in bad)}, which ansible.cfg cannot hold",
            "render into a directory whose path has no '%', ';' or control characters",
        )


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _refuse_templates(*parts: Any) -> None:
    # Nearly every spec has no delimiter anywhere: one search of the parts as
    # JSON shows that (JSON's own braces are never followed by '{', '%' or '#',
    # and it escapes none of those). Only then is each string walked, to name it.
    try:
        flat = json.dumps(parts, ensure_ascii=False)
    except (TypeError, ValueError):
        flat = None
    if flat is not None and not any(marker in flat for marker in _TEMPLATE_MARKERS):
        return
    for part in parts:
        for where, text in _strings(part, ""):
            if any(marker in text for marker in _TEMPLATE_MARKERS):
                raise UsageError(
                    f"{text!r} ({where}) contains Jinja delimiters, which Ansible would evaluate",
                    "remove '{{', '{%' and '{#' from the spec's values",
                )
