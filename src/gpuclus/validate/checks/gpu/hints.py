"""Hints that more than one GPU check gives, and how a check joins those that apply."""

from __future__ import annotations

DRIVER_HINT = (
    "the NVIDIA driver is missing or not loaded: `gpuclus deploy --only nvidia` installs it "
    "(reboot after a kernel or driver upgrade); on the node `nvidia-smi` must list every GPU, "
    "`dmesg | grep -i -e nvrm -e xid` says why it does not"
)
REBOOT_HINT = (
    "a node whose installed NVIDIA driver differs from its loaded kernel module needs a reboot to load it: "
    "`gpuclus deploy --reboot` drains such a node in Slurm, reboots it once and resumes it "
    "(on the node `cat /sys/module/nvidia/version` shows the loaded module's version)"
)
LAUNCH_HINT = (
    "the job did not run: `sinfo -R` and the node's /var/log/slurm/slurmd.log say why; "
    "cluster.gres and launch.gres-devices show GRES problems"
)


def join_hints(*pairs: tuple[bool, str]) -> str | None:
    """The hints whose condition holds, each once, in the order given; None when none does."""
    chosen = [hint for wanted, hint in pairs if wanted]
    return "; ".join(dict.fromkeys(chosen)) or None
