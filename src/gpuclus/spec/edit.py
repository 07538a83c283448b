"""Take nodes out of a spec's text, leaving every other byte as the admin wrote it.

`gpuclus nodes remove` keeps the spec the truth: the nodes it takes out of the
cluster leave cluster.yaml too. The edit works on the text, not on re-dumped
YAML, so comments, order and quoting survive: an entry whose every node goes
is cut out line by line; an entry written as a range (``gpu[01-04]`` with
``10.0.0.[11-14]``) keeps its other nodes, its name and address rewritten as
shorter hostlists. When the result cannot be written that way (an address
range whose order does not follow the names, a flow-style node list, a
partition naming a removed node by hand), SpecEditError says what to change
by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from gpuclus.spec import hostlist
from gpuclus.yamldoc.textedit import last_leaf, line_start


class SpecEditError(ValueError):
    """The text cannot be edited safely; the message says what to change by hand."""


@dataclass(frozen=True)
class _Entry:
    index: int
    item: yaml.MappingNode
    name: yaml.ScalarNode
    address: yaml.ScalarNode


def remove_nodes(text: str, names: set[str]) -> str:
    """``text`` without the nodes ``names`` (each must be in one entry of ``nodes``)."""
    root = yaml.compose(text)
    nodes = _nodes_sequence(root)
    assert isinstance(root, yaml.MappingNode)  # _nodes_sequence refused anything else
    entries = [_entry(index, item) for index, item in enumerate(nodes.value)]
    found: set[str] = set()
    # Edits from the end of the text backwards, so earlier offsets stay valid.
    edits: list[tuple[int, int, str]] = []
    for entry in entries:
        expanded = list(zip(hostlist.expand(entry.name.value), hostlist.expand(entry.address.value), strict=True))
        leaving = [pair for pair in expanded if pair[0] in names]
        if not leaving:
            continue
        found.update(name for name, _ in leaving)
        kept = [pair for pair in expanded if pair[0] not in names]
        if not kept:
            edits.append(_cut_entry(text, entry))
        else:
            edits.extend(_shrink_entry(entry, kept))
    missing = sorted(names - found)
    if missing:
        raise SpecEditError(f"{', '.join(missing)} not among the spec's nodes")
    edits.extend(_partition_edits(root, names))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _nodes_sequence(root: yaml.Node | None) -> yaml.SequenceNode:
    if not isinstance(root, yaml.MappingNode):
        raise SpecEditError("the spec is not a mapping")
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == "nodes":
            if not isinstance(value, yaml.SequenceNode) or value.flow_style:
                raise SpecEditError("`nodes` is not written as a block list (one `- ` item per entry)")
            return value
    raise SpecEditError("the spec has no `nodes` list")


def _entry(index: int, item: yaml.Node) -> _Entry:
    if not isinstance(item, yaml.MappingNode):
        raise SpecEditError(f"nodes[{index}] is not a mapping")
    fields = {key.value: value for key, value in item.value if isinstance(key, yaml.ScalarNode)}
    name, address = fields.get("name"), fields.get("address")
    if not isinstance(name, yaml.ScalarNode) or not isinstance(address, yaml.ScalarNode):
        raise SpecEditError(f"nodes[{index}] lacks a plain name or address")
    return _Entry(index, item, name, address)


def _cut_entry(text: str, entry: _Entry) -> tuple[int, int, str]:
    """The span of the entry's lines: its `- ` line through its last value, with the comments that go with it.

    Comment lines right above the `- ` line at its indentation describe the
    entry, and so do comment lines after its last value indented deeper than
    the dash; both go. A blank line ends either run.
    """
    lines = text.split("\n")
    first = entry.item.start_mark.line
    dash_line = lines[first]
    dash_column = len(dash_line) - len(dash_line.lstrip())
    if not dash_line[dash_column:].startswith("-") or dash_line[dash_column + 1 : entry.item.start_mark.column].strip():
        raise SpecEditError(f"nodes[{entry.index}] does not start its own `- ` line; remove it by hand")
    while first > 0 and _is_comment(lines[first - 1], lambda column: column == dash_column):
        first -= 1
    last = last_leaf(entry.item).end_mark.line
    while last + 1 < len(lines) and _is_comment(lines[last + 1], lambda column: column > dash_column):
        last += 1
    return line_start(text, first), line_start(text, last + 1), ""


def _is_comment(line: str, indented: Callable[[int], bool]) -> bool:
    stripped = line.lstrip()
    return stripped.startswith("#") and indented(len(line) - len(stripped))


def _partition_edits(root: yaml.MappingNode, names: set[str]) -> list[tuple[int, int, str]]:
    """Each partition whose `nodes` hostlist names a removed node, written without it."""
    slurm = _field(root, "slurm")
    partitions = _field(slurm, "partitions") if isinstance(slurm, yaml.MappingNode) else None
    if not isinstance(partitions, yaml.SequenceNode):
        return []
    edits = []
    for index, partition in enumerate(partitions.value):
        listed = _field(partition, "nodes") if isinstance(partition, yaml.MappingNode) else None
        if not isinstance(listed, yaml.ScalarNode) or listed.tag != "tag:yaml.org,2002:str":
            continue
        members = hostlist.expand_list(listed.value)
        kept = [member for member in members if member not in names]
        if len(kept) == len(members):
            continue
        if not kept:
            raise SpecEditError(
                f"slurm.partitions[{index}] would have no nodes left; remove the partition from the spec by hand"
            )
        edits.append(_replace_scalar(listed, hostlist.compress(kept)))
    return edits


def _field(mapping: yaml.Node | None, name: str) -> yaml.Node | None:
    if not isinstance(mapping, yaml.MappingNode):
        return None
    return next((value for key, value in mapping.value if isinstance(key, yaml.ScalarNode) and key.value == name), None)


def _shrink_entry(entry: _Entry, kept: list[tuple[str, str]]) -> list[tuple[int, int, str]]:
    new_name = hostlist.compress(name for name, _ in kept)
    new_address = hostlist.compress(address for _, address in kept)
    try:
        pairs = list(zip(hostlist.expand(new_name), hostlist.expand(new_address), strict=True))
    except (hostlist.HostlistError, ValueError):
        pairs = []
    if pairs != kept:
        raise SpecEditError(
            f"nodes[{entry.index}]: the nodes left in {entry.name.value!r} ({entry.address.value!r}) cannot be "
            "written as one name range and one address range in the same order; split the entry by hand"
        )
    return [_replace_scalar(entry.name, new_name), _replace_scalar(entry.address, new_address)]


def _replace_scalar(node: yaml.ScalarNode, value: str) -> tuple[int, int, str]:
    # A hostlist with brackets must be quoted in flow context and reads better quoted anyway;
    # JSON's quoting is valid YAML double-quoting for these characters.
    needs_quotes = node.style in ('"', "'") or any(character in value for character in "[],")
    return node.start_mark.index, node.end_mark.index, json.dumps(value) if needs_quotes else value
