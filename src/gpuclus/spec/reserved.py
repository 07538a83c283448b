"""Names that already mean something to the tools a spec's names reach, and so cannot name a node or a partition.

A node's name becomes an inventory host that plays select by pattern, and a word of slurm.conf; a partition's
name is a word of slurm.conf. Each of these readers gives a few names a meaning of its own, and a node or
partition named like one would be read as that meaning instead:

- Ansible resolves a play's ``hosts:`` word to a group or to a host of that name, so a node named like a group
  the playbooks target changes which nodes the play runs on: with render's inventory, ``hosts: gpu`` ran on a
  CPU node named gpu and on no GPU node, ``hosts: all`` on a node named all alone, and an empty group's plays
  reach the node of its name. ``all`` and ``ungrouped`` are groups of every inventory, and ``localhost`` is the
  control machine (``delegate_to: localhost`` and preflight's play would reach the node instead).
- Slurm reads ``NodeName=DEFAULT`` and ``PartitionName=DEFAULT`` (any case) as the defaults for the lines after
  them, not as a node or a partition; ``Nodes=ALL`` is every node; ``NodeName=localhost`` stands for the name of
  whichever host reads the file.

Every comparison is case-insensitive, as Slurm's own comparisons of these words are.
tests/unit/spec/test_reserved_names.py holds the inventory's groups and the playbooks' ``hosts:`` words to this
list, so a new group or play cannot be forgotten here.
"""

from __future__ import annotations

from typing import Final

from gpuclus.spec.models import Role

# Groups Ansible gives every inventory, and the name it keeps for the control machine.
ANSIBLE_NAMES: Final = frozenset({"all", "ungrouped", "localhost"})
# The groups render writes into inventory/hosts.yml: every node (cluster), one per role, the real-GPU nodes (gpu).
INVENTORY_GROUPS: Final = frozenset({"cluster", "gpu", *(role.value for role in Role)})
# slurm.conf's words for a node record: the defaults record, every node, and this host.
SLURM_NODE_WORDS: Final = frozenset({"default", "all", "localhost"})
# slurm.conf's words for a partition record: the defaults record.
SLURM_PARTITION_WORDS: Final = frozenset({"default"})

RESERVED_NODE_NAMES: Final = ANSIBLE_NAMES | INVENTORY_GROUPS | SLURM_NODE_WORDS
RESERVED_PARTITION_NAMES: Final = SLURM_PARTITION_WORDS


def reserved_node_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a node though it is a fine host name, or None."""
    word = name.casefold()
    if word in INVENTORY_GROUPS:
        return f"is the name of the inventory group {word!r}, which plays target by that name"
    if word in ANSIBLE_NAMES:
        return "is a name Ansible keeps (its groups 'all' and 'ungrouped', and 'localhost', the control machine)"
    if word in SLURM_NODE_WORDS:
        return "is a word slurm.conf reads as the defaults record (DEFAULT), every node (ALL) or this host"
    return None


def reserved_partition_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a partition though its characters are fine, or None."""
    if name.casefold() in SLURM_PARTITION_WORDS:
        return "is what slurm.conf calls its defaults record (PartitionName=DEFAULT, any case), not a partition"
    return None
