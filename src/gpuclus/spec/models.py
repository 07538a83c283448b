"""The cluster spec, v1: pydantic models for structure and types.

Meaning across fields (one controller, partitions naming real nodes, ...) is
checked in the ``checks`` package, which reports every problem at once with a code and
a hint. The field descriptions here feed ``gpuclus spec schema`` and
docs/spec.md, so keep them written for a cluster admin.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from gpuclus.yamldoc.grammar import (
    ascii_grammar,
    export_options_problem,
    export_path_problem,
    full_match,
    host_problem,
)
from gpuclus.yamldoc.patterns import (
    ABSOLUTE_PATH,
    CLUSTER_NAME_PATTERN,
    CUDA_VERSION_PATTERN,
    DIRECTORY_GROUP_PATTERN,
    DISK_PATH_PATTERN,
    DRIVER_BRANCH_PATTERN,
    GPU_MODEL_PATTERN,
    INDEX_URL_PATTERN,
    LDAP_ATTRIBUTE_PATTERN,
    LDAP_DN_PATTERN,
    LDAP_URI_PATTERN,
    MAX_TIME_PATTERN,
    NCCL_VALUE_PATTERN,
    NCCL_VARIABLE_PATTERN,
    PARTITION_PATTERN,
    PIP_REQUIREMENT_PATTERN,
    PYTORCH_FLAVOUR_PATTERN,
    PYTORCH_VERSION_PATTERN,
    RELEASE_FILE_PATTERN,
    RELEASE_VERSION_PATTERN,
    SHA256_PATTERN,
    USER_PATTERN,
    VERSION_PATTERN,
    NumberText,
)


class Role(enum.StrEnum):
    CONTROLLER = "controller"
    COMPUTE = "compute"
    LOGIN = "login"
    NFS_SERVER = "nfs_server"
    MONITORING = "monitoring"
    # A second slurmctld (Slurm HA): takes over when the controller stops answering.
    BACKUP_CONTROLLER = "backup_controller"


class Fabric(enum.StrEnum):
    ETHERNET = "ethernet"
    INFINIBAND = "infiniband"
    ROCE = "roce"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _host_is_address(value: str | None) -> str | None:
    """A validator: the host of a URL or HOST:PORT is an IPv4 address or a DNS name, as a node's address is."""
    problem = None if value is None else host_problem(value)
    if problem:
        raise ValueError(f"{value!r} {problem}")
    return value


def _version_text(value: Any) -> Any:
    # YAML reads 23.10 as the float 23.1; refusing floats is the only way not
    # to pin the wrong version silently.
    if isinstance(value, float):
        raise ValueError(f'write the version in quotes ("{value}" as YAML reads it is a number, not a version)')
    return value


class Gpus(_Model):
    count: int = Field(ge=1, le=64, description="GPUs in each node of this entry.")
    model: NumberText | None = Field(
        default=None,
        pattern=GPU_MODEL_PATTERN,
        description="Short GPU model, e.g. 'h100' or 'a100-80gb': the Slurm GRES type (so no spaces), "
        "and what validate looks for in nvidia-smi's name (case-insensitive).",
    )
    fake: bool = Field(
        default=False,
        description="Device nodes without a driver (the sandbox). Slurm schedules them; validate reports "
        "GPU checks on them as SKIP, never as PASS.",
    )


class NodeEntry(_Model):
    name: str = Field(
        min_length=1,
        max_length=200,
        description="Host name, or a hostlist range such as 'gpu[01-16]' that expands to several nodes.",
    )
    address: str = Field(
        min_length=1,
        max_length=300,
        description="IPv4 address or DNS name gpuclus connects to (IPv6 is not supported yet); a range "
        "such as '10.0.0.[11-26]' must expand to as many addresses as the name does.",
    )
    roles: list[Role] = Field(
        min_length=1,
        description="Any of: controller, compute, login, nfs_server, monitoring, backup_controller (a second "
        "slurmctld that takes over when the controller stops answering).",
    )
    gpus: Gpus | None = Field(default=None, description="GPUs per node; leave out for CPU-only nodes.")
    cpus: int | None = Field(
        default=None, ge=1, le=4096, description="CPUs for slurm.conf; probed from the node when left out."
    )
    memory_mb: int | None = Field(
        default=None,
        ge=256,
        le=67_108_864,
        description="RealMemory for slurm.conf in MiB (at most 64 TiB); probed from the node (minus a reserve) "
        "when left out.",
    )


class ClusterInfo(_Model):
    name: str = Field(
        pattern=CLUSTER_NAME_PATTERN,
        description="Cluster name (Slurm ClusterName): lower case letters, digits and '-', at most 40.",
    )
    admin_user: str = Field(
        pattern=USER_PATTERN,
        description="User gpuclus logs in as over SSH; needs passwordless sudo on every node.",
    )


class Partition(_Model):
    name: str = Field(pattern=PARTITION_PATTERN, description="Slurm partition name.")
    nodes: str | None = Field(
        default=None,
        min_length=1,
        description="Hostlist of compute nodes in it (e.g. 'gpu[01-04]'); all compute nodes when left out.",
    )
    default: bool = Field(default=False, description="The partition jobs go to when they name none.")
    max_time: NumberText = Field(
        default="UNLIMITED",
        pattern=MAX_TIME_PATTERN,
        description="Slurm MaxTime: UNLIMITED, minutes, or [days-]hours:minutes:seconds.",
    )


class DiskFloor(_Model):
    path: str = Field(pattern=DISK_PATH_PATTERN, description="A directory on the file system to watch, e.g. / or /tmp.")
    min_free_mb: int = Field(
        ge=0, le=100_000_000, description="Drain the node when that file system has less free space (MB) than this."
    )


def _default_disk_floors() -> list[DiskFloor]:
    # / holds /var/spool/slurmd and the logs; /tmp is where jobs and Enroot write by default.
    return [DiskFloor(path="/", min_free_mb=1024), DiskFloor(path="/tmp", min_free_mb=1024)]


class HealthCheck(_Model):
    enabled: bool = Field(
        default=True,
        description="Slurm runs gpuclus' health check on every compute node (HealthCheckProgram): it drains a node "
        "whose GPUs, mounts, disk space, munge or slurmd fail, and resumes it once healthy.",
    )
    interval: int = Field(
        default=300,
        ge=10,
        le=86_400,
        description="Seconds between two checks of a node (HealthCheckInterval); a bad node is drained within this.",
    )
    disks: list[DiskFloor] = Field(
        default_factory=_default_disk_floors,
        max_length=16,
        description="File systems that must keep free space: [{path, min_free_mb}]. Default: / and /tmp, 1024 MB each.",
    )
    dcgm_diag: bool = Field(
        default=True,
        description="Run `dcgmi diag -r 1` (a few seconds) as part of the check on nodes where DCGM is installed.",
    )

    @field_validator("disks")
    @classmethod
    def _one_floor_per_path(cls, value: list[DiskFloor]) -> list[DiskFloor]:
        paths = [floor.path for floor in value]
        twice = sorted({path for path in paths if paths.count(path) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed more than once; give each path one min_free_mb")
        return value


class Slurm(_Model):
    version: str | None = Field(
        default=None,
        pattern=VERSION_PATTERN,
        description="Pin the Slurm package version (e.g. '22.05.8'); the distribution's version when left out.",
    )
    _version_is_text = field_validator("version", mode="before")(_version_text)

    accounting: bool = Field(default=True, description="slurmdbd + MariaDB on the controller, for sacct.")
    partitions: list[Partition] = Field(
        default_factory=list,
        description="Partitions; one default partition 'gpu' with every compute node when empty.",
    )
    health_check: HealthCheck = Field(
        default_factory=HealthCheck, description="The node health check Slurm runs on the compute nodes."
    )
    state_save_location: str | None = Field(
        default=None,
        pattern=ABSOLUTE_PATH,
        description="Where slurmctld keeps its state (StateSaveLocation). Left out: the distribution's local "
        "directory, or, with a backup_controller, <first NFS export's mount>/slurm/state when both controllers "
        "see that path; with a backup controller it must be storage both controllers share.",
    )
    priority_calc_period: int = Field(
        default=5,
        ge=1,
        le=60,
        description="Minutes between Slurm's recomputations of fairshare usage (PriorityCalcPeriod); used with a "
        "users file, whose accounts Slurm then schedules by multifactor priority.",
    )
    controller_timeout: int = Field(
        default=120,
        ge=5,
        le=3600,
        description="Seconds the backup controller waits for an unanswering controller before it takes over "
        "(SlurmctldTimeout).",
    )
    compute_ssh: Literal["jobs", "open"] = Field(
        default="jobs",
        description="Who may SSH to a compute node that is not also a login node. 'jobs': only a user with a job "
        "running there (pam_slurm_adopt), whose session joins that job (its cgroup, its GPUs, its memory limit) and "
        "ends with it; root, cluster.admin_user and the users file's admins always get in. 'open': every user, "
        "outside Slurm's limits.",
    )
    job_tmp: Literal["private", "shared"] = Field(
        default="private",
        description="Each job's /tmp and /dev/shm on a compute node. 'private': the job gets its own, emptied when it "
        "ends (Slurm's job_container/tmpfs, namespace/tmpfs from Slurm 25.11); an SSH session adopted into the job "
        "sees the job's. 'shared': the node's own, shared by every job and left behind by them.",
    )

    @field_validator("state_save_location")
    @classmethod
    def _state_path_in_every_file(cls, value: str | None) -> str | None:
        # The same refusals as an export path ('..', '.' parts): the path is
        # shared, and it lands in slurm.conf and a file task.
        problem = None if value is None else export_path_problem(value)
        if problem:
            raise ValueError(f"{value!r} {problem}")
        return value


def _export_from_string(value: Any) -> Any:
    # `exports: [/home]` is the short form of `exports: [{path: /home}]`.
    if isinstance(value, str):
        return {"path": value}
    return value


class NfsExport(_Model):
    path: str = Field(pattern=ABSOLUTE_PATH, description="Directory exported by the NFS server.")
    mount: str | None = Field(
        default=None,
        pattern=ABSOLUTE_PATH,
        description="Where clients mount it; the same path as on the server when left out.",
    )
    options: str = Field(
        default="rw,sync,no_subtree_check",
        pattern=ascii_grammar(r"^[A-Za-z0-9_=,:-]+$"),
        description="Export options for /etc/exports (root_squash is the default, which is the safe one).",
    )

    @field_validator("path", "mount")
    @classmethod
    def _path_in_every_file(cls, value: str | None) -> str | None:
        # The pattern keeps out what would change a config file's meaning;
        # this refuses what is legal there but wrong for a share.
        problem = None if value is None else export_path_problem(value)
        if problem:
            raise ValueError(f"{value!r} {problem}")
        return value

    @field_validator("options")
    @classmethod
    def _known_options(cls, value: str) -> str:
        problem = export_options_problem(value)
        if problem:
            raise ValueError(f"{value!r} {problem}; see exports(5)")
        return value

    @property
    def mount_point(self) -> str:
        return self.mount or self.path


class Nfs(_Model):
    exports: list[
        Annotated[NfsExport, BeforeValidator(_export_from_string, json_schema_input_type=str | NfsExport)]
    ] = Field(
        default_factory=list,
        description="Shared directories; each is a path or {path, mount, options}. No NFS when empty.",
    )
    server_impl: Literal["kernel", "ganesha"] = Field(
        default="kernel",
        description="kernel (nfs-kernel-server, for real nodes) or ganesha (user space; the sandbox).",
    )
    client_options: str = Field(
        default="rw,hard,_netdev,x-systemd.automount",
        pattern=ascii_grammar(r"^[A-Za-z0-9_=,.:-]+$"),
        description="Mount options used on the clients.",
    )


class NvidiaDriver(_Model):
    install: bool = Field(default=True, description="Install the NVIDIA driver on GPU nodes.")
    branch: NumberText = Field(
        default="550",
        pattern=DRIVER_BRANCH_PATTERN,
        description="Driver branch, e.g. '550'. The packages are pinned to it and held there.",
    )
    source: Literal["auto", "cuda_repo", "distro"] = Field(
        default="auto",
        description="Where the driver comes from: distro (the OS's own packages), cuda_repo (NVIDIA's CUDA "
        "repository), or auto: distro on Ubuntu, on Debian 12 for branch 535 and on Debian 13 for branch 550, "
        "NVIDIA's repository otherwise.",
    )
    kernel_modules: Literal["auto", "open", "proprietary"] = Field(
        default="auto",
        description="Kernel module flavour: auto picks open from Turing on (required on Blackwell) and "
        "proprietary for Volta and GPUs whose model the spec does not name.",
    )


class Cuda(_Model):
    install: bool = Field(default=True, description="Install the CUDA toolkit on GPU nodes.")
    version: str = Field(default="12.4", pattern=CUDA_VERSION_PATTERN, description="CUDA toolkit version, e.g. '12.4'.")
    source: Literal["auto", "cuda_repo", "distro"] = Field(
        default="auto",
        description="cuda_repo (NVIDIA's repository: /usr/local/cuda-X.Y, versions side by side), distro (the "
        "OS's own toolkit, only where it is exactly this version), or auto (cuda_repo).",
    )

    _version_is_text = field_validator("version", mode="before")(_version_text)


class Nvidia(_Model):
    driver: NvidiaDriver = Field(default_factory=NvidiaDriver, description="The NVIDIA kernel driver.")
    cuda: Cuda = Field(default_factory=Cuda, description="The CUDA toolkit.")
    # A bool or "auto": YAML 1.1 reads on/off as booleans, so those cannot be the words.
    fabric_manager: Literal["auto"] | bool = Field(
        default="auto",
        description="nvidia-fabricmanager, at exactly the driver's version (it needs the driver's source to be "
        "cuda_repo on Debian): auto installs it on the nodes with NVSwitches on the PCI bus (HGX/DGX), true on "
        "every GPU node, false nowhere.",
    )
    dcgm: bool = Field(
        default=False,
        description="Install NVIDIA DCGM (datacenter-gpu-manager, from NVIDIA's repository) on GPU nodes.",
    )


# Longer than any path a file system takes; refuses a pasted file instead.
CONTROL_PATH_MAX = 4096


def control_path_problem(value: str) -> str | None:
    """What is wrong with a path on the machine running gpuclus, or None."""
    if not value:
        return "is empty"
    if len(value) > CONTROL_PATH_MAX:
        return f"is longer than {CONTROL_PATH_MAX} characters"
    if any(unicodedata.category(char).startswith("C") for char in value):
        return "contains control characters (a newline, a tab, ...)"
    if value.startswith("~"):
        return "starts with '~', which gpuclus does not expand; write the path out (absolute, or relative to the spec)"
    return None


def _control_path(value: str | None) -> str | None:
    """A field validator: a path on the machine running gpuclus, or None."""
    problem = None if value is None else control_path_problem(value)
    if problem:
        raise ValueError(f"{value!r} {problem}")
    return value


def container_image_problem(value: str) -> str | None:
    """What is wrong with an image for `srun --container-image`, or None.

    Pyxis takes a registry image ([USER@][REGISTRY#]IMAGE[:TAG], e.g.
    ubuntu:22.04 or nvcr.io#nvidia/pytorch:24.01-py3) or a squashfs file; it
    reads a value as a file only when it starts with '/' or './'.
    """
    if not value:
        return "is empty"
    if len(value) > CONTROL_PATH_MAX:
        return f"is longer than {CONTROL_PATH_MAX} characters"
    if any(char.isspace() or unicodedata.category(char).startswith("C") for char in value):
        return "contains whitespace or control characters"
    quotes = sorted({char for char in value if char in "\"'`\\"})
    if quotes:
        return f"contains {', '.join(repr(char) for char in quotes)}; an image name has no quotes"
    if value.startswith("-"):
        return "starts with '-'"
    if value.endswith(".sqsh") and not value.startswith(("/", "./")):
        return (
            "looks like a squashfs file, but Pyxis reads a value that does not start with '/' or './' as a "
            "registry image; write the file's absolute path (e.g. /shared/images/ubuntu.sqsh)"
        )
    return None


UserName = Annotated[str, Field(pattern=USER_PATTERN)]
ReleaseFile = Annotated[str, Field(pattern=RELEASE_FILE_PATTERN)]
Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN)]


class Containers(_Model):
    # Off unless asked for: Enroot and Pyxis come from GitHub or an artifacts
    # directory, and a download needs checksums (downloads-unverified), so a
    # default of on would make every spec that leaves containers out invalid.
    enroot: bool = Field(
        default=False,
        description="Install Enroot on compute and login nodes (from artifacts_dir, or GitHub's release packages "
        "checked against checksums).",
    )
    pyxis: bool = Field(
        default=False, description="Install the Pyxis SPANK plugin (srun --container-image); needs enroot."
    )
    enroot_version: str = Field(
        default="4.1.2",
        pattern=RELEASE_VERSION_PATTERN,
        description="Enroot release to install (major.minor.patch, e.g. '4.1.2').",
    )
    pyxis_version: str = Field(
        default="0.24.0",
        pattern=RELEASE_VERSION_PATTERN,
        description="Pyxis release to build against the cluster's Slurm (major.minor.patch, e.g. '0.24.0').",
    )
    _versions_are_text = field_validator("enroot_version", "pyxis_version", mode="before")(_version_text)

    artifacts_dir: str | None = Field(
        default=None,
        description="A directory on the machine running gpuclus (absolute, or relative to the spec file's "
        "directory) holding Enroot's release packages (enroot_<v>-1_<amd64|arm64>.deb, "
        "enroot-<v>-1.el8.<x86_64|aarch64>.rpm) or its source tarball enroot-<v>-src.tar.gz, and "
        "pyxis-<v>-src.tar.gz: nothing is downloaded (offline sites). Left out: each node downloads them "
        "from GitHub, which needs checksums or allow_unverified_downloads.",
    )
    checksums: dict[ReleaseFile, Sha256] = Field(
        default_factory=dict,
        description="sha256 of Enroot's and Pyxis' release files, by file name (e.g. "
        "'enroot_4.1.2-1_amd64.deb': <64 hex digits>). A download is refused without its checksum; a file "
        "from artifacts_dir is checked when it is named here.",
    )
    allow_unverified_downloads: bool = Field(
        default=False,
        description="Install what the nodes download from GitHub even without a checksum for it.",
    )
    credentials_file: str | None = Field(
        default=None,
        description="A file on the machine running gpuclus (absolute, or relative to the spec file's "
        "directory) with registry credentials in Enroot's format, one `machine HOST login USER password "
        "PASSWORD` entry per line; written as ~/.config/enroot/.credentials (0600) for credentials_users on "
        "the compute and login nodes. Keep it 0600; gpuclus never prints its content.",
    )
    credentials_users: list[UserName] | None = Field(
        default=None,
        min_length=1,
        description="Users who get the credentials file; cluster.admin_user when left out.",
    )
    validate_image: str = Field(
        default="ubuntu:22.04",
        description="The image `gpuclus validate` runs with Pyxis: a registry image (e.g. ubuntu:22.04) or "
        "a squashfs file on every compute node, written as a path starting with '/' or './'.",
    )

    _paths_on_control_machine = field_validator("artifacts_dir", "credentials_file")(_control_path)

    @field_validator("validate_image")
    @classmethod
    def _image(cls, value: str) -> str:
        problem = container_image_problem(value)
        if problem:
            raise ValueError(f"{value!r} {problem}")
        return value


# What lands in alertmanager.yml: an http(s) URL without spaces or quotes, a
# plain e-mail address, a host:port. pydantic's regex engine (Rust's) matches
# $ only at the very end, never before a trailing newline.
WEBHOOK_URL_PATTERN = ascii_grammar(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%!$&()*+,;=:@/?#-]*)?$")
EMAIL_PATTERN = ascii_grammar(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")
SMARTHOST_PATTERN = ascii_grammar(r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")


MAX_WEBHOOK_URL = 2048


def masked_url(url: str) -> str:
    """A URL that may carry a token (a webhook's path, a user:password@), as gpuclus shows it: scheme://host/… ***.

    Anything that does not read as scheme://host comes out as *** alone.
    """
    scheme, separator, rest = url.partition("://")
    host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2].split(":")[0]
    if not (separator and scheme.isalpha() and host and full_match(r"[A-Za-z0-9.-]+", host)):
        return "***"
    return f"{scheme}://{host}/… ***"


class AlertReceiver(_Model):
    webhook_url: str | None = Field(
        default=None,
        max_length=MAX_WEBHOOK_URL,
        pattern=WEBHOOK_URL_PATTERN,
        description="Alertmanager posts each alert group to this http(s) URL (e.g. a chat bridge); kept as a "
        "secret (it may carry a token), or give webhook_url_file instead.",
    )
    webhook_url_file: str | None = Field(
        default=None,
        description="File on the control machine holding the webhook URL (one line, mode 0600), instead of "
        "webhook_url: it lands only in alertmanager.yml (0640) on the monitoring node and is never printed.",
    )
    email_to: str | None = Field(
        default=None, max_length=254, pattern=EMAIL_PATTERN, description="E-mail address alerts go to."
    )
    email_from: str | None = Field(
        default=None, max_length=254, pattern=EMAIL_PATTERN, description="Sender address of alert e-mails."
    )
    smarthost: str | None = Field(
        default=None,
        max_length=260,
        pattern=SMARTHOST_PATTERN,
        description="SMTP relay as host:port (no authentication: a relay that accepts the cluster's mail).",
    )

    @model_validator(mode="after")
    def _email_complete(self) -> AlertReceiver:
        given = [name for name in ("email_to", "email_from", "smarthost") if getattr(self, name) is not None]
        if given and len(given) < 3:
            missing = [name for name in ("email_to", "email_from", "smarthost") if name not in given]
            raise ValueError(f"e-mail alerts need email_to, email_from and smarthost; missing {', '.join(missing)}")
        return self

    @field_validator("webhook_url", mode="before")
    @classmethod
    def _webhook_url_problem_masked(cls, value: Any) -> Any:
        # Before pydantic's own pattern check, whose finding would quote the URL, token and all.
        if not isinstance(value, str):
            return value
        if len(value) <= MAX_WEBHOOK_URL and not full_match(WEBHOOK_URL_PATTERN, value):
            raise ValueError(
                f"{masked_url(value)} is not an http(s) URL without spaces or quotes (shown masked: it may carry a "
                "token)"
            )
        problem = host_problem(value) if full_match(WEBHOOK_URL_PATTERN, value) else None
        if problem:
            raise ValueError(f"{masked_url(value)} has a host that is neither an IPv4 address nor a DNS name")
        return value

    @model_validator(mode="after")
    def _one_webhook(self) -> AlertReceiver:
        if self.webhook_url is not None and self.webhook_url_file is not None:
            raise ValueError("give webhook_url or webhook_url_file, not both")
        return self

    _hosts_are_addresses = field_validator("smarthost")(_host_is_address)
    _path_on_control_machine = field_validator("webhook_url_file")(_control_path)


class Monitoring(_Model):
    prometheus: bool = Field(
        default=True,
        description="Prometheus with gpuclus' alert rules on the monitoring node; the node exporter on every "
        "node, Slurm metrics on the controller, GPU metrics on real GPU nodes.",
    )
    grafana: bool = Field(
        default=False,
        description="Grafana on the monitoring node, from Grafana's package repository (or grafana_package), "
        "with the Prometheus datasource and gpuclus' dashboards provisioned and a generated admin password "
        "(.gpuclus/secrets/grafana_admin_password).",
    )
    grafana_package: str | None = Field(
        default=None,
        description="A Grafana .deb or .rpm on the machine running gpuclus (absolute, or relative to the spec "
        "file's directory), installed instead of Grafana's repository: for nodes without Internet access.",
    )
    grafana_unavailable: Literal["fail", "skip"] = Field(
        default="fail",
        description="When the nodes cannot reach Grafana's repository and no grafana_package is given: fail "
        "the deploy (the default), or skip Grafana and say so (the sandbox, whose nodes reach no package "
        "repository of Grafana).",
    )
    dcgm_exporter_package: str | None = Field(
        default=None,
        description="NVIDIA's dcgm-exporter as a .deb or .rpm on the machine running gpuclus (absolute, or "
        "relative to the spec file's directory), installed on the real GPU nodes instead of the CUDA "
        "repository's datacenter-gpu-manager-exporter; used with nvidia.dcgm: true.",
    )
    alertmanager: bool = Field(
        default=False,
        description="Prometheus Alertmanager (the distribution's package) on the monitoring node, sending the "
        "alerts to alert_receiver.",
    )
    alert_receiver: AlertReceiver | None = Field(
        default=None,
        description="Where Alertmanager sends alerts: webhook_url, and/or e-mail (email_to, email_from, "
        "smarthost). Without it alerts are only shown in Alertmanager's and Prometheus' web pages.",
    )

    @field_validator("grafana_package", "dcgm_exporter_package")
    @classmethod
    def _package_path(cls, value: str | None) -> str | None:
        problem = None if value is None else control_path_problem(value)
        if problem is None and value is not None and not value.endswith((".deb", ".rpm")):
            problem = "is not a .deb or .rpm file name"
        if problem:
            raise ValueError(f"{value!r} {problem}")
        return value


class Modules(_Model):
    lmod: bool = Field(
        default=False,
        description="Install Lmod (the `module` command) on every node, with modulefiles for the CUDA toolkit "
        "and the PyTorch environment, in login shells and batch jobs alike.",
    )
    path: str | None = Field(
        default=None,
        pattern=ABSOLUTE_PATH,
        description="The modulefiles tree gpuclus writes, added to every node's MODULEPATH. Left out: "
        "<first NFS export's mount>/modules when pytorch.location is shared, else /opt/gpuclus/modules.",
    )


class PyTorch(_Model):
    install: bool = Field(
        default=False,
        description="Build a Python environment with PyTorch and numpy for the compute and login nodes, and "
        "install the job templates (examples).",
    )
    location: Literal["shared", "node-local"] = Field(
        default="shared",
        description="shared: built once, on the first compute node, inside the first NFS export (needs "
        "nfs.server_impl kernel, so that nodes mount it); node-local: built on every compute and login node "
        "(kernels without an NFS client, such as the sandbox's).",
    )
    prefix: str | None = Field(
        default=None,
        pattern=ABSOLUTE_PATH,
        description="Directory holding the environments (each pytorch-<version>-<flavour>). Left out: "
        "<first NFS export's mount>/software when shared, /opt/gpuclus/software when node-local.",
    )
    version: str = Field(
        default="2.13.0",
        pattern=PYTORCH_VERSION_PATTERN,
        description="PyTorch version (torch==VERSION), e.g. '2.13.0'.",
    )
    flavour: str = Field(
        default="auto",
        pattern=PYTORCH_FLAVOUR_PATTERN,
        description="cpu, or the CUDA build (cu118, cu124, cu128, ...). auto: cu<major><minor> of "
        "nvidia.cuda.version where nodes have real GPUs, cpu otherwise.",
    )
    numpy_version: str | None = Field(
        default=None,
        pattern=VERSION_PATTERN,
        description="numpy version (numpy==VERSION); left out, pip picks one that suits torch.",
    )
    extra_packages: list[Annotated[str, Field(pattern=PIP_REQUIREMENT_PATTERN, max_length=200)]] = Field(
        default_factory=list,
        description="More pip requirements for the environment (name and optional version specifiers, e.g. "
        "'tqdm' or 'transformers==4.44.2'); they must be in the index or the wheelhouse.",
    )
    index_url: str | None = Field(
        default=None,
        pattern=INDEX_URL_PATTERN,
        description="The package index the nodes install from. Left out: PyTorch's own index for the flavour "
        "(download.pytorch.org/whl/<flavour>) plus pip's default for the rest. Ignored with a wheelhouse.",
    )
    wheelhouse: str | None = Field(
        default=None,
        description="A directory of wheels on the machine running gpuclus (absolute, or relative to the spec "
        "file's directory): copied to the building nodes and installed with --no-index, so nothing is "
        "downloaded (air-gapped sites). `pip download torch==VERSION numpy -d DIR` on a connected machine "
        "with the nodes' Python fills one.",
    )
    examples: bool = Field(
        default=True,
        description="Install the job templates (DDP on one node and across nodes, a Pyxis container job, "
        "FSDP, an MPI all-reduce), each with a README.",
    )
    examples_dir: str | None = Field(
        default=None,
        pattern=ABSOLUTE_PATH,
        description="Where the job templates go. Left out: <first NFS export's mount>/examples when shared, "
        "/opt/gpuclus/examples when node-local.",
    )
    nccl_env: dict[
        Annotated[str, Field(pattern=NCCL_VARIABLE_PATTERN)], Annotated[str, Field(pattern=NCCL_VALUE_PATTERN)]
    ] = Field(
        default_factory=dict,
        description="NCCL settings the job templates export (e.g. NCCL_SOCKET_IFNAME: eth0, NCCL_IB_HCA: "
        "mlx5_0), on top of what network.fabric implies (NCCL_IB_DISABLE=1 on ethernet).",
    )
    _versions_are_text = field_validator("version", "numpy_version", mode="before")(_version_text)
    _index_host_is_address = field_validator("index_url")(_host_is_address)

    _paths_on_control_machine = field_validator("wheelhouse")(_control_path)


class Network(_Model):
    fabric: Fabric = Field(
        default=Fabric.ETHERNET, description="ethernet, infiniband or roce; sets validate's thresholds."
    )
    link_gbps: int = Field(default=10, ge=1, le=3200, description="Per-NIC line rate in Gbit/s.")
    nics_per_node: int = Field(default=1, ge=1, le=16, description="NICs per node used for GPU traffic.")


class Directory(_Model):
    """An LDAP or Active Directory server the nodes read users and groups from, through sssd."""

    uri: list[Annotated[str, Field(pattern=LDAP_URI_PATTERN), AfterValidator(_host_is_address)]] = Field(
        min_length=1,
        max_length=8,
        description="The directory's servers, tried in order: ldaps://HOST[:PORT] or ldap://HOST[:PORT] (with "
        "start_tls for an encrypted connection).",
    )
    base_dn: str = Field(
        pattern=LDAP_DN_PATTERN, description="Where users and groups are searched, e.g. dc=example,dc=org."
    )
    schema_name: Literal["rfc2307", "rfc2307bis", "ad"] = Field(
        default="rfc2307",
        alias="schema",
        description="The directory's schema: rfc2307 (OpenLDAP's posixAccount/posixGroup with memberUid), "
        "rfc2307bis (groups list members by DN), or ad (Active Directory read over LDAP).",
    )
    bind_dn: str | None = Field(
        default=None,
        pattern=LDAP_DN_PATTERN,
        description="A read-only account sssd binds as, e.g. cn=reader,dc=example,dc=org; anonymous when "
        "left out. Needs bind_password_file.",
    )
    bind_password_file: str | None = Field(
        default=None,
        description="File on the control machine holding bind_dn's password (one line, mode 0600): it lands "
        "only in sssd.conf (0600, root) on the nodes and is never printed.",
    )
    ca_cert_file: str | None = Field(
        default=None,
        description="PEM file on the control machine with the CA that signed the servers' certificates; the "
        "system's trusted CAs when left out.",
    )
    start_tls: bool = Field(
        default=False, description="Encrypt ldap:// connections with StartTLS (ldaps:// URIs are encrypted anyway)."
    )
    id_mapping: bool = Field(
        default=False,
        description="Make uids and gids from Active Directory's SIDs (sssd's algorithm gives every node the "
        "same ones) instead of reading uidNumber/gidNumber; for an AD without POSIX attributes.",
    )
    ssh_keys_attribute: str | None = Field(
        default=None,
        pattern=LDAP_ATTRIBUTE_PATTERN,
        description="The attribute holding users' SSH public keys (e.g. sshPublicKey): sshd then also accepts "
        "the keys the directory gives (sss_ssh_authorizedkeys). The users file's keys work either way.",
    )
    allow_groups: list[Annotated[str, Field(pattern=DIRECTORY_GROUP_PATTERN)]] = Field(
        default_factory=list,
        description="Only members of these directory groups may log in (sssd's simple access control); every "
        "directory user when empty. The users file's removed users are refused either way.",
    )

    _paths_on_control_machine = field_validator("bind_password_file", "ca_cert_file")(_control_path)


class Users(_Model):
    file: str | None = Field(
        default=None,
        description="The users file (absolute, or relative to the spec's directory): the cluster's users, their "
        "groups, SSH keys and Slurm accounts (docs/users.md). Its users are created on every node by the users "
        "phase; none when left out.",
    )

    directory: Directory | None = Field(
        default=None,
        description="Read the users from an LDAP or Active Directory server (sssd on every node) instead of "
        "creating them: gpuclus then checks the users file's users resolve to the same uids on every node and "
        "writes their Slurm accounts and limits (docs/users.md#directory-services). Needs users.file.",
    )

    _path_on_control_machine = field_validator("file")(_control_path)


class ClusterSpec(_Model):
    """The whole cluster: what `gpuclus deploy` builds and `gpuclus validate` checks."""

    api_version: Literal["gpuclus/v1"] = Field(
        alias="apiVersion", description="Spec format version; must be gpuclus/v1."
    )
    cluster: ClusterInfo = Field(description="Cluster identity: name and admin_user.")
    nodes: list[NodeEntry] = Field(min_length=1, description="Nodes, one entry per host or hostlist range.")
    slurm: Slurm = Field(default_factory=Slurm)
    nfs: Nfs = Field(default_factory=Nfs)
    nvidia: Nvidia = Field(default_factory=Nvidia)
    containers: Containers = Field(default_factory=Containers)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    network: Network = Field(default_factory=Network)
    modules: Modules = Field(default_factory=Modules)
    pytorch: PyTorch = Field(default_factory=PyTorch)
    users: Users = Field(default_factory=Users)
