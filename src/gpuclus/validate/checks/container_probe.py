"""What the containers check runs inside a Pyxis container, and how it reads the job's answer.

The probe must run in any image Enroot accepts, which promises no more than
``/bin/sh``, ``/etc/passwd`` and ``/etc/group`` (what ``gpuclus image build``
checks): no grep, no cat, no /etc/os-release. So it is shell builtins only,
started as ``/bin/sh`` by its path (a busybox image has no ``/usr/bin/sh`` for
a PATH without /bin to find).

What it proves is that it ran inside the container. Every Enroot container
lives in a user namespace of its own, which Pyxis joins the task to; the step
daemon that started the task stays outside. So the probe compares its own
``/proc/self/uid_map`` with its parent's (read from the host's /proc, which
Enroot binds in): different maps, a container; the same, the host, i.e.
``--container-image`` was accepted but no container was started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuclus.slurm import commands as slurm
from gpuclus.slurm.remote import TIMED_OUT
from gpuclus.ssh.client import CommandResult

SHELL = "/bin/sh"
MARKER = "GPUCLUS_CONTAINER"
# Builtins only (test, read, echo) and no redirection that could fail (no
# /dev/null needed): nothing the image has to provide. A map that cannot be read
# (/proc hiding other users' processes) is "unknown", never a verdict.
PROBE = (
    "self= parent=; "
    "[ -r /proc/self/uid_map ] && read -r self </proc/self/uid_map; "
    '[ -r "/proc/$PPID/uid_map" ] && read -r parent <"/proc/$PPID/uid_map"; '
    'if [ -z "$self" ] || [ -z "$parent" ]; then where=unknown; '
    'elif [ "$self" = "$parent" ]; then where=host; '
    "else where=container; fi; "
    f'echo "{MARKER} $where $self"'
)

INSIDE = "container"  # the verdict of a probe that ran in a container
# Where it stopped otherwise: the stages of `srun --container-image`, by the line Pyxis logs when one fails...
PULL = "pull"
UNPACK = "unpack"
START = "start"
RUN = "run"  # slurmstepd could not exec /bin/sh in the started container
# ... or what the probe said, or did not say.
HOST = "host"
UNKNOWN = "unknown"
TIMEOUT = "timeout"
OTHER = "other"
# First match wins: after a failed pull or unpack Pyxis also says it "couldn't start container".
_STAGE_LINES = (
    (PULL, re.compile(r"pyxis: failed to import docker image")),
    (UNPACK, re.compile(r"pyxis: failed to create container filesystem")),
    (
        START,
        re.compile(
            r"pyxis: (couldn't start container|failed to start container|container start failed"
            r"|container exited too soon|couldn't join|couldn't chdir|couldn't get container)"
        ),
    ),
)
# Enroot's own error lines, which Pyxis copies into the job's stderr after its own.
_ENROOT_ERROR = re.compile(r"\[ERROR\]\s*(.+)")


@dataclass(frozen=True)
class Verdict:
    stage: str  # INSIDE when the probe ran in a container; else where it stopped, one of the stages above
    detail: str  # what the node's row says after the image


def read(answer: CommandResult) -> Verdict:
    """What one node's ``srun --container-image ... /bin/sh -c PROBE`` says happened."""
    for line in answer.stdout.splitlines():
        words = line.split(maxsplit=2)
        if len(words) >= 2 and words[0] == MARKER:
            where, uid_map = words[1], " ".join(" ".join(words[2:]).split())
            if where == INSIDE:
                return Verdict(INSIDE, f"/bin/sh ran in the container (user namespace map {uid_map})")
            if where == HOST:
                return Verdict(HOST, "the job ran on the host, not in a container")
            return Verdict(UNKNOWN, "/bin/sh ran, but /proc did not tell whether it was in a container")
    if answer.exit_status == TIMED_OUT:
        return Verdict(TIMEOUT, "no answer before the time limit")
    for stage, pattern in _STAGE_LINES:
        if any(pattern.search(line) for line in answer.stderr.splitlines()):
            return Verdict(stage, _why(answer.stderr, stage))
    if answer.exit_status == 0:
        return Verdict(OTHER, "the job printed no answer")
    if "execve" in answer.stderr:
        return Verdict(RUN, slurm.first_error_line(answer.stderr, f"exit {answer.exit_status}"))
    return Verdict(OTHER, slurm.first_error_line(answer.stderr, f"exit {answer.exit_status}"))


def _why(stderr: str, stage: str) -> str:
    """Enroot's first error line where Pyxis printed its log, else Pyxis' own line for the stage."""
    errors = [match.group(1).strip() for match in map(_ENROOT_ERROR.search, stderr.splitlines()) if match]
    said = {PULL: "pull failed", UNPACK: "unpacking the image failed", START: "the container did not start"}[stage]
    if errors:
        return f"{said}: {errors[0]}"
    return said


def hint(stage: str, image: str) -> str | None:
    """What to look at for a node whose probe ended at ``stage`` (None: nothing better than its error line)."""
    local = image.startswith(("/", "./"))
    texts = {
        PULL: "`enroot import docker://IMAGE` on the node shows pull and credential errors (credentials go in "
        "~/.config/enroot/.credentials); offline clusters can pass `--container-image` a local squashfs file",
        UNPACK: (
            "the file must exist at that path, readable, on every compute node (e.g. on the NFS share); "
            "`unsquashfs -s FILE` tells a damaged one; Enroot also needs room in its data directory"
            if local
            else "Enroot pulled the image but could not unpack it: room in its data directory "
            "(ENROOT_DATA_PATH) and `enroot create` on the node tell more"
        ),
        START: "Enroot could not start the image: `enroot create` then `enroot start NAME sh` on the node shows "
        "the hook or mount that fails; the image needs /bin/sh (`gpuclus image build` checks it)",
        RUN: "the container started but /bin/sh did not run: the image needs /bin/sh (`gpuclus image build` checks it)",
        HOST: "srun accepted --container-image but the node's slurmstepd started no container: Pyxis must be in "
        "the node's plugstack.conf too (`gpuclus deploy --only containers`), then restart slurmd",
        UNKNOWN: "/proc on the node hides other users' processes (hidepid), so the probe could not compare "
        "its user namespace with its parent's",
        TIMEOUT: "the first pull of a large image can take longer than the time limit: pull it once with "
        "`enroot import`, or pass `--container-image` a local squashfs file",
    }
    return texts.get(stage)
