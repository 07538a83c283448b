"""The pyxis role's per-OS choices and its rebuild decision, rendered as Ansible renders them.

The package that says which Slurm is installed, the development package pinned
to exactly that version, the plugin directory, plugstack.conf and pyxis.conf,
and whether a run rebuilds, are data (roles/pyxis/vars/<OS family>.yml) plus
the decisions in vars/main.yml, read from the probe's answer. Here they are
rendered with Ansible's Templar from recorded probe output (dpkg-query and rpm
as they answer), and the preflight asserts are evaluated. No node and no
compiler: the build itself was proved by hand (roles/pyxis/README.md).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, first_found_vars_file, first_refusal, role_templar
from test_nvidia_driver_choices import OSES, value

from gpuclus.release_files import group_vars_names
from gpuclus.yamldoc.patterns import ROLE_PATTERNS, ansible_form

ROLE_GROUP_VARS_PATTERNS = {name: ansible_form(pattern) for name, pattern in ROLE_PATTERNS.items()}

ROLE = "pyxis"
VARS_FILES = {
    "ubuntu22": "Debian.yml",
    "ubuntu24": "Debian.yml",
    "debian12": "Debian.yml",
    "debian13": "Debian.yml",
    "rocky9": "RedHat.yml",
}
SHA = "3dde120848c20b691535951e1706e0375d0fe7151a609e366da5b0d8ed6a6483"
DEBIAN_SLURM = "22.05.8-4+deb12u3"
ROCKY_SLURM = "22.05.9-1.el9"
DEBIAN_PLUGIN = "/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so"
ROCKY_PLUGIN = "/usr/lib64/slurm/spank_pyxis.so"
DF_TMPFS = (
    "Filesystem     Type  1024-blocks  Used Available Capacity Mounted on\n"
    "tmpfs          tmpfs    12342044    36  12342008       1% /run\n"
)
INPUTS = {
    "gpuclus_patterns": ROLE_GROUP_VARS_PATTERNS,
    "pyxis_artifacts_dir": "/work/shared/artifacts",
    "gpuclus_apt_cache_valid_time": 3600,
    "gpuclus_containers_artifacts_dir": None,
    "gpuclus_containers_checksums": {},
    "gpuclus_containers_allow_unverified_downloads": False,
}


def dpkg(**versions: str) -> str:
    """dpkg-query's answer for the installed packages given (name=version)."""
    return "".join(f"{name.replace('_', '-')}\t{version}\tii \n" for name, version in versions.items())


def record(slurm: str = DEBIAN_SLURM, sha: str = SHA, version: str = "0.24.0", plugin: str = DEBIAN_PLUGIN) -> str:
    """The record a run on Debian writes, as the role's copy task writes it (found on the node by cat)."""
    return (
        "{\n"
        f'  "plugin": "{plugin}",\n'
        f'  "pyxis_version": "{version}",\n'
        '  "slurm_package": "slurm-wlm-basic-plugins",\n'
        f'  "slurm_version": "{slurm}",\n'
        f'  "source_sha256": "{sha}"\n'
        "}\n"
    )


def probe(
    versions: str = "", recorded: str = "", stale_files: list[str] | None = None, df: str = DF_TMPFS
) -> dict[str, Any]:
    return {
        "stale": {"files": stale_files or [], "packages": [], "units": ["slurmd"], "fstab": []},
        "found": {
            "commands": [
                {"rc": 0, "stdout": versions, "stderr": ""},
                {"rc": 0 if recorded else 1, "stdout": recorded, "stderr": ""},
                {"rc": 0, "stdout": df, "stderr": ""},
            ],
            "users": {},
            "units": {"slurmd": "loaded"},
        },
    }


CONVERGED = probe(dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM, libslurm_dev=DEBIAN_SLURM), record())


def templar(os_name: str, **inputs: Any) -> Templar:
    # What render writes for the version: the version and its tarball's name (gpuclus/release_files.py).
    version = str(inputs.pop("pyxis_version", "0.24.0"))
    rendered = {"gpuclus_pyxis_version": version, **group_vars_names("4.1.2", version)}
    extra = {**INPUTS, **rendered, "__pyxis_artifact_stat": {"stat": {"exists": True, "isreg": True, "checksum": SHA}}}
    extra.update(inputs)
    return role_templar(ROLE, VARS_FILES[os_name], OSES[os_name], **extra)


def test_vars_files_are_the_ones_first_found_picks() -> None:
    for os_name, expected in VARS_FILES.items():
        assert first_found_vars_file(ROLE, templar(os_name)) == expected, os_name


# Per OS: which Slurm, which development package, where the plugin goes ------------------


@pytest.mark.parametrize("os_name", ["debian12", "ubuntu22", "ubuntu24"])
def test_apt_pins_libslurm_dev_to_the_installed_plugins(os_name: str) -> None:
    # The development package is older than the plugins (Slurm upgraded since): stale, pinned to the plugins' version.
    answer = dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM, libslurm_dev="22.05.8-4")
    t = templar(os_name, __pyxis_probe=probe(answer))
    assert value(t, "__pyxis_version_query")[-2:] == ["slurm-wlm-basic-plugins", "libslurm-dev"]
    assert value(t, "__pyxis_slurm_version") == DEBIAN_SLURM
    assert value(t, "__pyxis_dev_spec") == f"libslurm-dev={DEBIAN_SLURM}"
    assert value(t, "__pyxis_dev_stale") is True
    assert value(t, "__pyxis_build_packages") == ["gcc", "make", "libc6-dev"]
    assert value(t, "__pyxis_plugin") == DEBIAN_PLUGIN


def test_rocky_pins_slurm_devel_to_the_installed_slurm() -> None:
    # rpm's answer for an installed slurm and a missing slurm-devel.
    answer = f"slurm\t{ROCKY_SLURM}\tii\npackage slurm-devel is not installed\n"
    t = templar("rocky9", __pyxis_probe=probe(answer))
    assert value(t, "__pyxis_version_query")[0] == "rpm"
    assert value(t, "__pyxis_slurm_version") == ROCKY_SLURM
    assert value(t, "__pyxis_dev_version") is None
    assert value(t, "__pyxis_dev_spec") == f"slurm-devel-{ROCKY_SLURM}"
    assert value(t, "__pyxis_dev_stale") is True
    assert value(t, "__pyxis_plugin") == ROCKY_PLUGIN
    assert value(t, "__pyxis_conf") == "/etc/slurm/plugstack.conf.d/pyxis.conf"


def test_a_held_package_counts_as_installed() -> None:
    # slurm_common holds Slurm at the spec's version: dpkg says "hi ".
    answer = f"slurm-wlm-basic-plugins\t{DEBIAN_SLURM}\thi \nlibslurm-dev\t{DEBIAN_SLURM}\thi \n"
    t = templar("debian12", __pyxis_probe=probe(answer))
    assert value(t, "__pyxis_slurm_version") == DEBIAN_SLURM
    assert value(t, "__pyxis_dev_stale") is False


def test_removed_but_configured_is_not_installed() -> None:
    # "rc": removed, configuration files left; no Slurm to build against.
    t = templar("debian12", __pyxis_probe=probe(f"slurm-wlm-basic-plugins\t{DEBIAN_SLURM}\trc \n"))
    assert value(t, "__pyxis_slurm_version") is None


# The files ---------------------------------------------------------------------------------


def conf(os_name: str, template: str, **inputs: Any) -> str:
    source = (ROLES / ROLE / "templates" / template).read_text()
    return str(templar(os_name, **inputs).template(trust_as_template(source)))


@pytest.mark.parametrize(("os_name", "plugin"), [("debian12", DEBIAN_PLUGIN), ("rocky9", ROCKY_PLUGIN)])
def test_pyxis_conf_per_os(os_name: str, plugin: str) -> None:
    text = conf(os_name, "etc/slurm/plugstack.conf.d/pyxis.conf.j2")
    assert text.startswith("# managed by gpuclus — edits are overwritten\n")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == [
        f"required {plugin} runtime_path=/run/pyxis execute_entrypoint=0 container_scope=global "
        "sbatch_support=1 use_enroot_load=0 use_squashfuse=0"
    ]


def test_pyxis_arguments_follow_the_inputs() -> None:
    text = conf(
        "ubuntu24",
        "etc/slurm/plugstack.conf.d/pyxis.conf.j2",
        pyxis_runtime_path="/var/lib/pyxis",
        pyxis_execute_entrypoint=True,
        pyxis_container_scope="job",
        pyxis_sbatch_support=False,
        pyxis_importer="/usr/local/libexec/pyxis-importer.sh",
    )
    assert text.splitlines()[-1] == (
        f"required {DEBIAN_PLUGIN} runtime_path=/var/lib/pyxis execute_entrypoint=1 container_scope=job "
        "sbatch_support=0 use_enroot_load=0 use_squashfuse=0 importer=/usr/local/libexec/pyxis-importer.sh"
    )


def test_plugstack_conf_is_one_include() -> None:
    text = conf("debian12", "etc/slurm/plugstack.conf.j2")
    assert text.startswith("# managed by gpuclus")
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "include /etc/slurm/plugstack.conf.d/*.conf"
    ]


def test_the_plugin_and_the_files_are_probed() -> None:
    t = templar("rocky9")
    assert value(t, "__pyxis_config_files") == [
        "/etc/slurm/plugstack.conf",
        "/etc/slurm/plugstack.conf.d",
        "/etc/slurm/plugstack.conf.d/pyxis.conf",
    ]
    assert value(t, "__pyxis_record_file") == "/var/lib/gpuclus/pyxis.json"


# The rebuild decision ----------------------------------------------------------------------


def test_a_converged_node_rebuilds_nothing() -> None:
    t = templar("debian12", __pyxis_probe=CONVERGED)
    assert value(t, "__pyxis_record_text") == record()
    assert value(t, "__pyxis_rebuild") is False
    assert value(t, "__pyxis_config_stale") is False


@pytest.mark.parametrize(
    ("why", "found", "inputs"),
    [
        ("no record yet", probe(dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM)), {}),
        ("slurm upgraded", probe(dpkg(slurm_wlm_basic_plugins="22.05.9-1"), record()), {}),
        ("another pyxis", CONVERGED, {"pyxis_version": "0.25.0"}),
        ("another tarball", CONVERGED, {"__pyxis_artifact_stat": {"stat": {"checksum": "0" * 64}}}),
        (
            "plugin removed",
            probe(dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM), record(), stale_files=[DEBIAN_PLUGIN]),
            {},
        ),
    ],
)
def test_rebuild_when_an_input_changed(why: str, found: dict[str, Any], inputs: dict[str, Any]) -> None:
    t = templar("debian12", __pyxis_probe=found, **inputs)
    assert value(t, "__pyxis_rebuild") is True, why


def test_a_download_is_keyed_by_the_given_sha256() -> None:
    base = {"pyxis_artifacts_dir": None, "__pyxis_probe": CONVERGED}
    assert value(templar("debian12", pyxis_sha256=SHA, **base), "__pyxis_rebuild") is False
    unverified = templar("debian12", pyxis_allow_unverified_download=True, **base)
    assert value(unverified, "__pyxis_source_sha256") == "unverified"
    assert value(unverified, "__pyxis_rebuild") is True


def test_a_config_change_alone_rewrites_without_a_rebuild() -> None:
    found = probe(
        dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM), record(), stale_files=["/etc/slurm/plugstack.conf.d/pyxis.conf"]
    )
    t = templar("debian12", __pyxis_probe=found)
    assert value(t, "__pyxis_rebuild") is False
    assert value(t, "__pyxis_config_stale") is True


# Refusals ----------------------------------------------------------------------------------


def refusals(os_name: str, **inputs: Any) -> list[str]:
    """The fail_msg of the first preflight assert that fails (Ansible stops there)."""
    tasks = yaml.safe_load((ROLES / ROLE / "tasks" / "preflight.yml").read_text())
    t = templar(os_name, **{"__pyxis_probe": CONVERGED, **inputs})
    return first_refusal(t, [task for task in tasks if "ansible.builtin.assert" in task])


@pytest.mark.parametrize("os_name", list(OSES))
def test_defaults_with_artifacts_pass_preflight(os_name: str) -> None:
    installed = f"slurm\t{ROCKY_SLURM}\tii\n" if os_name == "rocky9" else dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM)
    assert refusals(os_name, __pyxis_probe=probe(installed)) == []


def test_a_node_without_slurm_is_refused() -> None:
    messages = refusals("debian12", __pyxis_probe=probe(""))
    assert messages == [
        "gpu01 has no slurm-wlm-basic-plugins package installed: pyxis is compiled against the node's installed "
        "Slurm release. Run the slurm phase first (gpuclus deploy --only slurm)."
    ]


def test_check_mode_on_a_fresh_node_skips_the_build_instead() -> None:
    t = templar("debian12", ansible_check_mode=True, __pyxis_probe=probe(""))
    assert refusals("debian12", ansible_check_mode=True, __pyxis_probe=probe("")) == []
    assert value(t, "__pyxis_check_mode_no_slurm") is True


def test_an_unverified_download_is_refused() -> None:
    messages = refusals("debian12", pyxis_artifacts_dir=None)
    assert len(messages) == 1 and messages[0].startswith("pyxis_sha256 is not set: the role will not build")
    assert refusals("debian12", pyxis_artifacts_dir=None, pyxis_allow_unverified_download=True) == []


def test_an_artifact_with_another_sha256_is_refused() -> None:
    messages = refusals("debian12", pyxis_sha256="a" * 64)
    assert messages and f"has sha256 {SHA}, not pyxis_sha256" in messages[0]


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("pyxis_runtime_path", "run/pyxis"),
        ("pyxis_runtime_path", "/run/py xis"),
        ("pyxis_runtime_path", "/run/pyxis#x"),
        ("pyxis_runtime_path", "/run/../etc"),
        ("pyxis_runtime_path", "/run/pyxis\n"),
        ("pyxis_importer", "/opt/imp orter"),
        ("pyxis_container_scope", "node"),
        ("pyxis_sbatch_support", "maybe"),
        ("pyxis_version", "v0.24.0"),
        ("pyxis_sha256", "ABC"),
        ("pyxis_url", "http://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"),
    ],
)
def test_bad_inputs_are_refused(name: str, bad: str) -> None:
    messages = refusals("debian12", **{name: bad})
    assert messages and messages[0].startswith("pyxis_version must be X.Y.Z")


def test_a_small_tmpfs_runtime_path_is_refused() -> None:
    small = DF_TMPFS.replace("12342008", "512000")
    found = probe(dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM), record(), df=small)
    messages = refusals("debian12", __pyxis_probe=found)
    assert messages and messages[0].startswith("/run/pyxis is on a tmpfs with 500 MiB free on gpu01")
    assert refusals("debian12", __pyxis_probe=found, pyxis_runtime_min_free_mb=0) == []
    on_disk = probe(
        dpkg(slurm_wlm_basic_plugins=DEBIAN_SLURM),
        record(),
        df="Filesystem Type 1024-blocks Used Available Capacity Mounted on\n/dev/sda1 ext4 100 0 100 1% /\n",
    )
    assert refusals("debian12", __pyxis_probe=on_disk) == []
