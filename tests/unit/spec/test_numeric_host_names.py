"""Numeric host names (issue 40, class 4): a "name" the resolver reads as an IPv4 address is no name.

getaddrinfo tries inet_aton first, which takes one to four parts, each decimal, octal or hex: 0x7f000001,
2130706433 and 127.1 are 127.0.0.1 and never reach /etc/hosts or DNS. Such a value would slip past the
rules for addresses (no loopback of another node, no 0.0.0.0, no broadcast), so gpuclus refuses it as a
node name, as an address, and as the host of every URL or HOST:PORT field. The C library's own inet_aton
(Python's socket.inet_aton) is the oracle.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from lookalikes import libc_reads_as_address
from spec_samples import SPEC

from gpuclus.initspec.draft import node_name_problem
from gpuclus.spec.load import load_spec_text
from gpuclus.yamldoc.grammar import address_problem, full_match, reads_as_ipv4
from gpuclus.yamldoc.patterns import NODE_NAME_PATTERN

NUMERIC = ["0x7f000001", "2130706433", "127.1", "0177.0.0.1", "0x7f.1", "0xdeadbeef", "127", "0", "00"]
# Digits and hex letters that the resolver still reads as names.
NAMES = ["gpu01", "0b101", "1e3", "deadbeef", "x7f000001", "0-1", "127-0-0-1", "a0x1"]


@pytest.mark.parametrize("name", NUMERIC)
def test_the_c_library_reads_these_as_addresses_and_so_does_gpuclus(name: str) -> None:
    assert libc_reads_as_address(name)
    assert reads_as_ipv4(name)


@pytest.mark.parametrize("name", NAMES)
def test_names_that_only_hold_digits_and_hex_letters_stay_names(name: str) -> None:
    assert not libc_reads_as_address(name)
    assert not reads_as_ipv4(name)
    assert node_name_problem(name) is None


@settings(max_examples=400, deadline=None)
@given(st.from_regex(r"\A(0[xX][0-9a-fA-F]{0,9}|[0-9]{1,11}|[0-9a-f.x]{1,12})\Z"))
def test_nothing_the_c_library_reads_as_an_address_is_taken_for_a_name(name: str) -> None:
    # gpuclus may refuse more than inet_aton takes ("0x" alone), never less.
    if libc_reads_as_address(name):
        assert reads_as_ipv4(name), name


def spec_with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(SPEC)
    for dotted, value in changes.items():
        target = data
        *parents, last = dotted.split("__")
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
        target[last] = value
    return data


def codes(data: dict[str, Any]) -> list[str]:
    return [finding.code for finding in load_spec_text(yaml.safe_dump(data, sort_keys=False)).findings]


@pytest.mark.parametrize("name", ["0x7f000001", "2130706433", "127", "0xdeadbeef"])
def test_a_numeric_node_name_is_refused_at_the_node(name: str) -> None:
    assert full_match(NODE_NAME_PATTERN, name)  # a fine DNS label, by the letters
    result = load_spec_text(yaml.safe_dump(spec_with(nodes__0__name=name), sort_keys=False), "cluster.yaml")
    refused = [finding for finding in result.findings if finding.code == "invalid-node-name"]
    assert refused and not result.ok
    assert refused[0].path.startswith("nodes[0]") and refused[0].line is not None
    assert "IPv4 address" in refused[0].message
    assert node_name_problem(name) is not None  # and init refuses it too


@pytest.mark.parametrize("address", ["0x7f000001", "2130706433", "127.1", "0177.0.0.1", "0x0", "0"])
def test_a_numeric_address_that_is_not_dotted_decimal_is_refused(address: str) -> None:
    problem = address_problem(address)
    assert problem is not None and "not a valid one" in problem
    assert "invalid-address" in codes(spec_with(nodes__0__address=address))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("monitoring__alert_receiver__webhook_url", "https://0x7f000001/hook"),
        ("monitoring__alert_receiver__webhook_url", "http://2130706433:9093/hook"),
        ("pytorch__index_url", "https://127.1/simple"),
    ],
)
def test_a_numeric_host_in_a_url_is_refused(field: str, value: str) -> None:
    data = spec_with(**{field: value})
    if field.startswith("monitoring"):
        data["monitoring"].update(alertmanager=True)
    found = codes(data)
    assert found and all(code != "internal-error" for code in found), found
    assert not load_spec_text(yaml.safe_dump(data, sort_keys=False)).ok


def test_a_smarthost_that_is_a_number_is_refused() -> None:
    data = spec_with(
        monitoring__alert_receiver__email_to="ops@example.org",
        monitoring__alert_receiver__email_from="gpuclus@example.org",
        monitoring__alert_receiver__smarthost="0:25",
    )
    data["monitoring"].update(alertmanager=True)
    assert not load_spec_text(yaml.safe_dump(data, sort_keys=False)).ok
    data["monitoring"]["alert_receiver"]["smarthost"] = "smtp.example.org:25"
    assert load_spec_text(yaml.safe_dump(data, sort_keys=False)).ok
