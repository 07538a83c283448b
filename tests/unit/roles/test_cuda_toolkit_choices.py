"""The cuda_toolkit role's per-OS choices, rendered as Ansible renders them.

Which packages, repository, paths and profile script the role picks is data
(roles/cuda_toolkit/vars/<OS>.yml) plus the decisions in vars/main.yml. Here
they are rendered with Ansible's Templar for each OS the role supports, from
the facts test_nvidia_driver_choices records, the preflight asserts are
evaluated for what no OS allows, and the profile script is sourced by real
shells. No node and no NVIDIA repository are involved: this proves the
choices and the script, not that the packages install (nothing here reaches
developer.download.nvidia.com).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, default_group_vars, first_found_vars_file, first_refusal, role_templar
from test_nvidia_driver_choices import OSES, value

ROLE = "cuda_toolkit"
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos"

# The file tasks/main.yml's first_found loads on each OS (checked against the
# task itself below).
VARS_FILES = {
    "ubuntu22": "Ubuntu-22.yml",
    "ubuntu24": "Ubuntu-24.yml",
    "debian12": "Debian-12.yml",
    "debian13": "Debian-13.yml",
    "rocky9": "RedHat-9.yml",
}
# NVIDIA's repository names (debian13: unverified, see vars/Debian-13.yml).
REPO_NAMES = {
    "ubuntu22": "ubuntu2204",
    "ubuntu24": "ubuntu2404",
    "debian12": "debian12",
    "debian13": "debian13",
    "rocky9": "rhel9",
}
# What each distribution ships as its own toolkit (packages.debian.org, packages.ubuntu.com; trixie: the
# mirror's package index, nvidia-cuda-toolkit 12.4.131~12.4.1-2).
DISTRO_VERSIONS = {"debian12": "11.8", "debian13": "12.4", "ubuntu22": "11.5", "ubuntu24": "12.0"}
APT_OSES = ["ubuntu22", "ubuntu24", "debian12", "debian13"]


def templar(os_name: str, **inputs: Any) -> Templar:
    """The role with a spec at its defaults (the rendered group_vars), ``inputs`` set as a caller would."""
    return role_templar(ROLE, VARS_FILES[os_name], OSES[os_name], **{**default_group_vars(), **inputs})


def probe(
    stale_packages: list[str] | None = None, stale_files: list[str] | None = None, library_rc: int = 0
) -> dict[str, Any]:
    """A node_probe result: what is stale, and the driver library query's exit status."""
    return {
        "stale": {"packages": stale_packages or [], "files": stale_files or [], "units": [], "fstab": []},
        "found": {"commands": [{"rc": library_rc, "stdout": "", "stderr": ""}], "users": {}, "units": {}},
    }


def test_vars_files_are_the_ones_first_found_picks() -> None:
    assert set(VARS_FILES) == set(OSES)
    for os_name, expected in VARS_FILES.items():
        assert first_found_vars_file(ROLE, templar(os_name)) == expected, os_name


# NVIDIA's repository (auto) ---------------------------------------------------------------


@pytest.mark.parametrize("source", ["auto", "cuda_repo"])
@pytest.mark.parametrize("os_name", list(OSES))
def test_nvidias_repository_per_os(os_name: str, source: str) -> None:
    t = templar(os_name, cuda_toolkit_source=source, cuda_toolkit_version="12.6")
    assert value(t, "__cuda_toolkit_source") == "cuda_repo"
    assert value(t, "__cuda_toolkit_packages") == ["cuda-toolkit-12-6"]
    assert value(t, "__cuda_toolkit_cuda_repo.url") == f"{NVIDIA}/{REPO_NAMES[os_name]}/x86_64/"
    assert value(t, "__cuda_toolkit_home") == "/usr/local/cuda-12.6"
    assert value(t, "cuda_toolkit_profile") is True
    assert value(t, "__cuda_toolkit_profile_wanted") is True
    if os_name == "rocky9":
        assert value(t, "__cuda_toolkit_package_list") == ["cuda-toolkit-12-6"]
        assert value(t, "__cuda_toolkit_cuda_repo.repo_file") == "cuda-rhel9.repo"
        assert value(t, "__cuda_toolkit_cuda_repo_file") == "/etc/yum.repos.d/cuda-rhel9.repo"
    else:
        assert value(t, "__cuda_toolkit_package_list") == ["cuda-keyring", "cuda-toolkit-12-6"]
        assert value(t, "__cuda_toolkit_cuda_repo.keyring_file") == "cuda-keyring_1.1-1_all.deb"


@pytest.mark.parametrize(
    ("version", "package", "home"),
    [
        ("12.4", "cuda-toolkit-12-4", "/usr/local/cuda-12.4"),
        ("11.8", "cuda-toolkit-11-8", "/usr/local/cuda-11.8"),
        ("13.0", "cuda-toolkit-13-0", "/usr/local/cuda-13.0"),
    ],
)
def test_package_and_directory_follow_the_version(version: str, package: str, home: str) -> None:
    t = templar("ubuntu22", cuda_toolkit_version=version)
    assert value(t, "__cuda_toolkit_packages") == [package]
    assert value(t, "__cuda_toolkit_bin_dir") == f"{home}/bin"
    assert value(t, "__cuda_toolkit_lib_dir") == f"{home}/lib64"


@pytest.mark.parametrize("os_name", list(OSES))
def test_the_repository_is_the_one_nvidia_driver_adds(os_name: str) -> None:
    """Both roles install the same keyring from the same URL (or fetch the same .repo to the same path),
    so whichever runs second finds it installed and does nothing."""
    mine = templar(os_name)
    driver = role_templar(
        "nvidia_driver",
        VARS_FILES[os_name],
        OSES[os_name],
        **{**default_group_vars(), "nvidia_driver_source": "cuda_repo"},
    )
    assert value(mine, "__cuda_toolkit_cuda_repo.url") == value(driver, "__nvidia_driver_cuda_repo.url")
    if os_name == "rocky9":
        assert value(mine, "__cuda_toolkit_cuda_repo_file") == value(driver, "__nvidia_driver_cuda_repo_file")
    else:
        for key in ("keyring_package", "keyring_file"):
            assert value(mine, f"__cuda_toolkit_cuda_repo.{key}") == value(driver, f"__nvidia_driver_cuda_repo.{key}")


def test_grace_on_arm_uses_the_sbsa_repository() -> None:
    facts = {**OSES["ubuntu24"], "architecture": "aarch64"}
    t = role_templar(ROLE, "Ubuntu-24.yml", facts, **default_group_vars())
    assert value(t, "__cuda_toolkit_cuda_repo.url") == f"{NVIDIA}/ubuntu2404/sbsa/"


def test_the_default_is_the_specs_default_version() -> None:
    t = templar("debian12")
    assert value(t, "cuda_toolkit_version") == "12.4"
    assert value(t, "cuda_toolkit_source") == "auto"
    assert value(t, "__cuda_toolkit_package_list") == ["cuda-keyring", "cuda-toolkit-12-4"]


# The distributions' own toolkits ----------------------------------------------------------


@pytest.mark.parametrize("os_name", APT_OSES)
def test_distro_toolkit_where_the_os_ships_that_version(os_name: str) -> None:
    t = templar(os_name, cuda_toolkit_source="distro", cuda_toolkit_version=DISTRO_VERSIONS[os_name])
    assert value(t, "__cuda_toolkit_package_list") == ["nvidia-cuda-toolkit"]
    # nvcc is in /usr/bin already: no profile script, and an earlier one is removed.
    assert value(t, "__cuda_toolkit_home") == "/usr"
    assert value(t, "__cuda_toolkit_profile_wanted") is False
    assert value(t, "__cuda_toolkit_probe_files") == [{"path": "/etc/profile.d/gpuclus-cuda.sh", "state": "absent"}]
    # The probe asks whether the driver's libraries are installed (the distro toolkit depends on them).
    assert value(t, "__cuda_toolkit_probe_commands") == [["dpkg-query", "-S", "*/libcuda.so.1", "*/libnvidia-ml.so.1"]]
    assert refusals(os_name, cuda_toolkit_source="distro", cuda_toolkit_version=DISTRO_VERSIONS[os_name]) == []


@pytest.mark.parametrize("os_name", list(OSES))
def test_nvidias_repository_needs_no_driver_library_probe(os_name: str) -> None:
    t = templar(os_name, __cuda_toolkit_probe=probe(library_rc=1))
    assert value(t, "__cuda_toolkit_probe_commands") == []
    assert value(t, "__cuda_toolkit_driver_library_present") is True


def test_rocky_repo_file_is_probed_by_presence_only() -> None:
    # Presence only, as nvidia_driver does: neither role rewrites the file the other fetched.
    t = templar("rocky9", cuda_toolkit_profile=False)
    assert value(t, "__cuda_toolkit_probe_files") == [
        {"path": "/etc/profile.d/gpuclus-cuda.sh", "state": "absent"},
        {"path": "/etc/yum.repos.d/cuda-rhel9.repo"},
    ]


def test_profile_false_removes_the_script() -> None:
    t = templar("ubuntu24", cuda_toolkit_profile=False)
    assert value(t, "__cuda_toolkit_profile_wanted") is False
    assert value(t, "__cuda_toolkit_probe_files")[0] == {"path": "/etc/profile.d/gpuclus-cuda.sh", "state": "absent"}


# Never a driver ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "is_driver"),
    [
        ("cuda", True),
        ("cuda-12-4", True),
        ("cuda-runtime-12-4", True),
        ("cuda-drivers", True),
        ("cuda-drivers-550", True),
        ("nvidia-driver-550-server", True),
        ("nvidia-open-570", True),
        ("@nvidia-driver:550-open", True),
        ("libcuda1", True),
        ("libnvidia-compute-550", True),
        ("kmod-nvidia-open-dkms", True),
        ("cuda-toolkit-12-4", False),
        ("cuda-keyring", False),
        ("nvidia-cuda-toolkit", False),
    ],
)
def test_driver_names_are_recognised(name: str, is_driver: bool) -> None:
    t = templar("ubuntu22", __cuda_toolkit_packages=[name])
    assert value(t, "__cuda_toolkit_driver_names") == ([name] if is_driver else [])


# Rocky has no distro toolkit (refused, below).
@pytest.mark.parametrize(
    ("os_name", "source"), [(os_name, "cuda_repo") for os_name in OSES] + [(os_name, "distro") for os_name in APT_OSES]
)
def test_no_choice_names_a_driver(os_name: str, source: str) -> None:
    version = DISTRO_VERSIONS[os_name] if source == "distro" else "12.4"
    t = templar(os_name, cuda_toolkit_source=source, cuda_toolkit_version=version)
    packages = value(t, "__cuda_toolkit_package_list")
    assert packages and value(t, "__cuda_toolkit_driver_names") == []


def test_a_driver_in_the_package_list_is_refused() -> None:
    messages = refusals("debian12", __cuda_toolkit_repo_package="cuda-12-4")
    assert messages == [
        "The CUDA toolkit's package list names driver packages (cuda-12-4): this role installs toolkits only "
        "(cuda-toolkit-X-Y, never cuda, cuda-X-Y or cuda-runtime-X-Y); the driver comes from the nvidia_driver role."
    ]


# Refusals ---------------------------------------------------------------------------------


def preflight_asserts() -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROLES / ROLE / "tasks" / "preflight.yml").read_text())
    return [task for task in tasks if "ansible.builtin.assert" in task]


def refusals(os_name: str, **inputs: Any) -> list[str]:
    """The fail_msg of the first preflight assert that fails (Ansible stops there); the probe's answer
    defaults to a node where everything is missing and the driver's libraries are installed."""
    t = templar(os_name, **{"__cuda_toolkit_probe": probe(["cuda-keyring", "nvidia-cuda-toolkit"]), **inputs})
    return first_refusal(t, preflight_asserts())


@pytest.mark.parametrize("os_name", list(OSES))
def test_defaults_pass_preflight(os_name: str) -> None:
    assert refusals(os_name) == []


@pytest.mark.parametrize(
    ("os_name", "version"),
    [("debian12", "12.4"), ("debian13", "11.8"), ("debian13", "12.6"), ("ubuntu22", "11.8"), ("ubuntu24", "12.4")],
)
def test_distro_toolkit_of_another_version_is_refused(os_name: str, version: str) -> None:
    messages = refusals(os_name, cuda_toolkit_source="distro", cuda_toolkit_version=version)
    facts = OSES[os_name]
    assert messages == [
        f"{facts['distribution']} {facts['distribution_major_version']}'s own CUDA toolkit (nvidia-cuda-toolkit) "
        f"is {DISTRO_VERSIONS[os_name]}, not {version}: set cuda_toolkit_version to {DISTRO_VERSIONS[os_name]}, "
        "or cuda_toolkit_source to cuda_repo or auto (NVIDIA's repository)."
    ]


def test_debian13_distro_toolkit_is_the_default_version() -> None:
    # trixie's nvidia-cuda-toolkit is 12.4, the role's default: distro needs no version on Debian 13 only.
    t = templar("debian13", cuda_toolkit_source="distro")
    assert value(t, "__cuda_toolkit_version") == "12.4"
    assert value(t, "__cuda_toolkit_package_list") == ["nvidia-cuda-toolkit"]
    assert value(t, "__cuda_toolkit_home") == "/usr"
    assert refusals("debian13", cuda_toolkit_source="distro") == []
    # auto is still NVIDIA's repository there.
    assert value(templar("debian13"), "__cuda_toolkit_package_list") == ["cuda-keyring", "cuda-toolkit-12-4"]
    assert refusals("debian12", cuda_toolkit_source="distro") != []


def test_rocky_has_no_distro_toolkit() -> None:
    messages = refusals("rocky9", cuda_toolkit_source="distro")
    assert messages == ["Rocky 9 ships no CUDA toolkit of its own: set cuda_toolkit_source to cuda_repo or auto."]


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("cuda_toolkit_version", "12"),
        ("cuda_toolkit_version", "12.4.1"),
        ("cuda_toolkit_version", "12.4\n"),
        ("cuda_toolkit_version", "v12.4"),
        ("cuda_toolkit_version", "12-4"),
        ("cuda_toolkit_source", "conda"),
        ("cuda_toolkit_profile", "maybe"),
    ],
)
def test_bad_inputs_are_refused(name: str, bad: str) -> None:
    messages = refusals("debian12", **{name: bad})
    assert messages and f"{name} " in messages[0] and messages[0].startswith("cuda_toolkit_version must be")


# The distro toolkit and the driver's libraries --------------------------------------------


@pytest.mark.parametrize("os_name", ["debian12", "debian13"])
def test_distro_toolkit_without_the_drivers_libraries_is_refused(os_name: str) -> None:
    # Measured on bookworm: `apt-get -s install nvidia-cuda-toolkit` on a node without the driver
    # would install libcuda1, libnvidia-ml1, nvidia-alternative and nvidia-support with it (trixie:
    # assumed the same, unverified).
    messages = refusals(
        os_name,
        cuda_toolkit_source="distro",
        cuda_toolkit_version=DISTRO_VERSIONS[os_name],
        __cuda_toolkit_probe=probe(["nvidia-cuda-toolkit"], library_rc=1),
    )
    assert len(messages) == 1
    assert "depends on the driver's libcuda and NVML libraries" in messages[0]
    assert "Install the driver first (the nvidia_driver role)" in messages[0]


def test_distro_toolkit_already_installed_needs_no_library_check() -> None:
    assert (
        refusals(
            "ubuntu22",
            cuda_toolkit_source="distro",
            cuda_toolkit_version="11.5",
            __cuda_toolkit_probe=probe([], library_rc=1),
        )
        == []
    )


def test_check_mode_skips_the_distro_install_instead_of_refusing() -> None:
    inputs: dict[str, Any] = {
        "cuda_toolkit_source": "distro",
        "cuda_toolkit_version": "11.8",
        "ansible_check_mode": True,
        "__cuda_toolkit_probe": probe(["nvidia-cuda-toolkit"], library_rc=1),
    }
    assert refusals("debian12", **inputs) == []
    assert value(templar("debian12", **inputs), "__cuda_toolkit_check_mode_no_driver") is True


# Check mode on a fresh node ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("check_mode", "keyring", "repo", "skipped"),
    [
        (True, True, False, True),  # apt: the keyring "installed" in check mode is not there
        (True, False, True, True),  # dnf: the .repo file "written" in check mode is not there
        (True, False, False, False),  # the repository was there already: apt/dnf can answer
        (False, True, False, False),  # a real run installs the keyring first
    ],
)
def test_check_mode_new_source(check_mode: bool, keyring: bool, repo: bool, skipped: bool) -> None:
    t = templar(
        "ubuntu22",
        ansible_check_mode=check_mode,
        __cuda_toolkit_keyring_installed={"changed": keyring},
        __cuda_toolkit_repo_written={"changed": repo},
    )
    assert value(t, "__cuda_toolkit_check_mode_new_source") is skipped


def test_stale_toolkit_is_read_from_the_probe() -> None:
    stale = templar("debian12", __cuda_toolkit_probe=probe(["cuda-keyring", "cuda-toolkit-12-4"]))
    assert value(stale, "__cuda_toolkit_toolkit_stale") is True
    # Only the keyring missing (removed by hand): the toolkit step is not re-run for it.
    keyring_only = templar("debian12", __cuda_toolkit_probe=probe(["cuda-keyring"]))
    assert value(keyring_only, "__cuda_toolkit_toolkit_stale") is False


# The profile script -----------------------------------------------------------------------


def profile_text(version: str = "12.4") -> str:
    source = (ROLES / ROLE / "templates" / "etc" / "profile.d" / "gpuclus-cuda.sh.j2").read_text()
    return str(templar("debian12", cuda_toolkit_version=version).template(trust_as_template(source)))


# sh is dash on Debian; bash too, as many login shells are.
SHELLS = [shell for shell in ("sh", "bash") if shutil.which(shell)]


def source(shell: str, scripts: list[Path], env: dict[str, str], flags: str = "") -> tuple[str, str]:
    """PATH and LD_LIBRARY_PATH (or <unset>) as a child process sees them after sourcing the scripts in order."""
    dots = "; ".join(f'. "{script}"' for script in scripts)
    command = f"{flags} {dots}; exec /usr/bin/env".strip()
    result = subprocess.run([shell, "-c", command], env=env, capture_output=True, text=True, check=True)
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return seen["PATH"], seen.get("LD_LIBRARY_PATH", "<unset>")


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "gpuclus-cuda.sh"
    path.write_text(profile_text())
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_profile_sourced_twice_adds_each_entry_once(shell: str, profile: Path) -> None:
    path, libraries = source(shell, [profile, profile], {"PATH": "/usr/bin:/bin"})
    assert path == "/usr/local/cuda-12.4/bin:/usr/bin:/bin"
    # No empty entry from the unset variable: "lib64:" would add the current directory.
    assert libraries == "/usr/local/cuda-12.4/lib64"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", "/usr/local/cuda-12.4/lib64"),
        ("/opt/site/lib", "/usr/local/cuda-12.4/lib64:/opt/site/lib"),
        ("/opt/site/lib:/usr/local/cuda-12.4/lib64", "/opt/site/lib:/usr/local/cuda-12.4/lib64"),
    ],
)
def test_profile_keeps_what_ld_library_path_had(shell: str, profile: Path, before: str, after: str) -> None:
    _, libraries = source(shell, [profile, profile], {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": before})
    assert libraries == after


@pytest.mark.parametrize("shell", SHELLS)
def test_profile_works_under_set_u(shell: str, profile: Path) -> None:
    # A login shell with nounset and no LD_LIBRARY_PATH must not abort on the script.
    path, libraries = source(shell, [profile], {"PATH": "/usr/bin:/bin"}, flags="set -u;")
    assert path.startswith("/usr/local/cuda-12.4/bin:") and libraries == "/usr/local/cuda-12.4/lib64"


def test_two_versions_side_by_side(tmp_path: Path) -> None:
    older, newer = tmp_path / "a.sh", tmp_path / "b.sh"
    older.write_text(profile_text("12.4"))
    newer.write_text(profile_text("12.6"))
    path, libraries = source("sh", [older, newer, older], {"PATH": "/usr/bin"})
    assert path == "/usr/local/cuda-12.6/bin:/usr/local/cuda-12.4/bin:/usr/bin"
    assert libraries == "/usr/local/cuda-12.6/lib64:/usr/local/cuda-12.4/lib64"


def test_profile_text_is_managed_and_versioned() -> None:
    text = profile_text("12.4")
    assert text.startswith("# managed by gpuclus — edits are overwritten\n")
    assert "/usr/local/cuda/" not in text  # the versioned directory, never the moving link
    assert text.count("/usr/local/cuda-12.4/bin") == 2 and text.count("/usr/local/cuda-12.4/lib64") == 2
