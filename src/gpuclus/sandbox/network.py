"""The sandbox's private network: which subnets are taken, and making and removing the network."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuclus.sandbox.engine import Engine, SandboxError
from gpuclus.sandbox.layout import SandboxLayout, network_name

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def host_routes(route_table: Path = Path("/proc/net/route")) -> list[ipaddress.IPv4Network]:
    """Networks this host routes (the default route excluded), from the kernel's table."""
    networks = []
    try:
        lines = route_table.read_text().splitlines()[1:]
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        destination, mask = (int(fields[1], 16), int(fields[7], 16))
        if mask == 0:
            continue
        # The table is little-endian hex.
        address = ipaddress.IPv4Address(destination.to_bytes(4, "little"))
        netmask = ipaddress.IPv4Address(mask.to_bytes(4, "little"))
        networks.append(ipaddress.IPv4Network(f"{address}/{netmask}", strict=False))
    return networks


def taken_networks(engine: Engine, cluster: str) -> list[Network]:
    """Subnets a new sandbox network must not overlap: the host's routes and the engine's other networks.

    The cluster's own network is left out, so that it does not block itself.
    """
    taken: list[Network] = list(host_routes())
    names = [
        name
        for name in engine.run(engine.network_list(), what="listing networks").stdout.split()
        if name != network_name(cluster)
    ]
    if names:
        for network in engine.json_lines(engine.network_inspect(names), what="inspecting networks"):
            for subnet in subnets_of(network):
                taken.append(ipaddress.ip_network(subnet, strict=False))
    return taken


def subnets_of(network: dict[str, Any]) -> list[str]:
    """The subnets in one network's inspect output, from podman or docker."""
    # podman: {"subnets": [{"subnet": ...}]}; docker: {"IPAM": {"Config": [{"Subnet": ...}]}}
    found = [entry.get("subnet") for entry in network.get("subnets") or []]
    found += [entry.get("Subnet") for entry in (network.get("IPAM") or {}).get("Config") or []]
    return [subnet for subnet in found if subnet]


def ensure_network(engine: Engine, layout: SandboxLayout, say: Callable[[str], None], owner: str | None = None) -> bool:
    """Create the sandbox's network (labelled with ``owner``) unless it is there; True when it was created."""
    if engine.ok(engine.network_inspect([layout.network])):
        subnets = subnets_of(engine.json_lines(engine.network_inspect([layout.network]), what="network")[0])
        if layout.subnet not in subnets:
            raise SandboxError(
                f"network {layout.network} exists with subnet {', '.join(subnets)}, not {layout.subnet}",
                "run `gpuclus sandbox down` to remove it",
            )
        return False
    say(f"creating network {layout.network} ({layout.subnet})")
    engine.run(engine.network_create(layout.network, layout.subnet, layout.cluster, owner), what="creating the network")
    return True


def remove_network(engine: Engine, cluster: str) -> bool:
    """Remove the cluster's network if it is there; True when it was removed."""
    name = network_name(cluster)
    if not engine.ok(engine.network_inspect([name])):
        return False
    engine.run(engine.network_remove(name), what="removing the network")
    return True
