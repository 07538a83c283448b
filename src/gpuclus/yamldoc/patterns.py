"""The patterns values in gpuclus' files must match, and what each means in words.

Each is built through ``grammar.ascii_grammar``: explicit ASCII classes ([0-9], not \\d), so that a
look-alike digit or letter is refused in pydantic (Rust's engine), in Python's re and in the roles alike.

The cluster spec's models and the users file's use them as pydantic ``pattern``s; schema_findings turns a
value that missed one into the rule from ``PATTERN_RULES``, which a person can act on.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

from gpuclus.yamldoc.grammar import ABSOLUTE_PATH_BODY, ADDRESS_PATTERN, PATH_COMPONENT, ascii_grammar


def _number_text(value: Any) -> Any:
    # `branch: 550`, `max_time: 60` and `model: 4090` are how people write
    # them; YAML hands us integers.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


NumberText = Annotated[str, BeforeValidator(_number_text, json_schema_input_type=str | int)]


# A DNS label as Slurm and /etc/hosts accept it (at most 63 characters); upper
# case is allowed by DNS but Slurm node names are case sensitive, so we keep
# names lower case.
NODE_NAME_PATTERN = ascii_grammar(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
CLUSTER_NAME_PATTERN = ascii_grammar(r"^[a-z][a-z0-9-]{0,39}$")
USER_PATTERN = ascii_grammar(r"^[a-z_][a-z0-9_-]{0,31}$")
# No '.' or '..' part (grammar.PATH_COMPONENT says why): what is checked is where it lands.
ABSOLUTE_PATH = ascii_grammar(f"^{ABSOLUTE_PATH_BODY}$")
# The same, or / itself: a file system to watch for free space.
DISK_PATH_PATTERN = ascii_grammar(f"^/({PATH_COMPONENT}(/{PATH_COMPONENT})*)?$")
GPU_MODEL_PATTERN = ascii_grammar(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PARTITION_PATTERN = ascii_grammar(r"^[A-Za-z0-9_-]{1,40}$")
# Minutes or days bounded so Slurm's 32-bit time fields cannot overflow.
MAX_TIME_PATTERN = ascii_grammar(
    r"^(UNLIMITED|INFINITE|[0-9]{1,7}|[0-9]{1,5}-[0-9]{1,2}(:[0-9]{1,2}){0,2}|[0-9]{1,6}(:[0-9]{1,2}){1,2})$"
)
VERSION_PATTERN = ascii_grammar(r"^[0-9]+\.[0-9]+(\.[0-9]+)?([-.][0-9A-Za-z.+~-]+)?$")
DRIVER_BRANCH_PATTERN = ascii_grammar(r"^[0-9]{3}$")
CUDA_VERSION_PATTERN = ascii_grammar(r"^[0-9]+\.[0-9]+$")

# Enroot's and Pyxis' release files, by the names NVIDIA publishes them under:
# the packages (enroot and enroot+caps, .deb per dpkg arch, .rpm per uname -m)
# and the source tarballs.
RELEASE_VERSION_PATTERN = ascii_grammar(r"^[0-9]+\.[0-9]+\.[0-9]+$")
_RELEASE_VERSION = r"[0-9]+\.[0-9]+\.[0-9]+"
RELEASE_FILE_PATTERN = ascii_grammar(
    rf"^(enroot(\+caps)?_{_RELEASE_VERSION}-1_(amd64|arm64)\.deb"
    rf"|enroot(\+caps)?-{_RELEASE_VERSION}-1\.el8\.(x86_64|aarch64)\.rpm"
    rf"|(enroot|pyxis)-{_RELEASE_VERSION}-src\.tar\.gz)$"
)
SHA256_PATTERN = ascii_grammar(r"^[0-9a-f]{64}$")

# A pip requirement as it lands in the env's requirements file: a project
# name, optional extras, optional version specifiers; no URLs, options or
# markers, so nothing can redirect pip or pass it a flag.
PIP_REQUIREMENT_PATTERN = ascii_grammar(
    r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?(\[[A-Za-z0-9._,-]+\])?"
    r"((===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!-]+(,(===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!-]+)*)?$"
)
PYTORCH_VERSION_PATTERN = ascii_grammar(r"^[0-9]+\.[0-9]+(\.[0-9]+)?$")
# cpu, or a CUDA build tag as PyTorch's wheel indexes name them (cu118, cu124, cu128, ...).
PYTORCH_FLAVOUR_PATTERN = ascii_grammar(r"^(auto|cpu|cu[0-9]{3})$")
INDEX_URL_PATTERN = ascii_grammar(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%!$&()*+,;=:@/-]*)?$")
NCCL_VARIABLE_PATTERN = ascii_grammar(r"^NCCL_[A-Z0-9_]{1,60}$")
NCCL_VALUE_PATTERN = ascii_grammar(r"^[A-Za-z0-9_.,:=^/+-]{1,200}$")
# A directory server: ldap:// or ldaps://, a host name or IPv4 address, an optional port; no path (sssd
# takes none) and nothing that would end the line in sssd.conf, where the URIs are joined with commas.
LDAP_URI_PATTERN = ascii_grammar(r"^ldaps?://[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?(:[0-9]{1,5})?$")
# A distinguished name of plain RDNs (attribute=value, comma-separated): what sssd.conf can carry on one
# line. Escapes, '+' (multi-valued RDNs), quotes, '#' and ';' are left out on purpose.
LDAP_DN_PATTERN = ascii_grammar(
    r"^[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9_.@-]([A-Za-z0-9_.@ -]*[A-Za-z0-9_.@-])?(,[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9_.@-]([A-Za-z0-9_.@ -]*[A-Za-z0-9_.@-])?)*$"  # noqa: E501
)
LDAP_ATTRIBUTE_PATTERN = ascii_grammar(r"^[A-Za-z][A-Za-z0-9-]{0,63}$")
# A group name for sssd's simple access list (comma-separated there): AD's may hold capitals and spaces.
DIRECTORY_GROUP_PATTERN = ascii_grammar(r"^[A-Za-z0-9_.][A-Za-z0-9_. -]{0,62}[A-Za-z0-9_.]$|^[A-Za-z0-9_.]$")

# What each pattern means, for error messages a person can act on.
PATTERN_RULES = {
    NODE_NAME_PATTERN: "is not a plain lower-case host name",
    CLUSTER_NAME_PATTERN: "must start with a lower-case letter and use only a-z, 0-9 and '-' (at most 40)",
    USER_PATTERN: "is not a valid Linux user name (lower case, digits, '_' and '-')",
    ABSOLUTE_PATH: "must be an absolute path of letters, digits and '_', '.', '+', '@', '-' "
    "(no spaces, quotes, ',', ';', '#', braces, a trailing '/', or '.' or '..' parts, which would make it "
    "land elsewhere than it reads)",
    DISK_PATH_PATTERN: "must be / or an absolute path of letters, digits and '_', '.', '+', '@', '-' "
    "(no spaces, quotes, a trailing '/', or '.' or '..' parts)",
    GPU_MODEL_PATTERN: "must be a short name without spaces, e.g. h100 (it becomes the Slurm GRES type)",
    PARTITION_PATTERN: "may use only letters, digits, '_' and '-' (at most 40)",
    MAX_TIME_PATTERN: "is not a Slurm time (UNLIMITED, minutes, or days-hours:minutes:seconds)",
    VERSION_PATTERN: "is not a version like 22.05.8",
    DRIVER_BRANCH_PATTERN: "is not a driver branch like 550",
    CUDA_VERSION_PATTERN: "is not a version like 12.4",
    RELEASE_VERSION_PATTERN: "is not a release version like 4.1.2 (major.minor.patch)",
    RELEASE_FILE_PATTERN: "is not the name of an Enroot or Pyxis release file (enroot_<v>-1_amd64.deb, "
    "enroot-<v>-1.el8.x86_64.rpm, enroot-<v>-src.tar.gz, pyxis-<v>-src.tar.gz, ...)",
    SHA256_PATTERN: "is not a sha256 (64 lower-case hex digits, as sha256sum prints it)",
    PIP_REQUIREMENT_PATTERN: "is not a plain pip requirement (a name and optional version specifiers, e.g. "
    "'tqdm' or 'transformers==4.44.2'; no URLs, options or markers)",
    PYTORCH_VERSION_PATTERN: "is not a PyTorch version like 2.13.0",
    PYTORCH_FLAVOUR_PATTERN: "is not a PyTorch build: auto, cpu, or a CUDA tag such as cu124",
    INDEX_URL_PATTERN: "is not an http(s) URL without spaces or quotes",
    NCCL_VARIABLE_PATTERN: "is not an NCCL variable name (NCCL_ and upper-case letters, digits, '_')",
    NCCL_VALUE_PATTERN: "may use only letters, digits and '_', '.', ',', ':', '=', '^', '/', '+', '-'",
    LDAP_URI_PATTERN: "is not a directory server URI: ldap://HOST or ldaps://HOST, an optional :PORT, no path",
    LDAP_DN_PATTERN: "is not a plain distinguished name such as dc=example,dc=org (attribute=value pairs joined "
    "by ','; values of letters, digits, spaces inside, '_', '.', '@', '-'; no escapes, quotes or '+')",
    LDAP_ATTRIBUTE_PATTERN: "is not an LDAP attribute name (a letter, then letters, digits and '-')",
    DIRECTORY_GROUP_PATTERN: "is not a group name sssd's access list can hold (letters, digits, '_', '.', '-', "
    "spaces inside; no commas)",
}


# The grammars the roles' preflight asserts share with the spec, by the name they have in group_vars'
# `gpuclus_patterns` (render writes them into group_vars/all/cluster.yml; a role reads
# `gpuclus_patterns.<name>` instead of spelling its own copy).
ROLE_PATTERNS = {
    "absolute_path": ABSOLUTE_PATH,
    "disk_path": DISK_PATH_PATTERN,
    "node_name": NODE_NAME_PATTERN,
    "address": ADDRESS_PATTERN,
    "release_version": RELEASE_VERSION_PATTERN,
    "sha256": SHA256_PATTERN,
    "user_name": USER_PATTERN,
    "partition": PARTITION_PATTERN,
    "gpu_model": GPU_MODEL_PATTERN,
    "nccl_variable": NCCL_VARIABLE_PATTERN,
    "nccl_value": NCCL_VALUE_PATTERN,
    "index_url": INDEX_URL_PATTERN,
    "ldap_uri": LDAP_URI_PATTERN,
    "ldap_attribute": LDAP_ATTRIBUTE_PATTERN,
    "driver_branch": DRIVER_BRANCH_PATTERN,
    "cuda_version": CUDA_VERSION_PATTERN,
    "slurm_version": VERSION_PATTERN,
    "pip_requirement": PIP_REQUIREMENT_PATTERN,
}


def ansible_form(pattern: str) -> str:
    """``pattern`` as a role's `is match(...)` must read it: ending in \\Z, since $ also matches before a
    trailing newline (pydantic's patterns are matched on a str without one; a role's input may carry one)."""
    if not (pattern.startswith("^") and pattern.endswith("$")):
        raise ValueError(f"{pattern!r} is not anchored at both ends")
    return pattern[:-1] + r"\Z"
