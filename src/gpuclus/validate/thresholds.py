"""Numeric thresholds for validate's GPU and workload checks: pure functions and named constants.

Every figure a GPU check judges against lives here, so docs/validate-gpu.md,
the checks and the tests agree on one number.

Ceilings are public spec-sheet peaks (dense, i.e. without the 2:4 sparsity
speed-up NVIDIA quotes first), taken from NVIDIA's product datasheets and
architecture whitepapers: H100/H200 Tensor Core GPU datasheets, A100 datasheet,
L40S/L40/L4/A10/A30/A40 datasheets, RTX A6000 and RTX 6000 Ada datasheets, the
Ada (AD102, RTX 4090) and Ampere (GA102, RTX 3090) whitepapers, the V100 and T4
datasheets, the HGX B200 spec sheet. GeForce cards are listed at their FP32-
accumulate tensor rate, which is what PyTorch's bf16/fp16 matmul uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuclus.spec.models import Fabric
from gpuclus.validate.results import Status

# --- single-GPU probes (matmul, memory bandwidth) -----------------------------

# A probe reaching half the spec-sheet peak is healthy: short bf16 GEMMs on a
# busy-free GPU reach 60-80 % of it, device copies 80-90 % of HBM peak.
PEAK_PASS_RATIO = 0.50
# Below a fifth of the peak something is wrong (clocks pinned low, thermal or
# power throttling, a PCIe-starved or mis-seated card, the wrong GPU).
PEAK_FAIL_RATIO = 0.20

# Model -> dense peak; keys are name tokens that must all appear in
# nvidia-smi's name (see ``model_matches``). Most specific keys first.
# Values: TFLOP/s for a bf16 matmul (fp16 on GPUs without bf16: V100, T4).
MATMUL_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("b200", 2250.0),  # HGX B200: 4.5 PFLOPS bf16 with sparsity per GPU
    ("gh200", 989.0),  # Grace Hopper superchip: the H100 SXM tensor core
    ("h200 nvl", 835.0),
    ("h200", 989.0),  # H200 SXM: 1,979 with sparsity
    ("h100 pcie", 756.0),  # 1,513 with sparsity
    ("h100 nvl", 835.0),  # 1,671 with sparsity
    ("h100", 989.0),  # H100 SXM5 ("NVIDIA H100 80GB HBM3"): 1,979 with sparsity
    ("a100", 312.0),  # SXM4 and PCIe alike: 624 with sparsity
    ("l40s", 362.0),  # 733 with sparsity
    ("l40", 181.0),  # 362 with sparsity
    ("l4", 121.0),  # 242 with sparsity
    ("a30", 165.0),  # 330 with sparsity
    ("a40", 149.7),  # 299.4 with sparsity
    ("a10", 125.0),  # 250 with sparsity
    ("rtx 6000 ada", 364.2),  # 1,457 FP8 with sparsity / 4
    ("rtx a6000", 154.8),  # 309.7 with sparsity
    ("rtx 4090", 165.2),  # FP32 accumulate (330.3 with FP16 accumulate)
    ("rtx 3090", 71.0),  # FP32 accumulate (142 with FP16 accumulate)
    ("v100", 125.0),  # fp16, SXM2 (PCIe: 112)
    ("t4", 65.0),  # fp16
)

# GB/s of memory (HBM/GDDR) bandwidth, as sold.
MEMORY_PEAK_GBS: tuple[tuple[str, float], ...] = (
    ("b200", 8000.0),
    ("gh200", 4000.0),  # 96 GB HBM3 (the 144 GB HBM3e part: 4,900)
    ("h200", 4800.0),  # SXM and NVL
    ("h100 pcie", 2000.0),
    ("h100 nvl", 3900.0),
    ("h100", 3350.0),  # SXM5
    ("a100 sxm4 80gb", 2039.0),
    ("a100 80gb", 1935.0),  # PCIe
    ("a100", 1555.0),  # 40 GB, SXM4 and PCIe
    ("l40s", 864.0),
    ("l40", 864.0),
    ("l4", 300.0),
    ("a30", 933.0),
    ("a40", 696.0),
    ("a10", 600.0),
    ("rtx 6000 ada", 960.0),
    ("rtx a6000", 768.0),
    ("rtx 4090", 1008.0),
    ("rtx 3090", 936.0),
    ("v100", 900.0),
    ("t4", 320.0),
)


def _name_tokens(name: str) -> list[str]:
    return [token for token in re.split(r"[\s_\-/]+", name.lower()) if token]


def model_matches(wanted: str, name: str) -> bool:
    """Whether a short model (``h100``, ``a100-80gb``, ``rtx4090``) names the GPU nvidia-smi calls ``name``.

    Case and '-', '_', ' ' do not matter, but each part of ``wanted`` must be
    one or more whole words of the name: ``a10`` does not match an A100, nor
    ``h200`` a GH200, nor ``l40`` an L40S.
    """
    words = _name_tokens(name)
    parts = _name_tokens(wanted)
    if not parts:
        return False
    return all(_covers(part, words) for part in parts)


def _covers(part: str, words: list[str]) -> bool:
    """``part`` equals one word or several consecutive words run together ("rtx4090")."""
    for start in range(len(words)):
        joined = ""
        for word in words[start:]:
            joined += word
            if joined == part:
                return True
            if not part.startswith(joined):
                break
    return False


def _lookup(table: tuple[tuple[str, float], ...], name: str) -> float | None:
    for key, peak in table:
        if model_matches(key, name):
            return peak
    return None


def matmul_peak_tflops(name: str) -> float | None:
    """Dense bf16 (fp16 where there is no bf16) peak of the GPU nvidia-smi/torch calls ``name``; None if unknown."""
    return _lookup(MATMUL_PEAK_TFLOPS, name)


def memory_peak_gbs(name: str) -> float | None:
    """Memory bandwidth peak in GB/s; None if unknown."""
    return _lookup(MEMORY_PEAK_GBS, name)


def grade_against_peak(value: float, peak: float | None) -> Status:
    """PASS at ≥ PEAK_PASS_RATIO of the peak, WARN below, FAIL under PEAK_FAIL_RATIO; unknown peak: PASS."""
    if peak is None:
        return Status.PASS
    ratio = value / peak
    if ratio < PEAK_FAIL_RATIO:
        return Status.FAIL
    if ratio < PEAK_PASS_RATIO:
        return Status.WARN
    return Status.PASS


# --- NCCL all-reduce ----------------------------------------------------------


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: algbw x 2(n-1)/n (what each link carries)."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    return algbw * 2 * (ranks - 1) / ranks


def line_rate_gbs(link_gbps: float, nics_per_node: int) -> float:
    """A node's network line rate in GB/s: link_gbps x nics / 8."""
    return link_gbps * nics_per_node / 8


# InfiniBand: ~80 % of line rate (100G → 10 GB/s, 200G → 20, 400G → 40 per NIC).
IB_PASS_RATIO = 0.80
# Ethernet and RoCE: WARN under 70 %, FAIL under 50 % of line rate.
ETHERNET_PASS_RATIO = 0.70
# Every fabric: under half the line rate the traffic is not on the fabric
# (e.g. NCCL fell back to TCP sockets over a management network).
FABRIC_FAIL_RATIO = 0.50


@dataclass(frozen=True)
class Bands:
    """PASS at ≥ pass_min, WARN at ≥ fail_below, FAIL under it (all GB/s)."""

    pass_min: float
    fail_below: float

    def grade(self, value: float) -> Status:
        if value < self.fail_below:
            return Status.FAIL
        if value < self.pass_min:
            return Status.WARN
        return Status.PASS

    @property
    def expected(self) -> str:
        return f">= {self.pass_min:g}"


def inter_node_busbw_bands(fabric: Fabric | str, link_gbps: float, nics_per_node: int) -> Bands:
    """All-reduce bus bandwidth a pair of nodes must reach over ``fabric``.

    ``nics_per_node`` should be the NICs the job can use: a job with fewer
    GPUs per node than the node has NICs cannot drive them all.
    """
    line = line_rate_gbs(link_gbps, nics_per_node)
    ratio = IB_PASS_RATIO if Fabric(fabric) is Fabric.INFINIBAND else ETHERNET_PASS_RATIO
    return Bands(pass_min=round(line * ratio, 2), fail_below=round(line * FABRIC_FAIL_RATIO, 2))


# Within a node the spec does not say whether GPUs talk over NVLink or PCIe, so
# only a floor is enforced: a quarter of what PCIe Gen3 x16 carries (~12 GB/s).
# NVLink systems reach hundreds of GB/s; the figure is reported either way.
INTRA_NODE_MIN_BUSBW_GBS = 3.0


def intra_node_busbw_bands() -> Bands:
    return Bands(pass_min=INTRA_NODE_MIN_BUSBW_GBS, fail_below=0.0)


# --- DDP ------------------------------------------------------------------------

# Throughput with N GPUs over N x one GPU's; below this, WARN (the fabric or
# the GPU interconnect limits data-parallel training).
DDP_MIN_SCALING_EFFICIENCY = 0.50


def scaling_efficiency(throughput_all: float, single_throughput: float, gpus: int) -> float:
    """throughput with N GPUs / (N x single-GPU throughput)."""
    if gpus < 1 or single_throughput <= 0:
        raise ValueError("need at least one GPU and a positive single-GPU throughput")
    return throughput_all / (gpus * single_throughput)


def grade_scaling(efficiency: float) -> Status:
    return Status.PASS if efficiency >= DDP_MIN_SCALING_EFFICIENCY else Status.WARN


# --- workloads.scaling: the DDP job template on one node and on all of them ---------------

# Throughput on N nodes over N x one node's, with the same per-rank batch.
# NCCL over a training fabric keeps 70 % or more; below that, WARN.
WORKLOAD_SCALING_MIN_GPU = 0.70
# gloo on CPUs moves gradients over TCP and competes with the training for the
# same cores: half of linear is the bar there.
WORKLOAD_SCALING_MIN_CPU = 0.50


def workload_scaling_bar(on_gpu: bool) -> float:
    return WORKLOAD_SCALING_MIN_GPU if on_gpu else WORKLOAD_SCALING_MIN_CPU


def grade_workload_scaling(efficiency: float, on_gpu: bool) -> Status:
    """PASS at or above the bar, WARN below it: slowness alone is never a failure."""
    return Status.PASS if efficiency >= workload_scaling_bar(on_gpu) else Status.WARN
