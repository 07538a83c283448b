"""Load a spec: read, parse with positions, validate structure, check meaning.

``load_spec`` never raises for bad content: everything wrong with the spec
comes back as findings with file:line. It raises SpecFileError only when the
file itself cannot be read (missing, directory, binary, huge).

Structure and meaning are reported together. When the schema refuses part of
the spec, the parts that parsed (each section's sound keys, each sound node
entry) still go through the checks, which skip what needs a failed part (see
``checks.SpecView``); ``LoadedSpec.spec`` stays None until the whole spec parses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from gpuclus.spec.checks.registry import run_checks, skipped_checks
from gpuclus.spec.checks.view import SpecView
from gpuclus.spec.models import ClusterSpec, NodeEntry
from gpuclus.spec.topology import Topology, expand_nodes
from gpuclus.users.models import UsersFile
from gpuclus.yamldoc.document import API_VERSION, SpecDocument, load_document, parse_spec_text
from gpuclus.yamldoc.findings import Finding, Loc, error, has_errors, sort_findings
from gpuclus.yamldoc.schema_findings import first_model, meant_key, schema_finding


@dataclass
class LoadedSpec:
    document: SpecDocument
    findings: list[Finding] = field(default_factory=list)
    spec: ClusterSpec | None = None
    topology: Topology | None = None
    # Checks of meaning that need a part the schema refused; they run once it is fixed.
    skipped_checks: list[str] = field(default_factory=list)
    # The users file the spec names (users.file), once it passed its checks.
    users: UsersFile | None = None

    @property
    def ok(self) -> bool:
        return self.spec is not None and self.topology is not None and not has_errors(self.findings)


def load_spec(path: Path) -> LoadedSpec:
    return validate_document(load_document(path))


def load_spec_text(text: str, path: str = "cluster.yaml") -> LoadedSpec:
    return validate_document(parse_spec_text(text, path))


def validate_document(document: SpecDocument) -> LoadedSpec:
    result = LoadedSpec(document=document, findings=list(document.findings))
    data = document.data
    if data is None:
        return result
    if not isinstance(data, dict):
        result.findings.append(
            document.locate(
                error(
                    "not-a-mapping",
                    f"the spec must be a mapping of keys (apiVersion, cluster, nodes, ...), not a {_yaml_kind(data)}",
                    hint="start from `gpuclus init` or an example under inventories/examples/",
                )
            )
        )
        return result

    findings: list[Finding] = []
    version = data.get("apiVersion")
    if version != API_VERSION:
        findings.append(
            error(
                "api-version",
                "apiVersion is missing" if version is None else f"apiVersion {version!r} is not supported",
                ("apiVersion",),
                hint=f"set `apiVersion: {API_VERSION}` as the first line",
            )
        )
    spec: ClusterSpec | None = None
    unsound: set[Loc] = set()
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        details = exc.errors(include_url=False)
        findings.extend(
            finding
            for finding in (schema_finding(detail, ClusterSpec) for detail in details)
            if finding.loc != ("apiVersion",)  # already reported, with a better message
        )
        # A failed key is dropped whole from its section (and a failed entry
        # from `nodes`), so what is unsound is that key or entry, not just
        # the value deep inside it that pydantic names.
        unsound.update(tuple(detail["loc"])[:2] for detail in details)
        # `nsf: {exports: [/home]}` leaves nfs at its defaults: the checks
        # must not read those as what the user wrote under the typo.
        for detail in details:
            meant = meant_key(tuple(detail["loc"]), ClusterSpec) if detail["type"] == "extra_forbidden" else None
            if meant is not None:
                unsound.add((*tuple(detail["loc"])[:-1], meant)[:2])

    # A spec written for another format version would be judged by rules that
    # are not its own; its structure findings are all that can be trusted.
    # A model-level error (empty loc) leaves nothing known to be sound.
    if (version is None or version == API_VERSION) and () not in unsound:
        if spec is not None:
            parts, indexes = spec, list(range(len(spec.nodes)))
        else:
            parts, indexes = _sound_parts(data, unsound)
        topology, expansion_findings = _expand(parts, indexes)
        findings.extend(expansion_findings)
        # An entry whose hostlists do not expand is left out of the topology:
        # checks that count nodes must not take its hosts for missing ones.
        unsound.update(finding.loc[:2] for finding in expansion_findings)
        view = SpecView(
            parts,
            topology,
            tuple(zip(indexes, parts.nodes, strict=True)),
            frozenset(unsound),
            spec_dir=Path(document.path).parent,
        )
        findings.extend(run_checks(view))
        result.skipped_checks = skipped_checks(view)
        if spec is not None:
            result.spec = spec
            result.topology = topology
            if spec.users.file is not None and not any(f.code.startswith("users-") for f in findings):
                # The reading the users_file check judged (it found no error there).
                read = view.users_read.get(view.control_path(spec.users.file))
                result.users = read.users if read is not None and read.ok else None

    result.findings.extend(_locate_all(document, findings))
    result.findings = sort_findings(result.findings)
    return result


def _expand(parts: ClusterSpec, indexes: list[int]) -> tuple[Topology, list[Finding]]:
    """Expand the node entries of ``parts``, whose n-th entry is ``nodes[indexes[n]]`` in the file."""
    topology, findings = expand_nodes(parts)
    if indexes == list(range(len(indexes))):
        return topology, findings
    nodes = tuple(replace(node, entry=indexes[node.entry]) for node in topology.nodes)
    # expand_nodes points every finding at ("nodes", position, ...).
    moved = [replace(f, loc=("nodes", indexes[int(f.loc[1])], *f.loc[2:])) for f in findings]
    return Topology(nodes), moved


def _sound_parts(data: dict[Any, Any], unsound: set[Loc]) -> tuple[ClusterSpec, list[int]]:
    """The spec's parts that passed the schema, and the file index of each node entry kept.

    Keys that failed are left out of their section, so the section takes their
    defaults; a section or node entry that fails as a whole is dropped. The
    checks never read what was replaced: ``unsound`` names it and they skip.
    Built with model_construct because the whole was refused; every part in
    it was validated on its own.
    """
    sections: dict[str, Any] = {}
    for name, info in ClusterSpec.model_fields.items():
        key = info.alias or name
        model = first_model(info.annotation)
        if key == "nodes" or model is None:
            continue
        sections[name] = _sound_section(model, key, data.get(key), unsound)
    entries: list[NodeEntry] = []
    indexes: list[int] = []
    raw_nodes = data.get("nodes")
    if isinstance(raw_nodes, list) and ("nodes",) not in unsound:
        for index, raw in enumerate(raw_nodes):
            if any(loc[:2] == ("nodes", index) for loc in unsound):
                continue
            try:
                entries.append(NodeEntry.model_validate(raw))
            except ValidationError:  # pragma: no cover - the whole spec's validation names every entry
                unsound.add(("nodes", index))
                continue
            indexes.append(index)
    parts = ClusterSpec.model_construct(api_version=API_VERSION, nodes=entries, **sections)
    return parts, indexes


def _sound_section(model: type[BaseModel], key: str, raw: Any, unsound: set[Loc]) -> BaseModel:
    failed = {loc[1] for loc in unsound if len(loc) > 1 and loc[0] == key}
    if (key,) not in unsound and (raw is None or isinstance(raw, dict)):
        kept = {k: v for k, v in (raw or {}).items() if k not in failed}
        try:
            return model.model_validate(kept)
        except ValidationError:  # a rule across the section's keys; none so far
            unsound.add((key,))
    # Never read: every check that reads this section is skipped.
    return model.model_construct()


def _locate_all(document: SpecDocument, findings: list[Finding]) -> list[Finding]:
    located = []
    for finding in findings:
        # An unknown key is best shown at the key itself, not its value.
        prefer_key = finding.code in {"unknown-key", "duplicate-key"}
        located.append(document.locate(finding, prefer_key=prefer_key))
    return sort_findings(located)


def _yaml_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    return type(value).__name__
