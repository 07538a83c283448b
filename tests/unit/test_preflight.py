"""Preflight's rules, judged from recorded probe answers (no SSH)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuclus.errors import ExitCode, GpuclusError
from gpuclus.spec.load import load_spec_text
from gpuclus.spec.topology import Node, Topology
from gpuclus.ssh import preflight as preflight_module
from gpuclus.ssh.client import SshFailure, SshTarget
from gpuclus.ssh.preflight import (
    HostKeyCheck,
    NodeReport,
    PreflightCheck,
    install_keys,
    judge,
    parse_sections,
    preflight_exit_code,
    preflight_spec,
    run_preflight,
    skew_checks,
)
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

    monkeypatch.setattr(preflight_module, "connect", refuse)
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

    monkeypatch.setattr(preflight_module, "install_key", install)
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
    monkeypatch.setattr(preflight_module, "install_key", lambda *args: pytest.fail("the password was sent"))
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

    monkeypatch.setattr(preflight_module, "preflight_spec", fake)


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
