"""Read a gpuclus YAML file (the cluster spec, the users file) into plain data, keeping every value's position.

PyYAML's composer gives us nodes with marks; we construct the data from the
same node tree and record, for each path, where its key and value start. That
is what lets a pydantic ``loc`` become ``cluster.yaml:12``. Duplicate keys,
which PyYAML silently merges, are reported here as findings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from gpuclus.fileio import FileTooLargeError, NotRegularFileError, read_regular_file
from gpuclus.yamldoc.findings import Finding, Loc, error

# A real spec is a few kilobytes even for a thousand nodes written out one per
# entry; anything far bigger is the wrong file, and we refuse before parsing.
# The apiVersion every gpuclus file carries (the cluster spec and the users file).
API_VERSION: Final = "gpuclus/v1"
MAX_SPEC_BYTES = 2 * 1024 * 1024
_MIB_LIMIT = MAX_SPEC_BYTES // (1024 * 1024)
# How deep values may nest: a spec is a handful of levels. The composer stops here, before Python's recursion
# limit, so a document nested thousands deep is a located finding rather than a RecursionError.
MAX_NESTING = 64
# The longest integer the loader converts: no setting needs more than 20 digits, and PyYAML's int() fails
# past Python's 4,300-digit limit with a ValueError that names no line.
MAX_INTEGER_CHARS = 100
# The line breaks PyYAML counts in its marks: source lines are cut where its line numbers are.
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")


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
        lines = _LINE_BREAK.split(self.text)
        if lines[-1] == "":  # the break ending the last line starts no line of its own
            lines.pop()
        if 1 <= line <= len(lines):
            return lines[line - 1]
        return None

    def locate(self, finding: Finding, *, prefer_key: bool = False) -> Finding:
        position = self.position(finding.loc, prefer_key=prefer_key)
        if position is None:
            return finding.located(self.path, None, None, None)
        return finding.located(self.path, position.line, position.column, self.source_line(position.line))


def read_spec_text(path: Path) -> str:
    """Read the file, turning every way it can fail into a SpecFileError.

    A finding echoes the line it is about (and quotes keys and values), so a
    spec that is a symlink is followed only to a file of the symlink's own
    owner: one to a file its owner may not see (read through sudo, or named
    by someone else's spec) is refused before any of it is parsed.
    """
    try:
        raw = _read_bounded(path, follow_symlinks=False)
    except NotRegularFileError:  # the one it lets through: a symlink
        _refuse_a_link_to_another_owners_file(path)
        raw = _read_bounded(path, follow_symlinks=True)
    return _decoded(path, raw)


def _refuse_a_link_to_another_owners_file(path: Path) -> None:
    try:
        link_owner, target_owner = path.lstat().st_uid, path.stat().st_uid
    except OSError:
        return  # a dangling or unreadable link: the read names what is wrong
    if link_owner != target_owner:
        raise SpecFileError(
            f"{path}: a symlink (owner uid {link_owner}) to a file of another owner (uid {target_owner})",
            "pass the file itself, or a symlink to a file of the symlink's owner",
            usage=False,
        )


def _decoded(path: Path, raw: bytes) -> str:
    if b"\x00" in raw:
        raise SpecFileError(f"{path}: binary data, not a YAML text file", "pass the cluster spec (YAML)", usage=False)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecFileError(
            f"{path}: not UTF-8 text (bad byte at offset {exc.start})",
            "save the spec as UTF-8",
            usage=False,
        ) from None


def _read_bounded(path: Path, *, follow_symlinks: bool) -> bytes:
    """Only a regular file of at most MAX_SPEC_BYTES is read; every failure is a SpecFileError."""
    try:
        return read_regular_file(path, MAX_SPEC_BYTES, follow_symlinks=follow_symlinks)
    except FileNotFoundError:
        raise SpecFileError(
            f"{path}: no such file",
            "create one with `gpuclus init`, or pass the path of your spec",
            usage=True,
        ) from None
    except NotRegularFileError as exc:
        if exc.is_symlink and not follow_symlinks:
            raise
        if exc.is_directory:
            raise SpecFileError(
                f"{path}: is a directory, not a spec file", "pass the YAML file itself", usage=True
            ) from None
        raise SpecFileError(
            f"{path}: is {exc.kind}, not a YAML text file", "pass the cluster spec (a regular YAML file)", usage=False
        ) from None
    except FileTooLargeError as exc:
        size = f"{exc.size / 1e6:.1f} MB is" if exc.size is not None else f"over {_MIB_LIMIT} MiB is"
        raise SpecFileError(
            f"{path}: {size} far too large for a cluster spec (limit {_MIB_LIMIT} MiB)",
            "a spec is a few KB; use hostlist ranges like gpu[01-64] instead of listing nodes, "
            "or check that this is the right file",
            usage=False,
        ) from None
    except PermissionError:
        raise SpecFileError(f"{path}: permission denied", "run as a user who can read it", usage=True) from None
    except OSError as exc:
        raise SpecFileError(f"{path}: cannot read: {exc.strerror}", None, usage=True) from None


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's base-60 numbers, with bounded nesting and integers.

    YAML 1.1 reads ``max_time: 2:00:00`` as the integer 7200; YAML 1.2 and
    every admin read it as a time. Dropping the sexagesimal forms keeps such
    values as the text that was written.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.nesting = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # The composer recurses once per level: refuse before Python's recursion limit does.
        self.nesting += 1
        try:
            if self.nesting > MAX_NESTING + 1:  # the root is level 1, and loc () has length 0
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _TreeError(
                    f"values nested more than {MAX_NESTING} levels deep", event.start_mark, hint=_NESTING_HINT
                )
            return super().compose_node(parent, index)
        finally:
            self.nesting -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_INTEGER_CHARS:
            raise _TreeError(
                f"an integer of {len(node.value)} characters is far too large for any setting "
                f"(at most {MAX_INTEGER_CHARS})",
                node.start_mark,
                hint="write the number the setting needs (ids, counts and sizes are at most 20 digits)",
            )
        return super().construct_yaml_int(node)


_SpecLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp) for tag, regexp in resolvers if tag not in {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_SpecLoader.add_constructor("tag:yaml.org,2002:int", _SpecLoader.construct_yaml_int)


_NESTING_HINT = "a spec or users file is a few levels deep: look for brackets that are never closed"
_SYNTAX_HINT = (
    "check indentation and quoting on this line or the one above; quote values that contain ': ' or start with [ { * &"
)


class _TreeError(Exception):
    """A YAML construct the spec refuses (cycles, bombs, odd keys), with where it is."""

    def __init__(self, message: str, where: yaml.Node | yaml.Mark, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.position = _mark(where)


def parse_spec_text(text: str, path: str) -> SpecDocument:
    """Parse YAML text into a SpecDocument; every YAML problem becomes a finding."""
    document = SpecDocument(path=path, text=text, data=None)

    def problem(code: str, message: str, hint: str | None, line: int | None = None, column: int | None = None) -> None:
        finding = error(code, message, hint=hint)
        source = document.source_line(line) if line is not None else None
        document.findings.append(finding.located(path, line, column, source))

    if not text.strip():
        problem("empty-file", "the spec is empty", "start from `gpuclus init` or an example spec")
        return document
    loader: _SpecLoader | None = None
    try:
        # The reader checks characters as it is created: control characters
        # (a pasted colour code) fail here, not later.
        loader = _SpecLoader(text)
        node = loader.get_single_node()
        if node is None:
            problem("empty-file", "the spec holds only comments", "start from `gpuclus init`")
            return document
        document.data = _Builder(document, loader).build(node, ())
        if document.data is None:
            problem("empty-file", "the spec holds no data (just null)", "start from `gpuclus init`", 1, 1)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "malformed YAML"
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        problem("yaml-syntax", f"invalid YAML: {reason}", _SYNTAX_HINT, line, column)
        document.data = None
    except yaml.reader.ReaderError as exc:
        before = _LINE_BREAK.split(text[: exc.position])
        line, column = len(before), len(before[-1]) + 1
        problem(
            "yaml-syntax",
            f"character U+{_code_point(exc.character):04X} cannot appear in YAML text",
            "remove control characters (often a pasted terminal colour code)",
            line,
            column,
        )
        document.data = None
    except _TreeError as exc:
        problem("yaml-syntax", exc.message, exc.hint, exc.position.line, exc.position.column)
        document.data = None
    except RecursionError:
        problem("yaml-syntax", "the YAML is nested too deeply to be a cluster spec", None)
        document.data = None
    except yaml.YAMLError as exc:
        problem("yaml-syntax", f"invalid YAML: {exc}", _SYNTAX_HINT)
        document.data = None
    finally:
        if loader is not None:
            loader.dispose()
    return document


def _code_point(character: int | str) -> int:
    # PyYAML's reader gives the character's code, its decoder the character itself.
    return character if isinstance(character, int) else ord(character[:1] or "\0")


def load_document(path: Path) -> SpecDocument:
    return parse_spec_text(read_spec_text(path), str(path))


def _mark(where: yaml.Node | yaml.Mark) -> Position:
    mark = where.start_mark if isinstance(where, yaml.Node) else where
    return Position(mark.line + 1, mark.column + 1)


class _Builder:
    """Builds plain data from the node tree and records each value's position.

    Aliases are followed (the spec may use anchors), but with limits: a cycle,
    a "billion laughs" expansion or absurd nesting is refused with a finding
    instead of eating the machine.
    """

    # A 10,000-node spec written host by host builds well under 100,000 values.
    MAX_VALUES = 200_000
    MAX_DEPTH = MAX_NESTING

    def __init__(self, document: SpecDocument, loader: _SpecLoader) -> None:
        self.document = document
        self.loader = loader
        self.values = 0
        self.active: set[int] = set()

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self.values += 1
        if self.values > self.MAX_VALUES:
            raise _TreeError(
                f"the spec expands to more than {self.MAX_VALUES} values (aliases repeated many times?)", node
            )
        if len(loc) > self.MAX_DEPTH:
            raise _TreeError(f"values nested more than {self.MAX_DEPTH} levels deep", node, hint=_NESTING_HINT)
        if id(node) in self.active:
            raise _TreeError("an alias refers to its own anchor (a cycle)", node)
        self.document.value_positions.setdefault(loc, _mark(node))
        if isinstance(node, yaml.ScalarNode):
            return self.loader.construct_object(node, deep=True)
        self.document.container_locs.add(loc)
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, loc)
            return [self.build(item, (*loc, index)) for index, item in enumerate(node.value)]
        finally:
            self.active.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[str, Any]:
        explicit: dict[str, Any] = {}
        merge_sources: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                merge_sources.extend(sources)
                continue
            key = self.loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise _TreeError(f'keys must be text, not {key!r} (quote it, e.g. "{key}": ...)', key_node)
            child: Loc = (*loc, key)
            self.document.key_positions[child] = _mark(key_node)
            if key in explicit:
                self.document.findings.append(
                    self.document.locate(
                        error(
                            "duplicate-key",
                            f"key {key!r} appears more than once; YAML keeps only the last one",
                            child,
                            hint="remove or merge the repeated key",
                        ),
                        prefer_key=True,
                    )
                )
            explicit[key] = self.build(value_node, child)
        # `<<: *defaults`: explicit keys win over merged ones wherever they are
        # written. Merged after the explicit keys so that positions recorded
        # first (setdefault) are those of the keys actually in effect.
        merged: dict[str, Any] = {}
        for source in merge_sources:
            if not isinstance(source, yaml.MappingNode):
                raise _TreeError("`<<` can only merge mappings (an anchor of key: value lines)", source)
            for key, value in self.build(source, loc).items():
                merged.setdefault(key, value)
        return {**merged, **explicit}
