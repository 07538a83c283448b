"""Specs the grammar tests and the role input guards start from: every field a pattern checks, filled in.

``SPEC`` is the spec tests/unit/spec/test_spec_grammar.py breaks one field at a time; ``BASE`` is that spec with
sized nodes and a second export, which test_spec_hostile.py fills with hostile strings and
tests/unit/roles/test_role_input_guards.py renders for the roles' own preflights.
"""

from __future__ import annotations

import copy
from typing import Any

SPEC: dict[str, Any] = {
    "apiVersion": "gpuclus/v1",
    "cluster": {"name": "lab", "admin_user": "ubuntu"},
    "nodes": [
        {"name": "head", "address": "10.0.0.10", "roles": ["controller", "nfs_server", "monitoring", "login"]},
        {
            "name": "gpu[01-02]",
            "address": "10.0.0.[11-12]",
            "roles": ["compute"],
            "gpus": {"count": 1, "model": "h100"},
        },
    ],
    "slurm": {
        "version": "22.05.8",
        "partitions": [{"name": "gpu", "nodes": "gpu[01-02]", "default": True, "max_time": "1-00:00:00"}],
    },
    "nfs": {
        "exports": [{"path": "/srv/home", "mount": "/home", "options": "rw,sync,no_subtree_check"}],
        "client_options": "rw,hard",
    },
    "nvidia": {"driver": {"branch": "550"}, "cuda": {"version": "12.4"}},
    "network": {"link_gbps": 100, "nics_per_node": 1},
}

BASE = copy.deepcopy(SPEC)
for entry in BASE["nodes"]:
    # Sized nodes: slurm.conf is then written from the spec alone, no probe.
    entry.update(cpus=8, memory_mb=16000)
BASE["nfs"]["exports"].append({"path": "/srv/data"})
