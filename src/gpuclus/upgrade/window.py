"""A batch's time out of service, on the controller: drain, then a reservation to check it in, then resume.

After its upgrade a node must prove itself before users get it back, but a
drained node runs no job at all, not even a check. So the node goes into a
maintenance reservation for the admin user first, is resumed (only the
reservation's user can start jobs there), runs the check jobs inside it, and
the reservation is deleted last. Every command runs on the controller as the
admin user (sudo for scontrol).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from gpuclus.errors import GpuclusError
from gpuclus.slurm.commands import parse_nodes, srun_command
from gpuclus.ssh.client import CommandResult

# Every drain and reservation of an upgrade says so: `sinfo -R` shows who and why.
REASON_PREFIX = "gpuclus-upgrade:"
RESERVATION_PREFIX = "gpuclus-upgrade-"
CHECK_JOB = "gpuclus-upgrade-check"
CHECK_TIME_S = 120
QUEUE_WAIT_S = 60
# Slurm keeps reasons short in `sinfo`; the whole message is in gpuclus' output.
_REASON_MAX = 120

Run = Callable[[str], CommandResult]


@dataclass(frozen=True)
class Expected:
    """What the upgraded nodes must run afterwards; None: not pinned or not installed, not checked."""

    slurm: str | None = None
    enroot: str | None = None
    pyxis: str | None = None
    container_image: str | None = None  # run with Pyxis when pyxis is on


def reason(text: str) -> str:
    return f"{REASON_PREFIX} {text}"[:_REASON_MAX]


def held_by_others(run: Run, nodes: list[str]) -> dict[str, str]:
    """The nodes someone else drained or took down: {node: their reason}. Those stay as they are."""
    shown = run(f"scontrol show node -o {shlex.quote(','.join(nodes))}")
    if shown.exit_status != 0:
        raise GpuclusError(
            f"scontrol show node failed on the controller: {(shown.stderr or shown.stdout).strip()}",
            "check that slurmctld runs (`gpuclus validate --only cluster`)",
        )
    held = {}
    for name, fields in parse_nodes(shown.stdout).items():
        state = fields.get("State", "").upper()
        why = fields.get("Reason", "")
        out = any(word in state for word in ("DRAIN", "DOWN", "FAIL"))
        if out and not why.startswith(REASON_PREFIX):
            held[name] = why or state
    return held


def _scontrol(run: Run, command: str, what: str) -> None:
    done = run(f"sudo -n scontrol {command}")
    if done.exit_status != 0:
        raise GpuclusError(f"could not {what}: {(done.stderr or done.stdout).strip()}")


def reserve(run: Run, name: str, nodes: list[str], user: str) -> None:
    # MAINT: accounting counts the time as maintenance; IGNORE_JOBS: a job
    # still completing on the node must not refuse the reservation.
    _scontrol(
        run,
        f"create reservation ReservationName={shlex.quote(name)} StartTime=now Duration=UNLIMITED "
        f"Nodes={shlex.quote(','.join(nodes))} Users={shlex.quote(user)} Flags=MAINT,IGNORE_JOBS",
        f"reserve {','.join(nodes)} for the upgrade check",
    )


def release(run: Run, name: str) -> None:
    """Delete the reservation; one that is gone already is fine (a second try after an error)."""
    done = run(f"sudo -n scontrol delete ReservationName={shlex.quote(name)}")
    if done.exit_status != 0 and "Invalid reservation" not in (done.stderr + done.stdout):
        raise GpuclusError(f"could not delete reservation {name}: {(done.stderr or done.stdout).strip()}")


def resume(run: Run, nodes: list[str]) -> None:
    """Resume the nodes; one that is not drained any more (nothing to resume) is fine."""
    done = run(f"sudo -n scontrol update NodeName={shlex.quote(','.join(nodes))} State=RESUME")
    said = done.stderr + done.stdout
    if done.exit_status != 0 and "Invalid node state" not in said:
        raise GpuclusError(f"could not resume {','.join(nodes)}: {said.strip()}")


def drain(run: Run, nodes: list[str], text: str) -> None:
    _scontrol(
        run,
        f"update NodeName={shlex.quote(','.join(nodes))} State=DRAIN Reason={shlex.quote(reason(text))}",
        f"drain {','.join(nodes)}",
    )


# One line per node: name, then what it runs. Pyxis' record is the pyxis role's
# build record; `slurmd -V` says "slurm-wlm 22.05.8" on Debian, "slurm 23.11.4" elsewhere.
_PROBE = (
    'printf "%s|%s|%s|%s\\n" "$SLURMD_NODENAME" "$(slurmd -V 2>/dev/null | cut -d" " -f2)" '
    '"$(enroot version 2>/dev/null)" '
    '"$(python3 -c \'import json; print(json.load(open("/var/lib/gpuclus/pyxis.json"))["pyxis_version"])\' '
    '2>/dev/null)"'
)


def check(run: Run, reservation: str, nodes: list[str], expected: Expected) -> dict[str, str]:
    """Run the check jobs inside the reservation: {node: what is wrong}; empty when every node is fine."""
    extra = (f"--reservation={reservation}",)
    probe = run(
        srun_command(
            _PROBE,
            job_name=CHECK_JOB,
            time_limit_s=CHECK_TIME_S,
            nodes=nodes,
            queue_wait_s=QUEUE_WAIT_S,
            extra=extra,
        )
    )
    if probe.exit_status != 0:
        why = (probe.stderr or probe.stdout).strip().splitlines()
        return dict.fromkeys(nodes, f"a job did not run: {why[-1] if why else f'srun exited {probe.exit_status}'}")
    problems = compare(probe.stdout, nodes, expected)
    if expected.container_image and expected.pyxis:
        image = run(
            srun_command(
                "true",
                job_name=CHECK_JOB,
                time_limit_s=CHECK_TIME_S,
                nodes=[node for node in nodes if node not in problems] or nodes,
                queue_wait_s=QUEUE_WAIT_S,
                extra=(*extra, f"--container-image={expected.container_image}"),
            )
        )
        if image.exit_status != 0:
            why = (image.stderr or image.stdout).strip().splitlines()
            for node in nodes:
                problems.setdefault(node, f"a Pyxis container job failed: {why[-1] if why else 'no output'}")
    return problems


def compare(output: str, nodes: list[str], expected: Expected) -> dict[str, str]:
    """The probe's lines against what the nodes must run: {node: what differs}."""
    seen: dict[str, list[str]] = {}
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 4 and fields[0] in nodes:
            seen[fields[0]] = fields[1:]
    problems = {}
    for node in nodes:
        if node not in seen:
            problems[node] = "the check job printed nothing for it"
            continue
        slurm, enroot, pyxis = seen[node]
        wrong = [
            f"{what} {found or 'missing'} (expected {want})"
            for what, found, want in (
                ("Slurm", slurm, expected.slurm),
                ("Enroot", enroot, expected.enroot),
                ("Pyxis", pyxis, expected.pyxis),
            )
            if want is not None and not _same_version(found, want)
        ]
        if wrong:
            problems[node] = "runs " + ", ".join(wrong)
    return problems


def _same_version(found: str, wanted: str) -> bool:
    # A pin may carry the package revision (22.05.8-4+deb12u1); slurmd -V shows the upstream part.
    return found == wanted or wanted.startswith(found + "-") or found.startswith(wanted + "-")
