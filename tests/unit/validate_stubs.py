"""A stub controller session for validate's unit tests: commands answered from recorded output.

test_validate_gpu.py stubs the Context itself (its checks only start jobs);
the core checks also talk SSH through the controller (munge, storage, the
gres probe on dead nodes) and read scontrol/sinfo/sacct, so here the stub sits
one layer lower: a ``Remote`` whose ``run`` answers each command line from a
list of rules, matched on substrings of the line. The real ``Context`` then
builds every srun/ssh line as in production, and the tests can assert on them.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuclus.sandbox.layout import sandbox_layout, sandbox_spec_text
from gpuclus.slurm.remote import Remote
from gpuclus.spec.load import LoadedSpec, load_spec_text
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.context import Context, Options

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "validate"

Answer = CommandResult | Callable[[str], CommandResult]
Pattern = str | tuple[str, ...]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def ok(stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(0, stdout, stderr)


def fail(status: int, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(status, stdout, stderr)


# --- the sandbox's 3-node spec ------------------------------------------------------------

# Exactly what `gpuclus sandbox up --name val` writes: val-head (controller, NFS
# server, monitoring) and val-gpu01/val-gpu02 with 2 fake GPUs each, the
# export /srv/nfs/shared mounted at /shared, accounting and Prometheus on, Pyxis off.
SANDBOX_SPEC = sandbox_spec_text(sandbox_layout("val", 3, 2, "10.213.0.0/24"))
HEAD, GPU01, GPU02 = "val-head", "val-gpu01", "val-gpu02"
COMPUTE = [GPU01, GPU02]


def load(text: str = SANDBOX_SPEC) -> LoadedSpec:
    loaded = load_spec_text(text)
    assert loaded.spec is not None and loaded.topology is not None and loaded.ok, loaded.findings
    return loaded


# --- where a command line goes -------------------------------------------------------------

_NODELIST = re.compile(r"--nodelist=(\S+)")
_SSH_TARGET = re.compile(r"StrictHostKeyChecking=yes (\S+) ")


def target(command: str) -> str:
    """The node a line runs on: srun's --nodelist, ssh's host, else the controller."""
    match = _NODELIST.search(command) or _SSH_TARGET.search(command)
    return match.group(1) if match else HEAD


def srun_words(command: str) -> list[str]:
    return shlex.split(command)


# --- answers that depend on the line or on earlier calls ----------------------------------


def per_node(answers: dict[str, CommandResult], default: CommandResult | None = None) -> Callable[[str], CommandResult]:
    """Answer by the node the line runs on (see ``target``)."""

    def answer(command: str) -> CommandResult:
        node = target(command)
        if node in answers:
            return answers[node]
        assert default is not None, f"no answer for node {node}: {command[:160]}"
        return default

    return answer


def in_turn(*answers: CommandResult) -> Callable[[str], CommandResult]:
    """Successive answers to the same rule (the last one repeats): state that changes during a check."""
    queue = list(answers)
    lock = threading.Lock()

    def answer(command: str) -> CommandResult:
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return answer


def hostname_job(command: str) -> CommandResult:
    """A healthy `srun ... echo "$SLURMD_NODENAME"`: each node of --nodelist prints its name."""
    return ok("".join(f"{node}\n" for node in target(command).split(",")))


# --- the stub --------------------------------------------------------------------------------


class StubRemote(Remote):
    """A controller session that answers from ``rules`` and records every command line.

    A rule is (pattern, answer): the pattern is a substring of the command
    line, or a tuple of substrings that must all appear; the first matching
    rule answers. ``prefer`` puts a rule in front (to break one thing in an
    otherwise healthy cluster). An unmatched line fails the test.
    ``run_many`` is Remote's own (threads, one ``run`` per command).
    """

    def __init__(self, rules: Sequence[tuple[Pattern, Answer]] = ()) -> None:
        super().__init__(client=None)
        self.rules: list[tuple[Pattern, Answer]] = list(rules)
        self.calls: list[tuple[str, CommandResult]] = []
        self.closed = False
        self._lock = threading.Lock()

    def prefer(self, pattern: Pattern, answer: Answer) -> StubRemote:
        self.rules.insert(0, (pattern, answer))
        return self

    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        for pattern, answer in self.rules:
            words = (pattern,) if isinstance(pattern, str) else pattern
            if all(word in command for word in words):
                result = answer if isinstance(answer, CommandResult) else answer(command)
                with self._lock:
                    self.calls.append((command, result))
                return result
        raise AssertionError(f"the stub has no answer for: {command[:300]}")

    def close(self) -> None:
        self.closed = True

    @property
    def commands(self) -> list[str]:
        return [command for command, _ in self.calls]

    def matching(self, *words: str) -> list[str]:
        return [command for command in self.commands if all(word in command for word in words)]

    def jobs_completed(self) -> int:
        """Jobs this session started that ended well (what sacct should list afterwards)."""
        return sum(1 for command, result in self.calls if command.startswith("timeout ") and result.exit_status == 0)


# --- recorded output from the sandbox (val-head, val-gpu01, val-gpu02) -------------------------

PING_UP = ok("Slurmctld(primary) at val-head is UP\n")
PING_DOWN = fail(1, "Slurmctld(primary) at val-head is DOWN\n")
NODES_HEALTHY = fixture("scontrol_nodes_healthy.txt")
PARTITIONS = fixture("sinfo_partitions.txt")
MUNGE_CREDENTIAL = ok("MUNGE:AwQFAAC...:\n")
UNMUNGE_OK = ok("STATUS:          Success (0)\n")
UNMUNGE_BAD_KEY = fail(1, "unmunge: Error: Invalid credential\n")
SSH_TIMED_OUT = fail(255, "", "ssh: connect to host val-gpu02 port 22: Connection timed out\n")
SRUN_TASK_LAUNCH_FAILED = fail(
    1,
    "",
    "srun: error: Task launch for StepId=13.0 failed on node val-gpu01: Communication connection failure\n",
)
SRUN_NODES_BUSY = fail(1, "", "srun: error: Unable to allocate resources: Requested nodes are busy\n")
GRES_PROBE_HEALTHY = fixture("gres_probe_healthy.txt")
GRES_PROBE_MISSING_DEVICE = (
    "slurmd: error: Waiting for gres.conf file /dev/nvidia2\n"
    "slurmd: fatal: can't stat gres.conf file /dev/nvidia2: No such file or directory\n"
    "--devices--\n/dev/nvidia0\n/dev/nvidia1\n"
)
READ_VIA_LIBNFS = ok("via=libnfs\n")
READ_VIA_MOUNT = ok("via=mount\n")
READ_LIBNFS_DENIED = fail(
    5,
    "via=libnfs-failed\nFailed to mount nfs share : mount_cb: RPC error: Mount failed with error "
    "MNT3ERR_ACCES(13) Permission denied(13)\n",
)
READ_NOT_NFS = fail(3, "via=none fstype=ext4\n")
TARGETS_HEALTHY = fixture("prometheus_targets_healthy.json")
# The first lines of the head's node exporter page (recorded on a deployed sandbox).
NODE_EXPORTER_HEAD = fixture("node_exporter_head.txt")
SLURM_COLLECTOR = Path(__file__).resolve().parents[2] / "roles" / "slurm_metrics" / "files" / "slurm_metrics.py"
SLURM_CAPTURES = Path(__file__).resolve().parent / "data" / "slurm_metrics"
# The controller's clock when validate asks (`date +%s` comes first in the answer).
CONTROLLER_NOW = 1795526723


def controller_metrics(age_s: float = 12, *, slurm_answers: bool = True, scenario: str = "idle") -> CommandResult:
    """The controller's answer to monitoring.slurm_metrics: its clock, then its node exporter's page.

    The slurm_* part is what roles/slurm_metrics' own collector writes from
    Slurm output captured on a sandbox (tests/unit/data/slurm_metrics/), last
    successful ``age_s`` seconds before CONTROLLER_NOW.
    """
    collector = _slurm_collector()
    files = {
        tuple(collector.NODES_COMMAND): "nodes.txt",
        tuple(collector.PARTITIONS_COMMAND): "partitions.txt",
        tuple(collector.JOBS_COMMAND): "jobs.txt",
        tuple(collector.SDIAG_COMMAND): "sdiag.txt",
    }
    snapshot = (
        collector.collect(lambda argv: (SLURM_CAPTURES / scenario / files[tuple(argv)]).read_text())
        if slurm_answers
        else None
    )
    page = collector.render(snapshot, 0.07, CONTROLLER_NOW - age_s)
    return ok(f"{CONTROLLER_NOW}\n{NODE_EXPORTER_HEAD}{page}")


def _slurm_collector() -> Any:
    if "slurm_metrics" not in sys.modules:
        spec = importlib.util.spec_from_file_location("slurm_metrics", SLURM_COLLECTOR)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["slurm_metrics"] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["slurm_metrics"]


NO_ROUTE = 'Get "http://10.213.0.12:9100/metrics": dial tcp 10.213.0.12:9100: connect: no route to host'
SACCT_RUN = fixture("sacct_run.txt")
# The doors.compute-ssh script's answer on a compute node of the sandbox (pamtester's own line for the admin).
PAM_DOOR_SHUT = "refused=1\npamtester: successfully acct_mgmt.\nadmitted=0\n"


def node_line(node: str, text: str = NODES_HEALTHY) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"NodeName={node} "))


def with_state(node: str, state: str, text: str = NODES_HEALTHY, reason: str | None = None) -> str:
    """The recorded scontrol output with one node's State= edited (and a Reason= added)."""
    line = node_line(node, text)
    edited = line.replace(" State=IDLE ", f" State={state} ")
    if reason is not None:
        edited += f" Reason={reason}"
    return text.replace(line, edited)


def sacct_for(remote: StubRemote) -> Callable[[str], CommandResult]:
    """sacct listing, as COMPLETED, every job the stub saw end well (job ids as in the recorded run)."""

    def answer(command: str) -> CommandResult:
        return ok("".join(f"{90 + index}|COMPLETED\n" for index in range(remote.jobs_completed())))

    return answer


def healthy_remote() -> StubRemote:
    """Every command of a standard-level run on the healthy sandbox, answered with recorded output."""
    # The config stage's survey, answered by stand-in nodes (config_survey_stubs imports this module).
    from config_survey_stubs import healthy_cluster

    from gpuclus.validate.checks.config.survey import SCRIPT_MARK

    remote = StubRemote()
    remote.rules += [
        (SCRIPT_MARK, healthy_cluster().answer),  # first: its lines also hold words the rules below match
        ("scontrol ping", PING_UP),
        ("scontrol --oneliner show node", ok(NODES_HEALTHY)),
        ("sinfo --noheader", ok(PARTITIONS)),
        ("unmunge", UNMUNGE_OK),
        ("munge -n", MUNGE_CREDENTIAL),
        ("SLURMD_NODENAME", hostname_job),
        ("slurmd -G", ok(GRES_PROBE_HEALTHY)),
        ("command -v mpicc", ok("no-mpicc\n")),  # launch.mpi: the sandbox has no MPI
        # doors.compute-ssh: sshd's account stack refuses nobody (pam_slurm_adopt) and lets the admin in.
        ("pamtester sshd nobody", ok(PAM_DOOR_SHUT)),
        (("srun", "rm -rf /var/tmp/gpuclus-validate-"), ok()),
        ("sudo -n sh -c", ok()),  # the storage check writes its file on the NFS server
        ("sudo -n rm -f", ok()),
        ("nfs-cat", READ_VIA_LIBNFS),
        ("sacct --noheader", sacct_for(remote)),
        (("srun", "sh -c true"), ok()),
        ("api/v1/targets", ok(TARGETS_HEALTHY)),
        ("date +%s; curl", controller_metrics()),
        ("%{http_code}", ok("200")),
        ("scancel --name=", ok()),
    ]
    return remote


def context(
    remote: StubRemote | None = None,
    text: str = SANDBOX_SPEC,
    nodes: list[str] | None = None,
    options: Options | None = None,
) -> Context:
    """A real Context over the stub session; ``nodes`` is --nodes (all by default)."""
    loaded = load(text)
    assert loaded.spec is not None and loaded.topology is not None
    selected = [node for node in loaded.topology.nodes if nodes is None or node.name in nodes]
    return Context(
        loaded.spec,
        loaded.topology,
        remote if remote is not None else healthy_remote(),
        "gpuclus-validate-t",
        selected,
        options or Options(),
    )
