"""`gpuclus nodes remove`: the spec edit, the removal plan, the drain-and-wait loop, the CLI's refusals.

The drain loop runs against a stand-in controller (a scripted squeue/sinfo);
the real Slurm path is tests/integration/test_cluster_nodes.py on the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuclus.cli.main import app
from gpuclus.errors import GpuclusError, UsageError
from gpuclus.nodes.drain import REASON, drain_and_wait
from gpuclus.nodes.plan import plan_removal
from gpuclus.nodes.retire import retire_nodes
from gpuclus.spec import hostlist
from gpuclus.spec.edit import SpecEditError, remove_nodes
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.topology import Node
from gpuclus.ssh.client import CommandResult, SshFailure, SshTarget
from gpuclus.state import StateDir

LAB = (Path(__file__).resolve().parents[3] / "inventories" / "examples" / "lab-3node" / "cluster.yaml").read_text()

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: admin}
nodes:
  # The head runs everything but jobs.
  - name: head
    address: 10.0.0.10
    roles: [controller, nfs_server, monitoring, login]
  # Four GPU servers in one range.
  - name: "gpu[01-04]"
    address: "10.0.0.[11-14]"
    roles: [compute]
    gpus: {count: 2, fake: true}
  # A CPU node of its own.
  - name: cpu1
    address: 10.0.0.21
    roles: [compute]
    # nothing else to say about it
  - {name: cpu2, address: 10.0.0.22, roles: [compute]}
slurm:
  partitions:
    - {name: gpu, nodes: "gpu[01-04]", default: true}
    - name: cpu
      nodes: cpu[1-2]
"""


def _nodes_of(text: str) -> dict[str, str]:
    loaded = load_spec_text(text)
    assert loaded.ok, loaded.findings
    assert loaded.topology is not None
    return {node.name: node.address for node in loaded.topology.nodes}


# --- the spec edit ------------------------------------------------------------------


def test_the_last_of_a_range_shrinks_it_and_its_partition() -> None:
    text = remove_nodes(SPEC, {"gpu04"})
    assert '  - name: "gpu[01-03]"\n    address: "10.0.0.[11-13]"\n' in text
    assert '{name: gpu, nodes: "gpu[01-03]", default: true}' in text
    nodes = _nodes_of(text)
    assert "gpu04" not in nodes and nodes["gpu03"] == "10.0.0.13"
    # Nothing else moved: the rest of the text is byte for byte the same.
    assert text.replace("[01-03]", "[01-04]").replace("[11-13]", "[11-14]") == SPEC


def test_the_middle_of_a_range_keeps_names_and_addresses_paired() -> None:
    nodes = _nodes_of(remove_nodes(SPEC, {"gpu02", "gpu03"}))
    assert {name: address for name, address in nodes.items() if name.startswith("gpu")} == {
        "gpu01": "10.0.0.11",
        "gpu04": "10.0.0.14",
    }


def test_an_entry_of_its_own_goes_with_its_comments() -> None:
    text = remove_nodes(SPEC, {"cpu1"})
    assert "A CPU node of its own" not in text and "nothing else to say" not in text
    assert "cpu1" not in _nodes_of(text)
    assert "nodes: cpu2\n" in text
    # The comment of the entry before it stays.
    assert "# Four GPU servers in one range." in text


def test_a_one_line_entry_goes_whole() -> None:
    text = remove_nodes(SPEC, {"cpu2"})
    assert "cpu2" not in text.split("slurm:")[0]
    assert "nodes: cpu1\n" in text
    assert set(_nodes_of(text)) == {"head", "gpu01", "gpu02", "gpu03", "gpu04", "cpu1"}


def test_a_whole_range_goes_and_the_example_stays_valid() -> None:
    text = remove_nodes(LAB, {"gpu01"})
    assert _nodes_of(text) == {"head": "192.168.1.10", "gpu02": "192.168.1.12"}
    assert 'nodes: "gpu02"' in text


def test_names_not_in_the_spec_are_refused() -> None:
    with pytest.raises(SpecEditError, match="gpu09 not among the spec's nodes"):
        remove_nodes(SPEC, {"gpu09"})


def test_an_address_order_that_cannot_follow_the_names_is_refused() -> None:
    crossed = SPEC.replace('"10.0.0.[11-14]"', '"10.0.0.[14,13,12,11]"')
    assert _nodes_of(crossed)["gpu01"] == "10.0.0.14"
    with pytest.raises(SpecEditError, match="split the entry by hand"):
        remove_nodes(crossed, {"gpu02"})


def test_a_partition_left_empty_is_refused() -> None:
    with pytest.raises(SpecEditError, match=r"slurm.partitions\[1\] would have no nodes left"):
        remove_nodes(SPEC, {"cpu1", "cpu2"})


def test_a_flow_style_node_list_is_refused() -> None:
    flow = "apiVersion: gpuclus/v1\nnodes: [{name: a, address: 10.0.0.1, roles: [compute]}]\n"
    with pytest.raises(SpecEditError, match="block list"):
        remove_nodes(flow, {"a"})


# --- the plan ------------------------------------------------------------------------


def _plan(names: list[str], text: str = SPEC) -> object:
    return plan_removal(load_spec_text(text), "cluster.yaml", names)


def test_plan_expands_hostlists_and_shows_the_diff() -> None:
    plan = plan_removal(load_spec_text(SPEC), "cluster.yaml", ["gpu[03-04]"])
    assert plan.names == ["gpu03", "gpu04"] and plan.hostlist == "gpu[03-04]"
    assert '-  - name: "gpu[01-04]"' in plan.diff and '+  - name: "gpu[01-02]"' in plan.diff
    assert [node.name for node in plan.staying_compute] == ["gpu01", "gpu02", "cpu1", "cpu2"]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["gpu09"], "gpu09: not a node of cluster.yaml"),
        (["head"], "only plain compute nodes can be removed (head: controller, login, monitoring, nfs_server)"),
        (["gpu[01-04]", "cpu[1-2]"], "that would remove every compute node"),
        (["gpu[1"], "gpu[1"),
    ],
)
def test_plan_refusals(names: list[str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        _plan(names)
    assert message in raised.value.message


def test_plan_refuses_what_the_spec_edit_cannot_write() -> None:
    with pytest.raises(UsageError) as raised:
        _plan(["cpu1", "cpu2"])
    assert "cannot take cpu[1-2] out of the spec" in raised.value.message
    assert "edit cluster.yaml by hand" in (raised.value.hint or "")


# --- drain and wait (stand-in controller) ----------------------------------------------


class Controller:
    """squeue answers from a script of job lists, one per poll; every command is logged."""

    def __init__(self, polls: list[list[str]], known: list[str], fail: str | None = None) -> None:
        self.polls = polls
        self.known = known
        self.fail = fail
        self.commands: list[str] = []

    def __call__(self, command: str) -> CommandResult:
        self.commands.append(command)
        if self.fail and self.fail in command:
            return CommandResult(1, "", "slurm_update error: Invalid node state specified")
        if command.startswith("sinfo"):
            return CommandResult(0, "".join(f"{name}\n" for name in self.known), "")
        if command.startswith("squeue"):
            jobs = self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]
            return CommandResult(0, "".join(f"{job}\n" for job in jobs), "")
        return CommandResult(0, "", "")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _drain(controller: Controller, *, force: bool = False, timeout: float = 60) -> tuple[object, list[str]]:
    clock, said = Clock(), []
    outcome = drain_and_wait(
        controller,
        ["gpu03", "gpu04"],
        "gpu[03-04]",
        force=force,
        timeout_s=timeout,
        progress=said.append,
        sleep=clock.sleep,
        clock=clock,
    )
    return outcome, said


def test_drain_then_wait_until_the_jobs_are_gone() -> None:
    controller = Controller([["41"], ["41"], []], known=["gpu01", "gpu03", "gpu04"])
    outcome, said = _drain(controller)
    assert controller.commands[1] == f"sudo -n scontrol update NodeName=gpu03,gpu04 State=DRAIN Reason='{REASON}'"
    assert outcome.drained == ["gpu03", "gpu04"] and outcome.cancelled == [] and outcome.waited_s == 10
    assert said == ["waiting for job(s) 41 on gpu[03-04] to finish (0 s)"]


def test_force_cancels_the_jobs_on_the_nodes() -> None:
    controller = Controller([["41", "42"], []], known=["gpu03", "gpu04"])
    outcome, said = _drain(controller, force=True)
    assert "sudo -n scancel --nodelist=gpu03,gpu04" in controller.commands
    # Then DOWN, so jobs on a dead node do not sit in COMPLETING until SlurmdTimeout.
    assert controller.commands[-2] == f"sudo -n scontrol update NodeName=gpu03,gpu04 State=DOWN Reason='{REASON}'"
    assert outcome.cancelled == ["41", "42"] and said == ["cancelled job(s) 41, 42 on gpu[03-04]"]


def test_a_job_that_outlives_the_timeout_stops_with_the_undo_hint() -> None:
    with pytest.raises(GpuclusError) as raised:
        _drain(Controller([["41"]], known=["gpu03", "gpu04"]), timeout=12)
    assert "job(s) 41 still run on gpu[03-04]" in raised.value.message
    assert "--force" in (raised.value.hint or "") and "State=RESUME" in (raised.value.hint or "")


def test_nodes_slurm_never_knew_are_not_drained() -> None:
    controller = Controller([[]], known=["gpu01", "gpu03"])
    outcome, _ = _drain(controller)
    assert outcome.unknown == ["gpu04"]
    assert "NodeName=gpu03 State=DRAIN" in controller.commands[1]
    none_known = Controller([[]], known=["gpu01"])
    outcome, _ = _drain(none_known)
    assert none_known.commands == ["sinfo --noheader --Node --format=%N"]


def test_a_refused_drain_is_one_line_with_a_hint() -> None:
    with pytest.raises(GpuclusError, match="could not drain gpu\\[03-04\\]: slurm_update error"):
        _drain(Controller([[]], known=["gpu03", "gpu04"], fail="scontrol update"))


# --- the removed nodes themselves -----------------------------------------------------------


def test_retire_stops_slurmd_and_forgets_the_host_keys(tmp_path: Path) -> None:
    state = StateDir.beside(tmp_path / "cluster.yaml")
    state.set_known_host_keys(
        {"10.0.0.13": ["ssh-ed25519 AAAA13"], "10.0.0.14": ["ssh-ed25519 AAAA14"], "10.0.0.11": ["ssh-ed25519 AAAA11"]}
    )
    nodes = [
        Node("gpu03", "10.0.0.13", frozenset(), None, None, None, 1),
        Node("gpu04", "10.0.0.14", frozenset(), None, None, None, 1),
    ]
    seen: list[str] = []

    def runner(target: SshTarget, command: str) -> CommandResult:
        seen.append(target.address)
        if target.address == "10.0.0.14":
            raise SshFailure("10.0.0.14: connection refused")
        return CommandResult(0, "inactive\n", "")

    outcomes = retire_nodes("admin", nodes, state, runner)
    assert [outcome.as_dict() for outcome in outcomes] == [
        {"node": "gpu03", "slurmd_stopped": True, "error": None},
        {"node": "gpu04", "slurmd_stopped": False, "error": "10.0.0.14: connection refused"},
    ]
    assert seen == ["10.0.0.13", "10.0.0.14"]
    assert state.known_hosts.read_text() == "10.0.0.11 ssh-ed25519 AAAA11\n"


# --- the CLI ----------------------------------------------------------------------------------


def test_dry_run_shows_the_plan_and_touches_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["nodes", "remove", "gpu04", "--spec", str(spec), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["dry_run"] and report["nodes"] == ["gpu04"]
    assert '+  - name: "gpu[01-03]"' in report["spec_diff"]
    assert spec.read_text() == SPEC
    assert not (tmp_path / ".gpuclus").exists()


def test_cli_refuses_a_controller_with_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["nodes", "remove", "head", "--spec", str(spec), "--json"])
    assert result.exit_code == 2
    assert "only plain compute nodes" in json.loads(result.stdout)["error"]["message"]
    assert spec.read_text() == SPEC


def test_hostlist_compress_keeps_the_pairing_it_is_trusted_with() -> None:
    # The edit relies on compress sorting names and addresses the same way for a range's leftovers.
    kept = [("gpu01", "10.0.0.11"), ("gpu04", "10.0.0.14")]
    assert hostlist.compress(name for name, _ in kept) == "gpu[01,04]"
    assert hostlist.compress(address for _, address in kept) == "10.0.0.[11,14]"
