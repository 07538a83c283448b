"""Container engine command builders and the runner (no engine needed: fake binaries in tmp_path)."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

import pytest

from gpuclus.sandbox import engine as engine_module
from gpuclus.sandbox.engine import (
    IMAGE_CHANGES,
    LABEL,
    Engine,
    NodeContainer,
    SandboxError,
    cgroup_v2_only,
    docker_engine,
    engine_message,
    mac_for,
    podman_engine,
)

NODE = NodeContainer(
    name="lab-head",
    address="10.213.0.10",
    network="gpuclus-lab",
    image="localhost/gpuclus-node:0123456789ab",
    cluster="lab",
    volumes=(("gpuclus-lab-nfs", "/srv/nfs"),),
    labels=(("gpuclus.role", "controller"),),
)

PODMAN = Engine("podman", "/usr/bin/podman")
PODMAN_RUNC = Engine("podman", "/usr/bin/podman", runtime="/usr/sbin/runc")
DOCKER = Engine("docker", "/usr/bin/docker")
ALL_ENGINES = [PODMAN, PODMAN_RUNC, DOCKER]


def values_of(argv: list[str], flag: str) -> list[str]:
    """Every value given to ``flag`` as a separate argument (``--flag value``)."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


def fake_binary(tmp_path: Path, body: str, name: str = "fake-engine") -> str:
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


# run_node -------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ALL_ENGINES, ids=["podman", "podman-runc", "docker"])
def test_run_node_common_flags(engine: Engine) -> None:
    argv = engine.run_node(NODE)
    assert argv[0] == engine.binary
    run_at = argv.index("run")
    assert argv[run_at + 1] == "--detach"
    assert values_of(argv, "--name") == ["lab-head"]
    assert values_of(argv, "--hostname") == ["lab-head"]
    assert values_of(argv, "--label") == [f"{LABEL}=lab", "gpuclus.role=controller"]
    assert values_of(argv, "--network") == ["gpuclus-lab"]
    assert values_of(argv, "--ip") == ["10.213.0.10"]
    assert values_of(argv, "--mac-address") == [mac_for("10.213.0.10")]
    assert values_of(argv, "--volume") == ["gpuclus-lab-nfs:/srv/nfs"]
    assert "/tmp:exec" in values_of(argv, "--tmpfs")
    # The image is the last word: everything after it would be the container's command.
    assert argv[-1] == NODE.image
    assert argv.count(NODE.image) == 1


@pytest.mark.parametrize("engine", ALL_ENGINES, ids=["podman", "podman-runc", "docker"])
def test_run_node_ulimits_stay_below_host_hard_limits(engine: Engine) -> None:
    limits = dict(value.split("=", 1) for value in values_of(engine.run_node(NODE), "--ulimit"))
    assert set(limits) == {"nofile", "nproc"}
    for value in limits.values():
        soft, hard = (int(part) for part in value.split(":"))
        # Debian's hard limits are far higher (nofile 1048576 / 524288); asking for
        # more than the host's hard limit is what fails without CAP_SYS_RESOURCE.
        assert 0 < soft <= hard <= 65536


@pytest.mark.parametrize("engine", ALL_ENGINES, ids=["podman", "podman-runc", "docker"])
def test_run_node_restarts_a_node_that_rebooted_itself(engine: Engine) -> None:
    """`systemctl reboot` in a node ends its systemd with a failure status; the engine starts it
    again (a real reboot of the node's systemd). A node stopped by hand stays stopped: both engines
    ignore on-failure for it, where `always` or `unless-stopped` would bring it back."""
    argv = engine.run_node(NODE)
    policies = [word for word in argv if word.startswith("--restart")]
    assert policies == ["--restart=on-failure"]
    # Before the image: after it come the container's command and arguments.
    assert argv.index(policies[0]) < argv.index(NODE.image)


@pytest.mark.parametrize("engine", ALL_ENGINES, ids=["podman", "podman-runc", "docker"])
def test_no_engine_ever_mounts_the_host_cgroup_tree(engine: Engine) -> None:
    """systemd in a node would remount a bind-mounted host cgroup tree read-only (DESIGN.md §7)."""
    argv = engine.run_node(NODE)
    for flag in ("--volume", "-v", "--mount"):
        assert not [value for value in values_of(argv, flag) if "cgroup" in value]
    assert not [word for word in argv if word.startswith(("--volume=", "-v=", "--mount=")) and "cgroup" in word]
    assert not [word for word in argv if "cgroupns=host" in word]
    # Any /sys/fs/cgroup at all is an empty tmpfs inside the node's own cgroup namespace.
    mentions = [i for i, word in enumerate(argv) if "/sys/fs/cgroup" in word]
    for index in mentions:
        assert argv[index - 1] == "--tmpfs", argv[index - 1 : index + 1]
    if mentions:
        assert "--cgroupns=private" in argv


def test_podman_never_names_the_cgroup_tree() -> None:
    for engine in (PODMAN, PODMAN_RUNC):
        assert not [word for word in engine.run_node(NODE) if "/sys/fs/cgroup" in word]


def test_podman_run_node_is_privileged_systemd_without_engine_hosts() -> None:
    argv = PODMAN.run_node(NODE)
    assert argv[:2] == ["/usr/bin/podman", "run"]
    for flag in ("--privileged", "--systemd=always", "--no-hosts", "--cgroupns=private"):
        assert flag in argv
    assert "--runtime" not in argv
    # podman runs systemd's init itself: no docker-only workarounds.
    assert not [word for word in argv if word.startswith("--cap-")]
    assert "--stop-signal" not in argv


def test_podman_runtime_is_a_global_flag_before_the_subcommand() -> None:
    argv = PODMAN_RUNC.run_node(NODE)
    assert argv[:4] == ["/usr/bin/podman", "--runtime", "/usr/sbin/runc", "run"]
    assert argv.count("--runtime") == 1
    # Every command goes through the same runtime, not only `run`.
    assert PODMAN_RUNC.exec("lab-head", ["true"])[:4] == [
        "/usr/bin/podman",
        "--runtime",
        "/usr/sbin/runc",
        "exec",
    ]
    assert PODMAN_RUNC.remove(["lab-head"])[1:3] == ["--runtime", "/usr/sbin/runc"]


def test_docker_ignores_a_runtime_setting() -> None:
    argv = Engine("docker", "docker", runtime="runc").run_node(NODE)
    assert argv[:2] == ["docker", "run"]
    assert "--runtime" not in argv


def test_docker_run_node_drops_only_sys_resource() -> None:
    argv = DOCKER.run_node(NODE)
    assert argv[:2] == ["/usr/bin/docker", "run"]
    # docker's --privileged would bring CAP_SYS_RESOURCE back: never use it.
    assert "--privileged" not in argv
    assert "--cap-add=ALL" in argv
    assert "--cap-drop=SYS_RESOURCE" in argv
    assert set(values_of(argv, "--security-opt")) == {"seccomp=unconfined", "apparmor=unconfined"}
    assert values_of(argv, "--device-cgroup-rule") == ["c 195:* rwm"]
    assert values_of(argv, "--stop-signal") == ["SIGRTMIN+3"]
    assert "/run" in values_of(argv, "--tmpfs")
    # podman-only flags would make docker refuse the command.
    for flag in ("--systemd=always", "--no-hosts", "--log-driver"):
        assert flag not in argv


def test_run_node_without_volumes_or_extra_labels() -> None:
    bare = NodeContainer("lab-gpu01", "10.213.0.11", "gpuclus-lab", "img:1", "lab")
    argv = PODMAN.run_node(bare)
    assert "--volume" not in argv
    assert values_of(argv, "--label") == [f"{LABEL}=lab"]


# Other builders --------------------------------------------------------------------


def test_image_import_sets_systemd_command_and_stop_signal() -> None:
    argv = PODMAN.image_import("localhost/gpuclus-node:abc")
    assert argv[:2] == ["/usr/bin/podman", "import"]
    assert values_of(argv, "--change") == ['CMD ["/lib/systemd/systemd"]', "STOPSIGNAL SIGRTMIN+3"]
    assert values_of(argv, "--change") == list(IMAGE_CHANGES["podman"])
    # The archive comes on stdin, the tag last.
    assert argv[-2:] == ["-", "localhost/gpuclus-node:abc"]
    assert PODMAN_RUNC.image_import("t")[:4] == ["/usr/bin/podman", "--runtime", "/usr/sbin/runc", "import"]


def test_docker_import_sets_the_command_and_each_node_the_stop_signal() -> None:
    argv = DOCKER.image_import("t")
    assert argv[:2] == ["/usr/bin/docker", "import"]
    changes = values_of(argv, "--change")
    assert 'CMD ["/lib/systemd/systemd"]' in changes
    assert argv[-2:] == ["-", "t"]
    # systemd needs SIGRTMIN+3 to stop cleanly: from the image, or else from every container.
    if "STOPSIGNAL SIGRTMIN+3" not in changes:
        assert values_of(DOCKER.run_node(NODE), "--stop-signal") == ["SIGRTMIN+3"]


def test_exec_interactive_flag() -> None:
    assert PODMAN.exec("lab-head", ["sh", "-s"]) == ["/usr/bin/podman", "exec", "lab-head", "sh", "-s"]
    assert DOCKER.exec("lab-head", ["sh", "-s"], interactive=True) == [
        "/usr/bin/docker",
        "exec",
        "--interactive",
        "lab-head",
        "sh",
        "-s",
    ]


def test_container_builders() -> None:
    assert PODMAN.list_containers("lab") == [
        "/usr/bin/podman",
        "ps",
        "--all",
        "--filter",
        "label=gpuclus.sandbox=lab",
        "--format",
        "{{.Names}}",
    ]
    assert values_of(DOCKER.list_containers(), "--filter") == ["label=gpuclus.sandbox"]
    assert PODMAN.remove(["a", "b"]) == ["/usr/bin/podman", "rm", "--force", "a", "b"]
    assert DOCKER.start(["a"]) == ["/usr/bin/docker", "start", "a"]
    assert PODMAN.stop(["a"], timeout=5) == ["/usr/bin/podman", "stop", "--time", "5", "a"]
    assert PODMAN.inspect(["a", "b"]) == ["/usr/bin/podman", "inspect", "a", "b"]


def test_network_and_volume_builders() -> None:
    assert PODMAN.network_create("gpuclus-lab", "10.213.0.0/24", "lab") == [
        "/usr/bin/podman",
        "network",
        "create",
        "--subnet",
        "10.213.0.0/24",
        "--label",
        "gpuclus.sandbox=lab",
        "gpuclus-lab",
    ]
    assert DOCKER.network_inspect(["n1", "n2"]) == ["/usr/bin/docker", "network", "inspect", "n1", "n2"]
    assert PODMAN.network_list() == ["/usr/bin/podman", "network", "ls", "--format", "{{.Name}}"]
    assert PODMAN.network_remove("gpuclus-lab") == ["/usr/bin/podman", "network", "rm", "gpuclus-lab"]
    assert PODMAN.volume_create("gpuclus-lab-nfs", "lab") == [
        "/usr/bin/podman",
        "volume",
        "create",
        "--label",
        "gpuclus.sandbox=lab",
        "gpuclus-lab-nfs",
    ]
    assert values_of(DOCKER.volume_list("lab"), "--filter") == ["label=gpuclus.sandbox=lab"]
    assert DOCKER.volume_remove(["v"]) == ["/usr/bin/docker", "volume", "rm", "--force", "v"]


def test_image_builders() -> None:
    assert PODMAN.image_exists("t:1") == ["/usr/bin/podman", "image", "inspect", "--format", "{{.Id}}", "t:1"]
    assert DOCKER.image_remove(["t:1", "t:2"]) == ["/usr/bin/docker", "image", "rm", "--force", "t:1", "t:2"]
    assert PODMAN.image_list("localhost/gpuclus-node")[-1] == "localhost/gpuclus-node"


# mac_for ------------------------------------------------------------------------------


def test_mac_for_is_deterministic_and_locally_administered() -> None:
    mac = mac_for("10.213.0.10")
    assert mac == mac_for("10.213.0.10")
    octets = mac.split(":")
    assert len(octets) == 6
    assert all(len(octet) == 2 and int(octet, 16) <= 255 for octet in octets)
    first = int(octets[0], 16)
    assert first == 0x02
    assert first & 0x02  # locally administered
    assert not first & 0x01  # unicast


def test_mac_for_is_unique_within_a_24() -> None:
    addresses = [str(host) for host in ipaddress.ip_network("10.213.7.0/24").hosts()]
    assert len({mac_for(address) for address in addresses}) == len(addresses)
    assert mac_for("10.213.0.10") != mac_for("10.213.1.10")


# engine_message ------------------------------------------------------------------------


def test_engine_message_drops_syslog_noise() -> None:
    stderr = (
        'time="2024-01-01T00:00:00Z" level=warning msg="Failed to add conmon to systemd scope"\n'
        "Error: network gpuclus-lab: subnet overlaps\n"
        'time="2024-01-01T00:00:00Z" level=error msg="failed to connect to syslog: No such file"\n'
        "\n"
    )
    assert engine_message(stderr) == "Error: network gpuclus-lab: subnet overlaps"


def test_engine_message_docker_reason_before_its_help_line() -> None:
    stderr = (
        "docker: Error response from daemon: failed to create task: "
        "error setting rlimit type 7: operation not permitted.\n"
        "See 'docker run --help'.\n"
    )
    assert engine_message(stderr).startswith("docker: Error response from daemon:")
    assert "rlimit type 7" in engine_message(stderr)


def test_engine_message_without_an_error_word_is_the_last_line() -> None:
    assert engine_message("first\nsecond\n") == "second"


def test_engine_message_empty_when_only_noise() -> None:
    assert engine_message("") == ""
    assert engine_message("  \n\n") == ""
    assert engine_message('level=error msg="failed to connect to syslog"\n') == ""


# cgroups and engine choice ----------------------------------------------------------------


def test_cgroup_v2_only(tmp_path: Path) -> None:
    assert cgroup_v2_only(tmp_path) is False
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert cgroup_v2_only(tmp_path) is True


def test_podman_engine_uses_runc_only_on_v1_or_hybrid_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    found = {"podman": "/usr/bin/podman", "runc": "/usr/sbin/runc"}
    monkeypatch.setattr(shutil, "which", lambda name: found.get(name))

    monkeypatch.setattr(engine_module, "cgroup_v2_only", lambda: True)
    assert podman_engine() == Engine("podman", "/usr/bin/podman", None)

    monkeypatch.setattr(engine_module, "cgroup_v2_only", lambda: False)
    assert podman_engine() == Engine("podman", "/usr/bin/podman", "/usr/sbin/runc")
    assert podman_engine(runc_path="/opt/runc").runtime == "/opt/runc"

    found.clear()
    picked = podman_engine()
    assert (picked.binary, picked.runtime) == ("podman", "runc")


def test_docker_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/docker" if name == "docker" else None)
    assert docker_engine() == Engine("docker", "/usr/bin/docker")


# Engine.run with fake binaries -------------------------------------------------------------


def test_run_failure_carries_the_engine_message_and_what(tmp_path: Path) -> None:
    binary = fake_binary(
        tmp_path,
        "echo 'Error: unable to find network with name or ID gpuclus-lab' >&2\n"
        "echo 'level=error msg=\"failed to connect to syslog\"' >&2\n"
        "exit 1",
    )
    engine = Engine("podman", binary)
    with pytest.raises(SandboxError) as caught:
        engine.run(engine.network_inspect(["gpuclus-lab"]), what="inspecting the network")
    message = str(caught.value)
    assert message.startswith("inspecting the network failed: ")
    assert message.endswith("Error: unable to find network with name or ID gpuclus-lab")
    assert "syslog" not in message


def test_run_failure_without_stderr_gives_the_exit_status(tmp_path: Path) -> None:
    engine = Engine("docker", fake_binary(tmp_path, "exit 3"))
    with pytest.raises(SandboxError, match=r"^removing nodes failed: exit 3$"):
        engine.run(engine.remove(["a"]), what="removing nodes")


def test_run_unchecked_returns_the_result(tmp_path: Path) -> None:
    engine = Engine("podman", fake_binary(tmp_path, "echo out; echo err >&2; exit 4"))
    result = engine.run(engine.network_list(), what="probe", check=False)
    assert (result.returncode, result.stdout, result.stderr) == (4, "out\n", "err\n")
    assert engine.ok(engine.network_list()) is False


def test_ok_reflects_the_exit_status(tmp_path: Path) -> None:
    good = Engine("podman", fake_binary(tmp_path, "exit 0", "good"))
    bad = Engine("podman", fake_binary(tmp_path, "exit 125", "bad"))
    assert good.ok(good.image_exists("t")) is True
    assert bad.ok(bad.image_exists("t")) is False


def test_run_missing_binary(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-podman")
    engine = Engine("podman", missing)
    with pytest.raises(SandboxError) as caught:
        engine.run(engine.network_list(), what="listing networks")
    assert str(caught.value) == f"listing networks: {missing} is not installed"


def test_run_timeout(tmp_path: Path) -> None:
    # exec: the sleep must be the process that gets killed, or its open pipes keep run() waiting.
    engine = Engine("docker", fake_binary(tmp_path, "exec sleep 30"))
    with pytest.raises(SandboxError, match=r"^waiting for lab-head: docker did not answer within"):
        engine.run(engine.exec("lab-head", ["true"]), what="waiting for lab-head", timeout=0.3)


def test_run_feeds_stdin_text(tmp_path: Path) -> None:
    engine = Engine("podman", fake_binary(tmp_path, "cat"))
    script = "set -eu\necho 'it''s here'\n"
    result = engine.run(engine.exec("lab-head", ["sh", "-s"], interactive=True), what="x", stdin_text=script)
    assert result.stdout == script


def test_run_feeds_a_stream(tmp_path: Path) -> None:
    engine = Engine("podman", fake_binary(tmp_path, "cat"))
    archive = tmp_path / "archive"
    archive.write_bytes(b"rootfs bytes\n")
    with archive.open("rb") as stream:
        result = engine.run(engine.image_import("t"), what="image import", stdin=stream)
    assert result.stdout == "rootfs bytes\n"


def test_json_lines_reads_an_array(tmp_path: Path) -> None:
    engine = Engine("podman", fake_binary(tmp_path, """printf '[{"Name": "a"},\\n {"Name": "b"}]\\n'"""))
    assert engine.json_lines(engine.inspect(["a", "b"]), what="inspecting") == [{"Name": "a"}, {"Name": "b"}]


def test_json_lines_reads_one_object_per_line(tmp_path: Path) -> None:
    engine = Engine("docker", fake_binary(tmp_path, """printf '{"Name": "a"}\\n\\n{"Name": "b"}\\n'"""))
    assert engine.json_lines(engine.inspect(["a", "b"]), what="inspecting") == [{"Name": "a"}, {"Name": "b"}]


def test_json_lines_empty_output(tmp_path: Path) -> None:
    engine = Engine("docker", fake_binary(tmp_path, "echo"))
    assert engine.json_lines(engine.inspect(["a"]), what="inspecting") == []


def test_json_lines_failure_raises(tmp_path: Path) -> None:
    engine = Engine("docker", fake_binary(tmp_path, "echo 'Error: No such object: a' >&2; exit 1"))
    with pytest.raises(SandboxError, match="inspecting nodes failed: Error: No such object: a"):
        engine.json_lines(engine.inspect(["a"]), what="inspecting nodes")
