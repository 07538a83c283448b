"""Read a spec file into plain data while keeping every value's position.

PyYAML's composer gives us nodes with marks; we construct the data from the
same node tree and record, for each path, where its key and value start. That
is what lets a pydantic ``loc`` become ``cluster.yaml:12``. Duplicate keys,
which PyYAML silently merges, are reported here as findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuclus.spec.findings import Finding, Loc, error

# A real spec is a few kilobytes even for a thousand nodes written out one per
# entry; anything far bigger is the wrong file, and we refuse before parsing.
MAX_SPEC_BYTES = 2 * 1024 * 1024


class SpecFileError(Exception):
    """The file cannot be read as a spec at all (missing, directory, ...).

    ``usage`` is true when the problem is how gpuclus was called (exit 2),
    false when the file exists but its content is unusable (exit 3).
    """

    def __init__(self, message: str, hint: str | None = None, *, usage: bool) -> None:
        super().__init__(message)
        self.hint = hint
        self.usage = usage


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based


@dataclass
class SpecDocument:
    """A spec's text, its data and where each value sits in the text."""

    path: str
    text: str
    data: Any
    value_positions: dict[Loc, Position] = field(default_factory=dict)
    key_positions: dict[Loc, Position] = field(default_factory=dict)
    container_locs: set[Loc] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)

    def position(self, loc: Loc, *, prefer_key: bool = False) -> Position | None:
        """Where ``loc`` is written; falls back to its nearest written parent.

        A missing key has no position of its own, so the mapping that should
        hold it is the best place to point at.
        """
        # A value left to its default has no line; the document's first line
        # would only mislead, so the root is used only for root findings.
        for length in range(len(loc), 0 if loc else -1, -1):
            prefix = loc[:length]
            if prefer_key and prefix in self.key_positions:
                return self.key_positions[prefix]
            if prefix in self.value_positions:
                # A scalar is shown at its value; a mapping or list at its key,
                # which reads better than its first child.
                if prefix in self.container_locs:
                    return self.key_positions.get(prefix, self.value_positions[prefix])
                return self.value_positions[prefix]
        return None

    def source_line(self, line: int) -> str | None:
        lines = self.text.splitlines()
        if 1 <= line <= len(lines):
            return lines[line - 1]
        return None

    def locate(self, finding: Finding, *, prefer_key: bool = False) -> Finding:
        position = self.position(finding.loc, prefer_key=prefer_key)
        if position is None:
            return finding.located(self.path, None, None, None)
        return finding.located(self.path, position.line, position.column, self.source_line(position.line))


def read_spec_text(path: Path) -> str:
    """Read the file, turning every way it can fail into a SpecFileError."""
    if not path.exists():
        raise SpecFileError(
            f"{path}: no such file",
            "create one with `gpuclus init`, or pass the path of your spec",
            usage=True,
        )
    if path.is_dir():
        raise SpecFileError(
            f"{path}: is a directory, not a spec file", "pass the YAML file itself", usage=True
        )
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecFileError(
                f"{path}: {size / 1e6:.1f} MB is far too large for a cluster spec "
                f"(limit {MAX_SPEC_BYTES // (1024 * 1024)} MiB)",
                "a spec is a few KB; use hostlist ranges like gpu[01-64] instead of listing nodes, "
                "or check that this is the right file",
                usage=False,
            )
        raw = path.read_bytes()
    except PermissionError:
        raise SpecFileError(
            f"{path}: permission denied", "run as a user who can read it", usage=True
        ) from None
    except OSError as exc:
        raise SpecFileError(f"{path}: cannot read: {exc.strerror}", None, usage=True) from None
    if b"\x00" in raw:
        raise SpecFileError(
            f"{path}: binary data, not a YAML text file", "pass the cluster spec (YAML)", usage=False
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecFileError(
            f"{path}: not UTF-8 text (bad byte at offset {exc.start})",
            "save the spec as UTF-8",
            usage=False,
        ) from None


def parse_spec_text(text: str, path: str) -> SpecDocument:
    """Parse YAML text into a SpecDocument; YAML errors become findings."""
    document = SpecDocument(path=path, text=text, data=None)
    if not text.strip():
        document.findings.append(
            error("empty-file", "the spec is empty", hint="start from `gpuclus init` or an example spec")
        )
        return document
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            document.findings.append(
                error("empty-file", "the spec holds only comments", hint="start from `gpuclus init`")
            )
            return document
        document.data = _build(node, (), document, loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        finding = error(
            "yaml-syntax",
            f"invalid YAML: {problem}",
            hint="check indentation and quoting on this line or the one above; "
            "quote values that contain ': ' or start with [ { * &",
        )
        if mark is not None:
            line = mark.line + 1
            finding = finding.located(path, line, mark.column + 1, document.source_line(line))
        document.findings.append(finding)
        document.data = None
    except yaml.YAMLError as exc:
        document.findings.append(error("yaml-syntax", f"invalid YAML: {exc}"))
        document.data = None
    finally:
        loader.dispose()
    return document


def load_document(path: Path) -> SpecDocument:
    return parse_spec_text(read_spec_text(path), str(path))


def _mark(node: yaml.Node) -> Position:
    return Position(node.start_mark.line + 1, node.start_mark.column + 1)


def _build(node: yaml.Node, loc: Loc, document: SpecDocument, loader: yaml.SafeLoader) -> Any:
    document.value_positions.setdefault(loc, _mark(node))
    if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        document.container_locs.add(loc)
    if isinstance(node, yaml.MappingNode):
        return _build_mapping(node, loc, document, loader)
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*loc, index), document, loader) for index, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def _build_mapping(
    node: yaml.MappingNode, loc: Loc, document: SpecDocument, loader: yaml.SafeLoader
) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            # `<<: *defaults` - merged keys keep the anchor's positions.
            merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in merged:
                for key, value in _build(source, loc, document, loader).items():
                    result.setdefault(key, value)
            continue
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        child: Loc = (*loc, key if isinstance(key, str | int) else str(key))
        document.key_positions[child] = _mark(key_node)
        if key in result:
            document.findings.append(
                document.locate(
                    error(
                        "duplicate-key",
                        f"key {key!r} appears more than once; YAML keeps only the last one",
                        child,
                        hint="remove or merge the repeated key",
                    ),
                    prefer_key=True,
                )
            )
        result[key] = _build(value_node, child, document, loader)
    return result
