"""Preflight's rules, judged from recorded probe answers (no SSH)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuclus.errors import ExitCode, GpuclusError
from gpuclus.preflight import gpu, keyinstall, rules
from gpuclus.preflight import runner as preflight_runner
from gpuclus.preflight.hostkeys import HostKeyCheck
from gpuclus.preflight.keyinstall import install_keys
from gpuclus.preflight.report import NodeReport, PreflightCheck
from gpuclus.preflight.rules import judge, parse_sections, skew_checks, slurm_release_checks
from gpuclus.preflight.runner import preflight_exit_code, preflight_spec, run_preflight
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.topology import Node, Topology
from gpuclus.ssh.client import SshFailure, SshTarget
from gpuclus.state import StateDir

SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: gpu01, address: 10.0.0.11, roles: [compute], gpus: {count: 2}}
  - {name: fake01, address: 10.0.0.12, roles: [compute], gpus: {count: 2, fake: true}}
monitoring: {prometheus: false}
nvidia: {driver: {install: false}, cuda: {install: false}}
containers: {enroot: false, pyxis: false}
"""

HEALTHY = """\
@@sudo
yes
@@os
debian 12
@@python
/usr/bin/python3
@@hostname
{name}
@@time
{clock}
@@disk
52428800
@@pci
{pci}
@@devnodes
{devnodes}
@@resolve
head ok
gpu01 ok
fake01 ok
"""


def topology() -> Topology:
    loaded = load_spec_text(SPEC)
    assert loaded.topology is not None, loaded.findings
    return loaded.topology


def node(name: str) -> Node:
    return topology().by_name()[name]


def answers(name: str, **changes: str) -> dict[str, list[str]]:
    values = {"name": name, "clock": "1000.0", "pci": "", "devnodes": "0", **changes}
    return parse_sections(HEALTHY.format(**values))


def statuses(checks: list[Any]) -> dict[str, str]:
    return {check.name: check.status for check in checks}


def test_a_healthy_cpu_node_passes_everything() -> None:
    result = statuses(judge(node("head"), answers("head"), "ubuntu", 10))
    assert result == {
        "sudo": "ok",
        "os": "ok",
        "python": "ok",
        "hostname": "ok",
        "disk": "ok",
        "gpus": "skip",
        "gpu-model": "skip",
        "secure-boot": "skip",
        "nouveau": "skip",
        "kernel-headers": "skip",
        "nvswitch": "skip",
        "names": "ok",
    }


def test_real_gpus_are_counted_on_the_pci_bus() -> None:
    two = "/sys/bus/pci/devices/0000:17:00.0\n/sys/bus/pci/devices/0000:65:00.0"
    assert statuses(judge(node("gpu01"), answers("gpu01", pci=two), "ubuntu", 10))["gpus"] == "ok"
    one = judge(node("gpu01"), answers("gpu01", pci="/sys/bus/pci/devices/0000:17:00.0"), "ubuntu", 10)
    gpu = next(check for check in one if check.name == "gpus")
    assert gpu.status == "fail"
    assert "1 NVIDIA GPU(s) on the PCI bus, the spec says 2" in gpu.message
    assert "lspci" in gpu.hint


def test_fake_gpus_are_reported_as_fake_never_ok() -> None:
    gpu = next(c for c in judge(node("fake01"), answers("fake01", devnodes="2"), "ubuntu", 10) if c.name == "gpus")
    assert (gpu.status, gpu.message) == ("skip", "2 fake GPU device(s), no driver (spec: fake)")
    missing = next(c for c in judge(node("fake01"), answers("fake01", devnodes="1"), "ubuntu", 10) if c.name == "gpus")
    assert missing.status == "fail"


@pytest.mark.parametrize(
    ("section", "value", "check", "status", "words"),
    [
        ("sudo", "no", "sudo", "fail", "NOPASSWD"),
        ("os", "ubuntu 24.04", "os", "warn", "not tested"),
        ("os", "centos 7", "os", "fail", "Debian 12"),
        ("python", "none", "python", "fail", "install python3"),
        ("hostname", "localhost", "hostname", "warn", "base phase sets it"),
        ("disk", "1024", "disk", "fail", "free space"),
    ],
)
def test_each_problem_fails_or_warns_with_a_hint(section: str, value: str, check: str, status: str, words: str) -> None:
    sections = answers("head")
    sections[section] = [value]
    found = next(c for c in judge(node("head"), sections, "ubuntu", 10) if c.name == check)
    assert found.status == status
    assert words in found.hint + found.message


def test_unresolvable_names_warn() -> None:
    sections = answers("head")
    sections["resolve"] = ["head ok", "gpu01 missing", "fake01 missing"]
    names = next(c for c in judge(node("head"), sections, "ubuntu", 10) if c.name == "names")
    assert names.status == "warn"
    assert "gpu01, fake01" in names.message


def test_clock_skew_is_measured_against_the_controller() -> None:
    reports = [
        NodeReport("head", "10.0.0.10", True, clock=1000.0, probed_at=1000.2),
        NodeReport("gpu01", "10.0.0.11", True, clock=1001.0, probed_at=1000.3),
        NodeReport("fake01", "10.0.0.12", True, clock=1010.0, probed_at=1000.3),
    ]
    skew_checks(reports, "head")
    clock = {report.node: report.checks[-1] for report in reports}
    assert clock["head"].status == "ok"
    assert clock["gpu01"].status == "ok" and clock["gpu01"].message.startswith("+0.90 s")
    assert clock["fake01"].status == "fail" and "munge" in clock["fake01"].message


def test_each_nodes_slurm_release_is_judged_against_the_controllers() -> None:
    def answered(name: str, os_release: str) -> NodeReport:
        return NodeReport(name, "10.0.0.1", True, os_release=os_release)

    reports = [
        answered("head", "debian 13"),
        answered("backup", "debian 12"),
        answered("gpu01", "ubuntu 24.04"),
        answered("gpu02", "debian 12"),
        answered("gpu03", "debian 13"),
        answered("gpu04", "arch rolling"),
        NodeReport("gpu05", "10.0.0.5", False),
    ]
    slurm_release_checks(reports, "head", {"backup"})
    verdicts = {r.node: (r.checks[-1].status, r.checks[-1].message) for r in reports if r.checks}
    assert verdicts["head"] == ("ok", "Slurm 24.11 (the controller)")
    assert verdicts["backup"][0] == "fail" and "both slurmctld must run one release" in verdicts["backup"][1]
    assert verdicts["gpu01"] == ("ok", "Slurm 23.11, the controller's 24.11")
    assert verdicts["gpu02"][0] == "fail" and verdicts["gpu02"][1].startswith("debian 12: its Slurm 22.05 is 4")
    assert verdicts["gpu03"] == ("ok", "Slurm 24.11, the controller's 24.11")
    assert verdicts["gpu04"][0] == "skip"
    assert "gpu05" not in verdicts  # unreachable: named by its ssh check already
    failed = next(c for c in reports[3].checks if c.name == "slurm-release")
    assert "docs/os-support.md" in failed.hint


def test_a_debian13_compute_node_under_a_debian12_controller_fails_and_the_reverse_too() -> None:
    newer = [
        NodeReport("head", "a", True, os_release="debian 12"),
        NodeReport("gpu01", "b", True, os_release="debian 13"),
    ]
    slurm_release_checks(newer, "head", set())
    assert newer[1].checks[-1].status == "fail" and "newer than the controller's 22.05" in newer[1].checks[-1].message
    pinned = [
        NodeReport("head", "a", True, os_release="debian 12"),
        NodeReport("gpu01", "b", True, os_release="debian 13"),
    ]
    slurm_release_checks(pinned, "head", set(), "24.11.5")
    assert [(r.checks[-1].status, r.checks[-1].message) for r in pinned] == [
        ("skip", "slurm.version pins 24.11.5 on every node")
    ] * 2
    unknown_controller = [
        NodeReport("head", "a", True, os_release="gentoo 2"),
        NodeReport("gpu01", "b", True, os_release="debian 12"),
    ]
    slurm_release_checks(unknown_controller, "head", set())
    assert [r.checks[-1].status for r in unknown_controller] == ["skip", "skip"]


@dataclass
class FakeChannel:
    status: int

    def recv_exit_status(self) -> int:
        return self.status


class FakeStream:
    def __init__(self, text: str, status: int = 0) -> None:
        self.text = text
        self.channel = FakeChannel(status)

    def read(self) -> bytes:
        return self.text.encode()


class FakeClient:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def exec_command(self, command: str, timeout: float) -> tuple[None, FakeStream, FakeStream]:
        assert "@@sudo" in command and "head gpu01 fake01" in command
        devnodes = "2" if self.name == "fake01" else "0"
        pci = "/sys/x/a\n/sys/x/b" if self.name == "gpu01" else ""
        return (
            None,
            FakeStream(HEALTHY.format(name=self.name, clock="1000", pci=pci, devnodes=devnodes)),
            FakeStream(""),
        )

    def close(self) -> None:
        self.closed = True


def test_run_preflight_probes_in_parallel_and_names_the_unreachable(tmp_path: Any) -> None:
    addresses = {"10.0.0.10": "head", "10.0.0.11": "gpu01", "10.0.0.12": "fake01"}

    def connector(target: SshTarget) -> FakeClient:
        if target.address == "10.0.0.12":
            raise SshFailure("10.0.0.12:22: timed out")
        assert target.user == "ubuntu"
        return FakeClient(addresses[target.address])

    reports = run_preflight(topology(), "ubuntu", tmp_path / "key", tmp_path / "known", connector=connector)
    by_node = {report.node: report for report in reports}
    assert [report.node for report in reports] == ["head", "gpu01", "fake01"]
    assert not by_node["head"].failed and not by_node["gpu01"].failed
    assert by_node["fake01"].reachable is False
    assert by_node["fake01"].checks[0].hint == "check the address, that sshd runs, and the firewall"
    only = run_preflight(topology(), "ubuntu", tmp_path / "k", tmp_path / "kh", connector=connector, only=["gpu01"])
    assert [report.node for report in only] == ["gpu01"]
    assert any(check.name == "clock" and check.status == "ok" for check in only[0].checks)


# For a spec: preflight_spec, its exit code, installing gpuclus' key ---------------------------


def report(name: str, reachable: bool = True, status: str = "ok") -> NodeReport:
    if not reachable:
        return NodeReport(name, "10.0.0.1", False, [PreflightCheck("ssh", "fail", "No route to host")])
    return NodeReport(name, "10.0.0.1", True, [PreflightCheck("ssh", "ok", ""), PreflightCheck("disk", status, "")])


def test_preflight_exit_code() -> None:
    assert preflight_exit_code([report("head"), report("gpu01", status="warn")]) is ExitCode.OK
    assert preflight_exit_code([report("head"), report("gpu01", status="fail")]) is ExitCode.FAILED
    unreachable = report("gpu01", reachable=False)
    assert preflight_exit_code([report("head", status="fail"), unreachable]) is ExitCode.UNREACHABLE


def spec_file(tmp_path: Path) -> tuple[Path, Any]:
    path = tmp_path / "cluster.yaml"
    path.write_text(SPEC)
    loaded = load_spec_text(SPEC, str(path))
    assert loaded.ok, loaded.findings
    return path, loaded


def test_preflight_spec_makes_the_key_and_learns_new_host_keys(tmp_path: Path, monkeypatch: Any) -> None:
    path, loaded = spec_file(tmp_path)
    targets: list[tuple[SshTarget, bool]] = []

    def refuse(target: SshTarget, *, accept_new: bool = False) -> Any:
        targets.append((target, accept_new))
        raise SshFailure(f"{target.address}: Connection refused")

    monkeypatch.setattr(preflight_runner, "connect", refuse)
    reports = preflight_spec(loaded, path, hosts=["gpu01"])
    state = StateDir.beside(path)
    assert state.private_key.exists()
    assert [r.node for r in reports] == ["gpu01"]
    addresses = sorted(target.address for target, _ in targets)
    assert addresses == ["10.0.0.10", "10.0.0.11"]  # and the controller, for the clock
    assert all(accept_new and target.known_hosts == state.known_hosts for target, accept_new in targets)


def test_install_keys_names_every_node_that_refused(tmp_path: Path, monkeypatch: Any) -> None:
    path, loaded = spec_file(tmp_path)
    installed: list[tuple[str, str]] = []

    def install(target: SshTarget, password: str, public_key: str) -> None:
        if target.address == "10.0.0.11":
            raise SshFailure("10.0.0.11: Authentication failed.")
        installed.append((target.address, password))
        assert public_key.startswith("ssh-ed25519 ")

    monkeypatch.setattr(keyinstall, "install_key", install)
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIDP8Ibq1N1mCHN5mu4Gjc1o+IFR2VWaqDvqszD7AUitl"
    StateDir.beside(path).set_known_host_keys(
        {"10.0.0.10": [f"ssh-ed25519 {key}"], "10.0.0.11": [f"ssh-ed25519 {key}"]}
    )
    host_keys = [
        HostKeyCheck("head", "10.0.0.10", "pinned", "ssh-ed25519", key),
        HostKeyCheck("gpu01", "10.0.0.11", "pinned", "ssh-ed25519", key),
        HostKeyCheck("fake01", "10.0.0.12", "mismatch", "ssh-ed25519", key, "10.0.0.12 offers another key"),
    ]
    done: list[str] = []
    with pytest.raises(
        GpuclusError, match=r"on: fake01: 10\.0\.0\.12 offers another key; gpu01: 10\.0\.0\.11: Auth"
    ) as raised:
        install_keys(loaded, path, "hunter2", done.append, host_keys)
    assert raised.value.exit_code is ExitCode.UNREACHABLE
    assert done == ["head"]
    assert installed == [("10.0.0.10", "hunter2")]


def test_install_keys_sends_nothing_to_a_host_key_nobody_trusted(tmp_path: Path, monkeypatch: Any) -> None:
    path, loaded = spec_file(tmp_path)
    monkeypatch.setattr(keyinstall, "install_key", lambda *args: pytest.fail("the password was sent"))
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIDP8Ibq1N1mCHN5mu4Gjc1o+IFR2VWaqDvqszD7AUitl"
    state = StateDir.beside(path)
    state.ssh_dir.mkdir(parents=True)
    state.known_hosts.write_text(f"10.0.0.10 ssh-ed25519 {key} gpuclus:first-contact\n")  # learned, never confirmed
    host_keys = [
        HostKeyCheck(name, address, "new", "ssh-ed25519", key)
        for name, address in [("head", "10.0.0.10"), ("gpu01", "10.0.0.11"), ("fake01", "10.0.0.12")]
    ]
    with pytest.raises(GpuclusError, match="head: host key not trusted yet, password not sent"):
        install_keys(loaded, path, "hunter2", lambda node: None, host_keys)


# Progress and units (issue 12 polish) ----------------------------------------------------------


def test_run_preflight_reports_each_answer_as_it_comes(tmp_path: Path) -> None:
    def connector(target: SshTarget) -> FakeClient:
        if target.address == "10.0.0.12":
            raise SshFailure("10.0.0.12:22: timed out")
        return FakeClient({"10.0.0.10": "head", "10.0.0.11": "gpu01"}[target.address])

    seen: list[tuple[str, int, int]] = []
    run_preflight(
        topology(),
        "ubuntu",
        tmp_path / "key",
        tmp_path / "known",
        connector=connector,
        on_answer=lambda report, answered, total: seen.append((report.node, answered, total)),
    )
    # Every node once, the unreachable one too; the counts go up one by one, whatever the order.
    assert sorted(node for node, _, _ in seen) == ["fake01", "gpu01", "head"]
    assert [(answered, total) for _, answered, total in seen] == [(1, 3), (2, 3), (3, 3)]
    seen.clear()
    run_preflight(
        topology(),
        "ubuntu",
        tmp_path / "key",
        tmp_path / "known",
        connector=connector,
        only=["gpu01"],
        on_answer=lambda report, answered, total: seen.append((report.node, answered, total)),
    )
    # The controller probed only as the clock reference is not one of the nodes asked about.
    assert seen == [("gpu01", 1, 1)]


@pytest.mark.parametrize(
    ("disk", "minimum", "message"),
    [
        ("1024", 10.0, "0.0 GB free on /, need 10 GB"),
        ("1024", 0.5, "0.0 GB free on /, need 0.5 GB"),
        ("", 10.0, "free space on / unknown, need 10 GB"),
    ],
)
def test_the_disk_check_gives_units(disk: str, minimum: float, message: str) -> None:
    sections = answers("head")
    sections["disk"] = [disk]
    found = next(c for c in judge(node("head"), sections, "ubuntu", minimum) if c.name == "disk")
    assert (found.status, found.message) == ("fail", message)


def _fake_preflight(monkeypatch: pytest.MonkeyPatch, calls: list[Any]) -> None:
    def fake(loaded: Any, spec: Path, min_disk_gb: float, on_answer: Any = None) -> list[NodeReport]:
        calls.append(on_answer)
        reports = [report("head"), report("gpu01"), report("fake01")]
        for count, one in enumerate(reports, start=1):
            if on_answer is not None:
                on_answer(one, count, len(reports))
        return reports

    monkeypatch.setattr(preflight_runner, "preflight_spec", fake)


def test_preflight_command_shows_progress_and_ends_with_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from gpuclus.cli.main import app

    path, _loaded = spec_file(tmp_path)
    calls: list[Any] = []
    _fake_preflight(monkeypatch, calls)
    result = CliRunner().invoke(app, ["preflight", str(path)])
    assert result.exit_code == 0, result.output
    assert calls and calls[0] is not None
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"preflight: 3 nodes in \d+\.\d s", last), last
    assert "preflight:" not in result.stdout


def test_preflight_json_has_seconds_and_no_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from gpuclus.cli.main import app

    path, _loaded = spec_file(tmp_path)
    calls: list[Any] = []
    _fake_preflight(monkeypatch, calls)
    result = CliRunner().invoke(app, ["preflight", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert calls == [None]
    payload = json.loads(result.stdout)
    assert isinstance(payload["seconds"], float)
    assert result.stderr == ""


def test_the_progress_line_counts_nodes() -> None:
    from gpuclus.cli.preflight import _progress

    assert _progress(2, 5) == "preflight: 2/5 nodes answered"
    assert _progress(0, 1) == "preflight: 0/1 node answered"


# Detection on GPU nodes (issue 13 item 1): recorded probe answers of real machines' kinds.

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "preflight"

GPU_SPEC = """\
apiVersion: gpuclus/v1
cluster: {name: lab, admin_user: ubuntu}
nodes:
  - {name: head, address: 10.0.0.10, roles: [controller, login]}
  - {name: hgx01, address: 10.0.0.11, roles: [compute], gpus: {count: 8, model: h100}}
  - {name: ws01, address: 10.0.0.12, roles: [compute], gpus: {count: 1, model: 4090}}
  - {name: v100a, address: 10.0.0.13, roles: [compute], gpus: {count: 4, model: v100}}
  - {name: rocky01, address: 10.0.0.14, roles: [compute], gpus: {count: 4, model: a100-80gb}}
  - {name: sandbox-gpu01, address: 10.0.0.15, roles: [compute], gpus: {count: 2, fake: true}}
monitoring: {prometheus: false}
containers: {enroot: false, pyxis: false}
"""


def gpu_node(name: str) -> Node:
    loaded = load_spec_text(GPU_SPEC)
    assert loaded.topology is not None, loaded.findings
    return loaded.topology.by_name()[name]


def recorded(fixture: str) -> dict[str, list[str]]:
    return parse_sections((FIXTURES / f"{fixture}.txt").read_text())


def detection(node_name: str, fixture: str, driver_install: bool = True) -> dict[str, tuple[str, str, str]]:
    checks = judge(gpu_node(node_name), recorded(fixture), "ubuntu", 10, driver_install=driver_install)
    names = ("gpus", *gpu.GPU_NODE_CHECKS)
    return {check.name: (check.status, check.message, check.hint) for check in checks if check.name in names}


def test_an_hgx_h100_node_with_secure_boot_on_fails_with_the_fix() -> None:
    found = detection("hgx01", "h100-hgx-secure-boot")
    assert {name: status for name, (status, _, _) in found.items()} == {
        "gpus": "ok",
        "gpu-model": "ok",
        "secure-boot": "fail",
        "nouveau": "ok",
        "kernel-headers": "ok",
        "nvswitch": "ok",
    }
    assert found["gpu-model"][1] == "8x h100 (0x2330, hopper): open kernel modules recommended"
    _, message, hint = found["secure-boot"]
    assert message == (
        "Secure Boot is on (mokutil --sb-state): the driver's DKMS-built kernel modules are unsigned and would not load"
    )
    assert "enrol a Machine Owner Key" in hint and "turn Secure Boot off" in hint
    assert found["nvswitch"][1] == "HGX with 4 NVSwitches: fabric manager needed"
    assert found["kernel-headers"][1] == "linux-headers-5.15.0-105-generic installed"


def test_secure_boot_on_is_fine_when_gpuclus_installs_no_driver() -> None:
    found = detection("hgx01", "h100-hgx-secure-boot", driver_install=False)
    assert found["secure-boot"][:2] == ("ok", "on (mokutil --sb-state); nvidia.driver.install is false")
    assert found["kernel-headers"][:2] == ("skip", "kernel 5.15.0-105-generic; nvidia.driver.install is false")


def test_a_workstation_with_nouveau_loaded_warns_that_a_reboot_follows() -> None:
    found = detection("ws01", "rtx4090-workstation-nouveau")
    assert found["gpu-model"][:2] == ("ok", "1x rtx4090 (0x2684, ada): open kernel modules recommended")
    assert found["nouveau"] == (
        "warn",
        "nouveau (the open-source driver) is loaded",
        "the nvidia role blacklists it and rebuilds the initramfs; a reboot follows",
    )
    assert found["secure-boot"][:2] == ("ok", "off (mokutil --sb-state)")
    assert found["kernel-headers"][:2] == (
        "ok",
        "linux-headers-6.8.0-31-generic installable (the nvidia role installs it)",
    )
    assert found["nvswitch"][:2] == ("ok", "no NVSwitch on the PCI bus")


def test_a_v100_node_without_installable_headers_fails_with_the_package_name() -> None:
    found = detection("v100a", "v100-headers-missing")
    assert found["gpu-model"][:2] == ("ok", "4x v100 (0x1db5, volta): proprietary kernel modules")
    assert found["secure-boot"][:2] == ("ok", "off (legacy BIOS boot, no UEFI)")
    status, message, hint = found["kernel-headers"]
    assert (status, message) == (
        "fail",
        "linux-headers-6.1.0-13-amd64 is not installed and apt has no candidate for it: "
        "DKMS cannot build the driver for 6.1.0-13-amd64",
    )
    assert "linux-headers-6.1.0-13-amd64" in hint and "reboot" in hint


def test_a_node_without_mokutil_and_without_the_efi_variable_leaves_secure_boot_unknown() -> None:
    found = detection("rocky01", "a100-rocky-no-mokutil")
    assert found["secure-boot"][:2] == (
        "skip",
        "Secure Boot state unknown: no mokutil and no readable SecureBoot EFI variable",
    )
    assert found["gpu-model"][:2] == ("ok", "4x a100 (0x20b2, ampere): open kernel modules recommended")
    status, message, hint = found["kernel-headers"]
    assert (status, message) == (
        "warn",
        "kernel-devel-5.14.0-362.8.1.el9_3.x86_64 is not installed (the nvidia role installs it with dnf)",
    )
    assert "dnf update kernel" in hint


@pytest.mark.parametrize(
    ("lines", "state"),
    [
        (["efivar 1"], ("on", "the SecureBoot EFI variable")),
        (["efivar 0"], ("off", "the SecureBoot EFI variable")),
        # mokutil without the rights to read the variables: the variable itself still answers.
        (["mokutil Failed to read SecureBoot", "efivar 1"], ("on", "the SecureBoot EFI variable")),
        (["mokutil This system doesn't support Secure Boot", "bios"], ("off", "legacy BIOS boot, no UEFI")),
        (
            ["mokutil EFI variables are not supported on this system", "efi"],
            (
                "unknown",
                "mokutil said 'EFI variables are not supported on this system' and the SecureBoot EFI variable "
                "is not readable",
            ),
        ),
        ([], ("unknown", "no mokutil and no readable SecureBoot EFI variable")),
    ],
)
def test_secure_boot_is_read_from_mokutil_then_the_efi_variable(lines: list[str], state: tuple[str, str]) -> None:
    assert gpu.secure_boot_state(lines) == state


def test_fake_gpus_and_cpu_nodes_skip_detection_with_the_reason() -> None:
    fake = detection("sandbox-gpu01", "sandbox-fake-gpus")
    assert fake.pop("gpus")[:2] == ("skip", "2 fake GPU device(s), no driver (spec: fake)")
    assert set(fake.values()) == {("skip", "fake GPUs (spec: fake): no driver to install", "")}
    cpu = detection("head", "cpu-node")
    assert cpu.pop("gpus")[:2] == ("skip", "0 NVIDIA GPU(s) on the PCI bus")
    assert set(cpu.values()) == {("skip", "no GPUs in the spec", "")}


def test_a_gpu_node_whose_gpus_are_missing_skips_the_headers() -> None:
    sections = recorded("v100-headers-missing")
    sections["pci"], sections["headers"] = [], ["nogpu"]
    found = {c.name: c for c in judge(gpu_node("v100a"), sections, "ubuntu", 10)}
    assert found["gpus"].status == "fail"
    assert (found["kernel-headers"].status, found["kernel-headers"].message) == (
        "skip",
        "kernel 6.1.0-13-amd64: no NVIDIA GPU on the PCI bus",
    )
    assert (found["gpu-model"].status, found["gpu-model"].message) == ("skip", "no NVIDIA GPU on the PCI bus")


def test_a_different_model_fails_naming_both() -> None:
    found = detection("v100a", "h100-hgx-secure-boot")
    assert found["gpus"][0] == "fail"  # 8 on the bus, 4 in the spec
    status, message, hint = found["gpu-model"]
    assert (status, message) == ("fail", "the spec says v100, the node has 8x h100 (0x2330, hopper)")
    assert "nodes[].gpus.model" in hint and "h100" in hint


def test_an_unknown_device_id_warns_and_shows_the_id() -> None:
    sections = recorded("rtx4090-workstation-nouveau")
    sections["pci"] = ["/sys/bus/pci/devices/0000:01:00.0 0x1234"]
    found = {c.name: c for c in judge(gpu_node("ws01"), sections, "ubuntu", 10)}
    assert (found["gpu-model"].status, found["gpu-model"].message) == (
        "warn",
        "1x unknown device 0x1234: 4090 not checked, device 0x1234 not in gpuclus' GPU catalogue",
    )
    assert found["gpus"].status == "ok"


def test_the_detection_checks_reach_the_json() -> None:
    report = NodeReport(
        "hgx01", "10.0.0.11", True, checks=judge(gpu_node("hgx01"), recorded("h100-hgx-secure-boot"), "ubuntu", 10)
    )
    names = [check["name"] for check in report.as_dict()["checks"]]
    assert names[names.index("gpus") :][:6] == ["gpus", *gpu.GPU_NODE_CHECKS]


def test_the_probe_runs_under_posix_sh_on_a_machine_without_gpus() -> None:
    # This machine has no NVIDIA device: the new sections come out empty or
    # "unknown"-ish, and nothing is written to stderr (every command tolerates absence).
    probe = rules.PROBE.replace("NAMES", "localhost")
    result = subprocess.run(["/bin/sh", "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stderr == ""
    sections = parse_sections(result.stdout)
    assert sections["pci"] == [] and sections["nvswitch"] == []
    assert sections["nouveau"] == ["no"]
    assert sections["kernel"] and sections["kernel"][0]
    assert sections["secureboot"] and sections["secureboot"][-1].split()[0] in {"bios", "efi", "efivar"}
    assert sections["headers"] == ["nogpu"]  # apt-cache is not asked on a node without a GPU
    state, _ = gpu.secure_boot_state(sections["secureboot"])
    assert state in {"on", "off", "unknown"}
    # As if a GPU had been found: the package manager's answer, whichever this machine has.
    assert "g=''" in probe
    result = subprocess.run(["/bin/sh", "-c", probe.replace("g=''", "g=1")], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, "")
    headers = parse_sections(result.stdout)["headers"][0].split()
    assert headers[0] in {"installed", "candidate", "missing", "absent", "unknown"}
    assert headers[0] == "unknown" or headers[1].endswith(sections["kernel"][0])


def test_a_check_every_node_skipped_is_one_line_not_a_column() -> None:
    from gpuclus.cli.preflight import print_reports
    from gpuclus.output import Output

    reports = [
        NodeReport(
            name,
            "10.0.0.1",
            True,
            [
                PreflightCheck("ssh", "ok", ""),
                PreflightCheck("nouveau", "skip", "fake GPUs"),
                PreflightCheck("gpus", "skip" if name == "head" else "ok", ""),
            ],
        )
        for name in ("head", "gpu01")
    ]
    out = Output(json_mode=False)
    with out.out.capture() as captured:
        print_reports(out, reports)
    text = captured.get()
    header = text.splitlines()[0].split()
    assert header == ["node", "ssh", "gpus"]
    assert "skipped on every node (--json gives each reason): nouveau" in text


def unnamed_model_check(fixture: str, *, modules_from_model: bool = True) -> tuple[str, str, str]:
    """gpu-model on an hgx01 whose spec entry names no gpus.model."""
    node = load_spec_text(GPU_SPEC.replace("gpus: {count: 8, model: h100}", "gpus: {count: 8}"))
    assert node.topology is not None
    sections = recorded(fixture)
    checks = judge(node.topology.by_name()["hgx01"], sections, "ubuntu", 10, modules_from_model=modules_from_model)
    [check] = [check for check in checks if check.name == "gpu-model"]
    return check.status, check.message, check.hint or ""


def test_without_a_model_hopper_gets_proprietary_modules_and_says_so() -> None:
    status, message, hint = unnamed_model_check("h100-hgx-secure-boot")
    assert status == "warn"
    assert message.startswith("8x h100 (0x2330, hopper): without gpus.model the nvidia phase installs the proprietary")
    assert hint.startswith("set nodes[].gpus.model: h100")


def test_without_a_model_open_only_gpus_fail_before_the_wrong_modules_go_in() -> None:
    # A Blackwell board (B200, 0x2901): the proprietary modules cannot drive it.
    sections = recorded("h100-hgx-secure-boot")
    sections["pci"] = [line.replace("0x2330", "0x2901") for line in sections["pci"]]
    node = load_spec_text(GPU_SPEC.replace("gpus: {count: 8, model: h100}", "gpus: {count: 8}"))
    assert node.topology is not None
    [check] = [c for c in judge(node.topology.by_name()["hgx01"], sections, "ubuntu", 10) if c.name == "gpu-model"]
    assert check.status == "fail"
    assert "only the open kernel modules drive these" in check.message
    assert check.hint == (
        "set nodes[].gpus.model: b200 (the nvidia phase picks the kernel modules from it), "
        "or nvidia.driver.kernel_modules: open"
    )


def test_modules_chosen_in_the_spec_need_no_model() -> None:
    status, message, _hint = unnamed_model_check("h100-hgx-secure-boot", modules_from_model=False)
    assert (status, message) == ("ok", "8x h100 (0x2330, hopper): open kernel modules recommended")
