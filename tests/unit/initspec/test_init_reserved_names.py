"""gpuclus init refuses the node names spec check reserves (issue 40, class 2), from flags, the wizard and a hosts file.

A node named like an inventory group, ``localhost``, ``all`` or Slurm's ``default`` would be written into a spec
that `spec check` then refuses; init says so at once, naming the name (and the hosts file's line).
"""

from __future__ import annotations

import pytest

from gpuclus.errors import UsageError
from gpuclus.initspec.draft import expand_names, node_name_problem
from gpuclus.initspec.hostsfile import parse_hosts_text
from gpuclus.spec.reserved import reserved_node_name_problem


@pytest.mark.parametrize("name", ["gpu", "login", "localhost", "all", "default", "cluster", "monitoring"])
def test_init_refuses_a_reserved_node_name(name: str) -> None:
    problem = node_name_problem(name)
    assert problem is not None and problem == reserved_node_name_problem(name)


def test_init_accepts_a_plain_node_name() -> None:
    assert node_name_problem("gpu01") is None


def test_a_flag_range_with_a_reserved_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'login' is the name of the inventory group"):
        expand_names("login")


def test_a_hosts_file_with_a_node_named_like_a_group_is_refused_at_its_line() -> None:
    with pytest.raises(UsageError, match=r"hosts:2: node name 'gpu' is the name of the inventory group"):
        parse_hosts_text("10.0.0.10 head\n10.0.0.11 gpu\n", "hosts")
