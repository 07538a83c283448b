"""Slurm-style hostlists: expansion, errors, and compress as expand's inverse."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclus.spec.hostlist import MAX_HOSTS, HostlistError, compress, expand, expand_list, is_range

# -- expand --------------------------------------------------------------------


def test_padded_range_keeps_the_lower_bound_width() -> None:
    assert expand("gpu[01-12]") == [f"gpu{i:02d}" for i in range(1, 13)]


def test_unpadded_range_has_no_padding() -> None:
    assert expand("gpu[1-12]") == [f"gpu{i}" for i in range(1, 13)]


def test_padding_wider_than_the_numbers() -> None:
    assert expand("n[0008-0011]") == ["n0008", "n0009", "n0010", "n0011"]


def test_list_of_single_numbers_and_ranges() -> None:
    assert expand("n[1,3,5-7]") == ["n1", "n3", "n5", "n6", "n7"]


def test_several_groups_expand_leftmost_slowest() -> None:
    assert expand("r[1-2]n[1-3]") == ["r1n1", "r1n2", "r1n3", "r2n1", "r2n2", "r2n3"]


def test_address_ranges() -> None:
    assert expand("10.0.[1-2].[11-12]") == ["10.0.1.11", "10.0.1.12", "10.0.2.11", "10.0.2.12"]


def test_group_with_a_suffix() -> None:
    assert expand("gpu[1-2].lab.example.org") == ["gpu1.lab.example.org", "gpu2.lab.example.org"]


def test_plain_name_expands_to_itself() -> None:
    assert expand("head") == ["head"]
    assert expand("10.0.0.1") == ["10.0.0.1"]


def test_single_number_group_and_spaces_around_terms() -> None:
    assert expand("gpu[07]") == ["gpu07"]
    assert expand("gpu[1, 3]") == ["gpu1", "gpu3"]


def test_order_within_a_group_is_as_written() -> None:
    assert expand("n[5,1-2]") == ["n5", "n1", "n2"]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("gpu[12-01]", "runs backwards"),
        ("gpu[]", "empty brackets"),
        ("gpu[1-2", "unbalanced"),
        ("gpu1-2]", "unbalanced"),
        ("gpu][", "unbalanced"),
        ("gpu[[1-2]]", "nested"),
        ("gpu[a-c]", "bad range"),
        ("gpu[1-c]", "bad range"),
        ("gpu[1,,2]", "bad range"),
        ("gpu[-1]", "bad range"),
        ("gpu[1-2-3]", "bad range"),
        ("gpu[0x1-0x2]", "bad range"),
    ],
)
def test_bad_expressions_raise_with_a_reason(expression: str, message: str) -> None:
    with pytest.raises(HostlistError, match=message) as raised:
        expand(expression)
    assert repr(expression) in str(raised.value)


def test_hostlist_error_is_a_value_error() -> None:
    assert issubclass(HostlistError, ValueError)


def test_max_hosts_is_allowed_in_one_range() -> None:
    hosts = expand(f"n[1-{MAX_HOSTS}]")
    assert len(hosts) == MAX_HOSTS
    assert hosts[-1] == f"n{MAX_HOSTS}"


def test_one_more_than_max_hosts_in_a_range_is_refused() -> None:
    with pytest.raises(HostlistError, match=f"more than {MAX_HOSTS}"):
        expand(f"n[0-{MAX_HOSTS}]")


def test_max_hosts_applies_to_the_cartesian_product() -> None:
    with pytest.raises(HostlistError, match=f"more than {MAX_HOSTS}"):
        expand("r[1-1000]n[1-1000]")


def test_max_hosts_applies_across_terms_of_one_group() -> None:
    with pytest.raises(HostlistError, match=f"more than {MAX_HOSTS}"):
        expand(f"n[1-{MAX_HOSTS},1-2]")


def test_huge_range_is_refused_without_building_it() -> None:
    with pytest.raises(HostlistError, match=f"more than {MAX_HOSTS}"):
        expand("n[0-99999999999999999999]")


# -- expand_list ---------------------------------------------------------------


def test_expand_list_splits_on_commas_outside_brackets() -> None:
    assert expand_list("head,gpu[01-02,05],login") == ["head", "gpu01", "gpu02", "gpu05", "login"]


def test_expand_list_of_several_ranges() -> None:
    assert expand_list("a[1-2],b[1,3]") == ["a1", "a2", "b1", "b3"]


def test_expand_list_strips_spaces() -> None:
    assert expand_list(" head , gpu[1-2] ") == ["head", "gpu1", "gpu2"]


@pytest.mark.parametrize("expressions", ["", ",", "a,", ",a", "a,,b", "a, ,b"])
def test_expand_list_refuses_empty_entries(expressions: str) -> None:
    with pytest.raises(HostlistError, match="empty entry"):
        expand_list(expressions)


def test_expand_list_reports_the_bad_member() -> None:
    with pytest.raises(HostlistError, match="runs backwards"):
        expand_list("head,gpu[2-1]")


def test_is_range() -> None:
    assert is_range("gpu[01-02]")
    assert is_range("gpu]")
    assert not is_range("gpu01")


# -- compress ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (["gpu01", "gpu02", "gpu03", "gpu05"], "gpu[01-03,05]"),
        (["gpu1", "gpu2", "gpu3"], "gpu[1-3]"),
        (["gpu9", "gpu10", "gpu11"], "gpu[9-11]"),
        (["gpu03", "gpu01", "gpu02"], "gpu[01-03]"),
        (["gpu01", "gpu01"], "gpu01"),
        (["head"], "head"),
        (["head", "gpu1", "gpu2", "head"], "head,gpu[1-2]"),
        (["gpu1", "cpu1", "gpu2"], "gpu[1-2],cpu1"),
        (["n1-ib", "n2-ib"], "n[1-2]-ib"),
        (["r1n01", "r1n02", "r2n01"], "r1n[01-02],r2n01"),
        (["gpu09", "gpu9"], "gpu09,gpu9"),
        (["gpu0", "gpu1"], "gpu[0-1]"),
        ([], ""),
    ],
)
def test_compress_examples(hosts: list[str], expected: str) -> None:
    assert compress(hosts) == expected


def test_compress_accepts_any_iterable() -> None:
    assert compress(f"gpu{i:02d}" for i in range(1, 5)) == "gpu[01-04]"


def test_compress_does_not_merge_widths() -> None:
    # gpu09 fixes a width of 2 and gpu10 reads the same at that width, so they
    # share a range; gpu100 is wider and stays on its own.
    assert compress(["gpu09", "gpu10", "gpu100"]) == "gpu[09-10],gpu100"
    assert compress([f"dgx{n:02d}" for n in range(1, 17)]) == "dgx[01-16]"
    assert compress([f"gpu{n:04d}" for n in range(1, 1001)]) == "gpu[0001-1000]"
    assert set(expand_list(compress(["gpu09", "gpu10", "gpu100"]))) == {"gpu09", "gpu10", "gpu100"}


_prefixes = st.sampled_from(["gpu", "n", "node-", "rack2-n", "dgx-a100-"])
_suffixes = st.sampled_from(["", "", "-ib", ".lab"])


@st.composite
def _host_names(draw: st.DrawFn) -> str:
    prefix = draw(_prefixes)
    width = draw(st.integers(min_value=0, max_value=4))
    number = draw(st.integers(min_value=0, max_value=12000))
    return f"{prefix}{str(number).zfill(width)}{draw(_suffixes)}"


_names = st.one_of(_host_names(), st.sampled_from(["head", "login", "storage"]))


@settings(max_examples=300, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_names, min_size=1, max_size=40))
def test_compress_round_trips_through_expand_list(hosts: list[str]) -> None:
    compressed = compress(hosts)
    assert set(expand_list(compressed)) == set(hosts)
    # No host appears twice in the compressed form.
    expanded = expand_list(compressed)
    assert len(expanded) == len(set(expanded))


@settings(max_examples=200, derandomize=True, database=None)
@given(prefix=_prefixes, width=st.integers(min_value=2, max_value=4), data=st.data())
def test_compress_of_one_padded_family_is_one_sorted_expression(prefix: str, width: int, data: st.DataObject) -> None:
    # Every number has a leading zero at this width, so all names share one group.
    numbers = data.draw(st.sets(st.integers(min_value=0, max_value=10 ** (width - 1) - 1), min_size=2, max_size=30))
    hosts = [f"{prefix}{n:0{width}d}" for n in numbers]
    compressed = compress(hosts)
    assert compressed.startswith(f"{prefix}[") and compressed.endswith("]")
    assert compressed.count("[") == 1
    assert expand_list(compressed) == sorted(hosts)


@settings(max_examples=200, derandomize=True, database=None)
@given(st.text(alphabet="ab01-9[],", max_size=20))
def test_expand_list_either_expands_or_raises_hostlist_error(text: str) -> None:
    try:
        hosts = expand_list(text)
    except HostlistError:
        return
    assert hosts
    assert all("[" not in h and "]" not in h for h in hosts)
