"""Stage "gpu": the GPUs answer, are isolated per job, run one driver, and reach their numbers.

Every figure comes from a Slurm job on the GPU nodes: nvidia-smi for the
inventory, the probe scripts in gpuclus.validate.probes (shipped inline,
run with the node's python3 and PyTorch) or nccl-tests' all_reduce_perf for
the performance checks. The figures are judged in this package, against the
thresholds in gpuclus.validate.thresholds; docs/validate-gpu.md explains each rule.

One module per check or pair of related checks; ``scope`` decides which nodes
every check runs on (fake GPUs are SKIP, never PASS), ``probe_output`` reads
what a probe printed, ``hints`` holds the hints several checks share.
"""

from __future__ import annotations

from gpuclus.validate.check import Check
from gpuclus.validate.checks.gpu.ddp import ddp_smoke
from gpuclus.validate.checks.gpu.isolation import isolation
from gpuclus.validate.checks.gpu.nccl import nccl_all_reduce
from gpuclus.validate.checks.gpu.nvidia_smi import driver_versions, nvidia_smi_inventory
from gpuclus.validate.checks.gpu.per_gpu import matmul, memory_bandwidth
from gpuclus.validate.results import Level

CHECKS = [
    Check(
        "gpu.nvidia-smi",
        Level.QUICK,
        "nvidia-smi lists the spec's GPUs on every GPU node, persistence mode on, NVSwitch fabric up",
        nvidia_smi_inventory,
    ),
    Check("gpu.isolation", Level.STANDARD, "a job given one GPU sees exactly one", isolation),
    Check(
        "gpu.driver", Level.STANDARD, "one NVIDIA driver version on all GPU nodes, and it is loaded", driver_versions
    ),
    Check("gpu.matmul", Level.FULL, "bf16 matmul TFLOP/s per GPU against the chip's peak", matmul),
    Check("gpu.membw", Level.FULL, "device memory bandwidth per GPU against the chip's peak", memory_bandwidth),
    Check("gpu.nccl", Level.FULL, "NCCL all-reduce bus bandwidth within nodes and between pairs", nccl_all_reduce),
    Check("gpu.ddp", Level.FULL, "PyTorch DDP training steps across all GPU nodes", ddp_smoke),
]
