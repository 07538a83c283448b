"""`gpuclus init`: from flags, a hosts file or a few questions to a commented spec.

Logic only (no typer, no rich): ``draft`` decides nodes and roles, ``hostsfile``
reads --from-hosts, ``wizard`` asks through injected callables and ``render``
writes the text. The CLI in ``gpuclus.cli.init`` validates and writes it.
"""

from __future__ import annotations

from gpuclus.initspec.draft import (
    DEFAULT_CLUSTER_NAME,
    DEFAULT_EXPORTS,
    DEFAULT_GPUS_PER_NODE,
    DraftNode,
    HostRange,
    SpecDraft,
    default_admin_user,
    default_cluster_name,
    draft_from_flags,
    parse_assignment,
    parse_exports,
    parse_host_range,
    resolve_identity,
)
from gpuclus.initspec.hostsfile import HostLine, HostsFile, SkippedLine, parse_hosts_text, read_hosts_file
from gpuclus.initspec.render import render_spec
from gpuclus.initspec.wizard import Ask, Confirm, Tell, WizardDefaults, run_wizard

__all__ = [
    "DEFAULT_CLUSTER_NAME",
    "DEFAULT_EXPORTS",
    "DEFAULT_GPUS_PER_NODE",
    "Ask",
    "Confirm",
    "DraftNode",
    "HostLine",
    "HostRange",
    "HostsFile",
    "SkippedLine",
    "SpecDraft",
    "Tell",
    "WizardDefaults",
    "default_admin_user",
    "default_cluster_name",
    "draft_from_flags",
    "parse_assignment",
    "parse_exports",
    "parse_host_range",
    "parse_hosts_text",
    "read_hosts_file",
    "render_spec",
    "resolve_identity",
    "run_wizard",
]
