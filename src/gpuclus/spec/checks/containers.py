"""Containers: Pyxis with Enroot, the artifacts directory's release files, registry credentials, checked downloads."""

from __future__ import annotations

import fnmatch

from gpuclus.spec.checks.control_files import read_secret_file, shown
from gpuclus.spec.checks.view import RegisteredCheck, SpecView, registrar
from gpuclus.spec.credentials import MAX_BYTES as CREDENTIALS_MAX_BYTES
from gpuclus.spec.credentials import credentials_problems
from gpuclus.yamldoc.findings import Finding, Loc, error

CHECKS: list[RegisteredCheck] = []
_check = registrar(CHECKS)


@_check(("containers",))
def containers(view: SpecView) -> list[Finding]:
    if view.spec.containers.pyxis and not view.spec.containers.enroot:
        return [
            error(
                "pyxis-without-enroot",
                "containers.pyxis needs containers.enroot",
                ("containers", "pyxis"),
                hint="set enroot: true, or pyxis: false",
            )
        ]
    return []


def _containers(*keys: str) -> tuple[Loc, ...]:
    return tuple(("containers", key) for key in keys)


@_check(*_containers("artifacts_dir"))
def artifacts_dir_missing(view: SpecView) -> list[Finding]:
    value = view.spec.containers.artifacts_dir
    if value is None:
        return []
    path = view.control_path(value)
    if path.is_dir():
        return []
    what = "does not exist" if not path.exists() else "is not a directory"
    return [
        error(
            "artifacts-dir-missing",
            f"containers.artifacts_dir {value!r} {what}",
            ("containers", "artifacts_dir"),
            hint=f"it resolves to {shown(path)} (a relative path is relative to the spec's directory); "
            "create it with Enroot's and Pyxis' release files, or fix the path",
        )
    ]


def expected_artifacts(enroot_version: str, pyxis_version: str) -> dict[str, tuple[str, ...]]:
    """The file name patterns (fnmatch) artifacts_dir must hold one of, per component (release_files names them)."""
    from gpuclus.release_files import enroot_artifact_patterns, pyxis_source_file

    return {"enroot": enroot_artifact_patterns(enroot_version), "pyxis": (pyxis_source_file(pyxis_version),)}


@_check(*_containers("artifacts_dir", "enroot", "pyxis", "enroot_version", "pyxis_version"))
def artifacts_incomplete(view: SpecView) -> list[Finding]:
    containers = view.spec.containers
    if containers.artifacts_dir is None:
        return []
    path = view.control_path(containers.artifacts_dir)
    if not path.is_dir():
        return []  # artifacts-dir-missing
    try:
        names = sorted(entry.name for entry in path.iterdir())
    except OSError as exc:
        return [
            error(
                "artifacts-incomplete",
                f"containers.artifacts_dir {containers.artifacts_dir!r} cannot be read ({exc.strerror})",
                ("containers", "artifacts_dir"),
                hint=f"let the user running gpuclus read {shown(path)}",
            )
        ]
    wanted = {"enroot": containers.enroot, "pyxis": containers.pyxis}
    missing: list[str] = []
    for component, patterns in expected_artifacts(containers.enroot_version, containers.pyxis_version).items():
        if wanted[component] and not any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns):
            missing.append(" or ".join(patterns))
    if not missing:
        return []
    return [
        error(
            "artifacts-incomplete",
            f"containers.artifacts_dir holds no {'; and no '.join(missing)}",
            ("containers", "artifacts_dir"),
            hint=f"put the release files in {shown(path)} (enroot_<v>-1_<arch>.deb from "
            "github.com/NVIDIA/enroot/releases, pyxis-<v>-src.tar.gz as github.com/NVIDIA/pyxis tags it), "
            "or change enroot_version / pyxis_version to the ones it holds",
        )
    ]


@_check(*_containers("credentials_file"))
def credentials_file(view: SpecView) -> list[Finding]:
    value = view.spec.containers.credentials_file
    if value is None:
        return []
    loc: Loc = ("containers", "credentials_file")
    data, findings = read_secret_file(
        view,
        value,
        loc,
        code="credentials-file",
        max_bytes=CREDENTIALS_MAX_BYTES,
        too_large=f"holds more than {CREDENTIALS_MAX_BYTES // 1024} KiB, far more than a list of registries",
        what="the credentials file itself",
        wanted="Enroot's credentials file, one `machine HOST login USER password PASSWORD` line each",
        holds="registry passwords",
    )
    if data is None:
        return findings
    # Only line numbers and word counts: every token of the file is a secret or names one.
    problems = credentials_problems(data)
    shown = problems[:MAX_CREDENTIAL_PROBLEMS]
    for number, problem in shown:
        where = f"line {number}: " if number else ""
        findings.append(
            error(
                "credentials-file-grammar",
                f"containers.credentials_file {where}{problem}",
                loc,
                hint="each line is `machine HOST login USER password PASSWORD` (Enroot's format), "
                "a '#' comment, or blank",
            )
        )
    if len(problems) > len(shown):
        findings.append(
            error(
                "credentials-file-grammar",
                f"containers.credentials_file has {len(problems) - len(shown)} more line(s) Enroot cannot read",
                loc,
                hint="fix the lines above first",
            )
        )
    return findings


# A credentials file of nothing but bad lines gives this many findings, then one that counts the rest.
MAX_CREDENTIAL_PROBLEMS = 10


@_check(
    *_containers(
        "enroot", "pyxis", "enroot_version", "pyxis_version", "artifacts_dir", "checksums", "allow_unverified_downloads"
    )
)
def downloads_unverified(view: SpecView) -> list[Finding]:
    """A download without a checksum: neither the spec's checksums nor gpuclus' own table has one for it.

    Enroot counts as checked with a checksum for any of its release packages of the version (which one a
    node downloads depends on its architecture, unknown here; the role refuses the others at deploy time).
    """
    from gpuclus.release_checksums import known_checksums
    from gpuclus.release_files import enroot_package_file, enroot_package_files, pyxis_source_file

    containers = view.spec.containers
    if not (containers.enroot or containers.pyxis):
        return []
    if containers.artifacts_dir is not None or containers.allow_unverified_downloads:
        return []
    have = set(containers.checksums) | set(known_checksums(containers.enroot_version, containers.pyxis_version))
    # Each missing download, with the file name the hint asks a checksum for.
    missing: dict[str, str] = {}
    if containers.enroot and not have & set(enroot_package_files(containers.enroot_version)):
        missing[f"Enroot {containers.enroot_version}"] = enroot_package_file(
            containers.enroot_version, family="apt", machine="x86_64"
        )
    if containers.pyxis and pyxis_source_file(containers.pyxis_version) not in have:
        missing[f"Pyxis {containers.pyxis_version}"] = pyxis_source_file(containers.pyxis_version)
    if not missing:
        return []
    files = list(missing.values())
    return [
        error(
            "downloads-unverified",
            f"containers: without artifacts_dir, each node downloads {' and '.join(missing)} from GitHub, "
            "and gpuclus knows no checksum for that version",
            ("containers",),
            hint=f"add containers.checksums ({', '.join(f'{name}: <sha256>' for name in files)}), "
            "set containers.artifacts_dir (offline), or containers.allow_unverified_downloads: true",
        )
    ]
