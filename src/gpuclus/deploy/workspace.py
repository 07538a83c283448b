"""A deploy run's workspace and configuration: everything decided before Ansible starts.

RunConfig describes a run (paths, settings, phases, limit) and is built
without running anything, so it is unit-testable; runner.py executes it.
Each run gets a fresh absolute 0700 directory under .gpuclus/runs/<id>/ with
the rendered inventory, a spec snapshot and the entry playbook. Ansible's
settings are passed as environment variables (never an ansible.cfg that may or
may not be found), and secrets only as the path of .gpuclus/secrets/.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets as random_source
import shlex
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuclus.deploy.events import PHASE_PLAY_PREFIX
from gpuclus.deploy.phases import Phase
from gpuclus.fileio import write_text_atomic
from gpuclus.resources import data_dir
from gpuclus.state import StateDir

MAX_FORKS = 25
FACT_CACHE_SECONDS = 86400


@dataclass(frozen=True)
class RunConfig:
    run_id: str
    run_dir: Path
    playbook: Path
    inventory: Path
    phases: tuple[str, ...]
    envvars: dict[str, str]
    extravars: dict[str, Any]
    limit: str | None = None
    check: bool = False
    verbosity: int = 0
    spec_sha256: str = ""
    spec_path: str = ""
    hosts: tuple[str, ...] = field(default_factory=tuple)

    def runner_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ansible_runner.run_async (without the callbacks)."""
        cmdline = ["--check", "--diff"] if self.check else []
        kwargs: dict[str, Any] = {
            "private_data_dir": str(self.run_dir),
            "project_dir": str(self.playbook.parent),
            "playbook": self.playbook.name,
            "inventory": str(self.inventory),
            "envvars": dict(self.envvars),
            "extravars": dict(self.extravars),
            "ident": self.run_id,
            "quiet": True,
            # Nothing of the run's environment is written to env/ files.
            "suppress_env_files": True,
            # Not "jsonfile": runner would then point Ansible's fact cache at this
            # run's artifacts (empty every run) over ANSIBLE_CACHE_PLUGIN_CONNECTION
            # in envvars. The shared .gpuclus/facts cache lets a re-run skip gathering.
            "fact_cache_type": "gpuclus",
            "verbosity": self.verbosity or None,
        }
        if self.limit:
            # localhost runs the phase marker plays; a limit must not hide it.
            kwargs["limit"] = f"{self.limit},localhost"
        if cmdline:
            kwargs["cmdline"] = shlex.join(cmdline)
        return kwargs


def search_path() -> str:
    """PATH with gpuclus' own Python environment first, so its pinned Ansible runs.

    (ansible-runner's `binary` option would switch it to raw mode, which drops
    the playbook argument.)
    """
    own = str(Path(sys.executable).parent)
    rest = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if entry and entry != own]
    return os.pathsep.join([own, *rest])


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{random_source.token_hex(2)}"


INTERNAL_POLL_INTERVAL = "0.01"


def ansible_environment(state: StateDir, host_count: int) -> dict[str, str]:
    known_hosts = shlex.quote(str(state.known_hosts))
    return {
        "PATH": search_path(),
        "ANSIBLE_ROLES_PATH": str(data_dir("roles")),
        "ANSIBLE_FORKS": str(max(1, min(host_count, MAX_FORKS))),
        # How long Ansible's main loop sleeps between looks at its workers.
        # The default (1 ms) spins: on a 2-core host a 12-node free-strategy
        # phase spent more controller CPU than wall time. 10 ms costs at most
        # that much latency per task.
        "ANSIBLE_INTERNAL_POLL_INTERVAL": INTERNAL_POLL_INTERVAL,
        "ANSIBLE_GATHERING": "smart",
        "ANSIBLE_CACHE_PLUGIN": "jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(state.root / "facts"),
        "ANSIBLE_CACHE_PLUGIN_TIMEOUT": str(FACT_CACHE_SECONDS),
        "ANSIBLE_PRIVATE_KEY_FILE": str(state.private_key),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": (
            "-o ControlMaster=auto -o ControlPersist=60s -o StrictHostKeyChecking=accept-new "
            f"-o UserKnownHostsFile={known_hosts}"
        ),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_INTERPRETER_PYTHON": "auto_silent",
        "ANSIBLE_NOCOLOR": "1",
        # A node that does not answer SSH within 15 s is reported unreachable
        # instead of holding the run up.
        "ANSIBLE_TIMEOUT": "15",
        # Summaries of where the time went land in the run's stdout log.
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
    }


def entry_playbook(phases: list[Phase]) -> str:
    """The run's playbook: the gate, then each phase behind a marker play that names it."""
    playbooks = data_dir("playbooks")
    lines = [
        "---",
        "# generated by gpuclus for this run: the phases the spec asks for, in order",
        f"- ansible.builtin.import_playbook: {json.dumps(str(playbooks / 'preflight.yml'))}",
    ]
    for phase in phases:
        lines += [
            f'- name: "{PHASE_PLAY_PREFIX}{phase.value}"',
            "  hosts: localhost",
            "  gather_facts: false",
            "  tasks: []",
            # JSON strings are YAML strings: paths with '#' or ': ' stay whole.
            f"- ansible.builtin.import_playbook: {json.dumps(str(playbooks / (phase.value + '.yml')))}",
        ]
    return "\n".join(lines) + "\n"


def missing_playbooks(phases: list[Phase]) -> list[Phase]:
    playbooks = data_dir("playbooks")
    return [phase for phase in phases if not (playbooks / f"{phase.value}.yml").exists()]


def prepare_run(
    *,
    spec_path: Path,
    spec_text: str,
    rendered: dict[str, str],
    state: StateDir,
    secrets_dir: Path,
    phases: list[Phase],
    hosts: list[str],
    limit: str | None = None,
    check: bool = False,
    verbosity: int = 0,
    run_id: str | None = None,
) -> RunConfig:
    run_id = run_id or new_run_id()
    runs = state.private_dir(state.root / "runs")
    run_dir = runs / run_id
    run_dir.mkdir(mode=0o700)
    for relative, text in rendered.items():
        write_text_atomic(run_dir / relative, text, mode=0o600)
    write_text_atomic(run_dir / "spec.yaml", spec_text, mode=0o600)
    playbook = run_dir / "project" / "deploy.yml"
    write_text_atomic(playbook, entry_playbook(phases), mode=0o600)
    return RunConfig(
        run_id=run_id,
        run_dir=run_dir.resolve(),
        playbook=playbook.resolve(),
        inventory=(run_dir / "inventory" / "hosts.yml").resolve(),
        phases=tuple(phase.value for phase in phases),
        envvars=ansible_environment(state, len(hosts)),
        # The phases of this run: the base phase installs their packages in
        # its one apt transaction per node (playbooks/base.yml).
        extravars={
            "gpuclus_secrets_dir": str(secrets_dir.resolve()),
            "gpuclus_run_phases": [phase.value for phase in phases],
        },
        limit=limit,
        check=check,
        verbosity=verbosity,
        spec_sha256=hashlib.sha256(spec_text.encode()).hexdigest(),
        spec_path=str(spec_path),
        hosts=tuple(hosts),
    )
