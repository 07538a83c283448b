"""The users commands' steps on the cluster: a change written and its users phase deployed, the GPUs in use.

The deploy and the controller's session are stand-ins; the spec, the users file and the state directory are
real files under tmp_path, read back by the real loaders.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuclus.deploy import records
from gpuclus.deploy.pipeline import DeployObserver, DeployRequest, DeployResult, QuietObserver
from gpuclus.errors import ExitCode
from gpuclus.slurm.commands import SQUEUE_GPUS
from gpuclus.spec.load import LoadedSpec, load_spec
from gpuclus.ssh.client import CommandResult, SshFailure
from gpuclus.users.change import UsersChange, plan_remove
from gpuclus.usersync.usage import gpus_in_use
from gpuclus.usersync.workflow import apply_change

SPEC = textwrap.dedent(
    """\
    apiVersion: gpuclus/v1
    cluster: {name: lab, admin_user: ubuntu}
    nodes:
      - {name: head, address: 10.0.0.10, roles: [controller, login]}
      - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
    users: {file: users.yaml}
    """
)

USERS = textwrap.dedent(
    """\
    apiVersion: gpuclus/v1
    kind: Users
    accounts:
      - name: nlp
    users:
      - name: bob
        uid: 2002
        account: nlp
    """
)


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    (tmp_path / "cluster.yaml").write_text(SPEC)
    (tmp_path / "users.yaml").write_text(USERS)
    (tmp_path / "users.yaml").chmod(0o640)
    return tmp_path / "cluster.yaml"


def removal(spec: Path) -> UsersChange:
    loaded = load_spec(spec)
    assert loaded.ok and loaded.users is not None, [finding.message for finding in loaded.findings]
    return plan_remove(spec.parent / "users.yaml", USERS, loaded.users, "bob")


class Deploys:
    """A stand-in for pipeline.deploy: logs each request with the spec it saw, answers with ``code``."""

    def __init__(self, tmp_path: Path, code: ExitCode) -> None:
        self.tmp_path = tmp_path
        self.code = code
        self.calls: list[tuple[DeployRequest, LoadedSpec, str]] = []

    def __call__(self, request: DeployRequest, loaded: LoadedSpec, observer: DeployObserver) -> DeployResult:
        self.calls.append((request, loaded, (request.spec_path.parent / "users.yaml").read_text()))
        status = "successful" if self.code == ExitCode.OK else "failed"
        record = records.RunRecord("run1", str(request.spec_path), "0" * 64, [], None, False, 0.0, "0", status)
        return DeployResult(record, self.code, self.tmp_path / record.id, 1.0)


class Seen:
    """The change's observer: what it was told, in order."""

    def __init__(self) -> None:
        self.told: list[str] = []

    def written(self, change: UsersChange) -> None:
        self.told.append(f"wrote {change.path.name}")

    def watch_deploy(self, request: DeployRequest, loaded: LoadedSpec, deploy: Any) -> DeployResult:
        self.told.append(f"deploy --only {request.only}")
        result: DeployResult = deploy(request, loaded, QuietObserver())
        return result

    def deployed(self, result: DeployResult) -> None:
        self.told.append(f"deployed {result.exit_code.name}")


def test_a_change_is_written_with_its_mode_then_only_the_users_phase_deploys_the_spec_read_back(
    spec: Path, tmp_path: Path
) -> None:
    change = removal(spec)
    deploys, seen = Deploys(tmp_path, ExitCode.OK), Seen()
    result = apply_change(change, spec, seen, load=load_spec, deploy=deploys)
    assert result.exit_code == ExitCode.OK
    assert seen.told == ["wrote users.yaml", "deploy --only users", "deployed OK"]
    users_file = spec.parent / "users.yaml"
    assert users_file.read_text() == change.new_text != USERS
    assert users_file.stat().st_mode & 0o777 == 0o640
    [(request, loaded, text_then)] = deploys.calls
    assert (request.spec_path, request.only, request.check) == (spec, "users", False)
    # The deploy reads the spec after the write: it renders the new users file.
    assert text_then == change.new_text
    assert loaded.users is not None and [(user.name, user.removed) for user in loaded.users.users] == [("bob", True)]


def test_a_users_phase_that_fails_leaves_the_file_written(spec: Path, tmp_path: Path) -> None:
    change = removal(spec)
    seen = Seen()
    result = apply_change(change, spec, seen, load=load_spec, deploy=Deploys(tmp_path, ExitCode.FAILED))
    assert result.exit_code == ExitCode.FAILED
    assert seen.told == ["wrote users.yaml", "deploy --only users", "deployed FAILED"]
    assert (spec.parent / "users.yaml").read_text() == change.new_text


class Controller:
    """A stand-in controller session answering squeue with ``answer``; it logs commands and whether it closed."""

    def __init__(self, answer: CommandResult) -> None:
        self.answer = answer
        self.commands: list[str] = []
        self.closed = False

    def __call__(self, *connect_args: object) -> Controller:
        return self

    def run(self, command: str, timeout: float = 60.0) -> CommandResult:
        self.commands.append(command)
        return self.answer

    def close(self) -> None:
        self.closed = True


def test_the_gpus_in_use_come_from_squeue_on_the_controller(spec: Path) -> None:
    controller = Controller(CommandResult(0, "bob|cpu=2,node=1,gres/gpu=2|\ncarol|cpu=1,node=1|\n", ""))
    assert gpus_in_use(load_spec(spec), spec, connect=controller) == ({"bob": 2}, None)
    assert controller.commands == [SQUEUE_GPUS] and controller.closed


def test_a_failed_squeue_or_an_unreachable_controller_is_an_answer_not_an_error(spec: Path) -> None:
    controller = Controller(CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"))
    in_use, problem = gpus_in_use(load_spec(spec), spec, connect=controller)
    assert in_use == {} and problem == "squeue failed: slurm_load_jobs error: Unable to contact slurm controller"
    assert controller.closed

    def unreachable(*connect_args: object) -> Controller:
        raise SshFailure("controller head unreachable: timed out", "is it up?")

    in_use, problem = gpus_in_use(load_spec(spec), spec, connect=unreachable)
    assert in_use == {} and problem is not None and "controller head unreachable" in problem
