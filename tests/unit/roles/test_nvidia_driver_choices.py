"""The nvidia_driver role's per-OS choices, rendered as Ansible renders them.

Which source, kernel module flavour, packages, hold command and kernel headers
the role picks is data (roles/nvidia_driver/vars/<OS>.yml) plus the decisions in
vars/main.yml. Here they are rendered with Ansible's Templar for each OS the
role supports (facts as Ansible reports them) and each GPU the issue names, and
the preflight asserts are evaluated for the combinations no OS or GPU allows.
No node is involved: what this proves is the choice, not that the packages
install (Debian 12 is installed for real by the molecule scenario; the others,
Debian 13 included, only on paper).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, default_group_vars, first_found_vars_file, first_refusal, role_templar

from gpuclus.gpu_catalog import kind_for_model

ROLE = "nvidia_driver"

# Facts as `ansible -m setup` reports them on each OS (kernel: a stock one).
OSES: dict[str, dict[str, str]] = {
    "ubuntu22": {
        "distribution": "Ubuntu",
        "distribution_major_version": "22",
        "distribution_version": "22.04",
        "os_family": "Debian",
        "kernel": "5.15.0-131-generic",
    },
    "ubuntu24": {
        "distribution": "Ubuntu",
        "distribution_major_version": "24",
        "distribution_version": "24.04",
        "os_family": "Debian",
        "kernel": "6.8.0-52-generic",
    },
    "debian12": {
        "distribution": "Debian",
        "distribution_major_version": "12",
        "distribution_version": "12.9",
        "os_family": "Debian",
        "kernel": "6.1.0-31-amd64",
    },
    "debian13": {
        "distribution": "Debian",
        "distribution_major_version": "13",
        "distribution_version": "13.2",
        "os_family": "Debian",
        "kernel": "6.12.57+deb13-amd64",
    },
    "rocky9": {
        "distribution": "Rocky",
        "distribution_major_version": "9",
        "distribution_version": "9.5",
        "os_family": "RedHat",
        "kernel": "5.14.0-503.14.1.el9_5.x86_64",
    },
}

# The file tasks/main.yml's first_found loads on each OS (checked against the task below).
VARS_FILES = {
    "ubuntu22": "Ubuntu-22.yml",
    "ubuntu24": "Ubuntu-24.yml",
    "debian12": "Debian-12.yml",
    "debian13": "Debian-13.yml",
    "rocky9": "RedHat-9.yml",
}
# Each Debian release's own driver: its only branch, its suites (packages.debian.org / the mirror's index).
DEBIAN_DRIVER = {"debian12": ("535", "bookworm"), "debian13": ("550", "trixie")}

# GPU model -> (generation preflight reports, a branch that drives it).
# B200 needs 570 or newer (Blackwell); the others take the default 550.
GPUS: dict[str, tuple[str, str]] = {
    "V100": ("volta", "550"),
    "A100": ("ampere", "550"),
    "H100": ("hopper", "550"),
    "B200": ("blackwell", "570"),
    "RTX 4090": ("ada", "550"),
}


def vars_file(facts: dict[str, str]) -> str:
    """The file tasks/main.yml's first_found picks for these facts."""
    candidates = [
        f"{facts['distribution']}-{facts['distribution_major_version']}.yml",
        f"{facts['os_family']}-{facts['distribution_major_version']}.yml",
    ]
    return next(name for name in candidates if (ROLES / ROLE / "vars" / name).exists())


def templar(os_name: str, **inputs: Any) -> Templar:
    """The role on gpu01 of a spec at its defaults (the rendered group_vars), with ``inputs`` set as a caller
    sets the role's variables."""
    facts = OSES[os_name]
    return role_templar(ROLE, vars_file(facts), facts, **{**default_group_vars(), **inputs})


def value(t: Templar, name: str) -> Any:
    return t.template(trust_as_template("{{ " + name + " }}"))


def choices(os_name: str, gpu: str, **inputs: Any) -> dict[str, Any]:
    generation, branch = GPUS[gpu]
    t = templar(os_name, nvidia_driver_gpu_generation=generation, nvidia_driver_branch=branch, **inputs)
    return {
        "source": value(t, "__nvidia_driver_source"),
        "modules": value(t, "__nvidia_driver_kernel_modules"),
        "packages": value(t, "__nvidia_driver_package_list"),
        "install": value(t, "__nvidia_driver_install_names"),
        "hold": value(t, "__nvidia_driver_hold_command"),
        "headers": value(t, "__nvidia_driver_headers"),
    }


def expected(os_name: str, gpu: str) -> dict[str, Any]:
    generation, branch = GPUS[gpu]
    kernel = OSES[os_name]["kernel"]
    modules = "proprietary" if generation == "volta" else "open"
    headers = [f"linux-headers-{kernel}"]
    if os_name.startswith("ubuntu") or (os_name == "debian13" and branch == "550"):
        # The distribution's own driver: Ubuntu's -server packages, or trixie's 550 (non-free, contrib,
        # non-free-firmware), which auto takes.
        if os_name.startswith("ubuntu"):
            driver = f"nvidia-driver-{branch}-server" + ("-open" if modules == "open" else "")
            packages = [*headers, driver, f"nvidia-compute-utils-{branch}-server"]
        else:
            dkms = "nvidia-open-kernel-dkms" if modules == "open" else "nvidia-kernel-dkms"
            packages = [*headers, "nvidia-driver", dkms, "firmware-nvidia-gsp", "nvidia-smi", "nvidia-persistenced"]
        return {
            "source": "distro",
            "modules": modules,
            "packages": packages,
            "install": packages,
            "hold": ["apt-mark", "hold"],
            "headers": headers,
        }
    if os_name.startswith("debian"):
        # 550 and 570 are not Debian 12's 535, nor 570 Debian 13's 550: auto takes NVIDIA's repository.
        if modules == "proprietary":
            drivers = [f"cuda-drivers-{branch}"]
        elif int(branch) >= 560:
            drivers = [f"nvidia-open-{branch}"]
        else:
            drivers = ["nvidia-kernel-open-dkms", f"cuda-drivers-{branch}"]
        install = [*headers, *drivers, "nvidia-persistenced"]
        return {
            "source": "cuda_repo",
            "modules": modules,
            "packages": ["cuda-keyring", *install],
            "install": install,
            "hold": ["apt-mark", "hold"],
            "headers": headers,
        }
    headers = [f"kernel-devel-{kernel}"]
    kmod = "kmod-nvidia-open-dkms" if modules == "open" else "kmod-nvidia-latest-dkms"
    stream = f"{branch}-open" if modules == "open" else f"{branch}-dkms"
    return {
        "source": "cuda_repo",
        "modules": modules,
        "packages": [
            "epel-release",
            "python3-dnf-plugin-versionlock",
            *headers,
            "nvidia-driver",
            "nvidia-driver-cuda",
            kmod,
            "nvidia-persistenced",
        ],
        "install": [*headers, f"@nvidia-driver:{stream}", "nvidia-persistenced"],
        "hold": ["dnf", "versionlock", "add"],
        "headers": headers,
    }


def test_vars_files_are_the_ones_first_found_picks() -> None:
    assert set(VARS_FILES) == set(OSES)
    for os_name, expected_file in VARS_FILES.items():
        assert vars_file(OSES[os_name]) == expected_file, os_name
        assert first_found_vars_file(ROLE, templar(os_name)) == expected_file, os_name


@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("os_name", list(OSES))
def test_choice_per_os_and_gpu(os_name: str, gpu: str) -> None:
    assert choices(os_name, gpu) == expected(os_name, gpu)


@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("os_name", list(OSES))
def test_every_matrix_case_passes_preflight(os_name: str, gpu: str) -> None:
    generation, branch = GPUS[gpu]
    assert refusals(os_name, nvidia_driver_gpu_generation=generation, nvidia_driver_branch=branch) == []


@pytest.mark.parametrize(
    ("os_name", "branch", "headers"),
    [("debian12", "535", "linux-headers-6.1.0-31-amd64"), ("debian13", "550", "linux-headers-6.12.57+deb13-amd64")],
)
def test_each_debian_release_takes_its_own_driver_at_its_branch(os_name: str, branch: str, headers: str) -> None:
    t = templar(os_name, nvidia_driver_gpu_generation="ampere", nvidia_driver_branch=branch)
    assert value(t, "__nvidia_driver_source") == "distro"
    assert value(t, "__nvidia_driver_package_list") == [
        headers,
        "nvidia-driver",
        "nvidia-open-kernel-dkms",
        "firmware-nvidia-gsp",
        "nvidia-smi",
        "nvidia-persistenced",
    ]
    proprietary = templar(os_name, nvidia_driver_gpu_generation="volta", nvidia_driver_branch=int(branch))
    assert value(proprietary, "__nvidia_driver_install_names")[1:3] == ["nvidia-driver", "nvidia-kernel-dkms"]


def test_a_plain_run_on_debian13_takes_debians_driver() -> None:
    # The default branch is trixie's: no NVIDIA repository needed there.
    assert value(templar("debian13"), "__nvidia_driver_source") == "distro"
    assert value(templar("debian13"), "__nvidia_driver_version_package") == "nvidia-driver"


def test_debian13_branch_535_takes_nvidias_repository() -> None:
    # trixie's nvidia-tesla-535-driver is not offered: 535 comes from NVIDIA's debian13 repository.
    t = templar("debian13", nvidia_driver_gpu_generation="ampere", nvidia_driver_branch="535")
    assert value(t, "__nvidia_driver_source") == "cuda_repo"
    assert value(t, "__nvidia_driver_package_list") == [
        "cuda-keyring",
        "linux-headers-6.12.57+deb13-amd64",
        "nvidia-kernel-open-dkms",
        "cuda-drivers-535",
        "nvidia-persistenced",
    ]
    assert value(t, "__nvidia_driver_cuda_repo.url") == (
        "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
    )


@pytest.mark.parametrize(("os_name", "repo"), [("debian12", "debian12"), ("debian13", "debian13")])
def test_debian_cuda_repository_per_release(os_name: str, repo: str) -> None:
    t = templar(os_name, nvidia_driver_source="cuda_repo")
    assert value(t, "__nvidia_driver_cuda_repo.url") == (
        f"https://developer.download.nvidia.com/compute/cuda/repos/{repo}/x86_64/"
    )
    assert value(t, "__nvidia_driver_cuda_repo.keyring_file") == "cuda-keyring_1.1-1_all.deb"
    assert value(t, "__nvidia_driver_cuda_repo.max_branch") == 580


def test_ubuntu_can_take_nvidias_repository() -> None:
    t = templar("ubuntu24", nvidia_driver_gpu_generation="hopper", nvidia_driver_source="cuda_repo")
    assert value(t, "__nvidia_driver_package_list") == [
        "cuda-keyring",
        "linux-headers-6.8.0-52-generic",
        "nvidia-driver-550-open",
        "cuda-drivers-550",
        "nvidia-compute-utils-550",
    ]
    assert value(t, "__nvidia_driver_cuda_repo.url") == (
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    )


def test_grace_on_arm_uses_the_sbsa_repository() -> None:
    facts = {**OSES["ubuntu22"], "architecture": "aarch64"}
    inputs = {"nvidia_driver_gpu_generation": "grace", "nvidia_driver_source": "cuda_repo"}
    t = role_templar(ROLE, "Ubuntu-22.yml", facts, **{**default_group_vars(), **inputs})
    assert value(t, "__nvidia_driver_cuda_repo.url").endswith("/repos/ubuntu2204/sbsa/")
    assert value(t, "__nvidia_driver_kernel_modules") == "open"


@pytest.mark.parametrize("os_name", list(OSES))
def test_no_headers_where_no_module_can_load(os_name: str) -> None:
    t = templar(os_name, nvidia_driver_gpu_generation="hopper", nvidia_driver_module_loadable=False)
    assert value(t, "__nvidia_driver_headers") == []
    assert not any("headers" in name or "kernel-devel" in name for name in value(t, "__nvidia_driver_package_list"))


@pytest.mark.parametrize(
    ("os_name", "command"),
    [
        ("debian12", ["update-initramfs", "-u", "-k", "all"]),
        ("debian13", ["update-initramfs", "-u", "-k", "all"]),
        ("ubuntu22", ["update-initramfs", "-u", "-k", "all"]),
        ("rocky9", ["dracut", "-f", "--regenerate-all"]),
    ],
)
def test_initramfs_and_unattended_upgrades_per_os(os_name: str, command: list[str]) -> None:
    t = templar(os_name)
    assert value(t, "__nvidia_driver_initramfs_command") == command
    exclusion = value(t, "__nvidia_driver_unattended_upgrades_file")
    if os_name == "rocky9":
        assert exclusion is None  # dnf-automatic honours versionlock
    else:
        assert exclusion == "/etc/apt/apt.conf.d/51gpuclus-nvidia-driver"


def test_fabric_manager_and_dcgm_names() -> None:
    assert value(templar("ubuntu22", nvidia_driver_source="cuda_repo"), "__nvidia_driver_fabricmanager_package") == (
        "nvidia-fabricmanager-550"
    )
    assert value(templar("rocky9"), "__nvidia_driver_fabricmanager_package") == "nvidia-fabric-manager"
    # Debian packages none: an NVSwitch node on Debian's own driver needs cuda_repo.
    assert value(templar("debian12", nvidia_driver_branch="535"), "__nvidia_driver_fabricmanager_package") is None
    assert value(templar("debian13", nvidia_driver_branch="550"), "__nvidia_driver_fabricmanager_package") is None
    assert value(templar("debian13", nvidia_driver_source="cuda_repo"), "__nvidia_driver_fabricmanager_package") == (
        "nvidia-fabricmanager-550"
    )
    assert value(templar("rocky9"), "__nvidia_driver_version_separator") == "-"
    # DCGM 4: one package per CUDA major version the branch supports.
    assert value(templar("debian12"), "__nvidia_driver_dcgm_package") == "datacenter-gpu-manager-4-cuda12"
    assert value(templar("rocky9", nvidia_driver_branch="580"), "__nvidia_driver_dcgm_package") == (
        "datacenter-gpu-manager-4-cuda13"
    )


def fabric_probe(nvswitches: str, installed: str = "", stale_units: tuple[str, ...] = ()) -> dict[str, Any]:
    """A probe result with the installed query's output and the NVSwitch listing (commands[7])."""
    commands = [{"rc": 0, "stdout": installed}] + [{"rc": 0, "stdout": ""}] * 6 + [{"rc": 0, "stdout": nvswitches}]
    return {"found": {"commands": commands, "units": {}}, "stale": {"packages": [], "units": list(stale_units)}}


@pytest.mark.parametrize(
    ("setting", "nvswitches", "wanted"),
    [
        ("auto", "0000:05:00.0\n0000:06:00.0\n", True),  # an HGX board's switches
        ("auto", "", False),
        (True, "", True),
        (False, "0000:05:00.0\n", False),
    ],
)
def test_fabric_manager_follows_the_nvswitches(setting: Any, nvswitches: str, wanted: bool) -> None:
    t = templar(
        "ubuntu22",
        nvidia_driver_fabric_manager=setting,
        __nvidia_driver_probe=fabric_probe(nvswitches, stale_units=("nvidia-fabricmanager",)),
    )
    assert value(t, "__nvidia_driver_fabric_manager") is wanted
    assert value(t, "__nvidia_driver_fabricmanager_missing") is wanted
    assert value(t, "__nvidia_driver_extra_units") == (["nvidia-fabricmanager"] if wanted else [])
    assert value(t, "__nvidia_driver_extra_units_stale") == (["nvidia-fabricmanager"] if wanted else [])


def test_installed_fabric_manager_and_dcgm_are_not_installed_again() -> None:
    installed = "hi nvidia-fabricmanager-550\nii datacenter-gpu-manager-4-cuda12\n"
    t = templar("ubuntu22", nvidia_driver_dcgm=True, __nvidia_driver_probe=fabric_probe("0000:05:00.0\n", installed))
    assert value(t, "__nvidia_driver_fabricmanager_missing") is False
    assert value(t, "__nvidia_driver_dcgm_missing") is False
    # DCGM is not tied to the driver's release: never held.
    assert "datacenter-gpu-manager-4-cuda12" not in value(t, "__nvidia_driver_installed_names")


@pytest.mark.parametrize("os_name", list(DEBIAN_DRIVER))
def test_dcgm_with_the_distribution_driver_adds_nvidia_repository(os_name: str) -> None:
    branch, _ = DEBIAN_DRIVER[os_name]
    t = templar(os_name, nvidia_driver_branch=branch, nvidia_driver_dcgm=True, __nvidia_driver_probe=fabric_probe(""))
    assert value(t, "__nvidia_driver_source") == "distro"
    assert value(t, "__nvidia_driver_dcgm_needs_keyring") is True
    assert value(t, "__nvidia_driver_dcgm_missing") is True
    assert value(t, "__nvidia_driver_dcgm_package") == "datacenter-gpu-manager-4-cuda12"
    assert (
        value(
            templar(
                os_name,
                nvidia_driver_source="cuda_repo",
                nvidia_driver_dcgm=True,
                __nvidia_driver_probe=fabric_probe(""),
            ),
            "__nvidia_driver_dcgm_needs_keyring",
        )
        is False
    )


# Holding -------------------------------------------------------------------------------------


def probe(installed: str, held: str) -> dict[str, Any]:
    return {"found": {"commands": [{"stdout": installed}, {"stdout": held}, {"stdout": "enabled\n"}], "units": {}}}


def test_apt_holds_what_is_installed_and_not_held() -> None:
    installed = "ii nvidia-driver\nii libcuda1\nun nvidia-kernel-dkms\nii nvidia-container-toolkit\nii nvidia-smi\n"
    t = templar("debian12", __nvidia_driver_probe=probe(installed, "nvidia-smi\n"))
    # Removed packages (un) are not held; the container toolkit belongs to the containers phase.
    assert value(t, "__nvidia_driver_unheld") == ["libcuda1", "nvidia-driver"]


def test_apt_held_packages_count_as_installed() -> None:
    # dpkg reports a held package as "hi": found by molecule/nvidia, where every package the
    # first run held looked missing to node_probe (which reads "ii" only) on the second run.
    installed = "hi nvidia-driver\nhi nvidia-smi\nii nvidia-persistenced\n"
    held = "nvidia-driver\nnvidia-smi\n"
    t = templar(
        "debian12",
        nvidia_driver_branch="535",
        __nvidia_driver_probe={
            **probe(installed, held),
            "stale": {"packages": ["nvidia-driver", "nvidia-smi", "nvidia-kernel-dkms"]},
        },
    )
    assert value(t, "__nvidia_driver_unheld") == ["nvidia-persistenced"]
    assert value(t, "__nvidia_driver_stale_packages") == ["nvidia-kernel-dkms"]


def state_probe(loaded: tuple[int, str], version: tuple[int, str], initramfs_rc: int) -> dict[str, Any]:
    commands = probe("", "")["found"]["commands"] + [
        {"rc": loaded[0], "stdout": loaded[1]},
        {"rc": 1, "stdout": ""},
        {"rc": version[0], "stdout": version[1]},
        {"rc": initramfs_rc, "stdout": ""},
    ]
    return {"found": {"commands": commands, "units": {}}, "stale": {"packages": []}}


@pytest.mark.parametrize(
    ("loadable", "loaded", "version", "verdict"),
    [
        # The sandbox's case: installed, no module can load here.
        (False, (1, ""), (0, "535.309.01-0+deb12u1"), "installed, reboot needed to load"),
        # A real node right after the install: nothing loaded yet.
        (True, (1, ""), (0, "535.309.01-0+deb12u1"), "installed, reboot needed to load"),
        # Module and libraries differ (an old module still loaded).
        (True, (0, "535.183.01\n"), (0, "535.309.01-0+deb12u1"), "installed, reboot needed to load"),
        (True, (0, "535.309.01\n"), (0, "535.309.01-0+deb12u1"), "installed and loaded"),
        # A check run on a fresh node.
        (True, (1, ""), (1, ""), "not installed"),
    ],
)
def test_state_verdict(loadable: bool, loaded: tuple[int, str], version: tuple[int, str], verdict: str) -> None:
    t = templar(
        "debian12",
        nvidia_driver_branch="535",
        nvidia_driver_module_loadable=loadable,
        __nvidia_driver_probe=state_probe(loaded, version, initramfs_rc=1),
    )
    state = value(t, "__nvidia_driver_state")
    assert state["verdict"] == verdict
    assert state["reboot_needed"] is (verdict == "installed, reboot needed to load")
    assert state["module_loadable"] is loadable
    assert state["installed_version"] == ("535.309.01" if version[0] == 0 else None)
    assert state["loaded_version"] == (loaded[1].strip() or None)
    assert state["initramfs"] == "none on this node (no /usr/sbin/update-initramfs): nothing to rebuild"
    assert value(t, "__nvidia_driver_version_query") == ["dpkg-query", "-W", "-f=${Version}", "nvidia-driver"]


def test_dnf_reads_versionlock_names() -> None:
    installed = "nvidia-driver\nkmod-nvidia-open-dkms\nnvidia-persistenced\n"
    held = (
        "Last metadata expiration check: 0:10:11 ago on Mon 03 Mar 2025 08:00:00 AM UTC.\n"
        "nvidia-driver-3:550.127.08-1.el9.*\nkmod-nvidia-open-dkms-3:550.127.08-1.el9.*\n"
    )
    t = templar("rocky9", __nvidia_driver_probe=probe(installed, held))
    assert value(t, "__nvidia_driver_held_names") == ["nvidia-driver", "kmod-nvidia-open-dkms"]
    assert value(t, "__nvidia_driver_unheld") == ["nvidia-persistenced"]


# Refusals ------------------------------------------------------------------------------------


def preflight_asserts(after_probe: bool = False) -> list[dict[str, Any]]:
    """The asserts before the node probe (on the inputs alone), or the ones after it (on what it found)."""
    tasks = yaml.safe_load((ROLES / ROLE / "tasks" / "preflight.yml").read_text())
    probe_at = next(index for index, task in enumerate(tasks) if "node_probe" in task)
    chosen = tasks[probe_at + 1 :] if after_probe else tasks[:probe_at]
    return [task for task in chosen if "ansible.builtin.assert" in task]


def refusals(os_name: str, after_probe: bool = False, **inputs: Any) -> list[str]:
    """The fail_msg of the first preflight assert that fails for these inputs (Ansible stops there)."""
    return first_refusal(templar(os_name, **inputs), preflight_asserts(after_probe))


@pytest.mark.parametrize(("os_name", "other"), [("debian12", "550"), ("debian13", "535"), ("debian13", "570")])
def test_debian_distro_source_is_the_releases_branch_only(os_name: str, other: str) -> None:
    branch, _ = DEBIAN_DRIVER[os_name]
    major = OSES[os_name]["distribution_major_version"]
    messages = refusals(os_name, nvidia_driver_branch=other, nvidia_driver_source="distro")
    assert messages == [
        f"Debian {major}'s own NVIDIA driver is branch {branch} only, not {other}: set nvidia_driver_branch to "
        f"{branch}, or nvidia_driver_source to cuda_repo (NVIDIA's repository)."
    ]
    assert refusals(os_name, nvidia_driver_branch=branch, nvidia_driver_source="distro") == []


def test_proprietary_modules_on_blackwell_are_refused() -> None:
    messages = refusals(
        "ubuntu24",
        nvidia_driver_gpu_generation="blackwell",
        nvidia_driver_branch="570",
        nvidia_driver_kernel_modules="proprietary",
    )
    assert messages == [
        "gpu01 has blackwell GPUs, which only the open kernel modules drive: "
        "set nvidia_driver_kernel_modules to open or auto (it is proprietary)."
    ]


def test_open_modules_on_volta_are_refused() -> None:
    messages = refusals("rocky9", nvidia_driver_gpu_generation="volta", nvidia_driver_kernel_modules="open")
    assert len(messages) == 1 and "do not drive (they need Turing or newer)" in messages[0]


def test_a_branch_too_old_for_the_gpus_is_refused() -> None:
    # The floor comes from gpuclus' GPU catalogue through render (the role holds no table of its own).
    kind = kind_for_model("b200")
    assert kind is not None and kind.min_driver_branch == 570
    messages = refusals(
        "ubuntu22",
        nvidia_driver_gpu_generation="blackwell",
        nvidia_driver_branch="550",
        nvidia_driver_min_branch=kind.min_driver_branch,
    )
    assert (
        refusals(
            "ubuntu22",
            nvidia_driver_gpu_generation="blackwell",
            nvidia_driver_branch="570",
            nvidia_driver_min_branch=570,
        )
        == []
    )
    assert messages == [
        "gpu01 has blackwell GPUs, which driver branch 550 does not know: "
        "they need branch 570 or newer (nvidia_driver_branch)."
    ]


def test_rocky_has_no_distro_driver() -> None:
    messages = refusals("rocky9", nvidia_driver_source="distro")
    assert messages == ["Rocky 9 ships no NVIDIA driver of its own: set nvidia_driver_source to cuda_repo or auto."]


def test_branches_named_without_their_branch_are_refused() -> None:
    messages = refusals("debian12", nvidia_driver_branch="590")
    assert len(messages) == 1 and "use branch 580 or older" in messages[0]


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("nvidia_driver_branch", "55"),
        ("nvidia_driver_branch", "550\n"),
        ("nvidia_driver_source", "ppa"),
        ("nvidia_driver_kernel_modules", "nouveau"),
        ("nvidia_driver_gpu_generation", "kepler"),
        ("nvidia_driver_min_branch", "570a"),
        ("nvidia_driver_module_loadable", "maybe"),
    ],
)
def test_bad_inputs_are_refused(name: str, bad: str) -> None:
    messages = refusals("debian12", **{name: bad})
    assert messages and name in messages[0]


# Rendered files ------------------------------------------------------------------------------


def rendered(template: str, os_name: str, **inputs: Any) -> str:
    source = Path(ROLES / ROLE / "templates" / template).read_text()
    return str(templar(os_name, **inputs).template(trust_as_template(source)))


@pytest.mark.parametrize("os_name", list(DEBIAN_DRIVER))
def test_debian_sources_add_the_nonfree_components(os_name: str) -> None:
    branch, suite = DEBIAN_DRIVER[os_name]
    t = templar(os_name, nvidia_driver_branch=branch)
    # What makes the role write (and probe) the sources file: Debian's own driver, components to add.
    assert value(t, "__nvidia_driver_source") == "distro"
    assert value(t, "__nvidia_driver_distro.components") == ["contrib", "non-free", "non-free-firmware"]
    text = rendered("etc/apt/sources.list.d/gpuclus-nvidia-driver.sources.j2", os_name, nvidia_driver_branch=branch)
    assert f"Suites: {suite} {suite}-updates\nComponents: contrib non-free non-free-firmware\n" in text
    assert f"Suites: {suite}-security\nComponents: contrib non-free non-free-firmware\n" in text
    assert text.count("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n") == 2


def test_unattended_upgrades_blacklist() -> None:
    text = rendered("etc/apt/apt.conf.d/51gpuclus-nvidia-driver.j2", "ubuntu22")
    assert 'Unattended-Upgrade::Package-Blacklist {\n    "nvidia-";\n    "libnvidia-";\n' in text
    assert '    "linux-modules-nvidia-";\n' in text


@pytest.mark.parametrize("os_name", list(DEBIAN_DRIVER))
def test_fabric_manager_on_debian_distro_driver_is_refused(os_name: str) -> None:
    branch, _ = DEBIAN_DRIVER[os_name]
    asked = refusals(os_name, nvidia_driver_branch=branch, nvidia_driver_fabric_manager=True)
    assert asked and "has no fabric manager: set nvidia_driver_source to cuda_repo" in asked[0]
    found = refusals(
        os_name, after_probe=True, nvidia_driver_branch=branch, __nvidia_driver_probe=fabric_probe("0000:05:00.0\n")
    )
    assert found == [
        "gpu01 has 1 NVSwitch(es), which need nvidia-fabricmanager at the driver's exact version, and Debian's own "
        "driver comes without one: set nvidia.driver.source: cuda_repo in cluster.yaml (nvidia_driver_source), or "
        "nvidia.fabric_manager: false."
    ]
    assert (
        refusals(os_name, after_probe=True, nvidia_driver_branch=branch, __nvidia_driver_probe=fabric_probe("")) == []
    )
