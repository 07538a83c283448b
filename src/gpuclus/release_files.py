"""The names of Enroot's and Pyxis' release files: the one place that spells them.

spec checks (what containers.artifacts_dir must hold, which downloads need a checksum), the checksum table
(release_checksums) and render read these functions; render writes `group_vars_names()` into
group_vars/all/containers.yml, and the enroot and pyxis roles (and playbooks/containers.yml's checksum lookup)
read the names from there instead of building them again. The names are the ones NVIDIA publishes: Enroot's
doc/installation.md ("From packages", standard flavour; one el8 build serves EL8 and EL9) and the source
tarballs as gpuclus names them (GitHub's archive of tag v<version> for Pyxis).
"""

from __future__ import annotations

# Enroot's two packages: the plain one and the one with file capabilities on its helpers.
ENROOT_PACKAGES = ("enroot", "enroot+caps")
# Debian's architecture names (dpkg --print-architecture) by `uname -m`, the machines Enroot is released for.
DEB_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
# The package managers the enroot role installs release packages with (its vars/<OS>.yml __enroot_family).
FAMILIES = ("apt", "dnf")


def _deb(package: str, version: str, deb_arch: str) -> str:
    return f"{package}_{version}-1_{deb_arch}.deb"


def _rpm(package: str, version: str, machine: str) -> str:
    return f"{package}-{version}-1.el8.{machine}.rpm"


def enroot_package_file(version: str, *, family: str, machine: str, package: str = "enroot") -> str:
    """The release package a node with this package manager and `uname -m` installs."""
    if family == "apt":
        return _deb(package, version, DEB_ARCHES[machine])
    if family == "dnf":
        return _rpm(package, version, machine)
    raise ValueError(f"no Enroot release packages for package manager {family!r}")


def enroot_package_files(version: str, *, caps: bool = False) -> tuple[str, ...]:
    """Every release package of ``version``: each package manager and machine, the +caps ones when asked."""
    packages = ENROOT_PACKAGES if caps else ENROOT_PACKAGES[:1]
    return tuple(
        enroot_package_file(version, family=family, machine=machine, package=package)
        for package in packages
        for family in FAMILIES
        for machine in DEB_ARCHES
    )


def enroot_source_file(version: str) -> str:
    """Enroot's source tarball in an artifacts directory (top directory enroot-<version>/, deps/ filled in)."""
    return f"enroot-{version}-src.tar.gz"


def pyxis_source_file(version: str) -> str:
    """Pyxis' source tarball: in an artifacts directory, and the name its download is checked under."""
    return f"pyxis-{version}-src.tar.gz"


def enroot_artifact_patterns(version: str) -> tuple[str, ...]:
    """What an artifacts directory may hold for Enroot (fnmatch): its source tarball, or a package of any machine."""
    return (enroot_source_file(version), _deb("enroot", version, "*"), _rpm("enroot", version, "*"))


def group_vars_names(enroot_version: str, pyxis_version: str) -> dict[str, object]:
    """The names render writes for the roles: Enroot's by package manager, `uname -m` and package, and Pyxis'."""
    packages = {
        family: {
            machine: {
                package: enroot_package_file(enroot_version, family=family, machine=machine, package=package)
                for package in ENROOT_PACKAGES
            }
            for machine in sorted(DEB_ARCHES)
        }
        for family in FAMILIES
    }
    return {
        "gpuclus_pyxis_release_file": pyxis_source_file(pyxis_version),
        "gpuclus_enroot_release_files": {"source": enroot_source_file(enroot_version), "packages": packages},
    }
