"""The enroot role's per-OS choices, rendered as Ansible renders them.

Which files, URLs, packages, paths and enroot.conf text the role picks is data
(roles/enroot/vars/<OS>.yml) plus the decisions in vars/main.yml. Here they are
rendered with Ansible's Templar for each OS the role supports, the preflight
asserts are evaluated for inputs they must refuse, and the rendered enroot.conf
is read the way enroot reads it (bash, `eval echo`). No node and no download:
molecule/enroot builds and runs enroot for real on Debian 12 only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, first_found_vars_file, role_templar
from test_nvidia_driver_choices import OSES, value

from gpuclus.release_files import group_vars_names
from gpuclus.yamldoc.patterns import ROLE_PATTERNS, ansible_form

ROLE_GROUP_VARS_PATTERNS = {name: ansible_form(pattern) for name, pattern in ROLE_PATTERNS.items()}

ROLE = "enroot"
RELEASES = "https://github.com/NVIDIA/enroot/releases/download"
VARS_FILES = {
    "ubuntu22": "Ubuntu-22.yml",
    "ubuntu24": "Ubuntu-24.yml",
    "debian12": "Debian.yml",
    "debian13": "Debian.yml",
    "rocky9": "RedHat-9.yml",
}
APT_OSES = ["ubuntu22", "ubuntu24", "debian12", "debian13"]
SHA = "0123456789abcdef" * 4
INVENTORY = {
    "gpuclus_patterns": ROLE_GROUP_VARS_PATTERNS,
    "gpuclus_apt_cache_valid_time": 3600,
    "gpuclus_package_lock_timeout": 60,
    "gpuclus_containers_artifacts_dir": None,
    "gpuclus_containers_checksums": {},
    "gpuclus_containers_allow_unverified_downloads": False,
    "gpuclus_enroot_credentials_file": None,
    "gpuclus_enroot_credentials_users": [],
    "gpuclus_control_cache_dir": "/var/tmp/gpuclus-cache",
}


def containers_vars(enroot_version: str) -> dict[str, Any]:
    """What render writes for this Enroot version: the version and the release files' names."""
    return {"gpuclus_enroot_version": enroot_version, **group_vars_names(enroot_version, "0.24.0")}


def templar(os_name: str, arch: str = "x86_64", **inputs: Any) -> Templar:
    facts = {**OSES[os_name], "architecture": arch}
    rendered = containers_vars(str(inputs.pop("enroot_version", "4.1.2")))
    return role_templar(ROLE, VARS_FILES[os_name], facts, **{**INVENTORY, **rendered, **inputs})


def render_template(t: Templar, name: str) -> str:
    source = (ROLES / ROLE / "templates" / name).read_text()
    return str(t.template(trust_as_template(source)))


def preflight_task(name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROLES / ROLE / "tasks" / "preflight.yml").read_text())
    return next(task for task in tasks if task["name"] == name)


def passes(t: Templar, task_name: str) -> bool:
    """Whether every `that` of a preflight assert holds, as Ansible evaluates them."""
    that = preflight_task(task_name)["ansible.builtin.assert"]["that"]
    return all(value(t, condition) for condition in that)


def probe(stale_files: list[str] | None = None, kernel: tuple[int | None, ...] = (65536, 1, 0)) -> dict[str, Any]:
    """A node_probe result: stale files, and /proc values (None: the file is missing)."""
    commands = [
        {"rc": 1, "stdout": "", "stderr": "No such file"} if v is None else {"rc": 0, "stdout": f"{v}\n", "stderr": ""}
        for v in kernel
    ]
    return {
        "stale": {"packages": [], "files": stale_files or [], "units": [], "fstab": []},
        "found": {"commands": commands, "users": {}, "units": {}},
    }


def test_vars_files_are_the_ones_first_found_picks() -> None:
    for os_name, expected in VARS_FILES.items():
        assert first_found_vars_file(ROLE, templar(os_name)) == expected, os_name


# Release packages -------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "deb_arch"), [("x86_64", "amd64"), ("aarch64", "arm64")])
@pytest.mark.parametrize("os_name", APT_OSES)
def test_release_debs_as_installation_md_names_them(os_name: str, arch: str, deb_arch: str) -> None:
    t = templar(os_name, arch=arch, enroot_caps=True)
    assert value(t, "__enroot_source") == "release"
    files = [f"enroot_4.1.2-1_{deb_arch}.deb", f"enroot+caps_4.1.2-1_{deb_arch}.deb"]
    assert value(t, "__enroot_files") == files
    assert value(t, "__enroot_release_urls") == [f"{RELEASES}/v4.1.2/{name}" for name in files]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_release_rpms_are_the_el8_builds(arch: str) -> None:
    t = templar("rocky9", arch=arch, enroot_version="4.0.1")
    assert value(t, "__enroot_files") == [f"enroot-4.0.1-1.el8.{arch}.rpm"]
    assert value(t, "__enroot_release_urls") == [f"{RELEASES}/v4.0.1/enroot-4.0.1-1.el8.{arch}.rpm"]


def test_caps_off_by_default_installs_the_base_package_only() -> None:
    t = templar("debian12")
    assert value(t, "enroot_caps") is False
    assert value(t, "__enroot_files") == ["enroot_4.1.2-1_amd64.deb"]


def test_a_mirror_url_keeps_the_layout() -> None:
    t = templar("debian12", enroot_release_url="https://mirror.example/enroot/")
    assert value(t, "__enroot_release_urls") == ["https://mirror.example/enroot/v4.1.2/enroot_4.1.2-1_amd64.deb"]


def test_a_release_download_without_checksum_is_refused() -> None:
    name = "Check every release download has a checksum"
    assert value(templar("debian12"), "__enroot_unchecked_files") == ["enroot_4.1.2-1_amd64.deb"]
    assert not passes(templar("debian12"), name)
    assert passes(templar("debian12", enroot_allow_unchecked=True), name)
    checked = templar("debian12", enroot_checksums={"enroot_4.1.2-1_amd64.deb": SHA})
    assert value(checked, "__enroot_unchecked_files") == []
    assert passes(checked, name)
    # A checksum for the base package does not cover the +caps one.
    caps = templar("debian12", enroot_caps=True, enroot_checksums={"enroot_4.1.2-1_amd64.deb": SHA})
    assert value(caps, "__enroot_unchecked_files") == ["enroot+caps_4.1.2-1_amd64.deb"]


def test_release_state_records_the_checksums_or_unchecked() -> None:
    t = templar("debian12", enroot_caps=True, enroot_checksums={"enroot_4.1.2-1_amd64.deb": SHA})
    assert value(t, "__enroot_state") == {
        "version": "4.1.2",
        "source": "release",
        "files": {"enroot_4.1.2-1_amd64.deb": SHA, "enroot+caps_4.1.2-1_amd64.deb": "unchecked"},
        "caps": True,
    }


# Artifacts directory ------------------------------------------------------------------------


def test_auto_picks_the_tarball_then_the_packages(tmp_path: Path) -> None:
    (tmp_path / "enroot-4.1.2-src.tar.gz").write_bytes(b"x")
    t = templar("debian12", enroot_artifacts_dir=str(tmp_path) + "/")
    assert value(t, "__enroot_source") == "source"
    assert value(t, "__enroot_files") == ["enroot-4.1.2-src.tar.gz"]
    # Every node gets the runtime dependencies only; the build tools go onto
    # the one node that builds (see test_build_tools_go_onto_the_building_node_only).
    assert "build-essential" not in value(t, "__enroot_packages")
    assert value(t, "__enroot_build_packages") == ["build-essential"]
    (tmp_path / "enroot_4.1.2-1_amd64.deb").write_bytes(b"x")
    t = templar("debian12", enroot_artifacts_dir=str(tmp_path))
    assert value(t, "__enroot_source") == "packages"
    assert "build-essential" not in value(t, "__enroot_packages")
    # Packages of another version do not count.
    assert (
        value(templar("debian12", enroot_artifacts_dir=str(tmp_path), enroot_version="4.1.1"), "__enroot_source")
        == "source"
    )


def test_a_missing_artifact_is_refused_naming_the_directory(tmp_path: Path) -> None:
    name = "Check the artifacts directory holds what the source needs"
    t = templar("debian12", enroot_artifacts_dir=str(tmp_path), enroot_source="source")
    assert not passes(t, name)
    fail_msg = str(t.template(trust_as_template(preflight_task(name)["ansible.builtin.assert"]["fail_msg"])))
    assert str(tmp_path) in fail_msg and "enroot-4.1.2-src.tar.gz" in fail_msg
    (tmp_path / "enroot-4.1.2-src.tar.gz").write_bytes(b"x")
    assert passes(templar("debian12", enroot_artifacts_dir=str(tmp_path), enroot_source="source"), name)


def test_source_state_keys_on_the_control_machines_checksum(tmp_path: Path) -> None:
    stat = {"results": [{"item": "enroot-4.1.2-src.tar.gz", "stat": {"checksum": SHA}}]}
    (tmp_path / "enroot-4.1.2-src.tar.gz").write_bytes(b"x")
    t = templar("debian12", enroot_artifacts_dir=str(tmp_path), __enroot_artifact_stat=stat)
    assert value(t, "__enroot_state") == {
        "version": "4.1.2",
        "source": "source",
        "files": {"enroot-4.1.2-src.tar.gz": SHA},
        "caps": False,
    }
    other = templar(
        "debian12",
        enroot_artifacts_dir=str(tmp_path),
        __enroot_artifact_stat={"results": [{"item": "enroot-4.1.2-src.tar.gz", "stat": {"checksum": "f" * 64}}]},
    )
    assert render_template(t, "var/lib/gpuclus/enroot.json.j2") != render_template(
        other, "var/lib/gpuclus/enroot.json.j2"
    )


# Packages per OS --------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", APT_OSES)
def test_apt_runtime_dependencies(os_name: str) -> None:
    packages = value(templar(os_name), "__enroot_packages")
    for name in ["squashfs-tools", "parallel", "jq", "zstd", "pigz", "curl", "gawk", "bsdmainutils", "libcap2-bin"]:
        assert name in packages, (os_name, name)
    assert {"squashfuse", "fuse-overlayfs"} <= set(packages)


def test_rocky_runtime_and_build_dependencies(tmp_path: Path) -> None:
    # Built from source, yet every node's packages are the runtime ones only.
    (tmp_path / "enroot-4.1.2-src.tar.gz").write_bytes(b"x")
    t = templar("rocky9", enroot_artifacts_dir=str(tmp_path))
    assert value(t, "__enroot_source") == "source"
    packages = value(t, "__enroot_packages")
    assert {"libcap", "shadow-utils", "squashfs-tools"} <= set(packages)
    assert not {"gcc", "make", "patch"} & set(packages)
    assert "bsdmainutils" not in packages and "build-essential" not in packages
    assert {"gcc", "make", "patch"} <= set(value(t, "__enroot_build_packages"))


@pytest.mark.parametrize("os_name", APT_OSES)
def test_apt_build_tools_are_not_runtime_packages(os_name: str) -> None:
    t = templar(os_name)
    assert value(t, "__enroot_build_packages") == ["build-essential"]
    assert "build-essential" not in value(t, "__enroot_packages")


def test_build_tools_go_onto_the_building_node_only() -> None:
    tasks_dir = ROLES / ROLE / "tasks"
    # Only build.yml installs them, each time once per run (run_once: the
    # first node that builds), ...
    users = sorted(p.name for p in tasks_dir.glob("*.yml") if "__enroot_build_packages" in p.read_text())
    assert users == ["build.yml"]
    build = yaml.safe_load((tasks_dir / "build.yml").read_text())
    installs = [
        task
        for task in build
        for module in ("ansible.builtin.apt", "ansible.builtin.dnf")
        if task.get(module, {}).get("name") == "{{ __enroot_build_packages }}"
    ]
    assert len(installs) == 2
    assert all(task.get("run_once") is True for task in installs)
    # ... and build.yml is only included to build the source.
    install = yaml.safe_load((tasks_dir / "install.yml").read_text())
    [include] = [task for task in install if task.get("ansible.builtin.include_tasks") == "build.yml"]
    assert "__enroot_source == 'source'" in include["when"]


# enroot.conf ------------------------------------------------------------------------------


def test_enroot_conf_text() -> None:
    text = render_template(templar("debian12"), "etc/enroot/enroot.conf.j2")
    settings = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert settings == [
        "ENROOT_CACHE_PATH /var/lib/enroot/cache/user-${UID}",
        "ENROOT_DATA_PATH /var/lib/enroot/data/user-${UID}",
        "ENROOT_MOUNT_HOME no",
        "ENROOT_RESTRICT_DEV yes",
        "ENROOT_RUNTIME_PATH /run/enroot/user-${UID}",
    ]
    assert "XDG" not in "\n".join(settings)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_enroot_conf_as_enroot_reads_it(tmp_path: Path) -> None:
    """enroot's config::load: `bash -n` must accept the file, then each `KEY VALUE` is `eval echo`ed."""
    conf = tmp_path / "enroot.conf"
    conf.write_text(
        render_template(
            templar("debian12", enroot_mount_home=True, enroot_restrict_dev=False), "etc/enroot/enroot.conf.j2"
        )
    )
    assert subprocess.run(["bash", "-n", str(conf)], check=False).returncode == 0
    script = (
        "while IFS=$' \\t=' read -r key value; do\n"
        '  [[ "$key" =~ ^ENROOT_ ]] && echo "$key=$(eval echo "$value")"\n'
        'done < "$1"'
    )
    out = subprocess.run(["bash", "-c", script, "-", str(conf)], check=True, capture_output=True, text=True).stdout
    uid = subprocess.run(["id", "-u"], check=True, capture_output=True, text=True).stdout.strip()
    assert dict(line.split("=", 1) for line in out.splitlines()) == {
        "ENROOT_CACHE_PATH": f"/var/lib/enroot/cache/user-{uid}",
        "ENROOT_DATA_PATH": f"/var/lib/enroot/data/user-{uid}",
        "ENROOT_MOUNT_HOME": "yes",
        "ENROOT_RESTRICT_DEV": "no",
        "ENROOT_RUNTIME_PATH": f"/run/enroot/user-{uid}",
    }


@pytest.mark.parametrize(
    "root",
    [
        "relative/path",
        "/with space",
        "/quote'd",
        '/dq"x',
        "/$(reboot)",
        "/back`tick`",
        "/semi;colon",
        "/new\nline",
        "/tab\t",
    ],
)
def test_paths_enroot_conf_cannot_hold_are_refused(root: str) -> None:
    assert not passes(templar("debian12", enroot_cache_root=root), "Check the enroot inputs")


def test_good_inputs_pass_and_the_roots_must_differ() -> None:
    assert passes(templar("debian12", enroot_data_root="/scratch/enroot-data"), "Check the enroot inputs")
    assert not passes(templar("debian12", enroot_data_root="/var/lib/enroot/cache"), "Check the enroot inputs")
    assert not passes(templar("debian12", enroot_version="4.1"), "Check the enroot inputs")
    assert not passes(templar("debian12", enroot_checksums={"x.deb": "abc"}), "Check the enroot inputs")
    assert not passes(templar("debian12", enroot_extra_hooks=["../../evil"]), "Check the enroot inputs")


def test_runtime_root_is_recreated_at_boot_sticky() -> None:
    text = render_template(templar("debian12", enroot_runtime_root="/run/ctr"), "etc/tmpfiles.d/gpuclus-enroot.conf.j2")
    assert "d /run/ctr 1777 root root -" in text.splitlines()


def test_hooks_are_linked_from_enroots_extra_hooks() -> None:
    assert value(templar("debian12"), "__enroot_hook_links") == [
        {
            "path": "/etc/enroot/hooks.d/50-slurm-pmi.sh",
            "state": "link",
            "src": "/usr/share/enroot/hooks.d/50-slurm-pmi.sh",
        },
        {
            "path": "/etc/enroot/hooks.d/50-slurm-pytorch.sh",
            "state": "link",
            "src": "/usr/share/enroot/hooks.d/50-slurm-pytorch.sh",
        },
    ]


# Kernel prerequisites ------------------------------------------------------------------------

KERNEL_CHECK = "Check the kernel lets unprivileged users create user namespaces"
APPARMOR_CHECK = "Check AppArmor lets enroot create user namespaces (Ubuntu 24.04)"


@pytest.mark.parametrize(
    ("kernel", "ok"),
    [((65536, 1, 0), True), ((0, 1, 0), False), ((65536, 0, 0), False), ((65536, None, None), True)],
)
def test_user_namespace_settings(kernel: tuple[int | None, ...], ok: bool) -> None:
    assert passes(templar("debian12", __enroot_probe=probe(kernel=kernel)), KERNEL_CHECK) is ok


def test_ubuntu24_apparmor_restriction_needs_the_profile() -> None:
    restricted = probe(kernel=(65536, None, 1))
    assert passes(templar("ubuntu24", __enroot_probe=restricted), APPARMOR_CHECK)
    assert value(templar("ubuntu24", __enroot_probe=restricted), "__enroot_apparmor_wanted") is True
    refused = templar("ubuntu24", __enroot_probe=restricted, enroot_apparmor_profile=False)
    assert not passes(refused, APPARMOR_CHECK)
    fail_msg = str(
        refused.template(trust_as_template(preflight_task(APPARMOR_CHECK)["ansible.builtin.assert"]["fail_msg"]))
    )
    assert "enroot_apparmor_profile" in fail_msg and "apparmor_restrict_unprivileged_userns = 0" in fail_msg
    assert (
        value(templar("ubuntu24", __enroot_probe=probe(kernel=(65536, None, 0))), "__enroot_apparmor_wanted") is False
    )


def test_a_no_change_run_includes_no_step() -> None:
    t = templar("debian12", __enroot_probe=probe())
    assert value(t, "__enroot_install_stale") is False
    assert value(t, "__enroot_configure_stale") is False
    stale_state = templar("debian12", __enroot_probe=probe(stale_files=["/var/lib/gpuclus/enroot.json"]))
    assert value(stale_state, "__enroot_install_stale") is True
    assert value(stale_state, "__enroot_configure_stale") is False
    stale_conf = templar("debian12", __enroot_probe=probe(stale_files=["/etc/enroot/enroot.conf"]))
    assert value(stale_conf, "__enroot_configure_stale") is True
    # An AppArmor profile nobody needs does not make configure run.
    apparmor = templar("ubuntu24", __enroot_probe=probe(stale_files=["/etc/apparmor.d/enroot"]))
    assert value(apparmor, "__enroot_configure_stale") is False
