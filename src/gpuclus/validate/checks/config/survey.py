"""One look at each node for the whole config stage: a shell script per node, its clock timed from the controller.

Every check of the stage reads the same survey, taken once per run (memoised in
``Context.memo``), so the stage costs one SSH round per node whatever it checks.
A node's script prints tab-separated lines: its files' hashes (a salted hash
for secrets, read with ``sudo -n``), the files the spec comparison reads, how
it resolves every cluster name, its mounts after touching them, its units'
states, then ``done``. ``parse_survey`` turns that text into a ``NodeSurvey``;
everything after it is pure and unit-tested on text.

The clock. A remote timestamp means little without knowing when it was taken,
so a small Python program on the controller (``CLOCK_DRIVER``) runs the whole
line, ssh hop included, with a pipe to the node script's stdin. The script
first answers each line it reads with ``date +%s.%N``; the driver writes a line,
reads the answer and notes its own time before and after. The node's clock was
read between the two, so offset = node - (before + after) / 2, give or take
(after - before) / 2. The first exchange includes the SSH connection; the later
ones only a round trip on an open channel, and the tightest one is kept.
"""

from __future__ import annotations

import secrets
import shlex
from dataclasses import dataclass, field

from gpuclus.spec.models import ClusterSpec
from gpuclus.spec.topology import Node, Topology
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.checks.config import expected
from gpuclus.validate.checks.config.expected import DEPLOY_STAMP, FileRule, Mount
from gpuclus.validate.context import Context, ssh_failure
from gpuclus.validate.results import NodeResult, Outcome, Status

MEMO_KEY = "config.survey"
# Clock exchanges per node; the one with the shortest round trip is kept.
CLOCK_SAMPLES = 4
# A mount point that neither mounts nor fails within this is a hung automount or server.
MOUNT_TOUCH_S = 5
# A name lookup that falls through to a DNS server that does not answer.
LOOKUP_S = 5
# The whole survey of one node, before the mounts' own bounds are added.
SURVEY_TIMEOUT_S = 60.0
# Marks the script (and lets test stubs recognise it).
SCRIPT_MARK = "# gpuclus validate: config survey"

# Runs on the controller: the node's line (ssh hop included) as a child whose stdin it writes and whose
# first answers it times; then the rest of the output as it comes (a survey cut off by its deadline still
# says how far it got), and the child's exit status (ssh's 255 included).
CLOCK_DRIVER = f"""\
import subprocess, sys, time
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
samples = []
for _ in range({CLOCK_SAMPLES}):
    before = time.time()
    try:
        child.stdin.write(b"t\\n")
        child.stdin.flush()
    except OSError:
        break
    answer = child.stdout.readline().decode(errors="replace").strip()
    after = time.time()
    if not answer:
        break
    samples.append("clock\\t%.6f\\t%s\\t%.6f\\n" % (before, answer, after))
try:
    child.stdin.close()
except OSError:
    pass
sys.stdout.write("".join(samples))
sys.stdout.flush()
for chunk in iter(lambda: child.stdout.read1(65536), b""):
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
status = child.wait()
sys.exit(status if status >= 0 else 128 - status)
"""


def timed(line: str) -> str:
    """``line`` as the controller runs it under the clock driver (``Context.ssh_each``'s ``around``)."""
    return f"python3 -c {shlex.quote(CLOCK_DRIVER)} sh -c {shlex.quote(line)}"


# One file's state: KEY SALT BLANK PATH...; the first PATH that exists is hashed (SALT first, for
# secrets; BLANK, the node's own name, replaced first where the file names its node).
_FILE_STATE = r"""key=$1 salt=$2 blank=$3; shift 3
for path in "$@"; do
  [ -e "$path" ] || continue
  [ -r "$path" ] || { printf 'file\t%s\t%s\tunreadable\n' "$key" "$path"; exit 0; }
  if [ -n "$blank" ]; then
    sum=$( { printf '%s' "$salt"; sed "s/$blank/@node@/g" "$path"; } | sha256sum)
  else
    sum=$( { printf '%s' "$salt"; cat "$path"; } | sha256sum)
  fi
  printf 'file\t%s\t%s\t%s\t%s\n' "$key" "$path" "${sum%% *}" "$(stat -c %Y "$path")"
  exit 0
done
printf 'file\t%s\t-\tmissing\n' "$key"
"""

# A file's lines, each behind '|', between begin and end (a last line without a newline included).
_SHOW = r"""show() {
  key=$1; shift
  for path in "$@"; do
    [ -r "$path" ] || continue
    printf 'begin\t%s\n' "$key"
    while IFS= read -r line || [ -n "$line" ]; do printf '|%s\n' "$line"; done < "$path"
    printf 'end\t%s\n' "$key"
    return 0
  done
}"""


@dataclass(frozen=True)
class Request:
    """What one node is asked."""

    node: str
    files: list[FileRule]
    shown: list[FileRule]
    names: list[str]
    mounts: list[Mount]
    units: list[str]
    markers: list[str]
    salt: str  # for the secrets' hashes: a fresh one each run, so a hash seen once tells nothing later


# The sections after the files, as the node runs them; @NAME@ stands for a quoted list.
_MACHINE = r"""
virt=$(systemd-detect-virt --container 2>/dev/null); printf 'virt\t%s\n' "${virt:-none}"
chrony=$(timeout 5 chronyc -n tracking 2>/dev/null | sed -n 's/^System time *: *//p')
[ -z "$chrony" ] || printf 'chrony\t%s\n' "$chrony"
"""
_UNITS = r"""
for unit in @UNITS@; do
  state=$(systemctl show -p LoadState -p UnitFileState -p ActiveState "$unit" 2>/dev/null | tr '\n' ' ')
  printf 'unit\t%s\t%s\n' "$unit" "$state"
done
"""
_MARKER = r"""[ ! -e @PATH@ ] || printf 'exists\t%s\n' @PATH@"""
# Touching a path inside a mount point mounts an automount (x-systemd.automount) first; then /proc/mounts.
_MOUNTS = r"""
for point in @POINTS@; do
  timeout @SECONDS@ stat -c %i "$point/." >/dev/null 2>&1
  printf 'touch\t%s\t%s\n' "$point" "$?"
done
while read -r source target fstype _rest; do
  case "$target" in @CASES@) printf 'mount\t%s\t%s\t%s\n' "$target" "$fstype" "$source" ;; esac
done < /proc/mounts
"""
_NAMES = r"""
for name in @NAMES@; do
  addresses=$(timeout @SECONDS@ getent ahostsv4 "$name" 2>/dev/null | while read -r address _rest; do
    printf '%s ' "$address"
  done)
  printf 'name\t%s\t%s\n' "$name" "$addresses"
done
"""


def survey_script(request: Request) -> str:
    quote = shlex.quote
    lines = [
        SCRIPT_MARK,
        # The clock first, before anything slow: each line the driver writes is answered at once.
        "while IFS= read -r _sample; do date +%s.%N; done",
        f"file_state={quote(_FILE_STATE)}",
        _SHOW,
    ]
    stamp = ["stamp", "", "", DEPLOY_STAMP]
    lines.append(f'sh -c "$file_state" file_state {" ".join(quote(word) for word in stamp)}')
    for rule in request.files:
        words = [rule.key, request.salt if rule.secret else "", request.node if rule.names_its_node else ""]
        args = " ".join(quote(word) for word in [*words, *rule.paths])
        if rule.root_only:
            refused = quote(f"file\t{rule.key}\t-\tunreadable\tsudo -n was refused\n")
            lines.append(f'sudo -n sh -c "$file_state" file_state {args} 2>/dev/null || printf {refused}')
        else:
            lines.append(f'sh -c "$file_state" file_state {args}')
    for rule in request.shown:
        lines.append(f"show {quote(rule.key)} {' '.join(quote(path) for path in rule.paths)}")
    lines.append(_MACHINE.strip())
    if request.units:
        lines.append(_UNITS.strip().replace("@UNITS@", " ".join(quote(unit) for unit in request.units)))
    lines += [_MARKER.replace("@PATH@", quote(marker)) for marker in request.markers]
    if request.mounts:
        points = [quote(mount.point) for mount in request.mounts]
        mounts = _MOUNTS.strip().replace("@POINTS@", " ".join(points)).replace("@CASES@", "|".join(points))
        lines.append(mounts.replace("@SECONDS@", str(MOUNT_TOUCH_S)))
    if request.names:
        names = _NAMES.strip().replace("@NAMES@", " ".join(quote(name) for name in request.names))
        lines.append(names.replace("@SECONDS@", str(LOOKUP_S)))
    lines.append("printf 'done\\n'")
    return "\n".join(lines) + "\n"


# --- what a node answered --------------------------------------------------------------------


@dataclass(frozen=True)
class ClockSample:
    before: float  # the controller's clock when it asked
    node: float  # the node's answer
    after: float  # the controller's clock when the answer came

    @property
    def offset(self) -> float:
        return self.node - (self.before + self.after) / 2

    @property
    def uncertainty(self) -> float:
        return (self.after - self.before) / 2


@dataclass(frozen=True)
class FileCopy:
    path: str | None  # where the node has it; None: missing
    sha256: str | None = None
    mtime: int | None = None
    unreadable: str | None = None  # why it could not be hashed


@dataclass
class NodeSurvey:
    clock: list[ClockSample] = field(default_factory=list)
    files: dict[str, FileCopy] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)
    virt: str | None = None  # systemd-detect-virt --container: "none", "podman", ...
    chrony: str | None = None  # `chronyc tracking`'s "System time"
    units: dict[str, dict[str, str]] = field(default_factory=dict)
    markers: set[str] = field(default_factory=set)
    touched: dict[str, int] = field(default_factory=dict)  # mount point -> stat's exit status
    mounts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # mount point -> (fstype, source)
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    complete: bool = False  # the script got to its end
    stopped: str = ""  # why not, when not

    @property
    def in_container(self) -> bool:
        return self.virt not in (None, "", "none")

    @property
    def best_clock(self) -> ClockSample | None:
        return min(self.clock, key=lambda sample: sample.uncertainty, default=None)

    def missing(self, what: str) -> str:
        """Why a section the script should have printed is not there."""
        return f"{what} not read: {self.stopped or 'the survey did not say'}"


def parse_survey(text: str) -> NodeSurvey:
    found = NodeSurvey()
    block: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if block is not None:
            if line == f"end\t{block}":
                found.contents[block] = "".join(f"{kept}\n" for kept in body)
                block, body = None, []
            elif line.startswith("|"):
                body.append(line[1:])
            continue
        kind, _, rest = line.partition("\t")
        fields = rest.split("\t")
        if kind == "clock" and len(fields) == 3:
            try:
                found.clock.append(ClockSample(float(fields[0]), float(fields[1]), float(fields[2])))
            except ValueError:
                continue  # a node whose date has no %N answers "1700000000.N"
        elif kind == "file" and len(fields) >= 3:
            found.files[fields[0]] = _file_copy(fields)
        elif kind == "begin" and fields[0]:
            block = fields[0]
        elif kind == "virt":
            found.virt = rest.strip()
        elif kind == "chrony":
            found.chrony = rest.strip()
        elif kind == "unit" and fields[0]:
            words = (fields[1] if len(fields) > 1 else "").split()
            found.units[fields[0]] = dict(word.partition("=")[::2] for word in words if "=" in word)
        elif kind == "exists":
            found.markers.add(rest.strip())
        elif kind == "touch" and len(fields) == 2 and fields[1].isdigit():
            found.touched[fields[0]] = int(fields[1])
        elif kind == "mount" and len(fields) == 3:
            found.mounts.setdefault(fields[0], []).append((fields[1], fields[2]))
        elif kind == "name" and fields[0]:
            found.names[fields[0]] = tuple(dict.fromkeys((fields[1] if len(fields) > 1 else "").split()))
        elif line == "done":
            found.complete = True
    return found


def _file_copy(fields: list[str]) -> FileCopy:
    _key, path, state, *more = fields
    if state == "missing":
        return FileCopy(None)
    if state == "unreadable":
        return FileCopy(None if path == "-" else path, unreadable=more[0] if more else "permission denied")
    mtime = more[0] if more else ""
    return FileCopy(path, state, int(mtime) if mtime.isdigit() else None)


# --- the survey of a run -------------------------------------------------------------------------


@dataclass
class Survey:
    answered: dict[str, NodeSurvey]  # every node that printed something (maybe cut short)
    failed: dict[str, str]  # the nodes that printed nothing, and why
    unreachable: set[str]  # those of them the SSH hop did not reach
    rules: list[FileRule]
    # Which check of the stage reported a failed node first: the later ones SKIP it.
    reported: dict[str, str] = field(default_factory=dict)


def surveyed_nodes(ctx: Context) -> list[Node]:
    """The selected nodes, and the controller (its copies are the reference) when --nodes left it out."""
    nodes = list(ctx.selected)
    if all(node.name != ctx.controller.name for node in nodes):
        nodes.append(ctx.controller)
    return nodes


def request_for(spec: ClusterSpec, topology: Topology, node: Node, rules: list[FileRule], salt: str) -> Request:
    services = expected.services_for(node, spec, topology)
    return Request(
        node=node.name,
        files=[rule for rule in rules if node.name in rule.holders],
        shown=[rule for rule in rules if node.name in rule.shown_on],
        names=expected.names_to_resolve(topology),
        mounts=expected.mounts_for(node, spec, topology),
        units=services.units,
        markers=services.markers,
        salt=salt,
    )


def survey(ctx: Context) -> Survey:
    """Every surveyed node's answer, asked once per run."""
    taken: Survey | None = ctx.memo.get(MEMO_KEY)
    if taken is not None:
        return taken
    rules = expected.file_rules(ctx.spec, ctx.topology)
    salt = secrets.token_hex(16)
    nodes = surveyed_nodes(ctx)
    requests = {node.name: request_for(ctx.spec, ctx.topology, node, rules, salt) for node in nodes}
    mounts = max((len(request.mounts) for request in requests.values()), default=0)
    results = ctx.ssh_each(
        lambda node: survey_script(requests[node.name]),
        nodes,
        timeout=SURVEY_TIMEOUT_S + MOUNT_TOUCH_S * mounts,
        around=timed,
    )
    taken = Survey({}, {}, set(), rules)
    for node in nodes:
        _take(taken, node, results[node.name], ctx.controller.name)
    ctx.memo[MEMO_KEY] = taken
    return taken


def _take(taken: Survey, node: Node, result: CommandResult, controller: str) -> None:
    cause = None if node.name == controller else ssh_failure(result)
    if cause is not None:
        taken.failed[node.name] = f"{node.name} unreachable: {cause}"
        taken.unreachable.add(node.name)
        return
    said = result.stderr.strip().splitlines()
    detail = f"exit {result.exit_status}" + (f": {said[-1][-200:]}" if said else "")
    if not result.stdout.strip():
        taken.failed[node.name] = f"the survey of {node.name} printed nothing ({detail})"
        return
    answer = parse_survey(result.stdout)
    if not answer.complete:
        answer.stopped = f"the survey of {node.name} stopped early ({detail})"
    taken.answered[node.name] = answer


def unsurveyed(ctx: Context, taken: Survey, check: str, nodes: list[Node]) -> tuple[list[NodeResult], list[Node]]:
    """Rows for the nodes the survey got nothing from, and the nodes it did.

    The first check of the stage to meet such a node FAILs it (an unreachable
    one with the hint about the node); the later ones SKIP it, saying where it
    was reported, instead of failing it once more for the same cause.
    """
    rows, answered = [], []
    for node in nodes:
        why = taken.failed.get(node.name)
        if why is None:
            answered.append(node)
            continue
        first = taken.reported.setdefault(node.name, check)
        if first != check:
            rows.append(NodeResult(node.name, Status.SKIP, f"{why} (see {first})"))
            continue
        hint = ctx.unreachable_hint([node.name]) if node.name in taken.unreachable else None
        rows.append(NodeResult(node.name, Status.FAIL, why, hint=hint))
    return rows, answered


def in_spec_order(rows: list[NodeResult], nodes: list[Node]) -> list[NodeResult]:
    """``rows`` sorted as ``nodes`` lists their nodes (the unreachable rows come first otherwise)."""
    order = {node.name: index for index, node in enumerate(nodes)}
    return sorted(rows, key=lambda row: order[row.node])


def outcome(ctx: Context, taken: Survey, rows: list[NodeResult], *, message: str, hint: str) -> Outcome:
    """The check's outcome: its own hint, unless every failure is a node SSH could not reach."""
    cut_off = [row.node for row in rows if row.status is Status.FAIL and row.node in taken.unreachable]
    others = any(row.status is Status.FAIL and row.node not in taken.unreachable for row in rows)
    chosen = ctx.unreachable_hint(cut_off) if cut_off and not others else hint
    return Outcome(rows, message=message, hint=chosen)


def deploy_hint(what: str) -> str:
    """The stage's repair: gpuclus deploy (the runner adds the spec's path), with what it does about ``what``."""
    return f"`gpuclus deploy` {what}; a change wanted on purpose belongs in the spec, or the next deploy undoes it"
