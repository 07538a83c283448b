"""The backup controller (Slurm HA): the spec's checks, render, slurm.conf, the sandbox spec, validate's takeover."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from role_templates import group_vars, render
from validate_stubs import GPU01, HEAD, SANDBOX_SPEC, StubRemote, context, load

from gpuclus.render import render_files
from gpuclus.sandbox.layout import sandbox_layout, sandbox_spec_text
from gpuclus.sandbox.nodes import node_containers
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.models import Role
from gpuclus.ssh.client import CommandResult
from gpuclus.validate.checks import failover
from gpuclus.validate.results import Status

HA = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, nfs_server, login]}
  - {name: head2, address: 10.0.0.9, roles: [backup_controller]}
  - {name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute], gpus: {count: 2, fake: true}}
slurm: {controller_timeout: 30}
nfs: {exports: [/shared]}
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: false, pyxis: false}
monitoring: {prometheus: false, grafana: false}
"""


def codes(text: str) -> list[str]:
    return [finding.code for finding in load_spec_text(text).findings if finding.severity.value == "error"]


# --- the spec ---------------------------------------------------------------------------------


def test_a_backup_controller_defaults_its_state_to_the_first_export() -> None:
    assert codes(HA) == []
    files = render_files(*_spec(HA), source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    variables = group_vars(files)
    assert variables["gpuclus_backup_controller"] == "head2"
    assert variables["gpuclus_backup_controller_address"] == "10.0.0.9"
    assert variables["gpuclus_slurm_state_save_location"] == "/shared/slurm/state"
    assert variables["gpuclus_slurm_controller_timeout"] == 30
    hosts = yaml.safe_load(files["inventory/hosts.yml"])
    assert list(hosts["all"]["children"]["backup_controller"]["hosts"]) == ["head2"]


def test_without_a_backup_the_state_stays_local() -> None:
    text = HA.replace("  - {name: head2, address: 10.0.0.9, roles: [backup_controller]}\n", "")
    variables = group_vars(render_files(*_spec(text), source_name="cluster.yaml", state_dir="x", known_hosts="/k"))
    assert variables["gpuclus_backup_controller"] is None
    assert variables["gpuclus_slurm_state_save_location"] is None
    assert variables["gpuclus_slurm_controller_timeout"] == 30


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        # On a range: Slurm takes one backup, and the node needs an entry of its own.
        (("[compute]", "[compute, backup_controller]"), "backup-controller-range"),
        (
            ("[controller, nfs_server, login]", "[controller, nfs_server, login, backup_controller]"),
            "backup-controller-on-controller",
        ),
        # The export is mounted elsewhere than its path, and the controller is its server: no one path for both.
        (("exports: [/shared]", "exports: [{path: /srv/shared, mount: /shared}]"), "state-save-location-required"),
        (("nfs: {exports: [/shared]}", "nfs: {exports: []}"), "state-save-location-required"),
    ],
)
def test_refusals(edit: tuple[str, str], code: str) -> None:
    old, new = edit
    assert old in HA
    assert code in codes(HA.replace(old, new))


def test_two_backup_entries_are_refused() -> None:
    text = HA.replace(
        "  - {name: head2, address: 10.0.0.9, roles: [backup_controller]}\n",
        "  - {name: head2, address: 10.0.0.9, roles: [backup_controller]}\n"
        "  - {name: head3, address: 10.0.0.8, roles: [backup_controller]}\n",
    )
    assert "backup-controller-count" in codes(text)


def test_an_explicit_state_path_lifts_the_refusal_and_is_checked_for_its_grammar() -> None:
    split = HA.replace("exports: [/shared]", "exports: [{path: /srv/shared, mount: /shared}]")
    assert (
        codes(split.replace("controller_timeout: 30", "controller_timeout: 30, state_save_location: /srv/state")) == []
    )
    for bad in ("/srv/../etc", "relative/path", "/srv/a b", "/srv/x#y"):
        text = split.replace("controller_timeout: 30", f"controller_timeout: 30, state_save_location: '{bad}'")
        assert codes(text), bad
    for timeout in (4, 3601):
        assert codes(HA.replace("controller_timeout: 30", f"controller_timeout: {timeout}")), timeout


# --- slurm.conf -------------------------------------------------------------------------------


def _spec(text: str) -> tuple[Any, Any]:
    loaded = load_spec_text(text)
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    return loaded.spec, loaded.topology


def _slurm_conf_lines(text: str) -> list[str]:
    files = render_files(*_spec(text), source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    conf = render(
        "slurm_common",
        "etc/slurm/slurm.conf.j2",
        group_vars(files),
        "head",
        __slurm_common_pmix=False,
        __slurm_common_probes={},
        __slurm_common_written_sizes={},
        __slurm_common_unsized=[],
    )
    return [
        line
        for line in conf.splitlines()
        if line.startswith(("SlurmctldHost=", "StateSaveLocation=", "SlurmctldTimeout="))
    ]


def test_slurm_conf_names_the_controller_first_then_the_backup() -> None:
    assert _slurm_conf_lines(HA.replace("gpus: {count: 2, fake: true}", "cpus: 4, memory_mb: 8000")) == [
        "SlurmctldHost=head(10.0.0.10)",
        "SlurmctldHost=head2(10.0.0.9)",
        "SlurmctldTimeout=30",
        "StateSaveLocation=/shared/slurm/state",
    ]


def test_slurm_conf_without_a_backup_is_as_before() -> None:
    text = HA.replace("  - {name: head2, address: 10.0.0.9, roles: [backup_controller]}\n", "")
    text = text.replace("gpus: {count: 2, fake: true}", "cpus: 4, memory_mb: 8000")
    assert _slurm_conf_lines(text.replace("{controller_timeout: 30}", "{}")) == [
        "SlurmctldHost=head(10.0.0.10)",
        "SlurmctldTimeout=120",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
    ]


# --- the sandbox ------------------------------------------------------------------------------


def test_the_sandbox_is_ha_from_three_nodes_and_the_backup_mounts_the_volume() -> None:
    for count, backup in ((1, None), (2, None), (3, "s-gpu01"), (5, "s-gpu01")):
        layout = sandbox_layout("s", count, 1, "10.213.0.0/24")
        loaded = load_spec_text(sandbox_spec_text(layout))
        assert loaded.ok and loaded.spec is not None and loaded.topology is not None, loaded.findings
        backups = [node.name for node in loaded.topology.nodes if node.has(Role.BACKUP_CONTROLLER)]
        assert backups == ([backup] if backup else [])
        state = loaded.spec.slurm.state_save_location
        assert state == ("/srv/nfs/shared/slurm/state" if backup else None)
        mounted = [c.name for c in node_containers(layout, {"debian12": "img"}) if c.volumes]
        # The first compute node mounts the volume from 2 nodes on, so growing to 3 needs no new container.
        assert mounted == ["s-head"] + (["s-gpu01"] if count > 1 else [])
    # The other compute nodes stay one range, which `nodes remove` can shrink.
    assert "name: s-gpu[02-04]" in sandbox_spec_text(sandbox_layout("s", 5, 1, "10.213.0.0/24"))
    assert "name: s-gpu02\n" in sandbox_spec_text(sandbox_layout("s", 3, 1, "10.213.0.0/24"))


# --- validate: failover.takeover --------------------------------------------------------------

BOTH_UP = CommandResult(0, f"Slurmctld(primary) at {HEAD} is UP\nSlurmctld(backup) at {GPU01} is UP\n", "")
BACKUP_ONLY = CommandResult(1, f"Slurmctld(primary) at {HEAD} is DOWN\nSlurmctld(backup) at {GPU01} is UP\n", "")
OK = CommandResult(0, "", "")


class Cluster:
    """scontrol ping as the controllers' states say; takeover and start change them as Slurm 22.05 does."""

    def __init__(self, takes_over: bool = True, job: CommandResult | None = None, node_state: str = "IDLE") -> None:
        self.primary_up, self.takes_over = True, takes_over
        self.job = job or CommandResult(0, f"{GPU01}\n", "")
        self.node_state = node_state

    def remote(self) -> StubRemote:
        return StubRemote(
            [
                ("scontrol ping", lambda _: BOTH_UP if self.primary_up else BACKUP_ONLY),
                ("scontrol takeover", self._takeover),
                ("systemctl start slurmctld", self._start),
                ("srun", self.job),
                ("squeue", OK),
                (
                    "show node",
                    lambda _: CommandResult(0, f"NodeName={GPU01} Arch=x86_64 State={self.node_state}\n", ""),
                ),
            ]
        )

    def _takeover(self, _: str) -> CommandResult:
        self.primary_up = not self.takes_over
        return OK

    def _start(self, _: str) -> CommandResult:
        self.primary_up = True
        return OK


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failover, "POLL_S", 0.0)
    monkeypatch.setattr(failover, "TAKEOVER_DEADLINE_S", 0.05)
    monkeypatch.setattr(failover, "HANDBACK_DEADLINE_S", 0.05)
    monkeypatch.setattr(failover, "NODE_DEADLINE_S", 0.05)
    monkeypatch.setattr(failover, "READY_DEADLINE_S", 0.05)
    monkeypatch.setattr(failover, "SETTLE_QUIET_S", 0.0)


def test_takeover_passes_with_both_figures_and_hands_control_back() -> None:
    cluster = Cluster()
    remote = cluster.remote()
    outcome = failover.takeover(context(remote))
    assert outcome.overall is Status.PASS
    rows = {row.node: row for row in outcome.nodes}
    assert rows[GPU01].unit == rows[HEAD].unit == "s"
    assert isinstance(rows[GPU01].value, float) and isinstance(rows[HEAD].value, float)
    assert "ran a job" in rows[GPU01].message
    assert cluster.primary_up
    # The job ran while the backup was in control: after the takeover, before the primary's start.
    commands = remote.commands
    words = ("takeover", "srun", "squeue", "systemctl start")
    order = [next(i for i, c in enumerate(commands) if word in c) for word in words]
    assert order == sorted(order)
    assert all(c.startswith("sudo -n ") for c in commands if "takeover" in c or "systemctl" in c)


def test_a_backup_that_never_takes_over_fails_and_the_primary_is_started_anyway() -> None:
    cluster = Cluster(takes_over=False)
    remote = cluster.remote()
    outcome = failover.takeover(context(remote))
    assert outcome.overall is Status.FAIL
    assert "not the only controller up" in outcome.nodes[0].message
    assert remote.matching("systemctl start slurmctld")


def test_a_job_that_fails_under_the_backup_fails_the_check() -> None:
    cluster = Cluster(job=CommandResult(1, "", "srun: error: Unable to allocate resources: Invalid partition"))
    remote = cluster.remote()
    outcome = failover.takeover(context(remote))
    assert outcome.overall is Status.FAIL
    assert "Invalid partition" in outcome.nodes[0].message
    assert cluster.primary_up  # started again on the way out


def test_a_node_that_never_registers_with_the_backup_fails_without_a_job() -> None:
    cluster = Cluster(node_state="IDLE*+NOT_RESPONDING")
    remote = cluster.remote()
    outcome = failover.takeover(context(remote))
    assert outcome.overall is Status.FAIL and "did not become usable" in outcome.nodes[0].message
    assert not remote.matching("srun") and cluster.primary_up


def test_a_backup_down_before_the_takeover_fails_without_touching_anything() -> None:
    remote = StubRemote(
        [("scontrol ping", CommandResult(0, BOTH_UP.stdout.replace(f"{GPU01} is UP", f"{GPU01} is DOWN"), ""))]
    )
    outcome = failover.takeover(context(remote))
    assert outcome.overall is Status.FAIL and GPU01 in outcome.message
    # It waited a little for the backup to answer (pings only), then touched nothing.
    assert remote.commands and set(remote.commands) == {"scontrol ping"}


def test_skipped_without_a_backup_controller() -> None:
    text = sandbox_spec_text(sandbox_layout("val", 2, 2, "10.213.0.0/24"))
    outcome = failover.takeover(context(StubRemote(), text=text))
    assert outcome.overall is Status.SKIP


def test_the_sandbox_spec_the_stubs_use_has_a_backup() -> None:
    loaded = load(SANDBOX_SPEC)
    assert loaded.topology is not None
    assert [node.name for node in loaded.topology.nodes if node.has(Role.BACKUP_CONTROLLER)] == [GPU01]


PRIMARY_ONLY = CommandResult(0, f"Slurmctld(primary) at {HEAD} is UP\nSlurmctld(backup) at {GPU01} is DOWN\n", "")


class HungBackup(Cluster):
    """Slurm 22.05's hang: the backup never comes back to standby after the hand-back until it is restarted."""

    def __init__(self) -> None:
        super().__init__()
        self.handed_back = self.backup_restarted = False

    def remote(self) -> StubRemote:
        return StubRemote(
            [
                ("systemctl restart slurmctld", self._restart),
                ("scontrol ping", self._ping),
                ("scontrol takeover", self._takeover),
                ("systemctl start slurmctld", self._start_hangs),
                ("srun", self.job),
                ("squeue", OK),
                ("show node", lambda _: CommandResult(0, f"NodeName={GPU01} Arch=x86_64 State=IDLE\n", "")),
            ]
        )

    def _ping(self, _: str) -> CommandResult:
        if not self.primary_up:
            return BACKUP_ONLY
        return PRIMARY_ONLY if self.handed_back and not self.backup_restarted else BOTH_UP

    def _start_hangs(self, command: str) -> CommandResult:
        self.handed_back = True
        return self._start(command)

    def _restart(self, _: str) -> CommandResult:
        self.backup_restarted = True
        return OK


def test_a_backup_that_hangs_handing_control_back_is_restarted_and_warned_about() -> None:
    cluster = HungBackup()
    remote = cluster.remote()
    outcome = failover.takeover(context(remote))
    assert outcome.overall is Status.WARN
    [restart] = remote.matching("systemctl restart slurmctld")
    # Killed and started again on the backup itself, through the controller's SSH trust.
    assert restart.startswith("ssh ") and GPU01 in restart and "systemctl kill --signal=KILL slurmctld" in restart
    warned = [row for row in outcome.nodes if row.status is Status.WARN]
    assert [row.node for row in warned] == [GPU01] and "a Slurm 22.05 bug" in warned[0].message
