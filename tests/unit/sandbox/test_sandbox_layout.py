"""The sandbox layout: names, addresses, subnets, and the spec written for them."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from gpuclus.errors import UsageError
from gpuclus.sandbox.layout import (
    NFS_VOLUME_MOUNT,
    TEST_IMAGE,
    SandboxLayout,
    network_name,
    pick_subnet,
    sandbox_layout,
    sandbox_spec_text,
)
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.models import Role


def placed(layout: SandboxLayout) -> list[tuple[str, str, bool, int]]:
    return [(node.name, node.address, node.controller, node.gpus) for node in layout.nodes]


# sandbox_layout ------------------------------------------------------------------------


def test_layout_three_nodes() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.4.0/24")
    assert placed(layout) == [
        ("lab-head", "10.213.4.10", True, 0),
        ("lab-gpu01", "10.213.4.11", False, 2),
        ("lab-gpu02", "10.213.4.12", False, 2),
    ]
    assert layout.head.name == "lab-head"
    assert [node.name for node in layout.compute] == ["lab-gpu01", "lab-gpu02"]
    assert (layout.cluster, layout.subnet, layout.gpus_per_node) == ("lab", "10.213.4.0/24", 2)
    assert layout.network == network_name("lab") == "gpuclus-lab"
    assert layout.volume == "gpuclus-lab-nfs"


def test_layout_one_node_carries_the_gpus() -> None:
    layout = sandbox_layout("solo", 1, 4, "10.213.0.0/24")
    assert placed(layout) == [("solo-head", "10.213.0.10", True, 4)]
    assert layout.compute == (layout.head,)


def test_layout_thirty_two_nodes_fit_a_24() -> None:
    layout = sandbox_layout("big", 32, 8, "10.213.9.0/24")
    assert len(layout.nodes) == 32
    assert layout.nodes[-1].name == "big-gpu31"
    assert layout.nodes[-1].address == "10.213.9.41"
    assert len({node.address for node in layout.nodes}) == 32


def test_layout_in_a_small_subnet() -> None:
    # A /28 holds .1-.14: the head at the 10th host, four compute nodes after it.
    layout = sandbox_layout("lab", 5, 1, "10.213.0.16/28")
    assert [node.address for node in layout.nodes] == [f"10.213.0.{n}" for n in range(26, 31)]
    network = ipaddress.ip_network(layout.subnet)
    assert all(ipaddress.ip_address(node.address) in network for node in layout.nodes)
    with pytest.raises(UsageError, match="too small"):
        sandbox_layout("lab", 6, 1, "10.213.0.16/28")


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (("lab", 0, 2, "10.213.0.0/24"), r"--nodes 0"),
        (("lab", 33, 2, "10.213.0.0/24"), r"--nodes 33"),
        (("lab", -1, 2, "10.213.0.0/24"), r"--nodes -1"),
        (("lab", 3, 9, "10.213.0.0/24"), r"--gpus-per-node 9"),
        (("lab", 3, -1, "10.213.0.0/24"), r"--gpus-per-node -1"),
        (("lab", 3, 2, "10.213.0.0/29"), r"too small"),
        (("Lab", 3, 2, "10.213.0.0/24"), r"--name 'Lab'"),
        (("1lab", 3, 2, "10.213.0.0/24"), r"--name"),
        (("lab_x", 3, 2, "10.213.0.0/24"), r"--name"),
        (("", 3, 2, "10.213.0.0/24"), r"--name"),
        (("a" * 41, 3, 2, "10.213.0.0/24"), r"--name"),
        (("lab x", 3, 2, "10.213.0.0/24"), r"--name"),
    ],
)
def test_layout_bounds(args: tuple[str, int, int, str], pattern: str) -> None:
    with pytest.raises(UsageError, match=pattern) as caught:
        sandbox_layout(*args)
    assert caught.value.exit_code == 2


def test_layout_longest_name() -> None:
    layout = sandbox_layout("a" * 40, 32, 0, "10.213.0.0/24")
    assert max(len(node.name) for node in layout.nodes) <= 63


# pick_subnet ---------------------------------------------------------------------------


def nets(*texts: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(text) for text in texts]


def test_pick_subnet_default_is_the_first_free_24() -> None:
    assert pick_subnet(None, []) == "10.213.0.0/24"
    assert pick_subnet(None, nets("192.168.1.0/24", "fd00::/64")) == "10.213.0.0/24"
    taken = nets("10.213.0.0/24", "10.213.1.128/25", "10.213.2.7/32", "172.17.0.0/16")
    assert pick_subnet(None, taken) == "10.213.3.0/24"


def test_pick_subnet_no_free_24() -> None:
    with pytest.raises(UsageError, match=r"no free /24 left in 10\.213\.0\.0/16"):
        pick_subnet(None, nets("10.0.0.0/8"))


def test_pick_subnet_requested_free() -> None:
    assert pick_subnet("10.99.0.0/24", nets("10.213.0.0/24")) == "10.99.0.0/24"
    assert pick_subnet("10.213.5.0/24", []) == "10.213.5.0/24"


@pytest.mark.parametrize(
    ("requested", "clash"),
    [("10.213.0.0/24", "10.213.0.0/16"), ("10.213.5.0/24", "10.213.5.128/25"), ("10.0.0.0/8", "10.1.2.0/24")],
)
def test_pick_subnet_requested_overlaps_a_route(requested: str, clash: str) -> None:
    with pytest.raises(UsageError) as caught:
        pick_subnet(requested, nets("192.168.0.0/24", clash))
    assert f"overlaps {clash}" in caught.value.message
    assert requested in caught.value.message
    assert caught.value.hint


@pytest.mark.parametrize("requested", ["not-a-net", "10.213.0.1/24", "10.213.0.0/33", "300.1.1.0/24", ""])
def test_pick_subnet_requested_invalid(requested: str) -> None:
    with pytest.raises(UsageError, match="--subnet") as caught:
        pick_subnet(requested, [])
    assert caught.value.exit_code == 2


def test_pick_subnet_requested_ipv6() -> None:
    with pytest.raises(UsageError, match="IPv4"):
        pick_subnet("fd00:213::/64", [])


# sandbox_spec_text ------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "gpus"), [(3, 2), (1, 2), (2, 0), (32, 8), (1, 0)])
def test_sandbox_spec_is_valid_and_matches_the_layout(count: int, gpus: int) -> None:
    layout = sandbox_layout("lab", count, gpus, "10.213.7.0/24")
    text = sandbox_spec_text(layout)
    loaded = load_spec_text(text, "sandbox.yaml")
    assert loaded.ok, [f"{f.code}: {f.message}" for f in loaded.findings]
    assert not [f for f in loaded.findings if f.severity.value == "error"]
    spec, topology = loaded.spec, loaded.topology
    assert spec is not None and topology is not None

    assert spec.cluster.name == "lab"
    assert spec.cluster.admin_user == "gpuclus"
    assert spec.nfs.server_impl == "ganesha"
    assert [export.path for export in spec.nfs.exports] == [f"{NFS_VOLUME_MOUNT}/shared"]
    assert spec.nvidia.driver.install is False
    assert spec.nvidia.cuda.install is False
    assert spec.monitoring.grafana is True
    assert spec.monitoring.grafana_unavailable == "skip"
    assert spec.monitoring.alertmanager is True

    assert [(node.name, node.address) for node in topology.nodes] == [
        (node.name, node.address) for node in layout.nodes
    ]
    assert topology.controller is not None and topology.controller.name == "lab-head"
    assert [node.name for node in topology.compute] == [node.name for node in layout.compute]
    for node in topology.nodes:
        planned = next(p for p in layout.nodes if p.name == node.name)
        assert node.gpu_count == planned.gpus
        if node.gpus is not None:
            assert node.gpus.fake is True
    if gpus:
        assert len(topology.gpu_nodes) == len(layout.compute)
    else:
        assert topology.gpu_nodes == []
    if count == 1:
        assert topology.nodes[0].roles >= {Role.CONTROLLER, Role.COMPUTE, Role.NFS_SERVER}


def test_sandbox_spec_is_deterministic() -> None:
    layout = sandbox_layout("lab", 3, 2, "10.213.7.0/24")
    assert sandbox_spec_text(layout) == sandbox_spec_text(sandbox_layout("lab", 3, 2, "10.213.7.0/24"))


# The containers section ---------------------------------------------------------------------


def containers_section(text: str) -> dict[str, object]:
    section = yaml.safe_load(text)["containers"]
    assert isinstance(section, dict)
    return section


def test_sandbox_spec_without_artifacts_keeps_containers_off_and_says_how_to_turn_them_on() -> None:
    text = sandbox_spec_text(sandbox_layout("lab", 3, 2, "10.213.7.0/24"))
    assert containers_section(text) == {"enroot": False, "pyxis": False}
    assert "`gpuclus sandbox up --artifacts DIR`" in text
    assert "enroot-<v>-src.tar.gz and pyxis-<v>-src.tar.gz" in text
    assert TEST_IMAGE not in text
    loaded = load_spec_text(text, "sandbox.yaml")
    assert loaded.ok and loaded.spec is not None
    assert (loaded.spec.containers.enroot, loaded.spec.containers.pyxis) == (False, False)


@pytest.mark.parametrize("directory", ["/work/shared/artifacts", "/srv/with space/art: ifacts #1", "/srv/'quoted'"])
def test_sandbox_spec_with_artifacts_turns_containers_on(directory: str) -> None:
    text = sandbox_spec_text(sandbox_layout("lab", 3, 2, "10.213.7.0/24"), directory)
    assert containers_section(text) == {
        "enroot": True,
        "pyxis": True,
        "artifacts_dir": directory,
        "validate_image": "/var/lib/gpuclus-sandbox/images/test.sqsh",
    }
    assert TEST_IMAGE == "/var/lib/gpuclus-sandbox/images/test.sqsh"
    assert "built on the nodes from the release sources in this" in text
    assert "--artifacts" not in text


@pytest.mark.parametrize("count", [3, 1])
def test_sandbox_spec_with_artifacts_passes_gpuclus_own_check(tmp_path: Path, count: int) -> None:
    layout = sandbox_layout("lab", count, 2, "10.213.7.0/24")
    for name in ("enroot-4.1.2-src.tar.gz", "pyxis-0.24.0-src.tar.gz"):
        (tmp_path / name).write_bytes(b"")  # stand-ins for the release sources
    loaded = load_spec_text(sandbox_spec_text(layout, str(tmp_path)), "sandbox.yaml")
    assert loaded.ok, [f"{f.code}: {f.message}" for f in loaded.findings]
    assert loaded.spec is not None
    containers = loaded.spec.containers
    assert (containers.enroot, containers.pyxis) == (True, True)
    assert str(containers.artifacts_dir) == str(tmp_path)
    assert str(containers.validate_image) == TEST_IMAGE
