"""Raw command output → typed values: scontrol, squeue, systemctl is-active, Prometheus' targets.

Pure functions, tested on output recorded from a deployed sandbox (Slurm 22.05,
Prometheus 2.42). Slurm's key=value lines are split by slurm/commands.py's parser,
which knows that values hold spaces (Reason=) and '=' (CfgTRES=).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuclus.fileio import parse_json
from gpuclus.slurm.commands import NodeState, gres_gpu_total, parse_gres, parse_key_values, parse_nodes
from gpuclus.status.report import Job, PartitionInfo, ServiceState, SlurmNode, Target, Usage

# Each command of a node's script starts with a marker line and ends with one giving its exit status.
SECTION = "@@gpuclus-status:"
EXIT = "@@gpuclus-status-exit:"


@dataclass(frozen=True)
class Section:
    exit_status: int
    text: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def said(self, default: str) -> str:
        """The command's last words (stderr is merged in), for a one-line error."""
        lines = [line.strip() for line in self.text.splitlines() if line.strip()]
        return lines[-1][:300] if lines else default


def parse_sections(text: str) -> dict[str, Section]:
    """A node's answer → {section name: its output and exit status}.

    A section cut off before its exit line (the script ran out of time) gets
    exit status -1.
    """
    sections: dict[str, Section] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(SECTION):
            name, lines = line[len(SECTION) :].strip(), []
        elif line.startswith(EXIT) and name is not None:
            status = line[len(EXIT) :].strip()
            sections[name] = Section(int(status) if status.lstrip("-").isdigit() else -1, "\n".join(lines).strip("\n"))
            name = None
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = Section(-1, "\n".join(lines).strip("\n"))
    return sections


# --- scontrol show nodes -o ---------------------------------------------------------------------


def _int(text: str | None) -> int:
    try:
        return int(text or "0")
    except ValueError:
        return 0


def tres(text: str | None) -> dict[str, str]:
    """`cpu=2,mem=23622M,billing=2,gres/gpu=2` → {"cpu": "2", ...}; empty or (null) → {}."""
    found: dict[str, str] = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep:
            found[key.strip()] = value.strip()
    return found


def _none_if_null(text: str | None) -> str | None:
    if text is None or text.strip() in ("", "(null)", "none", "None"):
        return None
    return text.strip()


def slurm_node(fields: dict[str, str]) -> SlurmNode:
    state = NodeState.parse(fields.get("State", "UNKNOWN"))
    configured = tres(fields.get("CfgTRES"))
    gres_total = gres_gpu_total(parse_gres(fields.get("Gres", "")))
    gpus_total = gres_total or _int(configured.get("gres/gpu"))
    partitions = _none_if_null(fields.get("Partitions"))
    return SlurmNode(
        name=fields["NodeName"],
        state=state.base.lower(),
        flags=tuple(sorted(flag.lower() for flag in state.flags)),
        reason=_none_if_null(fields.get("Reason")),
        cpus=Usage(_int(fields.get("CPUAlloc")), _int(fields.get("CPUTot"))),
        gpus=Usage(_int(tres(fields.get("AllocTRES")).get("gres/gpu")), gpus_total),
        partitions=tuple(partitions.split(",")) if partitions else (),
        healthy=state.usable,
    )


def parse_slurm_nodes(text: str) -> dict[str, SlurmNode]:
    """`scontrol show nodes -o` → {node name: SlurmNode}."""
    return {name: slurm_node(fields) for name, fields in parse_nodes(text).items()}


# --- scontrol show partitions -o ----------------------------------------------------------------


def parse_partitions(text: str) -> list[PartitionInfo]:
    """`scontrol show partitions -o` → the partitions in slurm.conf's order."""
    found = []
    for line in text.splitlines():
        fields = parse_key_values(line.strip())
        if "PartitionName" not in fields:
            continue
        found.append(
            PartitionInfo(
                name=fields["PartitionName"],
                state=fields.get("State", "UNKNOWN").lower(),
                default=fields.get("Default", "NO").upper() == "YES",
            )
        )
    return found


# --- squeue ---------------------------------------------------------------------------------------

# Job id, partition(s) (comma-separated while a job waits for any of several), state in full words.
SQUEUE_FORMAT = "%i|%P|%T"


def parse_jobs(text: str) -> list[Job]:
    """`squeue --noheader --format='%i|%P|%T'` → jobs; lines that are not that shape are skipped."""
    jobs = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 3 or not fields[0]:
            continue
        job_id, partitions, state = fields
        jobs.append(Job(job_id, tuple(part for part in partitions.split(",") if part), state.strip().lower()))
    return jobs


# --- systemctl is-active --------------------------------------------------------------------------


def parse_units(text: str, units: tuple[str, ...]) -> dict[str, ServiceState]:
    """`systemctl is-active A B C` prints one word per unit, in order; a missing word is unknown."""
    words = [line.strip() for line in text.splitlines() if line.strip()]
    states: dict[str, ServiceState] = {}
    for index, unit in enumerate(units):
        word = words[index] if index < len(words) else ""
        try:
            states[unit] = ServiceState(word)
        except ValueError:
            states[unit] = ServiceState.UNKNOWN
    return states


# --- Prometheus /api/v1/targets -----------------------------------------------------------------


def parse_targets(text: str) -> list[Target]:
    """Prometheus' active targets, sorted by job then instance; ValueError when it is not that document."""
    try:
        document = parse_json(text)  # what a node sends: nested thousands deep, json.loads recurses out
        active = document["data"]["activeTargets"]
        if not isinstance(active, list):
            raise TypeError
    except (KeyError, TypeError) as problem:
        raise ValueError("not a Prometheus targets document") from problem
    targets = []
    for target in active:
        labels = target.get("labels") or {}
        targets.append(
            Target(
                job=str(labels.get("job", "?")),
                instance=str(labels.get("instance", "?")),
                url=str(target.get("scrapeUrl", "")),
                health=str(target.get("health", "unknown")),
                last_error=str(target.get("lastError") or ""),
            )
        )
    return sorted(targets, key=lambda target: (target.job, target.instance))


# --- /var/lib/gpuclus/grafana.skipped --------------------------------------------------------------


def skip_reason(text: str) -> str:
    """The reason a deploy wrote into a skip record: its first sentence, comment lines left out.

    The grafana role writes a managed-by comment, then "Grafana is not installed on NODE: <why>, and
    monitoring.grafana_unavailable is skip." and how to install it; a JSON object's "reason" works too.
    """
    try:
        document = parse_json(text)  # what a node sends: nested thousands deep, json.loads recurses out
    except ValueError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("reason"), str) and document["reason"].strip():
        return _clip(str(document["reason"]))
    words = " ".join(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    first = _SENTENCE_END.split(words, maxsplit=1)[0]
    return _clip(first) if first else "no reason recorded"


_SENTENCE_END = re.compile(r"(?<=\.)\s")
_MAX_REASON = 400


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"
