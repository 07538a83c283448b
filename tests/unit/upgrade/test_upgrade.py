"""Rolling upgrades: which pins changed, Slurm's jumps, the batches, the check's verdict and the order of steps."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gpuclus.deploy.phases import Phase
from gpuclus.errors import ExitCode, UsageError
from gpuclus.render import render_files
from gpuclus.slurm.releases import jump_problem, major, mix_problem
from gpuclus.spec.load import load_spec_text
from gpuclus.ssh.client import CommandResult
from gpuclus.upgrade import window
from gpuclus.upgrade.batches import Batch, plan_batches
from gpuclus.upgrade.detect import installed_slurm, refuse_unsupported_jump
from gpuclus.upgrade.pins import PINS, SLURM, PinChange, changed_pins
from gpuclus.upgrade.rolling import BatchDeploy, Rollout, roll

SPEC = textwrap.dedent(
    """\
    apiVersion: gpuclus/v1
    cluster: {name: lab, admin_user: ubuntu}
    nodes:
      - {name: head, address: 10.0.0.10, roles: [controller, login, nfs_server, monitoring]}
      - name: "gpu[01-05]"
        address: "10.0.0.[11-15]"
        roles: [compute]
        gpus: {count: 2, fake: true}
    slurm: {version: "22.05.8"}
    containers: {enroot: true, pyxis: true, artifacts_dir: /srv/artifacts, pyxis_version: "0.24.0"}
    """
)
ALL_PHASES = list(Phase)


def _render(text: str) -> dict[str, str]:
    loaded = load_spec_text(text)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    return render_files(
        loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="../..", known_hosts="/x/known_hosts"
    )


def _topology(text: str = SPEC):  # type: ignore[no-untyped-def]
    loaded = load_spec_text(text)
    assert loaded.topology is not None, loaded.findings
    return loaded.topology


# --- which pins changed -----------------------------------------------------


def test_a_changed_pyxis_version_is_the_one_change() -> None:
    changes = changed_pins(_render(SPEC), _render(SPEC.replace('"0.24.0"', '"0.25.0"')), ALL_PHASES)
    assert [(change.pin.label, change.before, change.after) for change in changes] == [("Pyxis", "0.24.0", "0.25.0")]
    assert changes[0].describe() == "Pyxis 0.24.0 → 0.25.0"


def test_the_same_spec_and_other_changes_are_no_upgrade() -> None:
    assert changed_pins(_render(SPEC), _render(SPEC), ALL_PHASES) == []
    # A new node is a deploy, not an upgrade.
    grown = SPEC.replace("gpu[01-05]", "gpu[01-06]").replace("[11-15]", "[11-16]")
    assert changed_pins(_render(SPEC), _render(grown), ALL_PHASES) == []


def test_a_pin_of_a_phase_this_deploy_skips_or_just_turns_on_is_no_upgrade() -> None:
    newer = SPEC.replace('"0.24.0"', '"0.25.0"')
    assert changed_pins(_render(SPEC), _render(newer), [Phase.BASE, Phase.SLURM]) == []
    off = SPEC.replace("pyxis: true", "pyxis: false")
    assert changed_pins(_render(off), _render(newer), ALL_PHASES) == []


def test_slurm_pinned_and_unpinned() -> None:
    unpinned = SPEC.replace('slurm: {version: "22.05.8"}', "slurm: {}")
    [change] = changed_pins(_render(unpinned), _render(SPEC), ALL_PHASES)
    assert change.pin == SLURM and (change.before, change.after) == (None, "22.05.8")
    assert change.describe() == "Slurm (distribution's) → 22.05.8"
    assert {pin.phase for pin in PINS} == {Phase.SLURM, Phase.NVIDIA, Phase.CONTAINERS}


# --- Slurm's jumps ----------------------------------------------------------


@pytest.mark.parametrize(
    ("installed", "target"),
    [
        ("22.05.8", "22.05.11"),  # a maintenance release
        ("22.05.8", "23.02.7"),
        ("22.05.8", "23.11.4"),  # two majors: the old window
        ("23.02.1", "24.11.0"),  # three: 24.11 reads three older releases
        ("25.11.2", "27.05.1"),  # past gpuclus' list, on the 6-month cycle
    ],
)
def test_jumps_slurm_supports(installed: str, target: str) -> None:
    assert jump_problem(installed, target) is None


@pytest.mark.parametrize(
    ("installed", "target", "words"),
    [
        ("22.05.8", "24.05.1", "upgrade to a 23.11 release first"),
        ("22.05.8", "24.11.1", "upgrade to a 23.11 release first"),
        ("23.11.4", "22.05.8", "is a downgrade"),
        ("22.05.8", "23.07.1", "23.07 is not a Slurm major release"),
        ("slurm", "23.11.1", "cannot read a Slurm release"),
    ],
)
def test_jumps_slurm_refuses(installed: str, target: str, words: str) -> None:
    assert words in (jump_problem(installed, target) or "")


@pytest.mark.parametrize(
    ("controller", "node", "words"),
    [
        ("22.05", "22.05", None),
        ("24.11", "23.11", None),  # Ubuntu 24.04 compute nodes under a Debian 13 controller
        ("24.11", "23.02", None),  # 24.11 talks to three releases before it
        ("23.11", "22.05", None),
        ("23.11", "21.08", "3 major releases behind the controller's 23.11, which talks to the 2 before it"),
        ("24.11", "22.05", "4 major releases behind the controller's 24.11, which talks to the 3 before it"),
        ("22.05", "24.11", "newer than the controller's 22.05"),  # Debian 13 compute under a Debian 12 controller
        ("22.05", "23.07", "23.07 is not a Slurm major release"),
    ],
)
def test_which_slurm_releases_can_join_a_controller(controller: str, node: str, words: str | None) -> None:
    problem = mix_problem(controller, node)
    if words is None:
        assert problem is None
    else:
        assert words in (problem or ""), problem


def test_the_controller_s_version_and_the_refusal() -> None:
    assert installed_slurm(CommandResult(0, "slurm-wlm 22.05.8\n", "")) == "22.05.8"
    assert installed_slurm(CommandResult(0, "slurm 23.11.4\n", "")) == "23.11.4"
    assert installed_slurm(CommandResult(127, "", "sinfo: not found")) is None
    assert major("22.05.8-4+deb12u1") == "22.05"
    jump = [PinChange(SLURM, "22.05.8", "24.11.1")]
    with pytest.raises(UsageError) as refused:
        refuse_unsupported_jump(jump, "22.05.8")
    assert "slurm.version 24.11.1" in refused.value.message and "controller runs 22.05.8" in refused.value.message
    refuse_unsupported_jump(jump, None)  # the controller does not say: nothing to hold against it
    refuse_unsupported_jump([PinChange(SLURM, "22.05.8", "23.11.4")], "22.05.8")


# --- batches ----------------------------------------------------------------


def test_controllers_and_service_nodes_first_then_compute_nodes_n_at_a_time() -> None:
    batches = plan_batches(_topology(), 2)
    assert [(b.nodes, b.out_of_service) for b in batches] == [
        (("head",), ()),
        (("gpu01", "gpu02"), ("gpu01", "gpu02")),
        (("gpu03", "gpu04"), ("gpu03", "gpu04")),
        (("gpu05",), ("gpu05",)),
    ]


def test_a_controller_that_computes_is_in_the_first_batch_and_out_of_service() -> None:
    text = SPEC.replace("[controller, login, nfs_server, monitoring]", "[controller, compute, nfs_server]")
    batches = plan_batches(_topology(text), 5)
    assert batches[0] == Batch(("head",), ("head",))
    assert batches[1].nodes == ("gpu01", "gpu02", "gpu03", "gpu04", "gpu05")
    with pytest.raises(ValueError):
        plan_batches(_topology(), 0)


# --- the check after the upgrade ---------------------------------------------


EXPECTED = window.Expected(slurm="22.05.8", enroot="4.1.2", pyxis="0.25.0", container_image="/img.sqsh")


def test_the_probe_lines_against_what_must_run() -> None:
    output = "gpu01|22.05.8|4.1.2|0.25.0\ngpu02|22.05.8|4.1.2|0.24.0\n"
    assert window.compare(output, ["gpu01", "gpu02", "gpu03"], EXPECTED) == {
        "gpu02": "runs Pyxis 0.24.0 (expected 0.25.0)",
        "gpu03": "the check job printed nothing for it",
    }
    # A pin with the package revision matches the upstream version slurmd prints; unpinned is not checked.
    revision = window.Expected(slurm="22.05.8-4+deb12u1")
    assert window.compare("gpu01|22.05.8||\n", ["gpu01"], revision) == {}
    assert window.compare("gpu01|||\n", ["gpu01"], window.Expected()) == {}
    assert window.compare("gpu01|||\n", ["gpu01"], revision) == {
        "gpu01": "runs Slurm missing (expected 22.05.8-4+deb12u1)"
    }


def test_someone_else_s_drain_is_held_ours_is_not() -> None:
    shown = (
        "NodeName=gpu01 State=IDLE+DRAIN Reason=disk swap [root@2026-11-25]\n"
        "NodeName=gpu02 State=IDLE+DRAIN Reason=gpuclus-upgrade: upgrading Pyxis [ubuntu@2026-11-25]\n"
        "NodeName=gpu03 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2026-11-25]\n"
        "NodeName=gpu04 State=MIXED\n"
    )
    held = window.held_by_others(lambda command: CommandResult(0, shown, ""), ["gpu01", "gpu02", "gpu03", "gpu04"])
    assert held == {"gpu01": "disk swap [root@2026-11-25]", "gpu03": "Not responding [slurm@2026-11-25]"}


# --- the rollout -------------------------------------------------------------


class Controller:
    """A stand-in controller: nodes' states, jobs that end after some polls, the check's output."""

    def __init__(self, *, states: dict[str, str] | None = None, probe: str | None = None) -> None:
        self.commands: list[str] = []
        self.states = states or {}
        self.probe = probe
        self.reserved: list[str] = []

    def __call__(self, command: str) -> CommandResult:
        self.commands.append(command)
        if command.startswith("scontrol show node"):
            names = command.split()[-1].split(",")
            lines = [f"NodeName={name} {self.states.get(name, 'State=IDLE')}" for name in names]
            return CommandResult(0, "\n".join(lines) + "\n", "")
        if command.startswith("sinfo"):
            return CommandResult(0, "".join(f"gpu0{index}\n" for index in range(1, 6)), "")
        if command.startswith("squeue"):
            return CommandResult(0, "", "")
        if "create reservation" in command:
            self.reserved.append(command.split("ReservationName=")[1].split()[0])
        if "srun" in command and "--container-image" not in command:
            nodes = command.split("--nodelist=")[1].split()[0].split(",")
            text = self.probe if self.probe is not None else "".join(f"{n}|22.05.8|4.1.2|0.25.0\n" for n in nodes)
            return CommandResult(0, text, "")
        return CommandResult(0, "", "")


def _plan(topology_text: str = SPEC, max_unavailable: int = 2) -> Rollout:
    return Rollout(
        changes=[PinChange(PINS[4], "0.24.0", "0.25.0")],
        batches=plan_batches(_topology(topology_text), max_unavailable),
        admin_user="ubuntu",
        run_id="r1",
        expected=EXPECTED,
        timeout_s=60,
    )


def _steps(commands: list[str]) -> list[str]:
    """The controller commands that change something, in short."""
    steps = []
    for command in commands:
        if "State=DRAIN" in command:
            steps.append("drain " + command.split("NodeName=")[1].split()[0])
        elif "create reservation" in command:
            steps.append("reserve " + command.split("Nodes=")[1].split()[0])
        elif "State=RESUME" in command:
            steps.append("resume " + command.split("NodeName=")[1].split()[0])
        elif "delete ReservationName" in command:
            steps.append("release")
        elif "srun" in command:
            steps.append("check-image" if "--container-image" in command else "check")
    return steps


def test_each_batch_is_drained_deployed_checked_in_a_reservation_and_resumed() -> None:
    controller, deployed, said = Controller(), [], []

    def deploy(batch: Batch) -> BatchDeploy:
        deployed.append((batch.nodes, list(_steps(controller.commands))))
        return BatchDeploy(ExitCode.OK, {"status": "successful"})

    report = roll(_plan(), controller, deploy, said.append, clock=lambda: 0.0, sleep=lambda s: None)
    assert report.ok and [batch.nodes for batch in report.batches] == [
        ["head"],
        ["gpu01", "gpu02"],
        ["gpu03", "gpu04"],
        ["gpu05"],
    ]
    # head (no slurmd) first and never drained; each compute batch drained before its deploy.
    assert deployed[0] == (("head",), [])
    assert deployed[1][1][-1] == "drain gpu01,gpu02"
    assert _steps(controller.commands) == [
        *["drain gpu01,gpu02", "reserve gpu01,gpu02", "resume gpu01,gpu02", "check", "check-image", "release"],
        *["drain gpu03,gpu04", "reserve gpu03,gpu04", "resume gpu03,gpu04", "check", "check-image", "release"],
        *["drain gpu05", "reserve gpu05", "resume gpu05", "check", "check-image", "release"],
    ]
    assert all("--reservation=gpuclus-upgrade-r1-" in c for c in controller.commands if "srun" in c)
    assert "Reason='gpuclus-upgrade: upgrading Pyxis 0.24.0 -> 0.25.0'" in controller.commands[2]


def test_a_failed_deploy_stops_with_the_batch_drained_and_nothing_after_it() -> None:
    controller, deployed = Controller(), []

    def deploy(batch: Batch) -> BatchDeploy:
        deployed.append(batch.nodes)
        return BatchDeploy(ExitCode.FAILED if "gpu01" in batch.nodes else ExitCode.OK, {"status": "failed"})

    report = roll(_plan(), controller, deploy, lambda text: None, clock=lambda: 0.0, sleep=lambda s: None)
    assert report.exit_code == ExitCode.FAILED and deployed == [("head",), ("gpu01", "gpu02")]
    assert "gpu[01-02] stay drained" in (report.stopped or "")
    assert not any("State=RESUME" in command for command in controller.commands)


def test_a_driver_that_needs_a_reboot_stops_with_the_reboot_hint() -> None:
    report = roll(
        _plan(),
        Controller(),
        lambda batch: BatchDeploy(ExitCode.REBOOT_NEEDED if "gpu01" in batch.nodes else ExitCode.OK, {}),
        lambda text: None,
        clock=lambda: 0.0,
        sleep=lambda s: None,
    )
    assert report.exit_code == ExitCode.REBOOT_NEEDED and "--reboot" in (report.hint or "")


def test_a_failed_check_drains_the_node_again_and_stops() -> None:
    controller = Controller(probe="gpu01|22.05.8|4.1.2|0.25.0\ngpu02|22.05.8|4.1.2|0.24.0\n")
    report = roll(
        _plan(),
        controller,
        lambda batch: BatchDeploy(ExitCode.OK, {}),
        lambda text: None,
        clock=lambda: 0.0,
        sleep=lambda s: None,
    )
    assert report.exit_code == ExitCode.FAILED and report.batches[-1].problems == {
        "gpu02": "runs Pyxis 0.24.0 (expected 0.25.0)"
    }
    steps = _steps(controller.commands)
    # The reservation is always released; gpu02 alone is drained again; gpu03 onwards untouched.
    assert steps[-2:] == ["release", "drain gpu02"] and not any("gpu03" in step for step in steps)
    assert "gpuclus-upgrade: check after the upgrade failed" in controller.commands[-1]


def test_a_node_an_admin_drained_is_upgraded_but_neither_drained_again_nor_resumed() -> None:
    controller = Controller(states={"gpu02": "State=IDLE+DRAIN Reason=bad fan [root@x]"})
    report = roll(
        _plan(max_unavailable=2),
        controller,
        lambda batch: BatchDeploy(ExitCode.OK, {}),
        lambda text: None,
        clock=lambda: 0.0,
        sleep=lambda s: None,
    )
    assert report.ok and report.batches[1].held == {"gpu02": "bad fan [root@x]"}
    steps = _steps(controller.commands)
    assert steps[:3] == ["drain gpu01", "reserve gpu01", "resume gpu01"]


# --- gpuclus plan names the upgrade -------------------------------------------


def test_plan_names_the_rolling_upgrade_and_its_order(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuclus.cli.main import app
    from gpuclus.deploy.last_applied import save_last_applied
    from gpuclus.deploy.pipeline import render_for_run
    from gpuclus.spec.load import load_spec
    from gpuclus.state import StateDir

    spec = tmp_path / "cluster.yaml"
    # Downloads instead of an artifacts directory: the full spec check wants that directory to exist.
    text = SPEC.replace("artifacts_dir: /srv/artifacts", "allow_unverified_downloads: true")
    spec.write_text(text)
    save_last_applied(StateDir.beside(spec), render_for_run(spec, load_spec(spec)))
    runner = CliRunner()
    same = json.loads(runner.invoke(app, ["plan", str(spec), "--local", "--json"]).stdout)
    assert "upgrade" not in same
    spec.write_text(text.replace('"0.24.0"', '"0.24.1"'))
    planned = json.loads(runner.invoke(app, ["plan", str(spec), "--local", "--json"]).stdout)
    assert planned["upgrade"]["described"] == ["Pyxis 0.24.0 → 0.24.1"]
    assert planned["upgrade"]["batches"] == [["head"], ["gpu01"], ["gpu02"], ["gpu03"], ["gpu04"], ["gpu05"]]
    human = runner.invoke(app, ["plan", str(spec), "--local"]).stdout
    assert "rolling upgrade: Pyxis 0.24.0 → 0.24.1" in human and "head → gpu01 → gpu02" in human
