"""One status round for a checked spec: plan, ask every node, judge. What the CLI calls each time."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuclus.errors import UsageError
from gpuclus.hints import gpuclus_command
from gpuclus.secret_files import Secrets
from gpuclus.state import StateDir
from gpuclus.status import collect, expected, verdict
from gpuclus.status.report import ClusterStatus

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec


def require_state(spec_path: Path) -> StateDir:
    """The spec's .gpuclus/ with gpuclus' SSH key, or the one-line reason there is none (exit 2)."""
    state = StateDir.beside(spec_path)
    if not state.private_key.exists():
        where = "no .gpuclus/ directory" if not state.root.exists() else "no gpuclus SSH key"
        raise UsageError(
            f"{where} beside {spec_path} ({state.private_key} is missing): nothing was deployed from here",
            "run status from the directory the cluster was deployed from, or copy that directory's .gpuclus/ here; "
            f"a cluster not deployed yet: `{gpuclus_command('deploy', spec_path)}`",
        )
    return state


def take(loaded: LoadedSpec, spec_path: Path, state: StateDir) -> ClusterStatus:
    """Ask every node of the spec (in parallel) and judge the answers."""
    from gpuclus.preflight.runner import SshAdvice, ssh_hint

    spec, topology = loaded.spec, loaded.topology
    assert spec is not None and topology is not None  # a checked spec
    user = spec.cluster.admin_user
    advice = SshAdvice.beside(spec_path)

    def hint_for(message: str) -> str:
        if "not found in known_hosts" in message:
            # status never learns a host key (RejectPolicy); preflight does, on first contact.
            return f"gpuclus has not seen this node's host key yet: run `{gpuclus_command('preflight', spec_path)}`"
        return ssh_hint(message, user, advice)

    collected_at = datetime.now(UTC).isoformat(timespec="seconds")
    started = time.monotonic()
    plans = expected.plan(spec, topology)
    answers = collect.collect(plans, user, state.private_key, state.known_hosts, hint_for=hint_for)
    urls = expected.urls(spec, topology, Secrets(state.root / "secrets").grafana_password)
    return verdict.build(
        spec.cluster.name,
        plans,
        answers,
        urls,
        collected_at=collected_at,
        duration_s=time.monotonic() - started,
        spec_path=spec_path,
    )
