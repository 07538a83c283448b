"""What the cluster tests share: running gpuclus, and commands on sandbox nodes over SSH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.sandbox.oses import DEFAULT_OS, OSES
from gpuclus.ssh.client import CommandResult, SshTarget, connect, run
from gpuclus.state import StateDir

if TYPE_CHECKING:
    from interruptions import Interruptions

# Another name lets a second test run share the machine with one in progress.
CLUSTER = os.environ.get("GPUCLUS_TEST_CLUSTER", "itcl")
# The sandbox nodes' OS (`sandbox up --os`): .ci/run runs the suite on Debian 12 and its core on Debian 13
# side by side.
NODE_OS = os.environ.get("GPUCLUS_TEST_OS", DEFAULT_OS)
if NODE_OS not in OSES:
    raise ValueError(f"GPUCLUS_TEST_OS={NODE_OS!r}: use one of {', '.join(OSES)}")
HEAD, GPU1, GPU2 = f"{CLUSTER}-head", f"{CLUSTER}-gpu01", f"{CLUSTER}-gpu02"
GPUCLUS = [sys.executable, "-m", "gpuclus"]
REPO_ROOT = Path(__file__).resolve().parents[2]


def _artifacts_dir() -> Path | None:
    """Enroot's and Pyxis' release sources: GPUCLUS_ARTIFACTS_DIR, else <repo>/../shared/artifacts, if a directory."""
    configured = os.environ.get("GPUCLUS_ARTIFACTS_DIR")
    candidate = Path(configured) if configured else REPO_ROOT.parent / "shared" / "artifacts"
    return candidate.resolve() if candidate.is_dir() else None


# None: no artifacts directory; the sandbox's spec then has the containers
# phase off, and tests that need Enroot or Pyxis skip with a reason.
ARTIFACTS_DIR = _artifacts_dir()
NEEDS_ARTIFACTS = pytest.mark.skipif(
    ARTIFACTS_DIR is None,
    reason="no artifacts directory with the Enroot and Pyxis release sources (GPUCLUS_ARTIFACTS_DIR, "
    "or <repo>/../shared/artifacts): the sandbox deploys no containers phase without them",
)


def _wheelhouse() -> Path | None:
    """Wheels for the nodes' PyTorch environment: GPUCLUS_WHEELHOUSE, else <repo>/.cache/wheelhouse
    (scripts/wheelhouse.sh fills it; scripts/test.sh runs that), if it holds the torch wheel."""
    configured = os.environ.get("GPUCLUS_WHEELHOUSE")
    candidate = Path(configured) if configured else REPO_ROOT / ".cache" / "wheelhouse"
    # The wheel must suit the nodes' python3 (cp311 on Debian 12; this project has no CPU torch for 3.13).
    tag = "cp" + OSES[NODE_OS].python.replace(".", "")
    return candidate.resolve() if any(candidate.glob(f"torch-2.13.0[+-]*-{tag}-*.whl")) else None


# None: no wheelhouse (or none for the nodes' Python); the sandbox's spec then has the
# pytorch phase off, and the tests that need it skip with a reason (fail under CI on Debian 12).
WHEELHOUSE = _wheelhouse()
# A fixed subnet for a run that starts beside other sandboxes being made (.ci/run's three lanes
# make theirs at once): two `up`s picking the first free /24 at the same moment would pick the same one.
SUBNET = os.environ.get("GPUCLUS_TEST_SUBNET")
SANDBOX_UP = (
    ("sandbox", "up", "--name", CLUSTER, "--nodes", "3", "--gpus-per-node", "2", "--os", NODE_OS)
    + (("--subnet", SUBNET) if SUBNET else ())
    + (("--artifacts", str(ARTIFACTS_DIR)) if ARTIFACTS_DIR is not None else ())
    + (("--wheelhouse", str(WHEELHOUSE)) if WHEELHOUSE is not None else ())
)

# The phases a full deploy of that spec runs, in order.
PHASES = (
    ["base", "nfs", "slurm"]
    + (["containers"] if ARTIFACTS_DIR is not None else [])
    + (["pytorch"] if WHEELHOUSE is not None else [])
    + ["monitoring"]
)


def default_signals() -> None:
    """A child's preexec_fn for a test that interrupts it: SIGINT and SIGTERM at their defaults. A job that
    a non-interactive shell starts in the background (.ci/run's side block, `cmd &`) inherits SIGINT as
    ignored, and Python keeps it ignored: the child would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def gpuclus(*args: str, timeout: float = 1200, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run gpuclus; ``env`` adds variables to this process' environment."""
    return subprocess.run(
        [*GPUCLUS, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **env} if env else None,
    )


def plan_json(spec: Path) -> dict[str, Any]:
    """`gpuclus plan --json` of the spec (it asks every node for its deploy stamp); exit 0 asserted."""
    result = gpuclus("plan", str(spec), "--json", timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def plan_states(report: dict[str, Any]) -> dict[str, str]:
    """Each node's state in a plan report: in_sync, not_deployed, ..."""
    return {name: node["state"] for name, node in report["nodes"].items()}


@dataclass
class Cluster:
    spec: Path
    engine: str
    addresses: dict[str, str]
    first: dict[str, Any]  # `deploy --json` of the fresh deploy
    second: dict[str, Any]  # and of the one after it, with --full (every task runs: idempotence)
    third: dict[str, Any]  # and of a plain one after that (every node in sync: nothing runs)
    # `deploy --check --json` on the fresh nodes before the first deploy, and
    # what those nodes had installed right after it (must be nothing of Slurm).
    fresh_check: dict[str, Any] = field(default_factory=dict)
    after_fresh_check: dict[str, str] = field(default_factory=dict)
    # `deploy --check --json` on the deployed cluster, after the second deploy.
    deployed_check: dict[str, Any] = field(default_factory=dict)
    # The interrupted deploys of the fresh nodes before the first (interruptions.Interruptions), when
    # test_deploy_faults.py is in the session.
    interruptions: Interruptions | None = None

    def on(self, node: str, command: str, *, check: bool = True, timeout: float = 120) -> CommandResult:
        state = StateDir.beside(self.spec)
        client = connect(SshTarget(self.addresses[node], ADMIN_USER, state.private_key, state.known_hosts))
        try:
            result = run(client, command, timeout=timeout)
        finally:
            client.close()
        if check:
            assert result.exit_status == 0, f"{command!r} on {node}: {result.stdout}{result.stderr}"
        return result


def run_log(state: StateDir, before: set[Path]) -> str:
    """What the deploy started after ``before`` (the run directories then) has printed so far:
    ansible-runner's stdout file, written as the run goes."""
    runs = state.root / "runs"
    new = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
    if not new:
        return ""
    try:
        return (new[-1] / "artifacts" / new[-1].name / "stdout").read_text(errors="replace")
    except OSError:
        return ""
