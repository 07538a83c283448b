"""A stand-in for srun, for running the job templates' scripts on this machine (tests/unit/roles/test_job_templates.py).

Invoked as ``srun [--option=value ...] COMMAND [ARGS...]``: it appends its
arguments as one JSON line to $FAKE_SRUN_LOG, then (unless FAKE_SRUN_RUN=0)
starts COMMAND once per "node" of $SLURM_JOB_NODELIST (a plain comma list), all
at once on this machine, with the variables srun gives a step's tasks. Like
``--kill-on-bad-exit``, the first task to fail stops the others. The exit
status is the highest of the tasks'.

``srun --help`` lists ``--container-image`` only when FAKE_SRUN_PYXIS=1, as
Pyxis adds it to the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv[:1] == ["--help"]:
        print("Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]")
        if os.environ.get("FAKE_SRUN_PYXIS") == "1":
            print("      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH")
        return 0
    split = 0  # the options (all written --name=value) come first, then the command
    while split < len(argv) and argv[split].startswith("-"):
        split += 1
    options, command = argv[:split], argv[split:]
    log = os.environ.get("FAKE_SRUN_LOG")
    if log:
        with Path(log).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"options": options, "command": command}) + "\n")
    if os.environ.get("FAKE_SRUN_RUN", "1") == "0" or not command:
        return 0
    nodes = [node for node in os.environ.get("SLURM_JOB_NODELIST", "localhost").split(",") if node]
    tasks = []
    for index, _node in enumerate(nodes):
        env = dict(os.environ)
        env.update(
            SLURM_STEP_ID="0",
            SLURM_STEP_NODELIST=",".join(nodes),
            SLURM_STEP_NUM_NODES=str(len(nodes)),
            SLURM_STEP_NUM_TASKS=str(len(nodes)),
            SLURM_NODEID=str(index),
            SLURM_PROCID=str(index),
            SLURM_LOCALID="0",
        )
        tasks.append(subprocess.Popen(command, env=env))
    codes: dict[int, int] = {}
    while len(codes) < len(tasks):
        for index, task in enumerate(tasks):
            code = task.poll()
            if code is None or index in codes:
                continue
            codes[index] = code
            if code != 0:
                for other in tasks:
                    if other.poll() is None:
                        other.terminate()
        time.sleep(0.05)
    return max(abs(code) for code in codes.values())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
