"""The workflows a command hands off to: the rolling upgrade and `nodes remove`, each one call with an observer.

The controller's session, the deploy and the retiring SSH are stand-ins; the spec, the state directory,
last-applied and the spec file written are real files under tmp_path.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuclus.deploy import records
from gpuclus.deploy.last_applied import read_last_applied, save_last_applied
from gpuclus.deploy.pipeline import DeployObserver, DeployRequest, DeployResult, QuietObserver, render_for_run
from gpuclus.errors import ExitCode, GpuclusError, UsageError
from gpuclus.nodes.plan import plan_removal
from gpuclus.nodes.workflow import remove_nodes
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.ssh.client import CommandResult, SshTarget
from gpuclus.state import StateDir
from gpuclus.upgrade.pins import PINS, SLURM, PinChange
from gpuclus.upgrade.workflow import run_rolling_upgrade

UPGRADE_SPEC = textwrap.dedent(
    """\
    apiVersion: gpuclus/v1
    cluster: {name: lab, admin_user: ubuntu}
    nodes:
      - {name: head, address: 10.0.0.10, roles: [controller, login, nfs_server, monitoring]}
      - name: "gpu[01-03]"
        address: "10.0.0.[11-13]"
        roles: [compute]
        gpus: {count: 2, fake: true}
    slurm: {version: "22.05.8"}
    containers: {enroot: true, pyxis: true, allow_unverified_downloads: true, pyxis_version: "0.25.0"}
    """
)

REMOVAL_SPEC = textwrap.dedent(
    """\
    apiVersion: gpuclus/v1
    cluster: {name: lab, admin_user: admin}
    nodes:
      - name: head
        address: 10.0.0.10
        roles: [controller, nfs_server, monitoring, login]
      - name: "gpu[01-04]"
        address: "10.0.0.[11-14]"
        roles: [compute]
        gpus: {count: 2, fake: true}
    """
)


class Session:
    """A stand-in controller session: Slurm's answers by command, jobs for some polls, every command logged."""

    def __init__(self, *, version: str = "22.05.8", known: list[str] | None = None, jobs: list[str] | None = None):
        self.version = version
        self.known = known or []
        self.jobs = jobs or []
        self.commands: list[str] = []
        self.closed = False

    def __call__(self, *connect_args: object) -> Session:
        return self  # connect_controller's stand-in: the spec, topology, key and known_hosts are not needed

    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        self.commands.append(command)
        if command == "sinfo -V":
            return CommandResult(0, f"slurm-wlm {self.version}\n", "")
        if command.startswith("sinfo"):
            return CommandResult(0, "".join(f"{name}\n" for name in self.known), "")
        if command.startswith("scontrol show node"):
            names = command.split()[-1].split(",")
            return CommandResult(0, "".join(f"NodeName={name} State=IDLE\n" for name in names), "")
        if command.startswith("squeue") and "--nodelist" in command:
            return CommandResult(0, "".join(f"{job}\n" for job in self.jobs), "")
        if "srun" in command and "--container-image" not in command:
            nodes = command.split("--nodelist=")[1].split()[0].split(",")
            return CommandResult(0, "".join(f"{node}|22.05.8|4.1.2|0.25.0\n" for node in nodes), "")
        return CommandResult(0, "", "")

    def close(self) -> None:
        self.closed = True


class Deploys:
    """A stand-in for pipeline.deploy: logs each request with the spec it saw, answers with ``codes`` in turn."""

    def __init__(self, tmp_path: Path, *codes: ExitCode) -> None:
        self.tmp_path = tmp_path
        self.codes = list(codes)
        self.calls: list[tuple[DeployRequest, LoadedSpec]] = []

    def __call__(self, request: DeployRequest, loaded: LoadedSpec, observer: DeployObserver) -> DeployResult:
        self.calls.append((request, loaded))
        code = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
        status = "successful" if code == ExitCode.OK else "failed"
        record = records.RunRecord(
            f"run{len(self.calls)}", str(request.spec_path), "0" * 64, [], request.limit, False, 0.0, "0", status
        )
        return DeployResult(record, code, self.tmp_path / record.id, 1.0)


class Seen:
    """The observer of both workflows: what it was told, in order."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def watch_deploy(self, request: DeployRequest, loaded: LoadedSpec, deploy: Any) -> DeployResult:
        self.told.append(f"deploy {request.limit or 'all'}")
        result: DeployResult = deploy(request, loaded, QuietObserver())
        return result

    def planned(self, changes: list[PinChange], batches: list[Any], max_unavailable: int) -> None:
        self.told.append(f"planned {len(batches)} batches")

    def progress(self, text: str) -> None:
        self.told.append(text)

    def drained(self, plan: Any, outcome: Any) -> None:
        self.told.append(f"drained {plan.hostlist}")

    def spec_written(self, plan: Any, spec_path: Path) -> None:
        self.told.append(f"wrote {spec_path.name}")

    def deployed(self, result: DeployResult) -> None:
        self.told.append(f"deployed {result.exit_code.name}")


# --- the rolling upgrade -------------------------------------------------------------------------


def _deployed_spec(tmp_path: Path) -> tuple[Path, LoadedSpec]:
    """A spec whose last full deploy pinned Pyxis 0.24.0; the spec now asks for 0.25.0."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(UPGRADE_SPEC.replace('"0.25.0"', '"0.24.0"'))
    save_last_applied(StateDir.beside(spec), render_for_run(spec, load_spec(spec)))
    spec.write_text(UPGRADE_SPEC)
    return spec, load_spec(spec)


PYXIS = [PinChange(PINS[4], "0.24.0", "0.25.0")]


def test_the_upgrade_rolls_each_batch_through_the_observer_and_saves_last_applied(tmp_path: Path) -> None:
    spec, loaded = _deployed_spec(tmp_path)
    session, deploys, seen = Session(known=["gpu01", "gpu02", "gpu03"]), Deploys(tmp_path, ExitCode.OK), Seen()
    report = run_rolling_upgrade(
        DeployRequest(spec_path=spec), loaded, PYXIS, 2, seen, connect=session, deploy=deploys, sleep=lambda s: None
    )
    assert report.ok, report.stopped
    assert [request.limit for request, _ in deploys.calls] == ["head", "gpu01,gpu02", "gpu03"]
    assert seen.told[:2] == ["planned 3 batches", "batch 1/3 (head): deploying"]
    assert "deploy gpu01,gpu02" in seen.told and "batch 3/3 (gpu03): checked and resumed gpu03" in seen.told
    assert session.commands[0] == "sinfo -V" and session.closed
    # Every batch through: what `gpuclus plan` diffs against is this spec's render now.
    assert read_last_applied(StateDir.beside(spec)) == render_for_run(spec, loaded)


def test_a_failed_batch_stops_the_upgrade_and_keeps_the_old_last_applied(tmp_path: Path) -> None:
    spec, loaded = _deployed_spec(tmp_path)
    before = read_last_applied(StateDir.beside(spec))
    session, deploys = Session(known=["gpu01", "gpu02", "gpu03"]), Deploys(tmp_path, ExitCode.OK, ExitCode.FAILED)
    report = run_rolling_upgrade(
        DeployRequest(spec_path=spec), loaded, PYXIS, 1, Seen(), connect=session, deploy=deploys, sleep=lambda s: None
    )
    assert report.exit_code == ExitCode.FAILED and len(deploys.calls) == 2
    assert "gpu01 stay drained" in (report.stopped or "")
    assert read_last_applied(StateDir.beside(spec)) == before and session.closed


def test_a_slurm_jump_slurm_cannot_make_is_refused_before_any_drain(tmp_path: Path) -> None:
    spec, loaded = _deployed_spec(tmp_path)
    session, deploys, seen = Session(version="20.11.9"), Deploys(tmp_path, ExitCode.OK), Seen()
    change = [PinChange(SLURM, "20.11.9", "24.11.1")]
    with pytest.raises(UsageError, match=r"the controller runs 20\.11\.9"):
        run_rolling_upgrade(DeployRequest(spec_path=spec), loaded, change, 1, seen, connect=session, deploy=deploys)
    assert session.commands == ["sinfo -V"] and session.closed
    assert deploys.calls == [] and seen.told == []


# --- nodes remove ------------------------------------------------------------------------------


def _removal(tmp_path: Path) -> tuple[Path, LoadedSpec, Any]:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(REMOVAL_SPEC)
    spec.chmod(0o640)
    loaded = load_spec(spec)
    state = StateDir.beside(spec)
    state.set_known_host_keys({"10.0.0.14": ["ssh-ed25519 AAAA14"], "10.0.0.11": ["ssh-ed25519 AAAA11"]})
    return spec, loaded, plan_removal(loaded, spec.name, ["gpu04"])


def _retire(target: SshTarget, command: str) -> CommandResult:
    return CommandResult(0, "inactive\n", "")


def test_remove_drains_writes_the_spec_deploys_it_then_retires(tmp_path: Path) -> None:
    spec, loaded, plan = _removal(tmp_path)
    session, deploys, seen = Session(known=["gpu04"]), Deploys(tmp_path, ExitCode.OK), Seen()
    done = remove_nodes(
        loaded,
        plan,
        spec,
        seen,
        force=False,
        timeout_s=60,
        load=load_spec,
        connect=session,
        deploy=deploys,
        retire_runner=_retire,
    )
    assert seen.told == ["drained gpu04", "wrote cluster.yaml", "deploy all", "deployed OK"]
    assert any("State=DRAIN" in command for command in session.commands) and session.closed
    # The deploy ran on the spec as written, without the node; the file kept its mode.
    ((request, deployed_spec),) = deploys.calls
    assert request.spec_path == spec and request.limit is None
    assert deployed_spec.topology is not None and "gpu04" not in [n.name for n in deployed_spec.topology.nodes]
    assert spec.read_text() == plan.new_text and spec.stat().st_mode & 0o777 == 0o640
    assert done.exit_code == ExitCode.OK and [r.as_dict() for r in done.retired] == [
        {"node": "gpu04", "slurmd_stopped": True, "error": None}
    ]
    assert StateDir.beside(spec).known_hosts.read_text() == "10.0.0.11 ssh-ed25519 AAAA11\n"


def test_a_failed_deploy_stops_before_retiring_with_the_spec_already_written(tmp_path: Path) -> None:
    spec, loaded, plan = _removal(tmp_path)

    def no_retire(target: SshTarget, command: str) -> CommandResult:
        raise AssertionError("a node was retired after a failed deploy")

    seen = Seen()
    done = remove_nodes(
        loaded,
        plan,
        spec,
        seen,
        force=False,
        timeout_s=60,
        load=load_spec,
        connect=Session(known=["gpu04"]),
        deploy=Deploys(tmp_path, ExitCode.FAILED),
        retire_runner=no_retire,
    )
    assert done.exit_code == ExitCode.FAILED and done.retired == []
    assert seen.told[-1] == "deployed FAILED" and spec.read_text() == plan.new_text


def test_jobs_that_outlive_the_timeout_leave_the_spec_untouched(tmp_path: Path) -> None:
    spec, loaded, plan = _removal(tmp_path)
    session, deploys, seen = Session(known=["gpu04"], jobs=["41"]), Deploys(tmp_path, ExitCode.OK), Seen()
    with pytest.raises(GpuclusError, match="job\\(s\\) 41 still run on gpu04"):
        remove_nodes(
            loaded,
            plan,
            spec,
            seen,
            force=False,
            timeout_s=0,
            load=load_spec,
            connect=session,
            deploy=deploys,
            sleep=lambda s: None,
        )
    assert spec.read_text() == REMOVAL_SPEC and deploys.calls == [] and session.closed
