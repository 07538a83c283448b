"""Where a YAML node's text ends, and where a line starts: what an edit that keeps every other byte needs.

The spec's node removal (spec/edit.py) and the users file's edits (users/edit.py) cut and insert text at these
offsets instead of dumping YAML again, so comments, order and quoting survive.
"""

from __future__ import annotations

import yaml


def last_leaf(node: yaml.Node) -> yaml.Node:
    """The node written last inside ``node``: where its text really ends.

    A block collection's end mark is the next token, past any comments after
    it; a scalar's or a flow collection's ends on its own last character.
    """
    while not node.flow_style if isinstance(node, yaml.CollectionNode) else False:
        if isinstance(node, yaml.MappingNode):
            if not node.value:
                return node
            node = node.value[-1][1]
        elif isinstance(node, yaml.SequenceNode):
            if not node.value:
                return node
            node = node.value[-1]
        else:
            break
    return node


def line_start(text: str, line: int) -> int:
    """Offset of 0-based ``line``'s first character (len(text) past the end)."""
    offset = 0
    for _ in range(line):
        newline = text.find("\n", offset)
        if newline < 0:
            return len(text)
        offset = newline + 1
    return offset
