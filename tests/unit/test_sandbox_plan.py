"""Sandbox planning: names, addresses, subnets, the spec it writes, and what each node gets."""

from __future__ import annotations

import ipaddress
import shlex
import subprocess
from pathlib import Path

import pytest

from gpuclus.errors import UsageError
from gpuclus.sandbox.image import FAKE_GPU_CONFIG
from gpuclus.sandbox.lifecycle import _containers, _node_setup_script, _subnets_of
from gpuclus.sandbox.plan import (
    NFS_VOLUME_MOUNT,
    SandboxPlan,
    host_routes,
    pick_subnet,
    plan_sandbox,
    sandbox_spec_text,
)
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.models import Role

PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm8Yq9tP1n0J2k3L4m5N6o7P8q9R0s1T2u3V4w5X6y7 gpuclus@lab"


def layout(plan: SandboxPlan) -> list[tuple[str, str, bool, int]]:
    return [(node.name, node.address, node.controller, node.gpus) for node in plan.nodes]


# plan_sandbox ------------------------------------------------------------------------


def test_plan_three_nodes() -> None:
    plan = plan_sandbox("lab", 3, 2, "10.213.4.0/24")
    assert layout(plan) == [
        ("lab-head", "10.213.4.10", True, 0),
        ("lab-gpu01", "10.213.4.11", False, 2),
        ("lab-gpu02", "10.213.4.12", False, 2),
    ]
    assert plan.head.name == "lab-head"
    assert [node.name for node in plan.compute] == ["lab-gpu01", "lab-gpu02"]
    assert (plan.cluster, plan.subnet, plan.gpus_per_node) == ("lab", "10.213.4.0/24", 2)
    assert plan.network == "gpuclus-lab"
    assert plan.volume == "gpuclus-lab-nfs"


def test_plan_one_node_carries_the_gpus() -> None:
    plan = plan_sandbox("solo", 1, 4, "10.213.0.0/24")
    assert layout(plan) == [("solo-head", "10.213.0.10", True, 4)]
    assert plan.compute == (plan.head,)


def test_plan_thirty_two_nodes_fit_a_24() -> None:
    plan = plan_sandbox("big", 32, 8, "10.213.9.0/24")
    assert len(plan.nodes) == 32
    assert plan.nodes[-1].name == "big-gpu31"
    assert plan.nodes[-1].address == "10.213.9.41"
    assert len({node.address for node in plan.nodes}) == 32


def test_plan_in_a_small_subnet() -> None:
    # A /28 holds .1-.14: the head at the 10th host, four compute nodes after it.
    plan = plan_sandbox("lab", 5, 1, "10.213.0.16/28")
    assert [node.address for node in plan.nodes] == [f"10.213.0.{n}" for n in range(26, 31)]
    network = ipaddress.ip_network(plan.subnet)
    assert all(ipaddress.ip_address(node.address) in network for node in plan.nodes)
    with pytest.raises(UsageError, match="too small"):
        plan_sandbox("lab", 6, 1, "10.213.0.16/28")


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
def test_plan_bounds(args: tuple[str, int, int, str], pattern: str) -> None:
    with pytest.raises(UsageError, match=pattern) as caught:
        plan_sandbox(*args)
    assert caught.value.exit_code == 2


def test_plan_longest_name() -> None:
    plan = plan_sandbox("a" * 40, 32, 0, "10.213.0.0/24")
    assert max(len(node.name) for node in plan.nodes) <= 63


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


# sandbox_spec_text ------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "gpus"), [(3, 2), (1, 2), (2, 0), (32, 8), (1, 0)])
def test_sandbox_spec_is_valid_and_matches_the_plan(count: int, gpus: int) -> None:
    plan = plan_sandbox("lab", count, gpus, "10.213.7.0/24")
    text = sandbox_spec_text(plan)
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
    assert spec.monitoring.grafana is False

    assert [(node.name, node.address) for node in topology.nodes] == [(node.name, node.address) for node in plan.nodes]
    assert topology.controller is not None and topology.controller.name == "lab-head"
    assert [node.name for node in topology.compute] == [node.name for node in plan.compute]
    for node in topology.nodes:
        planned = next(p for p in plan.nodes if p.name == node.name)
        assert node.gpu_count == planned.gpus
        if node.gpus is not None:
            assert node.gpus.fake is True
    if gpus:
        assert len(topology.gpu_nodes) == len(plan.compute)
    else:
        assert topology.gpu_nodes == []
    if count == 1:
        assert topology.nodes[0].roles >= {Role.CONTROLLER, Role.COMPUTE, Role.NFS_SERVER}


def test_sandbox_spec_is_deterministic() -> None:
    plan = plan_sandbox("lab", 3, 2, "10.213.7.0/24")
    assert sandbox_spec_text(plan) == sandbox_spec_text(plan_sandbox("lab", 3, 2, "10.213.7.0/24"))


# What each node gets (lifecycle's pure parts) ---------------------------------------------------


def test_containers_nfs_volume_only_on_the_controller() -> None:
    plan = plan_sandbox("lab", 3, 2, "10.213.0.0/24")
    containers = _containers(plan, "localhost/gpuclus-node:0123456789ab")
    assert [c.name for c in containers] == ["lab-head", "lab-gpu01", "lab-gpu02"]
    assert containers[0].volumes == (("gpuclus-lab-nfs", NFS_VOLUME_MOUNT),)
    assert all(c.volumes == () for c in containers[1:])
    assert [dict(c.labels)["gpuclus.role"] for c in containers] == ["controller", "compute", "compute"]
    for container, node in zip(containers, plan.nodes, strict=True):
        assert (container.address, container.network, container.cluster) == (
            node.address,
            "gpuclus-lab",
            "lab",
        )
        assert container.image == "localhost/gpuclus-node:0123456789ab"


def test_containers_single_node_gets_the_volume() -> None:
    (only,) = _containers(plan_sandbox("solo", 1, 1, "10.213.0.0/24"), "img")
    assert only.volumes == (("gpuclus-solo-nfs", NFS_VOLUME_MOUNT),)


def test_subnets_of_podman_and_docker_inspect_output() -> None:
    podman = {
        "name": "podman",
        "subnets": [{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}, {"subnet": "fd00::/64"}],
    }
    docker = {"Name": "bridge", "IPAM": {"Driver": "default", "Config": [{"Subnet": "172.17.0.0/16"}]}}
    assert _subnets_of(podman) == ["10.88.0.0/16", "fd00::/64"]
    assert _subnets_of(docker) == ["172.17.0.0/16"]
    assert _subnets_of({"name": "host", "subnets": None}) == []
    assert _subnets_of({"Name": "none", "IPAM": {"Config": None}}) == []
    assert _subnets_of({"Name": "x", "IPAM": {"Config": [{"Gateway": "1.2.3.4"}]}}) == []


def test_node_setup_script_for_a_gpu_node() -> None:
    plan = plan_sandbox("lab", 3, 2, "10.213.0.0/24")
    script = _node_setup_script(plan, plan.nodes[1], PUBLIC_KEY)
    for node in plan.nodes:
        assert f"\n{node.address} {node.name}\n" in script
    assert "127.0.0.1 localhost" in script
    assert f"echo 2 > {FAKE_GPU_CONFIG} && /usr/local/sbin/gpuclus-fake-gpus" in script
    assert "/home/gpuclus/.ssh/authorized_keys" in script
    assert "chmod 600 /home/gpuclus/.ssh/authorized_keys" in script
    assert script.rstrip().endswith("cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub")
    assert "set -eu" in script.splitlines()[0]


def test_node_setup_script_for_a_node_without_gpus() -> None:
    plan = plan_sandbox("lab", 3, 2, "10.213.0.0/24")
    script = _node_setup_script(plan, plan.head, PUBLIC_KEY)
    assert f"rm -f {FAKE_GPU_CONFIG}" in script
    assert f"> {FAKE_GPU_CONFIG}" not in script
    assert "gpuclus-fake-gpus" not in script
    no_gpus = plan_sandbox("lab", 2, 0, "10.213.0.0/24")
    assert f"> {FAKE_GPU_CONFIG}" not in _node_setup_script(no_gpus, no_gpus.nodes[1], PUBLIC_KEY)


def test_node_setup_script_single_node_writes_its_gpus() -> None:
    plan = plan_sandbox("solo", 1, 3, "10.213.0.0/24")
    assert f"echo 3 > {FAKE_GPU_CONFIG}" in _node_setup_script(plan, plan.head, PUBLIC_KEY)


@pytest.mark.parametrize(
    "key",
    [
        PUBLIC_KEY,
        PUBLIC_KEY.replace("gpuclus@lab", "gpuclus@it's lab"),
        PUBLIC_KEY.replace("gpuclus@lab", 'gpuclus@$(touch pwned) `id` "x" \\n'),
    ],
    ids=["plain", "single-quote", "shell-metacharacters"],
)
def test_node_setup_script_quotes_the_key(tmp_path: Path, key: str) -> None:
    plan = plan_sandbox("lab", 2, 1, "10.213.0.0/24")
    script = _node_setup_script(plan, plan.nodes[1], key)
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)  # the node runs it with sh -s
    # Run the lines that add the key, into tmp_path, twice, next to a key a
    # deploy put there: the key is added once and nothing else is lost.
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("key="))
    snippet = "\n".join(lines[start : start + 3])
    target = tmp_path / "authorized_keys"
    snippet = snippet.replace("/home/gpuclus/.ssh/authorized_keys", shlex.quote(str(target)))
    target.write_text("ssh-ed25519 AAAACLUSTER cluster-key\n")
    for _ in range(2):
        subprocess.run(["sh", "-c", snippet], check=True, cwd=tmp_path)
    assert target.read_text() == "ssh-ed25519 AAAACLUSTER cluster-key\n" + key + "\n"
    assert not (tmp_path / "pwned").exists()
