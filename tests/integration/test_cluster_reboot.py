"""Reboots for a new NVIDIA driver (issue 13 item 5): drain -> reboot -> resume, once, on the session's sandbox.

playbooks/nvidia_reboot.yml runs with ansible-playbook against the cluster's
rendered inventory (`gpuclus render`), with GPU1 put in the `gpu` group by an
extra inventory file, as `gpuclus deploy --reboot` will run it (gpuclus_reboot).

No NVIDIA kernel module can exist in a container, so the module version check
has a stand-in, and every test here says so in its name: a oneshot unit on
GPU1 copies "the version the next boot loads" (NEXT_BOOT_FILE) into
/run/gpuclus-stand-in/nvidia-version at boot, and the role is pointed at that
file for the loaded version and at `cat` of it for its verify command. /run is
a tmpfs, so the file changes only when the node's systemd really starts again:
the sandbox runs nodes with --restart=on-failure, and `shutdown -r` in a node
is a real reboot of its systemd (counted by the engine's RestartCount).

The state file, the stand-in and its files are removed at the end and GPU1 is
resumed, so the tests after these find the cluster as deployed (a rebooted node
converges with 0 changes: measured by hand on a sandbox).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import GPU1, HEAD, Cluster, gpuclus

from gpuclus.resources import data_dir

pytestmark = pytest.mark.integration

STATE_FILE = "/var/lib/gpuclus/nvidia-driver.json"
STAND_IN_RUN = "/run/gpuclus-stand-in"
LOADED_FILE = f"{STAND_IN_RUN}/nvidia-version"
STAND_IN_LIB = "/var/lib/gpuclus-stand-in"
NEXT_BOOT_FILE = f"{STAND_IN_LIB}/module-version"
STAND_IN_UNIT = "gpuclus-stand-in-nvidia.service"
UNIT_TEXT = f"""\
[Unit]
Description=Stand-in for the NVIDIA module (gpuclus test): the version this boot loads appears in /run

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c "mkdir -p {STAND_IN_RUN} && cp {NEXT_BOOT_FILE} {LOADED_FILE}"

[Install]
WantedBy=multi-user.target
"""
MARKER = "/run/gpuclus-test-before-reboot"
OUR_REASON = "gpuclus: reboot to load NVIDIA driver"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"


@dataclass
class PlaybookRun:
    returncode: int
    report: dict[str, Any]
    output: str
    facts: dict[str, Any] = field(default_factory=dict)  # GPU1's facts set by the run, last value wins
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # GPU1's result per task name, last wins

    @property
    def changed(self) -> int:
        return int(self.report["stats"][GPU1]["changed"])

    @property
    def failed_messages(self) -> list[str]:
        return [str(result.get("msg", "")) for result in self.results.values() if result.get("failed")]


def _json_report(stdout: str) -> dict[str, Any]:
    """The json callback's document: other callbacks (profile_tasks) may print around it."""
    start = re.search(r"^\{$", stdout, re.MULTILINE)
    assert start, f"no JSON report in ansible-playbook's output:\n{stdout[-3000:]}"
    report, _ = json.JSONDecoder().raw_decode(stdout[start.start() :])
    assert isinstance(report, dict)
    return report


class RebootBench:
    """The rendered inventory with GPU1 in `gpu`, the stand-in on GPU1, and helpers to look at it."""

    def __init__(self, cluster: Cluster, directory: Path) -> None:
        self.cluster = cluster
        self.rendered = directory / "rendered"
        rendered = gpuclus("render", str(cluster.spec), "-o", str(self.rendered))
        assert rendered.returncode == 0, rendered.stderr
        self.gpu_inventory = directory / "gpu.yml"
        self.gpu_inventory.write_text(f"all:\n  children:\n    gpu:\n      hosts:\n        {GPU1}:\n")

    # On the nodes ---------------------------------------------------------------------
    def root(self, node: str, command: str, *, check: bool = True) -> str:
        return self.cluster.on(node, f"sudo sh -c {shlex.quote(command)}", check=check).stdout

    def write(self, node: str, path: str, text: str) -> None:
        self.root(node, f"mkdir -p {shlex.quote(str(Path(path).parent))} && printf %s {shlex.quote(text)} > {path}")

    def install_stand_in(self) -> None:
        self.write(GPU1, f"/etc/systemd/system/{STAND_IN_UNIT}", UNIT_TEXT)
        self.root(GPU1, f"systemctl daemon-reload && systemctl enable --quiet {STAND_IN_UNIT}")

    def driver(self, installed: str, next_boot: str) -> None:
        """The nvidia_driver role's verdict for ``installed`` (as on a node where a new driver
        waits for the next boot), and the version the stand-in loads at that boot."""
        state = {
            "installed_version": installed,
            "loaded_version": None,
            "module_loadable": True,
            "reboot_needed": True,
            "verdict": "installed, reboot needed to load",
        }
        self.write(GPU1, STATE_FILE, json.dumps(state, sort_keys=True, indent=2) + "\n")
        self.write(GPU1, NEXT_BOOT_FILE, next_boot + "\n")

    def remove_stand_in(self) -> None:
        self.root(
            GPU1,
            f"systemctl disable --quiet {STAND_IN_UNIT}; rm -rf /etc/systemd/system/{STAND_IN_UNIT} "
            f"{STATE_FILE} {STAND_IN_LIB} {STAND_IN_RUN} {MARKER}; systemctl daemon-reload",
            check=False,
        )

    def restart_count(self) -> int:
        return int(self._inspect()["RestartCount"])

    def started_at(self) -> datetime:
        """When the engine last started GPU1's container (its last boot)."""
        return datetime.fromisoformat(self._inspect()["State"]["StartedAt"])

    def _inspect(self) -> dict[str, Any]:
        done = subprocess.run(
            [self.cluster.engine, "inspect", GPU1], capture_output=True, text=True, check=True, timeout=60
        )
        found: list[dict[str, Any]] = json.loads(done.stdout)
        return found[0]

    # Slurm ------------------------------------------------------------------------------
    def node_line(self) -> str:
        return self.cluster.on(HEAD, f"scontrol --oneliner show node {GPU1}").stdout.strip()

    def sinfo_state(self) -> str:
        return self.cluster.on(HEAD, f"sinfo --noheader --Node --nodes {GPU1} --format %T").stdout.strip()

    def wait_idle(self, seconds: float = 60) -> str:
        """GPU1's sinfo state once it is plain idle (a resumed node is idle* until Slurm pings it)."""
        deadline = time.monotonic() + seconds
        state = self.sinfo_state()
        while state != "idle" and time.monotonic() < deadline:
            time.sleep(1)
            state = self.sinfo_state()
        return state

    def resume_if_drained(self) -> None:
        if re.search(r" State=\S*(DRAIN|DOWN)", self.node_line()):
            self.root(HEAD, f"scontrol update NodeName={GPU1} State=RESUME")

    def log_lines(self) -> int:
        return int(self.root(HEAD, f"wc -l < {SLURMCTLD_LOG}").strip())

    def head_zone(self) -> timezone:
        """The controller's time zone: slurmctld's log and sacct give its local time."""
        offset = self.root(HEAD, "date +%z").strip()
        return timezone(timedelta(hours=int(offset[:3]), minutes=int(offset[0] + offset[3:])))

    def log_since(self, line_count: int) -> list[tuple[datetime, str]]:
        """slurmctld's log lines about GPU1 after the first ``line_count`` lines, with their times."""
        zone = self.head_zone()
        text = self.root(HEAD, f"tail -n +{line_count + 1} {SLURMCTLD_LOG}")
        lines = []
        for line in text.splitlines():
            found = re.match(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)$", line)
            if found and GPU1 in found.group(2):
                lines.append((datetime.fromisoformat(found.group(1)).replace(tzinfo=zone), found.group(2)))
        return lines

    # The playbook -----------------------------------------------------------------------
    def run(self, *, reboot: bool | None, check: bool = False) -> PlaybookRun:
        """playbooks/nvidia_reboot.yml as `gpuclus deploy [--reboot]` runs it, pointed at the stand-in."""
        extravars: dict[str, Any] = {
            "nvidia_reboot_loaded_version_file": LOADED_FILE,
            "nvidia_reboot_verify_command": f"cat {LOADED_FILE}",
        }
        if reboot is not None:
            extravars["gpuclus_reboot"] = reboot
        argv = [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(self.rendered / "inventory" / "hosts.yml"),
            "-i",
            str(self.gpu_inventory),
            str(data_dir("playbooks") / "nvidia_reboot.yml"),
            "-e",
            json.dumps(extravars),
            *(["--check"] if check else []),
        ]
        env = {
            **os.environ,
            # The rendered ansible.cfg: gpuclus' key, its known_hosts, its fact cache.
            "ANSIBLE_CONFIG": str(self.rendered / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(data_dir("roles")),
            "ANSIBLE_STDOUT_CALLBACK": "json",
            "ANSIBLE_NOCOLOR": "1",
        }
        done = subprocess.run(
            argv, cwd=self.rendered, env=env, capture_output=True, text=True, timeout=1200, check=False
        )
        report = _json_report(done.stdout)
        run = PlaybookRun(done.returncode, report, done.stdout[-6000:] + done.stderr[-3000:])
        for play in report["plays"]:
            for task in play["tasks"]:
                result = task["hosts"].get(GPU1)
                if result is None:
                    continue
                run.results[task["task"]["name"]] = result
                run.facts.update(result.get("ansible_facts", {}))
        return run


@pytest.fixture(scope="module")
def bench(deployed: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RebootBench]:
    bench = RebootBench(deployed, tmp_path_factory.mktemp("reboot"))
    bench.install_stand_in()
    try:
        yield bench
    finally:
        bench.remove_stand_in()
        bench.resume_if_drained()
        assert bench.wait_idle() == "idle"


@pytest.fixture
def reboot_bench(bench: RebootBench) -> Iterator[RebootBench]:
    """Each test starts and ends with GPU1 in service (a failed test leaves no drained node behind)."""
    bench.resume_if_drained()
    try:
        yield bench
    finally:
        bench.resume_if_drained()


def test_reboot_drains_reboots_resumes_once_with_stand_in_module_version(reboot_bench: RebootBench) -> None:
    bench = reboot_bench
    bench.driver(installed="535.261.03", next_boot="535.261.03")
    bench.root(GPU1, f"touch {MARKER}")
    restarts = bench.restart_count()

    # Without --reboot: nothing reboots, nothing is drained, the node is named pending.
    quiet = bench.run(reboot=None)
    assert quiet.returncode == 0, quiet.output
    assert quiet.facts == {"nvidia_reboot_pending": True, "nvidia_reboot_done": False}
    assert quiet.changed == 0
    assert bench.restart_count() == restarts
    bench.root(GPU1, f"test -e {MARKER}")
    assert bench.sinfo_state() == "idle"

    # --check with --reboot: the plan is said, nothing is done.
    check = bench.run(reboot=True, check=True)
    assert check.returncode == 0, check.output
    assert check.facts == {"nvidia_reboot_pending": False, "nvidia_reboot_done": False}
    plan = check.results["nvidia_reboot : Say what a run would do"]["msg"]
    assert f"{GPU1} needs a reboot to load NVIDIA driver 535.261.03 (loaded: none)" in plan
    assert "drain it in Slurm" in plan and "reboot it once" in plan and "resume it in Slurm" in plan
    assert bench.restart_count() == restarts
    bench.root(GPU1, f"test -e {MARKER}")
    assert bench.sinfo_state() == "idle"

    # --reboot, with a job running on the node: it ends normally before the reboot.
    job = bench.cluster.on(HEAD, f"sbatch --parsable --nodelist={GPU1} --output=/dev/null --wrap='sleep 15'")
    job_id = job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while bench.cluster.on(HEAD, f"squeue --noheader --jobs={job_id} --format=%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, f"job {job_id} never started on {GPU1}"
        time.sleep(1)
    log_mark = bench.log_lines()
    started = time.monotonic()
    rebooted = bench.run(reboot=True)
    seconds = time.monotonic() - started
    assert rebooted.returncode == 0, rebooted.output
    assert rebooted.facts == {"nvidia_reboot_pending": False, "nvidia_reboot_done": True}
    # The engine restarted the container once, and /run is new: one real reboot of its systemd.
    assert bench.restart_count() == restarts + 1
    assert bench.root(GPU1, f"test -e {MARKER} && echo still there || echo gone").strip() == "gone"
    assert bench.root(GPU1, f"cat {LOADED_FILE}").strip() == "535.261.03"
    boot = bench.started_at()
    # slurmctld drained it with our Reason before that boot, and resumed it after.
    events = bench.log_since(log_mark)
    drained = [when for when, text in events if f"reason set to: {OUR_REASON} 535.261.03" in text]
    resumed = [when for when, text in events if "state set to IDLE" in text]
    assert len(drained) == 1 and drained[0] < boot, (events, boot)
    assert len(resumed) == 1 and resumed[0] > boot, (events, boot)
    # The job was let finish: completed (not killed by the reboot), before the boot.
    sacct = f"sacct --jobs={job_id} --allocations --noheader --parsable2 --format=State,End"
    accounting = bench.cluster.on(HEAD, sacct).stdout.strip()
    deadline = time.monotonic() + 30
    while not accounting.startswith("COMPLETED|") and time.monotonic() < deadline:
        time.sleep(1)
        accounting = bench.cluster.on(HEAD, sacct).stdout.strip()
    state, end = accounting.split("|")
    assert state == "COMPLETED", accounting
    assert datetime.fromisoformat(end).replace(tzinfo=bench.head_zone()) <= boot, (accounting, boot)
    assert bench.wait_idle() == "idle"
    print(f"\ndrain (job of 15 s) + reboot + check + resume: {seconds:.0f} s")

    # Again: the driver is loaded now, so nothing changes and nothing reboots.
    again = bench.run(reboot=True)
    assert again.returncode == 0, again.output
    assert again.changed == 0, again.output
    assert again.facts == {"nvidia_reboot_pending": False, "nvidia_reboot_done": False}
    assert bench.restart_count() == restarts + 1
    assert bench.sinfo_state() == "idle"


def test_a_node_an_admin_drained_stays_drained_with_stand_in_module_version(reboot_bench: RebootBench) -> None:
    bench = reboot_bench
    bench.driver(installed="535.274.02", next_boot="535.274.02")
    bench.root(HEAD, f"scontrol update NodeName={GPU1} State=DRAIN Reason='admin: swap a fan'")
    restarts = bench.restart_count()
    log_mark = bench.log_lines()

    run = bench.run(reboot=True)
    assert run.returncode == 0, run.output
    assert run.facts == {"nvidia_reboot_pending": False, "nvidia_reboot_done": True}
    assert bench.restart_count() == restarts + 1
    assert bench.root(GPU1, f"cat {LOADED_FILE}").strip() == "535.274.02"
    # Rebooted, but neither drained again (that would overwrite the Reason) nor resumed.
    line = bench.node_line()
    assert re.search(r" State=\S*DRAIN", line), line
    assert re.search(r" Reason=admin: swap a fan \[", line), line
    assert not [text for _, text in bench.log_since(log_mark) if "update_node" in text]
    assert bench.sinfo_state() == "drained"


def test_a_failed_driver_check_never_reboots_twice_with_stand_in_module_version(reboot_bench: RebootBench) -> None:
    bench = reboot_bench
    # The boot loads the old module (say, the new one failed to build): the check after the reboot fails.
    bench.driver(installed="535.288.01", next_boot="535.274.02")
    restarts = bench.restart_count()

    failed = bench.run(reboot=True)
    assert failed.returncode != 0, failed.output
    assert bench.restart_count() == restarts + 1
    message = " ".join(failed.failed_messages)
    assert "installed 535.288.01, loaded 535.274.02" in message, failed.output
    assert "not rebooted again and stays drained in Slurm" in message
    line = bench.node_line()
    assert re.search(r" State=\S*DRAIN", line), line
    assert re.search(rf" Reason={OUR_REASON} 535.288.01 \[", line), line

    # The right module loaded by hand: the next run checks it and resumes the node, without a reboot.
    bench.root(GPU1, f"echo 535.288.01 > {LOADED_FILE} && echo 535.288.01 > {NEXT_BOOT_FILE}")
    resumed = bench.run(reboot=True)
    assert resumed.returncode == 0, resumed.output
    assert resumed.facts == {"nvidia_reboot_pending": False, "nvidia_reboot_done": False}
    assert resumed.changed == 1, resumed.output  # the resume
    assert bench.restart_count() == restarts + 1
    assert bench.wait_idle() == "idle"
