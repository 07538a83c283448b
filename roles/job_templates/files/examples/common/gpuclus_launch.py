"""Start torchrun for a training script inside a Slurm job: one launcher per node.

Usage (inside a job; srun starts one launcher on each node):

    srun --ntasks-per-node=1 python gpuclus_launch.py [--dry-run] SCRIPT [ARGS...]

The launcher reads the Slurm job's variables and runs

    python -m torch.distributed.run <torchrun options> SCRIPT ARGS...

with the same Python interpreter (the PyTorch environment's when
/etc/gpuclus/pytorch-env.sh was sourced). torchrun then starts one training
process per GPU on this node and connects the nodes:

- one node: ``--standalone`` (torchrun picks a free local port itself);
- several nodes: the c10d rendezvous, served by the first node of the job step
  (the first node of the allocation when srun spans all of it) on the port
  ``rendezvous_port`` derives from the job ID, with the job ID as the
  rendezvous ID.

Processes per node: ``GPUCLUS_NPROC_PER_NODE`` when set; else the GPUs Slurm gave
this node (``SLURM_GPUS_ON_NODE``, or the number of ``CUDA_VISIBLE_DEVICES``);
else 1 (a CPU-only node trains with one process, gloo).

SCRIPT may be a path, or a file name found next to this launcher or in
``$GPUCLUS_EXAMPLES_DIR`` (``python gpuclus_launch.py train_ddp.py`` works
from any directory). ``--dry-run`` prints the command instead of running it.

Standard library only, Python 3.9 and later: it runs on the nodes, before
anything is known about the environment.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import shlex
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

# Rendezvous ports: BASE_PORT + job ID % PORT_SPAN, i.e. 29500-30499, below
# Linux's ephemeral range (32768-60999), so no outgoing connection holds it.
# Two jobs sharing a node get different ports unless their IDs differ by a
# multiple of 1000; GPUCLUS_RDZV_PORT sets the port outright.
BASE_PORT = 29500
PORT_SPAN = 1000
# A host list longer than this is a mistake, not a cluster.
MAX_HOSTS = 100_000

ENV_FILE = "/etc/gpuclus/pytorch-env.sh"
HERE = Path(__file__).resolve().parent
NOT_IN_SLURM_HINT = (
    "submit a job script with sbatch (e.g. sbatch $GPUCLUS_EXAMPLES_DIR/ddp-multi-node/job.sbatch) or run inside "
    "salloc/srun; without Slurm use: python -m torch.distributed.run --standalone --nproc-per-node=2 SCRIPT"
)


class LaunchError(Exception):
    """Something the user can fix: the message and a hint, printed on one line."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def line(self) -> str:
        text = f"gpuclus_launch: error: {self}"
        return f"{text} (hint: {self.hint})" if self.hint else text


# -- Slurm host lists -----------------------------------------------------------

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _split_top_level(text: str) -> list[str]:
    """Split at the commas outside brackets: 'a[1,2],b' -> ['a[1,2]', 'b']."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise LaunchError(f"nested '[' in host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise LaunchError(f"unmatched ']' in host list {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise LaunchError(f"unclosed '[' in host list {text!r}")
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _expand_ranges(body: str, text: str) -> list[str]:
    """'01-03,7' -> ['01', '02', '03', '7']: a range keeps the width of its lower bound."""
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise LaunchError(f"bad range {item.strip()!r} in host list {text!r}")
        low, high = match.group(1), match.group(2)
        if high is None:
            values.append(low)
            continue
        if int(high) < int(low):
            raise LaunchError(f"range {low}-{high} runs backwards in host list {text!r}")
        if int(high) - int(low) >= MAX_HOSTS:
            raise LaunchError(f"range {low}-{high} in host list {text!r} is too long")
        width = len(low)
        values.extend(str(number).zfill(width) for number in range(int(low), int(high) + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, expanded in Slurm's order.

    'gpu[01-03,07],head' -> gpu01 gpu02 gpu03 gpu07 head. Zero padding is kept
    (the width of each range's lower bound); a name may hold several bracket
    groups, the leftmost varying slowest ('r[1-2]n[1-2]' -> r1n1 r1n2 r2n1 r2n2).
    """
    hosts: list[str] = []
    for part in _split_top_level(text):
        pieces: list[list[str]] = []
        position = 0
        for match in _BRACKET.finditer(part):
            pieces.append([part[position : match.start()]])
            pieces.append(_expand_ranges(match.group(1), text))
            position = match.end()
        pieces.append([part[position:]])
        count = 1
        for piece in pieces:
            count *= len(piece)
        if len(hosts) + count > MAX_HOSTS:
            raise LaunchError(f"host list {text!r} names more than {MAX_HOSTS} hosts")
        hosts.extend("".join(combination) for combination in itertools.product(*pieces))
    return hosts


# -- The job, from Slurm's variables --------------------------------------------


def job_id(env: Mapping[str, str]) -> str:
    value = env.get("SLURM_JOB_ID", "").strip()
    if not value:
        raise LaunchError("not inside a Slurm allocation (SLURM_JOB_ID is not set)", NOT_IN_SLURM_HINT)
    if not value.isdigit():
        raise LaunchError(f"SLURM_JOB_ID is {value!r}, not a number")
    return value


def node_list(env: Mapping[str, str]) -> list[str]:
    """The nodes that run a launcher: the job step's (inside srun), else the allocation's."""
    for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        value = env.get(name, "").strip()
        if value:
            nodes = expand_hostlist(value)
            if nodes:
                return nodes
    job_id(env)  # outside Slurm, say so rather than "no node list"
    raise LaunchError("Slurm set no node list (SLURM_JOB_NODELIST is empty)")


def first_node(env: Mapping[str, str]) -> str:
    """Where the c10d rendezvous runs: the first node of the step (or allocation)."""
    return node_list(env)[0]


def num_nodes(env: Mapping[str, str]) -> int:
    return len(node_list(env))


def rendezvous_port(env: Mapping[str, str]) -> int:
    """GPUCLUS_RDZV_PORT, else BASE_PORT + SLURM_JOB_ID % PORT_SPAN (29500-30499): the same on every node."""
    override = env.get("GPUCLUS_RDZV_PORT", "").strip()
    if override:
        if not override.isdigit() or not 1 <= int(override) <= 65535:
            raise LaunchError(f"GPUCLUS_RDZV_PORT is {override!r}, not a port number (1-65535)")
        return int(override)
    return BASE_PORT + int(job_id(env)) % PORT_SPAN


def _visible_devices(value: str) -> int:
    """How many GPUs CUDA_VISIBLE_DEVICES names (CUDA stops at the first invalid entry, e.g. -1)."""
    count = 0
    for item in value.split(","):
        item = item.strip()
        if not item or item.startswith("-") or item == "NoDevFiles":
            break
        count += 1
    return count


def nproc_per_node(env: Mapping[str, str]) -> int:
    """Training processes on this node: GPUCLUS_NPROC_PER_NODE, else Slurm's GPUs for the node, else 1."""
    override = env.get("GPUCLUS_NPROC_PER_NODE", "").strip()
    if override:
        if not override.isdigit() or int(override) < 1:
            raise LaunchError(f"GPUCLUS_NPROC_PER_NODE is {override!r}, not a positive whole number")
        return int(override)
    gpus = env.get("SLURM_GPUS_ON_NODE", "").strip()
    if gpus.isdigit() and int(gpus) > 0:
        return int(gpus)
    visible = _visible_devices(env.get("CUDA_VISIBLE_DEVICES", ""))
    return visible if visible > 0 else 1


def world_size(env: Mapping[str, str]) -> int:
    """All training processes of the job: nodes x processes per node."""
    return num_nodes(env) * nproc_per_node(env)


def check_one_task_per_node(env: Mapping[str, str]) -> None:
    """torchrun is the one launcher per node: srun must not start several on one node."""
    tasks = env.get("SLURM_STEP_NUM_TASKS", "").strip()
    nodes = num_nodes(env)
    if tasks.isdigit() and int(tasks) != nodes:
        raise LaunchError(
            f"srun started {tasks} tasks on {nodes} node(s); gpuclus_launch must run once per node",
            "srun --ntasks-per-node=1 python gpuclus_launch.py ...; torchrun starts the per-GPU processes",
        )


def torchrun_args(env: Mapping[str, str], script: str, script_args: list[str]) -> list[str]:
    """torchrun's arguments for this node, then the script and its arguments."""
    nodes = node_list(env)
    nproc = nproc_per_node(env)
    if len(nodes) == 1:
        head = ["--standalone", "--nnodes=1", f"--nproc-per-node={nproc}"]
    else:
        head = [
            f"--nnodes={len(nodes)}",
            f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={nodes[0]}:{rendezvous_port(env)}",
            f"--rdzv-id={job_id(env)}",
        ]
    return [*head, script, *script_args]


def resolve_script(script: str, env: Mapping[str, str], here: Path = HERE) -> str:
    """SCRIPT as given, else next to this launcher, else under $GPUCLUS_EXAMPLES_DIR (or its common/)."""
    given = Path(script)
    candidates = [given]
    if not given.is_absolute():
        candidates.append(here / given)
        examples = env.get("GPUCLUS_EXAMPLES_DIR", "").strip()
        if examples:
            candidates += [Path(examples) / given, Path(examples) / "common" / given]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.absolute())
    looked = ", ".join(str(candidate) for candidate in candidates)
    raise LaunchError(f"training script {script!r} not found (looked at {looked})")


def torchrun_command(env: Mapping[str, str], script: str, script_args: list[str]) -> list[str]:
    """The whole command line this node runs, checked against the job."""
    job_id(env)
    check_one_task_per_node(env)
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_args(env, script, script_args)]


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    dry_run = bool(args) and args[0] == "--dry-run"
    if dry_run:
        args = args[1:]
    if not args:
        print("usage: python gpuclus_launch.py [--dry-run] SCRIPT [ARGS...]  (--help explains)", file=sys.stderr)
        return 2
    try:
        job_id(env)
        script = resolve_script(args[0], env)
        command = torchrun_command(env, script, args[1:])
        if not dry_run and importlib.util.find_spec("torch") is None:
            raise LaunchError(
                f"{sys.executable} cannot import torch",
                f"source {ENV_FILE} first, so that python is the PyTorch environment's",
            )
    except LaunchError as error:
        print(error.line(), file=sys.stderr)
        return 2
    if dry_run:
        print(shlex.join(command))
        return 0
    print(f"gpuclus_launch: {socket.gethostname()}: {shlex.join(command)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execvp(command[0], command)
    return 127  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
