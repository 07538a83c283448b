"""Which deploy phases a spec needs (and why), and --only / --skip."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuclus.deploy.phases import (
    ORDER,
    WHAT,
    Phase,
    PhaseChoice,
    parse_phase_list,
    playbook_file,
    select_phases,
    wanted_phases,
)
from gpuclus.errors import ExitCode, UsageError
from gpuclus.spec.load import load_spec_text

ALL = [phase.value for phase in Phase]
PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"


def test_site_yml_imports_every_phase_in_deploy_order() -> None:
    # site.yml stays a plain playbook (run by hand it runs every phase); it must list the one phase list.
    plays = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
    imported = [play["ansible.builtin.import_playbook"] for play in plays]
    assert imported == ["preflight.yml", *(playbook_file(phase) for phase in ORDER), "stamp.yml"]
    for play, phase in zip(plays[1:-1], ORDER, strict=True):
        assert play["name"].lower().startswith(f"{phase.value} phase"), play["name"]
    assert all((PLAYBOOKS / name).is_file() for name in imported)


def test_every_phase_says_what_it_sets_up() -> None:
    assert list(WHAT) == list(ORDER)


def spec_text(extra: str = "", *, gpus: str | None = "{count: 2}", exports: bool = True) -> str:
    head_roles = "[controller, nfs_server, monitoring, login]" if exports else "[controller, monitoring, login]"
    gpu_key = f", gpus: {gpus}" if gpus is not None else ""
    return (
        "apiVersion: gpuclus/v1\n"
        "cluster: {name: lab, admin_user: ubuntu}\n"
        "nodes:\n"
        f"  - {{name: head, address: 10.0.0.10, roles: {head_roles}}}\n"
        f'  - {{name: "gpu[01-02]", address: "10.0.0.[11-12]", roles: [compute]{gpu_key}}}\n'
        + ("nfs: {exports: [/home]}\n" if exports else "")
        + extra
    )


SANDBOX = spec_text("nvidia: {driver: {install: false}, cuda: {install: false}}\n", gpus="{count: 2, fake: true}")
NO_INSTALL = "nvidia: {driver: {install: false}, cuda: {install: false}}\n"
# Enroot and Pyxis default to off; on, they need a source (downloads-unverified otherwise).
CONTAINERS_ON = "containers: {enroot: true, pyxis: true, allow_unverified_downloads: true}\n"
PYTORCH_ON = "modules: {lmod: true}\npytorch: {install: true}\n"


def choices(text: str) -> tuple[list[PhaseChoice], list[PhaseChoice]]:
    loaded = load_spec_text(text)
    assert loaded.ok, loaded.findings
    assert loaded.spec is not None and loaded.topology is not None
    return wanted_phases(loaded.spec, loaded.topology)


def names(found: list[PhaseChoice]) -> list[str]:
    return [choice.phase.value for choice in found]


def reasons(found: list[PhaseChoice]) -> dict[str, str]:
    return {choice.phase.value: choice.reason for choice in found}


def test_order_is_the_deploy_order() -> None:
    assert [phase.value for phase in ORDER] == [
        "base",
        "nfs",
        "nvidia",
        "slurm",
        "users",
        "containers",
        "pytorch",
        "monitoring",
    ]


# wanted_phases -----------------------------------------------------------------------


def test_sandbox_like_spec_has_no_nvidia_phase() -> None:
    run, skip = choices(SANDBOX)
    assert names(run) == ["base", "nfs", "slurm", "monitoring"]
    assert names(skip) == ["nvidia", "users", "containers", "pytorch"]
    assert reasons(skip)["nvidia"] == "no real GPUs (none declared, or all fake)"


def test_fake_gpus_skip_nvidia_even_with_install_on() -> None:
    # fake-gpus-with-driver is a warning, so such a spec still deploys: without the nvidia phase.
    run, skip = choices(spec_text(gpus="{count: 2, fake: true}"))
    assert "nvidia" not in names(run)
    assert names(skip) == ["nvidia", "users", "containers", "pytorch"]


def test_real_gpus_with_install_run_nvidia() -> None:
    run, skip = choices(spec_text(CONTAINERS_ON + PYTORCH_ON))
    assert names(run) == [phase for phase in ALL if phase != "users"]
    assert names(skip) == ["users"]
    assert reasons(run) == {
        "base": "always: hosts, time, packages, SSH trust",
        "nfs": "nfs.exports is set",
        "nvidia": "real GPUs and nvidia.*.install",
        "slurm": "always: munge, slurmctld, slurmd, accounting",
        "containers": "containers.enroot/pyxis",
        "pytorch": "pytorch.install / modules.lmod",
        "monitoring": "monitoring on",
    }


def test_cuda_alone_is_enough_for_nvidia() -> None:
    run, _ = choices(spec_text("nvidia: {driver: {install: false}, cuda: {install: true}}\n"))
    assert "nvidia" in names(run)


def test_real_gpus_without_install_skip_nvidia() -> None:
    run, skip = choices(spec_text(NO_INSTALL))
    assert "nvidia" not in names(run)
    assert names(skip) == ["nvidia", "users", "containers", "pytorch"]


def test_real_gpus_without_install_say_why_nvidia_is_skipped() -> None:
    _, skip = choices(spec_text(NO_INSTALL))
    run, _ = choices(spec_text())
    assert reasons(skip)["nvidia"] != reasons(run)["nvidia"]
    assert "install" in reasons(skip)["nvidia"]


def test_no_gpus_at_all_skip_nvidia() -> None:
    _, skip = choices(spec_text(gpus=None))
    assert reasons(skip) == {
        "users": "no users.file",
        "nvidia": "no real GPUs (none declared, or all fake)",
        "containers": "containers off",
        "pytorch": "pytorch and modules off",
    }


@pytest.mark.parametrize(
    ("containers", "wanted"),
    [
        ("{enroot: false, pyxis: false}", False),
        ("{enroot: true, pyxis: false, allow_unverified_downloads: true}", True),
        ("{enroot: true, pyxis: true, allow_unverified_downloads: true}", True),
        (None, False),  # the section left out: both default to off
    ],
)
def test_containers_phase(containers: str | None, wanted: bool) -> None:
    run, skip = choices(spec_text(f"containers: {containers}\n" if containers is not None else ""))
    assert ("containers" in names(run)) is wanted
    if not wanted:
        assert reasons(skip)["containers"] == "containers off"


@pytest.mark.parametrize(
    ("monitoring", "wanted"),
    [
        ("{prometheus: false, grafana: false}", False),
        ("{prometheus: true, grafana: false}", True),
        ("{prometheus: true, grafana: true, alertmanager: true}", True),
    ],
)
def test_monitoring_phase(monitoring: str, wanted: bool) -> None:
    run, skip = choices(spec_text(f"monitoring: {monitoring}\n"))
    assert ("monitoring" in names(run)) is wanted
    if not wanted:
        assert reasons(skip)["monitoring"] == "monitoring off"


def test_no_exports_no_nfs() -> None:
    run, skip = choices(spec_text(exports=False))
    assert "nfs" not in names(run)
    assert reasons(skip)["nfs"] == "no nfs.exports"


def test_slurm_reason_without_accounting() -> None:
    run, _ = choices(spec_text("slurm: {accounting: false}\n"))
    assert reasons(run)["slurm"] == "always: munge, slurmctld, slurmd"


def test_everything_off_keeps_base_and_slurm() -> None:
    run, skip = choices(
        spec_text(
            NO_INSTALL + "containers: {enroot: false, pyxis: false}\nmonitoring: {prometheus: false, grafana: false}\n",
            exports=False,
        )
    )
    assert names(run) == ["base", "slurm"]
    assert names(skip) == ["nfs", "nvidia", "users", "containers", "pytorch", "monitoring"]


# parse_phase_list ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, set()),
        ("", set()),
        ("base", {Phase.BASE}),
        ("slurm,base", {Phase.SLURM, Phase.BASE}),
        (" nfs , monitoring ", {Phase.NFS, Phase.MONITORING}),
        ("base,base", {Phase.BASE}),
    ],
)
def test_parse_phase_list(text: str | None, expected: set[Phase]) -> None:
    assert parse_phase_list(text, "--only") == expected


@pytest.mark.parametrize(
    ("text", "bad"), [("bogus", "bogus"), ("base,Slurm", "Slurm"), ("base,", ""), ("nvidia,gpu", "gpu")]
)
def test_parse_phase_list_errors(text: str, bad: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_phase_list(text, "--skip")
    assert caught.value.message == f"--skip {bad!r} is not a phase"
    assert caught.value.hint == "phases: base, nfs, nvidia, slurm, users, containers, pytorch, monitoring"
    assert caught.value.exit_code == ExitCode.USAGE


# select_phases ------------------------------------------------------------------------


@pytest.fixture
def sandbox_phases() -> list[PhaseChoice]:
    return choices(SANDBOX)[0]


def test_select_everything_by_default(sandbox_phases: list[PhaseChoice]) -> None:
    assert select_phases(sandbox_phases, set(), set()) == [
        Phase.BASE,
        Phase.NFS,
        Phase.SLURM,
        Phase.MONITORING,
    ]


def test_select_only_keeps_deploy_order(sandbox_phases: list[PhaseChoice]) -> None:
    assert select_phases(sandbox_phases, {Phase.MONITORING, Phase.BASE}, set()) == [Phase.BASE, Phase.MONITORING]


def test_select_skip(sandbox_phases: list[PhaseChoice]) -> None:
    assert select_phases(sandbox_phases, set(), {Phase.MONITORING, Phase.NFS}) == [Phase.BASE, Phase.SLURM]


def test_skipping_an_unneeded_phase_is_fine(sandbox_phases: list[PhaseChoice]) -> None:
    assert Phase.NVIDIA not in select_phases(sandbox_phases, set(), {Phase.NVIDIA})


def test_only_and_skip_together(sandbox_phases: list[PhaseChoice]) -> None:
    with pytest.raises(UsageError, match="--only and --skip cannot be used together"):
        select_phases(sandbox_phases, {Phase.BASE}, {Phase.SLURM})


def test_only_an_unneeded_phase(sandbox_phases: list[PhaseChoice]) -> None:
    with pytest.raises(UsageError) as caught:
        select_phases(sandbox_phases, {Phase.NVIDIA, Phase.BASE}, set())
    assert caught.value.message == "--only nvidia: the spec does not use that phase"
    assert caught.value.hint is not None and "gpuclus deploy --help" in caught.value.hint


def test_a_users_file_runs_the_users_phase_after_slurm(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("apiVersion: gpuclus/v1\nkind: Users\naccounts: [{name: lab}]\nusers: []\n")
    loaded = load_spec_text(spec_text(f"users: {{file: {users}}}\n"))
    assert loaded.ok and loaded.spec is not None and loaded.topology is not None
    assert loaded.users is not None and loaded.users.accounts[0].name == "lab"
    run, _skip = wanted_phases(loaded.spec, loaded.topology)
    order = names(run)
    assert order.index("users") == order.index("slurm") + 1
    assert reasons(run)["users"] == "users.file is set"
