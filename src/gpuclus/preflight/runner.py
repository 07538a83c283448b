"""Running preflight: the probe on every chosen node in parallel, the rules over the answers, the exit code."""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclus.errors import ExitCode
from gpuclus.hints import gpuclus_command
from gpuclus.preflight.report import AnswerCallback, NodeReport, PreflightCheck
from gpuclus.preflight.rules import PROBE, judge, parse_sections, skew_checks, slurm_release_checks
from gpuclus.spec.models import Role
from gpuclus.spec.topology import Node, Topology
from gpuclus.ssh.client import SshFailure, SshTarget, connect, is_auth_failure, run
from gpuclus.state import StateDir

if TYPE_CHECKING:
    from gpuclus.spec.load import LoadedSpec


def run_preflight(
    topology: Topology,
    admin_user: str,
    key_file: Path,
    known_hosts: Path,
    *,
    min_disk_gb: float = 10.0,
    connector: Callable[[SshTarget], Any] = connect,
    only: list[str] | None = None,
    advice: SshAdvice | None = None,
    on_answer: AnswerCallback | None = None,
    driver_install: bool = True,
    modules_from_model: bool = True,
    slurm_pin: str | None = None,
) -> list[NodeReport]:
    """Probe the nodes (all, or those named in ``only``); the controller is always probed for clock skew
    and as the reference of the Slurm releases.

    ``driver_install``, ``modules_from_model``: from the spec's nvidia.driver (see judge).
    ``slurm_pin``: the spec's slurm.version (every node installs it; the releases are then not compared).

    ``advice``: what the hint for a failed SSH login may say about this directory.
    ``on_answer(report, answered, total)``: called as each of the chosen nodes answers (or
    fails to), from the probing threads, one call at a time; ``total`` counts the chosen
    nodes, not a controller probed only as the clock reference. The report's clock check
    comes later, once every node has answered.
    """
    names = " ".join(shlex.quote(node.name) for node in topology.nodes)
    probe = PROBE.replace("NAMES", names)

    def one(node: Node) -> NodeReport:
        report = NodeReport(node.name, node.address, reachable=False)
        target = SshTarget(node.address, admin_user, key_file, known_hosts)
        try:
            client = connector(target)
        except SshFailure as failure:
            hint = ssh_hint(str(failure), admin_user, advice or SshAdvice())
            report.checks.append(PreflightCheck("ssh", "fail", str(failure), hint))
            return report
        try:
            result = run(client, probe, timeout=60)
        finally:
            client.close()
        report.probed_at = time.time()
        report.reachable = True
        report.checks.append(PreflightCheck("ssh", "ok", f"{admin_user}@{node.address} with gpuclus' key"))
        sections = parse_sections(result.stdout)
        report.os_release = (sections.get("os") or [""])[0]
        try:
            report.clock = float((sections.get("time") or ["nan"])[0])
        except ValueError:
            report.clock = None
        report.checks.extend(
            judge(
                node,
                sections,
                admin_user,
                min_disk_gb,
                driver_install=driver_install,
                modules_from_model=modules_from_model,
            )
        )
        return report

    controller = topology.controller
    chosen = [node for node in topology.nodes if only is None or node.name in only]
    reference_only = controller is not None and controller not in chosen
    probed = [*chosen, controller] if reference_only and controller is not None else chosen
    chosen_names = {node.name for node in chosen}
    answered = 0
    # One call at a time, so a caller's counter or spinner needs no lock of its own.
    answering = threading.Lock()

    def reported(node: Node) -> NodeReport:
        nonlocal answered
        report = one(node)
        if on_answer is not None and node.name in chosen_names:
            with answering:
                answered += 1
                on_answer(report, answered, len(chosen))
        return report

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(probed)))) as pool:
        reports = list(pool.map(reported, probed))
    if controller is not None:
        skew_checks(reports, controller.name)
        backups = {node.name for node in topology.with_role(Role.BACKUP_CONTROLLER)}
        slurm_release_checks(reports, controller.name, backups, slurm_pin)
    # The controller was probed only as the clock reference: not part of the result.
    return reports[: len(chosen)]


@dataclass(frozen=True)
class SshAdvice:
    """What a hint for a failed SSH login can say about the spec's directory."""

    spec: Path | None = None  # named in the commands the hint suggests
    sandbox: bool = False  # `gpuclus sandbox up` made these nodes (.gpuclus/sandbox.json beside the spec)
    new_key: bool = False  # this directory's key was made by a plain preflight and never installed anywhere

    @classmethod
    def beside(cls, spec_path: Path) -> SshAdvice:
        state = StateDir.beside(spec_path)
        return cls(spec_path, state.sandbox_record.exists(), state.key_not_installed_marker.exists())


def ssh_hint(message: str, admin_user: str, advice: SshAdvice) -> str:
    """The hint for a node gpuclus could not log in to: a refused login is not a host that is down."""
    if "host key" in message:
        return "the node's host key changed: if it was reinstalled, remove its line from .gpuclus/ssh/known_hosts"
    if not is_auth_failure(message):
        return "check the address, that sshd runs, and the firewall"
    spec = str(advice.spec) if advice.spec is not None else "the spec"
    if advice.sandbox:
        return (
            f"authentication failed as {admin_user}: check cluster.admin_user in {spec}; gpuclus' key reaches "
            f"sandbox nodes through `{gpuclus_command('sandbox up', advice.spec)}` (as it creates or starts them), "
            "not through --password"
        )
    if advice.new_key:
        return (
            "this directory has its own new SSH key (.gpuclus/ssh/) that the nodes do not know: run gpuclus from "
            "the directory where the cluster was set up, or copy its .gpuclus/ here; for a cluster new to "
            f"gpuclus, install this key with `{gpuclus_command('preflight', advice.spec, '--password')}`"
        )
    return (
        f"authentication failed as {admin_user}: check cluster.admin_user in {spec}, or install gpuclus' key "
        f"with `{gpuclus_command('preflight', advice.spec, '--password')}`"
    )


def preflight_spec(
    loaded: LoadedSpec,
    spec_path: Path,
    min_disk_gb: float = 10.0,
    hosts: list[str] | None = None,
    on_answer: AnswerCallback | None = None,
) -> list[NodeReport]:
    """Preflight a checked spec's nodes (all, or ``hosts``) with gpuclus' key, learning new host keys.

    ``on_answer``: see run_preflight (progress while the nodes answer).
    """
    assert loaded.spec is not None and loaded.topology is not None
    state = StateDir.beside(spec_path)
    if not state.private_key.exists():
        state.ensure_ssh_key()
        if not state.sandbox_record.exists():
            # A key no node knows yet: a login refused with it says so (SshAdvice.new_key).
            state.mark_key_not_installed()
    return run_preflight(
        loaded.topology,
        loaded.spec.cluster.admin_user,
        state.private_key,
        state.known_hosts,
        min_disk_gb=min_disk_gb,
        only=hosts,
        advice=SshAdvice.beside(spec_path),
        on_answer=on_answer,
        driver_install=loaded.spec.nvidia.driver.install,
        modules_from_model=loaded.spec.nvidia.driver.kernel_modules == "auto",
        slurm_pin=loaded.spec.slurm.version,
        # First contact with a real node: its host key is learned (accept-new, as Ansible does).
        connector=lambda target: connect(target, accept_new=True),
    )


def preflight_exit_code(reports: list[NodeReport]) -> ExitCode:
    if any(not report.reachable for report in reports):
        return ExitCode.UNREACHABLE
    if any(report.failed for report in reports):
        return ExitCode.FAILED
    return ExitCode.OK
