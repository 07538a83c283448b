"""Job hygiene: each job's own /tmp (slurm_common) and the epilog that clears up after it (slurm_hygiene).

slurm.conf and job_container.conf are rendered with Ansible's own templating
from rendered group_vars (tests/unit/role_templates.py). The epilog is
rendered the same way and run as slurmd runs it (root, SLURM_JOB_* in its
environment) against real processes of a UID of its own and real directories;
only Slurm's `scontrol listpids` (no slurmd here) and `logger` (no journal)
are stand-ins on PATH. The sandbox runs it for real:
tests/integration/test_cluster_users.py.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, first_refusal, group_vars, render, role_variables
from spec_samples import BASE
from test_slurm_conf_hooks import slurm_conf as hooks_slurm_conf

from gpuclus.render import render_files
from gpuclus.spec.load import load_spec_text

EPILOG_TEMPLATE = "etc/slurm/epilog.d/gpuclus-job-hygiene.j2"
# A UID no account of this host has: every process of it is one this module started.
STRAY_UID = 47321
NOT_ROOT = "starting processes as another UID and ending them takes root (CI runs as root)"


def inventory_for(**slurm: Any) -> dict[str, Any]:
    spec = yaml.safe_load(yaml.safe_dump(BASE))
    spec.setdefault("slurm", {}).update(slurm)
    loaded = load_spec_text(yaml.safe_dump(spec))
    assert loaded.spec is not None and loaded.topology is not None, loaded.findings
    files = render_files(loaded.spec, loaded.topology, source_name="cluster.yaml", state_dir="x", known_hosts="/k")
    return group_vars(files)


@pytest.fixture(scope="module")
def inventory() -> dict[str, Any]:
    return inventory_for()


def slurm_facts(version: str) -> dict[str, Any]:
    return {"__slurm_common_facts": {"slurm": {"version": version}}}


def slurm_conf(inventory: dict[str, Any], version: str = "22.05.8", **extra: Any) -> dict[str, str]:
    """slurm.conf's settings as slurm_common renders them on a node whose Slurm is ``version``."""
    return hooks_slurm_conf(inventory, **slurm_facts(version), **extra)


def common_templar(inventory: dict[str, Any], **extra: Any) -> Templar:
    variables = role_variables("slurm_common", inventory, "head", {"role_path": str(ROLES / "slurm_common"), **extra})
    return Templar(loader=DataLoader(), variables=variables)


# ---------------------------------------------------------------------------
# Each job's own /tmp and /dev/shm: slurm.conf and job_container.conf
# ---------------------------------------------------------------------------


def test_by_default_each_job_gets_its_own_tmp_with_the_extern_step_it_needs(inventory: dict[str, Any]) -> None:
    assert inventory["gpuclus_slurm_job_tmp"] == "private"
    settings = slurm_conf(inventory)
    assert settings["JobContainerType"] == "job_container/tmpfs"
    assert settings["PrologFlags"] == "Contain"
    assert "NamespaceType" not in settings


@pytest.mark.parametrize("version", ["25.11.7", "26.05.3"])
def test_slurm_from_25_11_names_the_plugin_namespace_tmpfs(inventory: dict[str, Any], version: str) -> None:
    # Slurm 25.11's release notes: job_container/tmpfs became namespace/tmpfs (NamespaceType=), same file.
    settings = slurm_conf(inventory, version)
    assert settings["NamespaceType"] == "namespace/tmpfs"
    assert "JobContainerType" not in settings


@pytest.mark.parametrize("version", ["22.05.8", "24.11.5", "25.05.3"])
def test_slurm_before_25_11_keeps_job_container_tmpfs(inventory: dict[str, Any], version: str) -> None:
    assert slurm_conf(inventory, version)["JobContainerType"] == "job_container/tmpfs"


def test_shared_tmp_writes_no_plugin_and_open_ssh_with_it_no_extern_step() -> None:
    shared = inventory_for(job_tmp="shared")
    settings = slurm_conf(shared)
    assert "JobContainerType" not in settings and "NamespaceType" not in settings
    # Login containment still wants the extern step.
    assert settings["PrologFlags"] == "Contain"
    neither = slurm_conf(inventory_for(job_tmp="shared", compute_ssh="open"))
    assert "PrologFlags" not in neither
    # A private /tmp alone needs it too.
    assert slurm_conf(inventory_for(compute_ssh="open"))["PrologFlags"] == "Contain"


def test_a_change_of_the_plugin_restarts_the_daemons(inventory: dict[str, Any]) -> None:
    pattern = str(common_templar(inventory).template(trust_as_template("{{ __slurm_common_restart_pattern }}")))
    assert re.match(pattern, "JobContainerType=job_container/tmpfs")
    assert re.match(pattern, "NamespaceType=namespace/tmpfs")


def test_job_container_conf_makes_the_directories_under_a_local_base_path(inventory: dict[str, Any]) -> None:
    text = render("slurm_common", "etc/slurm/job_container.conf.j2", inventory, "gpu01", **slurm_facts("22.05.8"))
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == ["AutoBasePath=true", "BasePath=/var/lib/slurm/job-tmp"]
    assert "JobContainerType=job_container/tmpfs" in text
    newer = render("slurm_common", "etc/slurm/job_container.conf.j2", inventory, "gpu01", **slurm_facts("25.11.7"))
    assert "NamespaceType=namespace/tmpfs" in newer


def preflight_refusal(inventory: dict[str, Any], **extra: Any) -> list[str]:
    tasks = yaml.safe_load((ROLES / "slurm_common" / "tasks" / "preflight.yml").read_text())
    asserts = [task for task in tasks if task.get("name") == "Check the private /tmp settings"]
    assert len(asserts) == 1
    return first_refusal(common_templar(inventory, **extra), asserts)


@pytest.mark.parametrize(
    "extra",
    [
        {"slurm_common_job_tmp_base": "/tmp/jobs"},
        {"slurm_common_job_tmp_base": "/dev/shm"},
        {"slurm_common_job_tmp_base": "/var/lib/x\nBasePath=/etc"},
        {"slurm_common_job_tmp_base": "relative/path"},
        {"slurm_common_job_tmp": "tmpfs"},
        {"slurm_common_prolog_contain": False},
    ],
    ids=["under-tmp", "dev-shm", "newline", "relative", "unknown-choice", "no-extern-step"],
)
def test_preflight_refuses_a_private_tmp_it_cannot_write(inventory: dict[str, Any], extra: dict[str, Any]) -> None:
    refusal = preflight_refusal(inventory, **extra)
    assert refusal and "slurm_common_job_tmp" in refusal[0], refusal


def test_preflight_passes_the_defaults_and_shared_without_the_extern_step(inventory: dict[str, Any]) -> None:
    assert preflight_refusal(inventory) == []
    assert preflight_refusal(inventory, slurm_common_job_tmp="shared", slurm_common_prolog_contain=False) == []


def test_the_spec_refuses_an_unknown_job_tmp_naming_its_line() -> None:
    spec = yaml.safe_load(yaml.safe_dump(BASE))
    spec["slurm"] = {"job_tmp": "tmpfs"}
    loaded = load_spec_text(yaml.safe_dump(spec), "/lab/cluster.yaml")
    assert not loaded.ok
    [finding] = loaded.findings
    assert (finding.loc, finding.line, finding.source_line) == (("slurm", "job_tmp"), 40, "  job_tmp: tmpfs")
    assert finding.message == "'tmpfs' is not one of: private or shared"


# ---------------------------------------------------------------------------
# The epilog, run as slurmd runs it
# ---------------------------------------------------------------------------


def epilog_text(inventory: dict[str, Any], host: str = "gpu01", **extra: Any) -> str:
    return render("slurm_hygiene", EPILOG_TEMPLATE, inventory, host, **extra)


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    """A node's places for one epilog run: the Enroot data root, Pyxis' runtime path, stand-ins on PATH."""
    places = {name: tmp_path / name for name in ("data", "pyxis", "bin")}
    for path in places.values():
        path.mkdir()
    places["listpids"] = tmp_path / "listpids.txt"
    places["log"] = tmp_path / "logger.txt"
    # scontrol listpids as Slurm 22.05 answers (seen on the sandbox): the header and one line per
    # process of a job on the node; with no job the header, "No job steps exist on this node." and exit 1.
    places["listpids"].write_text("PID      JOBID    STEPID   LOCALID GLOBALID\n")
    stand_in(
        places["bin"] / "scontrol",
        f'[ "$1" = listpids ] || exit 1\ncat {places["listpids"]}\n'
        f'[ "$(wc -l < {places["listpids"]})" -gt 1 ] && exit 0\n'
        'echo "No job steps exist on this node." >&2\nexit 1\n',
    )
    stand_in(places["bin"] / "logger", f'shift 3; echo "$*" >> {places["log"]}\n')
    return places


def stand_in(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run_epilog(
    inventory: dict[str, Any],
    node: dict[str, Path],
    *,
    job: str = "77",
    uid: int = STRAY_UID,
    user: str = "ghost",
    **extra: Any,
) -> str:
    """Render the epilog for this node's places, run it with slurmd's SLURM_JOB_* variables; its log."""
    text = epilog_text(
        inventory,
        slurm_hygiene_enroot_data_root=str(node["data"]),
        slurm_hygiene_pyxis_runtime_path=str(node["pyxis"]),
        **extra,
    )
    program = node["bin"].parent / "50-gpuclus-job-hygiene"
    program.write_text(text)
    program.chmod(0o755)
    environment = {
        "PATH": f"{node['bin']}:/usr/bin:/bin",
        "SLURM_JOB_ID": job,
        "SLURM_JOB_UID": str(uid),
        "SLURM_JOB_USER": user,
    }
    done = subprocess.run([str(program)], env=environment, capture_output=True, text=True, timeout=30, check=False)
    # A failing epilog drains the node: it exits 0 whatever happened, and says nothing on its outputs.
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done
    return node["log"].read_text() if node["log"].exists() else ""


def test_the_epilog_is_valid_shell_in_both_forms(inventory: dict[str, Any], tmp_path: Path) -> None:
    for strays in (True, False):
        program = tmp_path / f"epilog-{strays}"
        program.write_text(epilog_text(inventory, slurm_hygiene_end_strays=strays))
        checked = subprocess.run(["bash", "-n", str(program)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stderr
        if shutil.which("shellcheck"):
            linted = subprocess.run(["shellcheck", str(program)], capture_output=True, text=True, check=False)
            assert linted.returncode == 0, linted.stdout


def test_the_jobs_leftover_containers_and_images_go_and_every_other_stays(
    inventory: dict[str, Any], node: dict[str, Path], tmp_path: Path
) -> None:
    data = node["data"] / f"user-{STRAY_UID}"
    gone = ["pyxis_77.0", "pyxis_77.4294967294", "pyxis_77_train"]
    # Another job's (770 starts like 77), a global-scope container the user named, another user's.
    kept = ["pyxis_770.0", "pyxis_78.0", "pyxis_77", "pyxis_train", "pyxis_770_train"]
    for name in gone + kept:
        (data / name / "usr").mkdir(parents=True)
    (node["data"] / "user-1001" / "pyxis_77.0").mkdir(parents=True)
    # A link named like the job's container is not followed out of the data root.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    (data / "pyxis_77.9").symlink_to(outside)
    images = node["pyxis"] / str(STRAY_UID)
    images.mkdir()
    for image in ("77.0.squashfs", "77.3.squashfs", "770.0.squashfs", "78.0.squashfs"):
        (images / image).write_text("sqsh")

    log = run_epilog(inventory, node, slurm_hygiene_end_strays=False)

    assert sorted(path.name for path in data.iterdir()) == sorted([*kept, "pyxis_77.9"])
    assert (outside / "precious").read_text() == "x"
    assert (node["data"] / "user-1001" / "pyxis_77.0").is_dir()
    assert sorted(path.name for path in images.iterdir()) == ["770.0.squashfs", "78.0.squashfs"]
    for name in gone:
        assert f"job 77 (ghost): removed the Enroot container {name}" in log
    assert "removed the image 77.0.squashfs" in log and "removed the image 77.3.squashfs" in log


@pytest.mark.parametrize(
    ("job", "uid"),
    [("77; touch /tmp/x", str(STRAY_UID)), ("", str(STRAY_UID)), ("77", "0 -o"), ("77", ""), ("*", "*")],
    ids=["job-with-shell", "no-job", "uid-with-words", "no-uid", "globs"],
)
def test_an_epilog_without_a_plain_job_and_uid_does_nothing(
    inventory: dict[str, Any], node: dict[str, Path], job: str, uid: str
) -> None:
    container = node["data"] / f"user-{STRAY_UID}" / "pyxis_77.0"
    container.mkdir(parents=True)
    program = node["bin"].parent / "epilog"
    program.write_text(
        epilog_text(
            inventory,
            slurm_hygiene_enroot_data_root=str(node["data"]),
            slurm_hygiene_pyxis_runtime_path=str(node["pyxis"]),
        )
    )
    environment = {"PATH": f"{node['bin']}:/usr/bin:/bin", "SLURM_JOB_ID": job, "SLURM_JOB_UID": uid}
    done = subprocess.run(["bash", str(program)], env=environment, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert container.is_dir()
    assert not node["log"].exists()


@pytest.fixture
def stray() -> Iterator[subprocess.Popen[bytes]]:
    """A process of STRAY_UID, as a user's leftover is: outside any job."""
    if os.geteuid() != 0:
        pytest.skip(NOT_ROOT)
    process = subprocess.Popen(
        ["setpriv", f"--reuid={STRAY_UID}", f"--regid={STRAY_UID}", "--clear-groups", "sleep", "300"]
    )
    deadline = time.monotonic() + 10
    while _uid_of(process.pid) != STRAY_UID:
        assert time.monotonic() < deadline, "the stray never took its UID"
        time.sleep(0.05)
    yield process
    process.kill()
    process.wait()


def _uid_of(pid: int) -> int | None:
    try:
        return Path(f"/proc/{pid}").stat().st_uid
    except FileNotFoundError:
        return None


def ended(process: subprocess.Popen[bytes]) -> bool:
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_a_user_with_no_job_left_on_the_node_loses_every_process(
    inventory: dict[str, Any], node: dict[str, Path], stray: subprocess.Popen[bytes]
) -> None:
    log = run_epilog(inventory, node, slurm_hygiene_end_strays=True)
    assert ended(stray), "the user's process outlived their last job"
    assert stray.returncode == -9
    assert f"job 77 (ghost): ended the processes left outside any job: {stray.pid}" in log


def test_a_user_with_another_job_on_the_node_keeps_their_processes(
    inventory: dict[str, Any], node: dict[str, Path], stray: subprocess.Popen[bytes]
) -> None:
    # Another job of theirs still runs here: one of its processes is theirs.
    with node["listpids"].open("a") as listing:
        listing.write(f"-1       78       extern   0       0\n{stray.pid}      78       extern   -       -\n")
    assert run_epilog(inventory, node, slurm_hygiene_end_strays=True) == ""
    assert not ended(stray)


def test_a_process_of_another_users_job_does_not_keep_the_users_strays(
    inventory: dict[str, Any], node: dict[str, Path], stray: subprocess.Popen[bytes]
) -> None:
    with node["listpids"].open("a") as listing:
        listing.write(f"{os.getpid()}      79       batch    0       0\n")
    run_epilog(inventory, node, slurm_hygiene_end_strays=True)
    assert ended(stray)


NEVER_ENDED = {
    "off": {"slurm_hygiene_end_strays": False},  # slurm.compute_ssh: open, or a login node
    "exempt": {"slurm_hygiene_end_strays": True, "slurm_hygiene_exempt_users": ["root", "ghost"]},  # an admin
    "system-uid": {"slurm_hygiene_end_strays": True, "slurm_hygiene_min_uid": STRAY_UID + 1},
}


@pytest.mark.parametrize("case", sorted(NEVER_ENDED))
def test_these_users_processes_are_never_ended(
    inventory: dict[str, Any], node: dict[str, Path], stray: subprocess.Popen[bytes], case: str
) -> None:
    run_epilog(inventory, node, **NEVER_ENDED[case])
    assert not ended(stray), case


def test_without_the_users_name_nothing_is_ended(
    inventory: dict[str, Any], node: dict[str, Path], stray: subprocess.Popen[bytes]
) -> None:
    # The exempt list holds names: an epilog without SLURM_JOB_USER cannot tell an admin's processes.
    run_epilog(inventory, node, user="", slurm_hygiene_end_strays=True)
    assert not ended(stray)


def test_without_an_answer_from_slurmd_nothing_is_ended_and_that_is_logged(
    inventory: dict[str, Any], node: dict[str, Path], stray: subprocess.Popen[bytes]
) -> None:
    stand_in(node["bin"] / "scontrol", "echo 'slurm_load_node error' >&2; exit 1\n")
    log = run_epilog(inventory, node, slurm_hygiene_end_strays=True)
    assert not ended(stray)
    assert "scontrol listpids failed: left the user's processes alone" in log


def test_gpuclus_ends_strays_only_where_logins_are_contained() -> None:
    def end_strays(inv: dict[str, Any], host: str, groups: dict[str, list[str]]) -> bool:
        variables = role_variables("slurm_hygiene", inv, host, {"groups": groups})
        return bool(
            Templar(loader=DataLoader(), variables=variables).template(
                trust_as_template("{{ slurm_hygiene_end_strays | bool }}")
            )
        )

    contained = inventory_for()
    assert end_strays(contained, "gpu01", {"login": ["head"]})
    # A compute node that is also a login node: its users' sessions are theirs.
    assert not end_strays(contained, "head", {"login": ["head"]})
    assert not end_strays(inventory_for(compute_ssh="open"), "gpu01", {"login": ["head"]})


def test_the_admins_are_exempt(inventory: dict[str, Any]) -> None:
    variables = role_variables("slurm_hygiene", inventory, "gpu01", {})
    exempt = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template("{{ slurm_hygiene_exempt_users }}")
    )
    assert exempt[:2] == ["root", inventory["gpuclus_admin_user"]]
