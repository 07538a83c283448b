"""Per-release data in the roles: which vars file each Debian release gets, and what it changes.

Rendered with Ansible's Templar from the role's own defaults, vars and templates
(role_templates.py): no node. Debian 12 and 13 both run for real on the sandbox
(`sandbox up --os`); this pins the choices that differ between them.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible.template import Templar, trust_as_template
from role_templates import ROLES, first_found_vars_file, role_templar

DEBIAN = {
    "debian12": {"distribution": "Debian", "distribution_major_version": "12", "os_family": "Debian"},
    "debian13": {"distribution": "Debian", "distribution_major_version": "13", "os_family": "Debian"},
}
IN_CONTAINER = {"virtualization_role": "guest", "virtualization_type": "podman"}
EXPORT = {"path": "/srv/nfs/shared", "mount": "/shared", "options": "rw,sync,no_subtree_check,root_squash"}
NFS_INPUTS: dict[str, Any] = {
    "gpuclus_nfs_server_impl": "ganesha",
    "gpuclus_nfs_exports": [EXPORT],
    "gpuclus_nfs_clients": ["10.0.0.11"],
    "gpuclus_apt_cache_valid_time": 3600,
    "gpuclus_package_lock_timeout": 60,
}


def nfs_templar(release: str, facts: dict[str, str]) -> Templar:
    base = role_templar("nfs_server", "Debian.yml", {**DEBIAN[release], **facts}, **NFS_INPUTS)
    chosen = first_found_vars_file("nfs_server", base)
    return role_templar("nfs_server", chosen, {**DEBIAN[release], **facts}, **NFS_INPUTS)


def ganesha_conf(t: Templar) -> str:
    source = (ROLES / "nfs_server" / "templates" / "etc" / "ganesha" / "ganesha.conf.j2").read_text()
    return str(t.template(trust_as_template(source)))


@pytest.mark.parametrize(("release", "expected"), [("debian12", "Debian.yml"), ("debian13", "Debian-13.yml")])
def test_nfs_server_picks_its_release_table(release: str, expected: str) -> None:
    base = role_templar("nfs_server", "Debian.yml", DEBIAN[release], **NFS_INPUTS)
    assert first_found_vars_file("nfs_server", base) == expected


@pytest.mark.parametrize(
    ("release", "facts", "allowed"),
    [
        ("debian13", IN_CONTAINER, True),  # ganesha 6 in a container without CAP_SYS_RESOURCE: must be told
        ("debian13", {}, False),  # a real server has the capability: nothing to allow
        ("debian12", IN_CONTAINER, False),  # ganesha 4.3 does not know the option
    ],
)
def test_ganesha_may_start_without_the_io_flusher_only_where_it_must(
    release: str, facts: dict[str, str], allowed: bool
) -> None:
    text = ganesha_conf(nfs_templar(release, facts))
    core = text[text.index("NFS_CORE_PARAM {") : text.index("}", text.index("NFS_CORE_PARAM {"))]
    assert ("Allow_Set_IO_Flusher_Fail = true;" in core) is allowed, core
    assert "Protocols = 3, 4;" in core


@pytest.mark.parametrize("release", ["debian12", "debian13"])
def test_enroot_shares_one_debian_table(release: str) -> None:
    t = role_templar("enroot", "Debian.yml", DEBIAN[release])
    assert first_found_vars_file("enroot", t) == "Debian.yml"


@pytest.mark.parametrize(
    ("release", "table", "pmix", "pinned_libraries"),
    [
        ("debian12", "Debian.yml", "libpmix2", "libpmi0 libpmi2-0"),
        # trixie's 64-bit time_t transition renamed the libraries (as on Ubuntu 24.04).
        ("debian13", "Debian-13.yml", "libpmix2t64", "libpmi0t64 libpmi2-0t64"),
    ],
)
def test_slurm_common_names_each_release_packages(release: str, table: str, pmix: str, pinned_libraries: str) -> None:
    base = role_templar("slurm_common", "Debian.yml", DEBIAN[release])
    assert first_found_vars_file("slurm_common", base) == table
    t = role_templar("slurm_common", table, DEBIAN[release])
    assert pmix in t.template(trust_as_template("{{ __slurm_common_packages.common }}"))
    assert str(t.template(trust_as_template("{{ __slurm_common_pin_globs }}"))).endswith(pinned_libraries)
