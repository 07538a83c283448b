"""The deployed 3-node sandbox cluster, shared by the end-to-end and validate tests.

Deploying takes minutes, so it happens once per session: sandbox up → deploy →
deploy again (the second must change nothing). The cluster is removed at the
end of the session, also when a test fails. Before the first deploy, on the
fresh nodes, a check run when test_cluster_check_mode.py is in the session,
then Ctrl-C at random moments of three deploys when test_deploy_faults.py is
(interruptions.py); each module asserts on what the fixture kept.

With GPUCLUS_TEST_QUICKSTART=1 the first three steps are the README's first
command, scripts/quickstart.sh (sandbox up, deploy, jobs, validate), run with
this session's cluster name, OS, subnet, artifacts and wheelhouse: .ci/run's
Debian 12 lane proves the quickstart and deploys its cluster with one fresh
deploy instead of two (on CI's two cores a fresh deploy is several minutes).
The quickstart deploys with the gpuclus it installs from a wheel (uv tool, into
this session's directory); the tests after it run the checkout's gpuclus in
.venv (cluster_helpers.gpuclus), the same commit: they test the code, the
quickstart tests the wheel and its files.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    ARTIFACTS_DIR,
    CLUSTER,
    NODE_OS,
    REPO_ROOT,
    SANDBOX_UP,
    SUBNET,
    WHEELHOUSE,
    Cluster,
    gpuclus,
)
from interruptions import interrupt_fresh_deploys

from gpuclus.sandbox.image import ADMIN_USER
from gpuclus.ssh.client import SshTarget, run_once
from gpuclus.state import StateDir


def _module_in_session(session: pytest.Session, module: str) -> bool:
    """Whether a test of tests/integration/``module`` runs in this session: only then is the fixture's work
    for it (minutes) worth doing."""
    return any(item.nodeid.startswith(f"tests/integration/{module}") for item in session.items)


@pytest.fixture(scope="session")
def deployed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("the sandbox needs root for privileged containers")
    # .ci/run runs both modules in its Debian 13 lane only.
    check_runs = _module_in_session(request.session, "test_cluster_check_mode.py")
    interrupt = _module_in_session(request.session, "test_deploy_faults.py")
    spec = tmp_path_factory.mktemp(CLUSTER) / "sandbox.yaml"
    via_quickstart = os.environ.get("GPUCLUS_TEST_QUICKSTART") == "1"
    # The check runs and the interruptions need the fresh nodes before any deploy, which the quickstart
    # does not leave.
    assert not (via_quickstart and check_runs), "GPUCLUS_TEST_QUICKSTART=1 cannot run test_cluster_check_mode.py"
    assert not (via_quickstart and interrupt), "GPUCLUS_TEST_QUICKSTART=1 cannot run test_deploy_faults.py"
    fresh_check = None
    after_fresh_check: dict[str, str] = {}
    interruptions = None
    try:
        if via_quickstart:
            first_report = _quickstart(spec)
            first_seconds = float(first_report["seconds"])
        else:
            up = gpuclus(*SANDBOX_UP, "--spec", str(spec))
            assert up.returncode == 0, up.stderr
            status = json.loads(gpuclus("sandbox", "status", "--spec", str(spec), "--json").stdout)
            addresses = {node["name"]: node["address"] for node in status["nodes"]}
            # A check run on the fresh nodes first: it must succeed and leave them as they were.
            if check_runs:
                fresh_check = gpuclus("deploy", str(spec), "--check", "--json")
                after_fresh_check = {node: _installed(spec, address) for node, address in addresses.items()}
            # Then Ctrl-C at random moments of the first deploys (test_deploy_faults.py asserts on them);
            # the deploy below finishes the work and must succeed.
            if interrupt:
                interruptions = interrupt_fresh_deploys(spec, set(addresses))
            started = time.monotonic()
            # A hang guard, not a time limit: with three lanes on two cores a fresh deploy with containers and
            # PyTorch came close to 20 min (the whole fixture takes about 13 alone); 40 leave room, still no hang.
            first = gpuclus("deploy", str(spec), "--json", timeout=2400)
            first_seconds = time.monotonic() - started
            assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
            first_report = json.loads(first.stdout)
        # The idempotence proof runs every task (--full); the plain deploy after it finds every node as that one
        # left it and runs nothing (deploy/in_sync.py).
        started = time.monotonic()
        second = gpuclus("deploy", str(spec), "--full", "--json")
        second_seconds = time.monotonic() - started
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        started = time.monotonic()
        third = gpuclus("deploy", str(spec), "--json")
        third_seconds = time.monotonic() - started
        assert third.returncode == 0, third.stdout[-4000:] + third.stderr[-4000:]
        deployed_check = gpuclus("deploy", str(spec), "--check", "--json") if check_runs else None
        status = json.loads(gpuclus("sandbox", "status", "--spec", str(spec), "--json").stdout)
        print(
            f"\nfresh deploy {first_seconds:.0f} s, no-change deploy (--full) {second_seconds:.0f} s,"
            f" in-sync deploy {third_seconds:.1f} s"
        )
        yield Cluster(
            spec=spec,
            engine=status["engine"],
            addresses={node["name"]: node["address"] for node in status["nodes"]},
            first=first_report,
            second=json.loads(second.stdout),
            third=json.loads(third.stdout),
            fresh_check=_json_or_output(fresh_check) if fresh_check else {},
            after_fresh_check=after_fresh_check,
            deployed_check=_json_or_output(deployed_check) if deployed_check else {},
            interruptions=interruptions,
        )
    finally:
        gpuclus("sandbox", "down", "--spec", str(spec))
        if via_quickstart:
            # A quickstart stopped before `sandbox up` wrote the spec left its nodes under the name only.
            gpuclus("sandbox", "down", "--name", CLUSTER)


def _quickstart(spec: Path) -> dict[str, Any]:
    """scripts/quickstart.sh in the spec's directory for this session's sandbox; its deploy's run record.

    Its output goes to quickstart.log beside the spec (the tail is shown when it fails).
    """
    environment = {
        **os.environ,
        "GPUCLUS_SANDBOX_NAME": CLUSTER,
        "GPUCLUS_SANDBOX_OS": NODE_OS,
        **({"GPUCLUS_SANDBOX_SUBNET": SUBNET} if SUBNET else {}),
        **({"GPUCLUS_ARTIFACTS_DIR": str(ARTIFACTS_DIR)} if ARTIFACTS_DIR is not None else {}),
        **({"GPUCLUS_SANDBOX_WHEELHOUSE": str(WHEELHOUSE)} if WHEELHOUSE is not None else {}),
        # The wheel's install goes beside the spec, not over the user's own ~/.local/bin/gpuclus.
        "UV_TOOL_DIR": str(spec.parent / "uv-tools"),
        "UV_TOOL_BIN_DIR": str(spec.parent / "uv-bin"),
    }
    log = spec.parent / "quickstart.log"
    with log.open("w") as output:
        # A hang guard: the fresh deploy inside came close to 20 min with three lanes on two cores.
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "scripts" / "quickstart.sh"), str(spec.parent)],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environment,
            timeout=3000,
            check=False,
        )
    assert done.returncode == 0, f"the quickstart failed (exit {done.returncode}):\n" + log.read_text()[-6000:]
    assert spec.is_file(), f"the quickstart wrote no {spec}"
    runs = json.loads(gpuclus("runs", "list", "--spec", str(spec), "--json").stdout)["runs"]
    deploys = [run for run in runs if run["kind"] == "deploy"]
    assert len(deploys) == 1, f"the quickstart should have deployed once: {[run['id'] for run in runs]}"
    return dict(deploys[0])


# What a deploy would have put on a node: Slurm, munge, Prometheus and chrony
# packages, slurm.conf, the deploy stamp. Printed one per line when present.
_INSTALLED = (
    "for p in slurmctld slurmd munge prometheus chrony; do "
    "dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q 'install ok installed' && echo $p; done; "
    "test -e /etc/slurm/slurm.conf && echo slurm.conf; "
    "test -e /var/lib/gpuclus/deployed.json && echo stamp; true"
)


def _installed(spec: Path, address: str) -> str:
    state = StateDir.beside(spec)
    probe = run_once(SshTarget(address, ADMIN_USER, state.private_key, state.known_hosts), _INSTALLED)
    return probe.stdout if probe.exit_status == 0 else f"probe failed: {probe.stderr[-500:]}"


def _json_or_output(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The command's JSON with its exit code, or its output when it printed no JSON."""
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        return {"returncode": done.returncode, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]}
    return {**report, "returncode": done.returncode}
