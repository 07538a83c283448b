"""gpuclus-healthcheck (roles/slurm_health/files), run as slurmd runs it, against stand-in commands.

What cannot exist on this host is faked on PATH and named so: nvidia-smi,
dmesg Xid lines and dcgmi (no GPU, no NVIDIA driver), and Slurm's scontrol,
munge and systemctl (a small stand-in keeps the node's state in a file; the
real ones are exercised on the sandbox by tests/integration/test_cluster_health.py).
Disk space, mount points and the mount write probe are the host's real ones,
and so are the fake GPUs' device nodes: character devices made with mknod,
which takes root (CI runs as root); without it the tests that need them skip.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PROGRAM = Path(__file__).resolve().parents[3] / "roles" / "slurm_health" / "files" / "gpuclus-healthcheck"
PREFIX = "gpuclus-health:"
NVIDIA_MAJOR = 195  # the driver's character-device major: /dev/nvidiaN is 195:N, nvidiactl 195:255
NO_MKNOD = "the fake GPUs are character devices (mknod), and making one takes root (CAP_MKNOD)"

# A stand-in scontrol: `show node` prints the state kept in $FAKE_SLURM_STATE,
# `update` changes it and logs the call; FAKE_SLURM_DOWN makes it fail as
# when slurmctld does not answer.
FAKE_SCONTROL = r"""#!{python}
import json, os, sys
path = os.environ["FAKE_SLURM_STATE"]
if os.environ.get("FAKE_SLURM_DOWN"):
    print("slurm_load_node error: Unable to contact slurm controller", file=sys.stderr); sys.exit(1)
state = json.load(open(path))
args = sys.argv[1:]
with open(path + ".calls", "a") as log:
    log.write(json.dumps(args) + "\n")
if "show" in args:
    reason = (" Reason=" + state["reason"] + " [root@2026-11-24T10:00:00]") if state["reason"] else ""
    print("NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=" + state["state"] + " ThreadsPerCore=1" + reason)
elif args[0] == "update":
    fields = dict(arg.split("=", 1) for arg in args[1:])
    if fields["State"] == "DRAIN":
        state = {"state": "IDLE+DRAIN", "reason": fields["Reason"]}
    elif fields["State"] == "RESUME":
        state = {"state": "IDLE", "reason": ""}
    json.dump(state, open(path, "w"))
"""


def _char_device(path: Path, major: int, minor: int) -> None:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def _can_mknod(directory: Path) -> bool:
    probe = directory / ".mknod-probe"
    try:
        _char_device(probe, NVIDIA_MAJOR, 0)
    except PermissionError:
        return False
    probe.unlink()
    return True


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


# The commands the stand-ins replace. The host's own copies must stay off PATH (a
# host with Slurm's packages installed has a real munge, which would answer instead).
STOOD_IN = frozenset({"dcgmi", "dmesg", "munge", "unmunge", "nvidia-smi", "scontrol", "systemctl"})


def _host_commands(directory: Path) -> Path:
    """A directory of links to the host's commands, less the ones the tests stand in for."""
    directory.mkdir()
    for system_dir in (Path("/usr/bin"), Path("/bin")):
        for command in system_dir.iterdir():
            link = directory / command.name
            if command.name not in STOOD_IN and not link.exists() and not link.is_symlink():
                link.symlink_to(command)
    return directory


class Node:
    """A node as the health check sees it: its settings file, a PATH of stand-ins, Slurm's view of it."""

    def __init__(self, root: Path, host_bin: Path) -> None:
        self.root = root
        self.host_bin = host_bin
        self.bin = root / "bin"
        self.bin.mkdir()
        self.dev = root / "dev"
        self.dev.mkdir()
        self.state_file = root / "slurm-state.json"
        self.slurm_state("IDLE")
        self.config: dict[str, Any] = {
            "node": "n1",
            "reason_prefix": PREFIX,
            "gpus": 2,
            "gpu_fake": True,
            "device_dir": str(self.dev),
            "mounts": [],
            "disks": [{"path": str(root), "min_free_mb": 0}],
            "dcgm_diag": True,
            "munge": True,
            "services": ["slurmd"],
            "xid_fatal": [48, 79, 95],
            "command_timeout_s": 2,
            "nvidia_smi_timeout_s": 2,
        }
        # As the driver makes them; without root, no fake GPUs (the node has none: see gpu_node).
        self.devices = _can_mknod(self.dev)
        if self.devices:
            for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
                _char_device(self.dev / name, NVIDIA_MAJOR, minor)
        else:
            self.config["gpus"] = 0
        _write(self.bin / "scontrol", FAKE_SCONTROL.replace("{python}", sys.executable))
        self.munge(works=True)
        self.service("active")

    # --- stand-ins ---------------------------------------------------------
    def slurm_state(self, state: str, reason: str = "") -> None:
        self.state_file.write_text(json.dumps({"state": state, "reason": reason}))

    def munge(self, works: bool) -> None:
        _write(self.bin / "munge", "#!/bin/sh\necho MUNGE:fakecredential:\n")
        body = (
            "cat >/dev/null; echo 'STATUS: Success (0)'"
            if works
            else "echo 'unmunge: Error: Expired credential' >&2; exit 15"
        )
        _write(self.bin / "unmunge", f"#!/bin/sh\n{body}\n")

    def service(self, state: str) -> None:
        _write(self.bin / "systemctl", f"#!/bin/sh\necho {state}\n[ {state} = active ]\n")

    def nvidia_smi(
        self, rows: list[str], status: int = 0, remapped: list[str] | None = None, hang: bool = False
    ) -> None:
        self.config["gpu_fake"] = False
        self.config["gpus"] = 2
        (self.root / "smi.query").write_text("".join(row + "\n" for row in rows))
        (self.root / "smi.remap").write_text("".join(row + "\n" for row in remapped or []))
        remap_status = 0 if remapped is not None else 2
        body = (
            "sleep 30\n"
            if hang
            else (
                f'case "$1" in --query-remapped-rows=*) cat {self.root / "smi.remap"}; exit {remap_status};; esac\n'
                f"cat {self.root / 'smi.query'}\nexit {status}\n"
            )
        )
        _write(self.bin / "nvidia-smi", f"#!/bin/sh\n{body}")
        self.dmesg("")

    def dmesg(self, text: str) -> None:
        (self.root / "kmsg").write_text(text)
        _write(self.bin / "dmesg", f"#!/bin/sh\ncat {self.root / 'kmsg'}\n")

    def dcgmi(self, output: str, status: int) -> None:
        (self.root / "dcgm.out").write_text(output)
        _write(self.bin / "dcgmi", f"#!/bin/sh\ncat {self.root / 'dcgm.out'}\nexit {status}\n")

    # --- running it ----------------------------------------------------------
    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        config = self.root / "healthcheck.json"
        config.write_text(json.dumps(self.config))
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{self.host_bin}",
            "FAKE_SLURM_STATE": str(self.state_file),
            **(env or {}),
        }
        return subprocess.run(
            [sys.executable, str(PROGRAM), "--config", str(config), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    def report(self) -> dict[str, Any]:
        done = self.run("--json")
        assert done.returncode in (0, 1), done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        assert report["healthy"] is (done.returncode == 0)
        return report

    def failed(self) -> dict[str, str]:
        return {check["name"]: check["detail"] for check in self.report()["checks"] if not check["ok"]}

    def state(self) -> dict[str, str]:
        loaded: dict[str, str] = json.loads(self.state_file.read_text())
        return loaded

    def updates(self) -> list[list[str]]:
        calls = self.state_file.with_name(self.state_file.name + ".calls")
        if not calls.exists():
            return []
        return [args for args in map(json.loads, calls.read_text().splitlines()) if args[0] == "update"]


@pytest.fixture(scope="module")
def host_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _host_commands(tmp_path_factory.mktemp("host") / "bin")


@pytest.fixture
def node(tmp_path: Path, host_bin: Path) -> Node:
    return Node(tmp_path, host_bin)


@pytest.fixture
def gpu_node(node: Node) -> Node:
    """A node whose two fake GPUs are real device nodes; skipped where mknod is not allowed."""
    if not node.devices:
        pytest.skip(NO_MKNOD)
    return node


HEALTHY_GPU_ROWS = ["0, 00000000:3B:00.0, Enabled, 0, No", "1, 00000000:86:00.0, Enabled, 0, No"]


# --- the checks ------------------------------------------------------------------


@pytest.mark.usefixtures("gpu_node")
def test_a_healthy_node_with_fake_gpus_passes_every_check(node: Node) -> None:
    report = node.report()
    assert report["healthy"], report
    names = [check["name"] for check in report["checks"]]
    assert names == ["gpus", f"disk {node.root}", "munge", "slurmd"]
    assert report["checks"][0]["detail"] == "2 of 2 GPU device nodes present (fake GPUs)"


@pytest.mark.usefixtures("gpu_node")
def test_fake_gpus_count_only_numbered_device_nodes(node: Node) -> None:
    # nvidiactl (195:255) is the driver's control node, no GPU: two GPUs, not three.
    (node.dev / "nvidia1").unlink()
    assert node.failed() == {"gpus": "1 of 2 GPU device nodes present"}


@pytest.mark.usefixtures("gpu_node")
def test_a_gpu_device_node_replaced_by_a_plain_file_is_missing(node: Node) -> None:
    (node.dev / "nvidia1").unlink()
    (node.dev / "nvidia1").touch()
    assert node.failed() == {"gpus": "1 of 2 GPU device nodes present; nvidia1 is not a character device"}


@pytest.mark.usefixtures("gpu_node")
def test_a_gpu_device_node_of_another_device_is_missing(node: Node) -> None:
    (node.dev / "nvidia1").unlink()
    _char_device(node.dev / "nvidia1", 1, 3)  # /dev/null's numbers
    assert node.failed() == {"gpus": "1 of 2 GPU device nodes present; nvidia1 is device 1:3, not 195:1"}
    # NVIDIA's major but GPU 0's minor: a job given "GPU 1" would get GPU 0.
    (node.dev / "nvidia1").unlink()
    _char_device(node.dev / "nvidia1", NVIDIA_MAJOR, 0)
    assert node.failed() == {"gpus": "1 of 2 GPU device nodes present; nvidia1 is device 195:0, not 195:1"}


@pytest.mark.usefixtures("gpu_node")
def test_a_link_to_the_right_device_node_counts(node: Node) -> None:
    # udev may make a GPU's node a link; what the link leads to is what opens.
    (node.dev / "nvidia1").rename(node.dev / "real-nvidia1")
    (node.dev / "nvidia1").symlink_to(node.dev / "real-nvidia1")
    assert node.failed() == {}
    (node.dev / "real-nvidia1").unlink()
    assert node.failed() == {"gpus": "1 of 2 GPU device nodes present; nvidia1 unreadable: No such file or directory"}


def test_a_node_without_gpus_has_no_gpu_check(node: Node) -> None:
    node.config["gpus"] = 0
    assert "gpus" not in [check["name"] for check in node.report()["checks"]]


def test_real_gpus_fake_nvidia_smi_healthy(node: Node) -> None:
    node.nvidia_smi(HEALTHY_GPU_ROWS, remapped=["00000000:3B:00.0, 0, 0", "00000000:86:00.0, 0, 0"])
    report = node.report()
    assert report["healthy"], report
    names = [check["name"] for check in report["checks"]]
    assert names[:5] == ["nvidia-smi", "gpus", "persistence", "ecc", "xid"]
    # No dcgmi on this PATH: reported as skipped, not failed.
    assert report["checks"][5] == {"name": "dcgm", "ok": True, "detail": "DCGM not installed", "skipped": True}


def test_fake_nvidia_smi_missing_gpu(node: Node) -> None:
    node.nvidia_smi(HEALTHY_GPU_ROWS[:1])
    assert node.failed() == {"gpus": "1 of 2 GPUs visible"}


def test_fake_nvidia_smi_not_talking_to_the_driver(node: Node) -> None:
    node.nvidia_smi(["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."], status=9)
    failed = node.failed()
    assert list(failed) == ["nvidia-smi"]
    assert "couldn't communicate with the NVIDIA driver" in failed["nvidia-smi"]


def test_fake_nvidia_smi_hanging_is_cut_off(node: Node) -> None:
    node.nvidia_smi([], hang=True)
    node.config["nvidia_smi_timeout_s"] = 1
    assert node.failed() == {"nvidia-smi": "nvidia-smi failed: nvidia-smi: no answer in 1 s"}


def test_fake_nvidia_smi_persistence_mode_off(node: Node) -> None:
    node.nvidia_smi([HEALTHY_GPU_ROWS[0], "1, 00000000:86:00.0, Disabled, 0, No"])
    assert node.failed() == {"persistence": "persistence mode off on GPU 1"}


def test_fake_nvidia_smi_uncorrected_ecc_and_pending_retirement(node: Node) -> None:
    node.nvidia_smi(["0, 00000000:3B:00.0, Enabled, 3, No", "1, 00000000:86:00.0, Enabled, [N/A], Yes"])
    assert node.failed() == {
        "ecc": "GPU 0 3 uncorrected ECC errors; GPU 1 retired pages pending (reset needed)",
    }


def test_fake_nvidia_smi_row_remapping(node: Node) -> None:
    node.nvidia_smi(HEALTHY_GPU_ROWS, remapped=["00000000:3B:00.0, Yes, No", "00000000:86:00.0, No, Yes"])
    assert node.failed() == {
        "ecc": "GPU 00000000:3B:00.0 row remapping pending (reset needed); GPU 00000000:86:00.0 row remapping failed"
    }


def test_fake_dmesg_fatal_xid_fails_and_an_application_xid_does_not(node: Node) -> None:
    node.nvidia_smi(HEALTHY_GPU_ROWS)
    node.dmesg("[ 12.1] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception\n")
    assert node.failed() == {}
    node.dmesg(
        "[ 12.1] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception\n"
        "[ 99.5] NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has fallen off the bus.\n"
    )
    assert node.failed() == {"xid": "Xid 79 on PCI:0000:86:00 since boot (reboot or reset the GPU)"}


def test_fake_dcgmi_diag_failure_and_opt_out(node: Node) -> None:
    node.nvidia_smi(HEALTHY_GPU_ROWS)
    node.dcgmi("| Deployment | Pass |\n| GPU Memory | Fail - GPU 1 memory errors |\n", status=226)
    assert node.failed() == {"dcgm": "dcgmi diag -r 1: GPU Memory | Fail - GPU 1 memory errors"}
    node.config["dcgm_diag"] = False
    assert "dcgm" not in [check["name"] for check in node.report()["checks"]]
    node.config["dcgm_diag"] = True
    node.dcgmi("| Deployment | Pass |\n", status=0)
    assert node.failed() == {}


def test_disk_below_its_floor_fails_with_the_numbers(node: Node) -> None:
    node.config["disks"] = [{"path": str(node.root), "min_free_mb": 100_000_000}]
    failed = node.failed()
    assert list(failed) == [f"disk {node.root}"]
    assert failed[f"disk {node.root}"].endswith("MB free, needs 100000000 MB")
    node.config["disks"] = [{"path": str(node.root / "gone"), "min_free_mb": 1}]
    assert node.failed() == {f"disk {node.root / 'gone'}": f"{node.root / 'gone'}: No such file or directory"}


def _writable_tmpfs() -> str | None:
    """A tmpfs this host has mounted and root may write to (/dev/shm on most), for a real mount to probe."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        point = fields.split()[4]
        if tail.split()[0] == "tmpfs" and point in ("/dev/shm", "/run", "/tmp") and os.access(point, os.W_OK):
            return point
    return None


def test_mounts_mounted_and_writable_pass_and_a_plain_directory_fails(node: Node) -> None:
    mounted = _writable_tmpfs()
    if mounted is None:
        pytest.skip("this host has no writable tmpfs at /dev/shm, /run or /tmp to probe as a mount")
    node.config["mounts"] = [mounted, str(node.root)]
    failed = node.failed()
    assert failed == {f"mount {node.root}": f"{node.root} is not mounted"}
    detail = next(check["detail"] for check in node.report()["checks"] if check["name"] == f"mount {mounted}")
    assert detail == f"{mounted} mounted (tmpfs), writable"
    assert not list(Path(mounted).glob(".gpuclus-health-*")), "the write probe left its file behind"


def test_mount_point_that_is_missing(node: Node) -> None:
    node.config["mounts"] = [str(node.root / "shared")]
    assert node.failed() == {f"mount {node.root / 'shared'}": f"{node.root / 'shared'}: No such file or directory"}


def test_munge_and_slurmd_failures(node: Node) -> None:
    node.munge(works=False)
    node.service("inactive")
    assert node.failed() == {
        "munge": "unmunge failed: unmunge: Error: Expired credential",
        "slurmd": "slurmd inactive",
    }
    (node.bin / "munge").unlink()
    assert node.failed()["munge"] == "munge -n failed: munge: not found"


# --- drain and resume -------------------------------------------------------------


@pytest.mark.usefixtures("gpu_node")
def test_a_failure_drains_the_node_with_the_prefixed_reason(node: Node) -> None:
    (node.dev / "nvidia1").unlink()
    done = node.run()
    assert done.returncode == 1
    assert node.state() == {"state": "IDLE+DRAIN", "reason": f"{PREFIX} 1 of 2 GPU device nodes present"}
    # The same fault again: nothing to change.
    node.run()
    assert len(node.updates()) == 1


def test_a_new_fault_rewords_its_own_drain(node: Node) -> None:
    node.slurm_state("IDLE+DRAIN", f"{PREFIX} 1 of 2 GPU device nodes present")
    node.service("inactive")
    node.run()
    assert node.state() == {"state": "IDLE+DRAIN", "reason": f"{PREFIX} slurmd inactive"}


def test_a_healthy_node_it_drained_is_resumed(node: Node) -> None:
    node.slurm_state("IDLE+DRAIN", f"{PREFIX} 1 of 2 GPU device nodes present")
    done = node.run()
    assert done.returncode == 0
    assert node.state() == {"state": "IDLE", "reason": ""}
    assert node.updates() == [["update", "NodeName=n1", "State=RESUME"]]


@pytest.mark.usefixtures("gpu_node")
def test_an_admins_drain_is_never_touched(node: Node) -> None:
    node.slurm_state("IDLE+DRAIN", "disk swap on Friday")
    node.run()
    (node.dev / "nvidia1").unlink()
    node.run()
    assert node.state() == {"state": "IDLE+DRAIN", "reason": "disk swap on Friday"}
    assert node.updates() == []


def test_a_draining_node_with_jobs_counts_as_drained(node: Node) -> None:
    node.slurm_state("MIXED+DRAIN", f"{PREFIX} slurmd inactive")
    node.run()
    assert node.updates() == [["update", "NodeName=n1", "State=RESUME"]]


@pytest.mark.usefixtures("gpu_node")
def test_no_answer_from_slurmctld_leaves_the_node_alone(node: Node) -> None:
    (node.dev / "nvidia1").unlink()
    node.slurm_state("IDLE")
    node.run(env={"FAKE_SLURM_DOWN": "1"})
    assert node.state() == {"state": "IDLE", "reason": ""}


def test_a_long_reason_is_cut_to_fit(node: Node) -> None:
    node.config["disks"] = [{"path": str(node.root), "min_free_mb": 100_000_000}] * 4
    node.service("inactive")
    node.run()
    reason = node.state()["reason"]
    assert reason.startswith(PREFIX) and len(reason) == 120 and reason.endswith("...")


@pytest.mark.usefixtures("gpu_node")
def test_report_mode_never_touches_slurm(node: Node) -> None:
    (node.dev / "nvidia1").unlink()
    done = node.run("--report")
    assert done.returncode == 1
    assert "FAIL gpus" in done.stdout and "n1: UNHEALTHY" in done.stdout
    assert node.updates() == [] and node.state()["state"] == "IDLE"


def test_a_missing_settings_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(PROGRAM), "--config", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("gpuclus-healthcheck: cannot read ") and len(done.stderr.splitlines()) == 1
