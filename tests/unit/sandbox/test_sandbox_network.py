"""The sandbox network: the host's routes, the engine's networks, and which subnets they take."""

from __future__ import annotations

import ipaddress
import json
import sys
from pathlib import Path

import pytest

from gpuclus.sandbox import network as network_module
from gpuclus.sandbox.engine import Engine
from gpuclus.sandbox.layout import pick_subnet
from gpuclus.sandbox.network import host_routes, subnets_of, taken_networks


def nets(*texts: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(text) for text in texts]


# host_routes ----------------------------------------------------------------------------

ROUTE_TABLE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
podman1\t00D50D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
tun0\t0A0A0A0A\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0
broken\tline
"""


def test_host_routes(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(ROUTE_TABLE)
    assert host_routes(table) == nets("192.168.1.0/24", "10.13.213.0/24", "172.17.0.0/16", "10.10.10.10/32")


def test_host_routes_without_a_table(tmp_path: Path) -> None:
    assert host_routes(tmp_path / "missing") == []


def test_host_routes_feed_pick_subnet(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(ROUTE_TABLE.replace("00D50D0A", "0000D50A"))  # 10.213.0.0/24 is routed
    assert pick_subnet(None, host_routes(table)) == "10.213.1.0/24"


# subnets_of and taken_networks ---------------------------------------------------------------


def test_subnets_of_podman_and_docker_inspect_output() -> None:
    podman = {
        "name": "podman",
        "subnets": [{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}, {"subnet": "fd00::/64"}],
    }
    docker = {"Name": "bridge", "IPAM": {"Driver": "default", "Config": [{"Subnet": "172.17.0.0/16"}]}}
    assert subnets_of(podman) == ["10.88.0.0/16", "fd00::/64"]
    assert subnets_of(docker) == ["172.17.0.0/16"]
    assert subnets_of({"name": "host", "subnets": None}) == []
    assert subnets_of({"Name": "none", "IPAM": {"Config": None}}) == []
    assert subnets_of({"Name": "x", "IPAM": {"Config": [{"Gateway": "1.2.3.4"}]}}) == []


FAKE_PODMAN = """
import json, sys
if sys.argv[2] == "ls":
    print("\\n".join(NETWORKS))
else:
    print(json.dumps([{"name": name, "subnets": [{"subnet": NETWORKS[name]}]} for name in sys.argv[3:]]))
"""


def fake_engine(tmp_path: Path, networks: dict[str, str]) -> Engine:
    """A podman stand-in that answers `network ls` and `network inspect` for ``networks`` (name: subnet)."""
    script = tmp_path / "podman"
    script.write_text(f"#!{sys.executable} -S\nNETWORKS = {json.dumps(networks)}\n{FAKE_PODMAN}")
    script.chmod(0o755)
    return Engine("podman", str(script))


def test_taken_networks_are_the_routes_and_the_other_networks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network_module, "host_routes", lambda: nets("192.168.1.0/24"))
    engine = fake_engine(
        tmp_path, {"podman": "10.88.0.0/16", "gpuclus-lab": "10.213.0.0/24", "gpuclus-other": "10.213.1.0/24"}
    )
    # The cluster's own network does not count against it: a second `up` finds the same subnet free.
    assert taken_networks(engine, "lab") == nets("192.168.1.0/24", "10.88.0.0/16", "10.213.1.0/24")
    assert pick_subnet(None, taken_networks(engine, "lab")) == "10.213.0.0/24"
    assert pick_subnet(None, taken_networks(engine, "new")) == "10.213.2.0/24"
