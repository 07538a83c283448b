"""A deploy run's workspace and configuration: everything decided before Ansible starts.

RunConfig describes a run (paths, settings, phases, limit) and is built
without running anything, so it is unit-testable; runner.py executes it.
Each run gets a fresh absolute 0700 directory under .gpuclus/runs/<id>/ with
the rendered inventory and ansible.cfg, a spec snapshot and the entry
playbook. Ansible's settings come from gpuclus.ansible_settings, as environment
variables and through ANSIBLE_CONFIG naming the run's own ansible.cfg (never
an ansible.cfg that may or may not be found), and secrets only as the path of
.gpuclus/secrets/.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets as random_source
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuclus import __version__, ansible_settings, galaxy_collections
from gpuclus.deploy.events import PHASE_PLAY_PREFIX
from gpuclus.deploy.node_stamps import render_digest
from gpuclus.deploy.phases import Phase, playbook_file
from gpuclus.fileio import write_text_atomic
from gpuclus.render.files import ANSIBLE_CFG
from gpuclus.resources import data_dir
from gpuclus.spec.record import SecretLoc, masked_spec_text
from gpuclus.state import StateDir


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


def ansible_environment(state: StateDir, host_count: int, config_file: Path) -> dict[str, str]:
    """The run's envvars: the settings table (as ansible.cfg has it), plus what only a run needs.

    ``config_file`` is the run's own rendered ansible.cfg: Ansible reads some
    settings from a config file only, and naming the file keeps an admin's
    ~/.ansible.cfg or /etc/ansible/ansible.cfg out of the run.
    """
    table = ansible_settings.settings(
        host_count=host_count, state_dir=str(state.root), known_hosts=str(state.known_hosts)
    )
    return {
        "PATH": search_path(),
        "ANSIBLE_CONFIG": str(config_file),
        "ANSIBLE_ROLES_PATH": str(data_dir("roles")),
        # The collections installed beside gpuclus first (galaxy_collections.py).
        galaxy_collections.PATH_VARIABLE: galaxy_collections.run_path(),
        # gpuclus reads Ansible's output (the run log); colour codes would garble it.
        "ANSIBLE_NOCOLOR": "1",
        **ansible_settings.environment(table),
    }


STAMP_PLAYBOOK = "stamp.yml"


def entry_playbook(phases: list[Phase], *, stamp: bool = False) -> str:
    """The run's playbook: the gate, then each phase behind a marker play that names it.

    ``stamp``: the run covers every phase the spec needs, so the nodes that
    complete it get the deploy stamp (playbooks/stamp.yml, last; no marker
    play: it is not a phase). A playbooks directory without stamp.yml (the
    tests' tiny phase playbooks, GPUCLUS_PLAYBOOKS_DIR) gets none.
    """
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
            f"- ansible.builtin.import_playbook: {json.dumps(str(playbooks / playbook_file(phase)))}",
        ]
    if stamp and (playbooks / STAMP_PLAYBOOK).is_file():
        lines.append(f"- ansible.builtin.import_playbook: {json.dumps(str(playbooks / STAMP_PLAYBOOK))}")
    return "\n".join(lines) + "\n"


def missing_playbooks(phases: list[Phase]) -> list[Phase]:
    playbooks = data_dir("playbooks")
    return [phase for phase in phases if not (playbooks / playbook_file(phase)).exists()]


def prepare_run(
    *,
    spec_path: Path,
    spec_text: str,
    rendered: dict[str, str],
    spec_secrets: Sequence[SecretLoc] = (),
    state: StateDir,
    secrets_dir: Path,
    phases: list[Phase],
    hosts: list[str],
    limit: str | None = None,
    excluded: Sequence[str] = (),
    check: bool = False,
    verbosity: int = 0,
    run_id: str | None = None,
    full: bool = False,
    reboot: bool = False,
) -> RunConfig:
    """The run's directory and configuration.

    ``full``: ``phases`` are every phase the spec needs; such a run, unless
    it is a check run, ends by stamping its nodes (entry_playbook).
    ``reboot``: GPU nodes whose new driver is not loaded may be rebooted
    (playbooks/nvidia_reboot.yml reads gpuclus_reboot).
    Every run (deploy, check, reset) needs the Ansible collections of
    requirements.yml: a missing one is a one-line error here, not a module
    Ansible cannot resolve minutes into the run.
    """
    galaxy_collections.check()
    run_id = run_id or new_run_id()
    runs = state.private_dir(state.root / "runs")
    run_dir = runs / run_id
    run_dir.mkdir(mode=0o700)
    for relative, text in rendered.items():
        write_text_atomic(run_dir / relative, text, mode=0o600)
    # The run's copy of the spec, less what it holds inline of the secrets (spec/record.py).
    write_text_atomic(run_dir / "spec.yaml", masked_spec_text(spec_text, list(spec_secrets)), mode=0o600)
    playbook = run_dir / "project" / "deploy.yml"
    write_text_atomic(playbook, entry_playbook(phases, stamp=full and not check), mode=0o600)
    return RunConfig(
        run_id=run_id,
        run_dir=run_dir.resolve(),
        playbook=playbook.resolve(),
        inventory=(run_dir / "inventory" / "hosts.yml").resolve(),
        phases=tuple(phase.value for phase in phases),
        envvars=ansible_environment(state, len(hosts), (run_dir / ANSIBLE_CFG).resolve()),
        # The phases of this run: the base phase installs their packages in
        # its one apt transaction per node (playbooks/base.yml).
        extravars={
            "gpuclus_secrets_dir": str(secrets_dir.resolve()),
            "gpuclus_run_phases": [phase.value for phase in phases],
            # Nodes preflight left out: roles must not contact them, not even
            # through delegation from a node of the run (slurm_common).
            "gpuclus_excluded_nodes": sorted(excluded),
            # What the deploy stamp holds (playbooks/stamp.yml; `gpuclus plan` compares it).
            "gpuclus_render_sha256": render_digest(rendered),
            "gpuclus_version": __version__,
            "gpuclus_reboot": reboot,
        },
        limit=limit,
        check=check,
        verbosity=verbosity,
        spec_sha256=hashlib.sha256(spec_text.encode()).hexdigest(),
        spec_path=str(spec_path),
        hosts=tuple(hosts),
    )
