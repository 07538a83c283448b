"""gpuclus GPU probe: bf16 matmul TFLOP/s and device memory bandwidth on every visible GPU.

Usage: python3 gpu_probe.py matmul|membw [--seconds S] [--size N] [--mib M]

Prints one line ``GPUCLUS_PROBE {json}`` and exits 0 whatever the figures are
(gpuclus judges them): {"probe": "matmul", "gpus": [{"index": 0, "name": ...,
"tflops": ..., "ok": true, ...}]}, or {"error": "no-torch"} and the like.
Only the standard library and torch; about 2-4 s per GPU on an H100.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from typing import Any

# Imported from the package; shipped inline, common.py's text has already run.
with contextlib.suppress(ImportError):
    from gpuclus.validate.probes.common import emit, load_torch

# Largest relative error (Frobenius norm over a sample of the product) that a
# bf16 matmul with fp32 accumulation can show against an fp32 reference.
# Rounding the output to bf16 alone gives ~0.2 %; a broken GPU gives O(1).
MATMUL_MAX_REL_ERROR = 0.02


def tflops(size: int, iterations: int, seconds: float) -> float:
    """TFLOP/s of ``iterations`` square matmuls of ``size`` (2·n³ operations each)."""
    return 2.0 * size**3 * iterations / seconds / 1e12


def copy_gbs(nbytes: int, iterations: int, seconds: float) -> float:
    """GB/s of device-to-device copies: each copy reads and writes ``nbytes`` (2 x nbytes moved)."""
    return 2.0 * nbytes * iterations / seconds / 1e9


def relative_error(difference_norm: float, reference_norm: float) -> float:
    if reference_norm == 0:
        return math.inf if difference_norm else 0.0
    return difference_norm / reference_norm


def result_ok(value: float, finite: bool, rel_error: float | None, max_rel_error: float) -> bool:
    """A measured figure counts only when the computed data is right."""
    if not finite or not math.isfinite(value) or value <= 0:
        return False
    return rel_error is None or rel_error <= max_rel_error


def _timed(torch: Any, step: Any, seconds: float, warmup: int = 3) -> tuple[int, float]:
    """Run ``step`` warmup times, then until ``seconds`` have passed; (iterations, seconds) by CUDA events."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    # Estimate one step to size a single timed batch (no host sync inside it).
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    one = max(time.perf_counter() - start, 1e-6)
    iterations = max(5, min(10000, int(seconds / one)))
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iterations):
        step()
    end.record()
    end.synchronize()
    return iterations, float(begin.elapsed_time(end)) / 1000.0


def matmul(torch: Any, index: int, size: int, seconds: float) -> dict[str, Any]:
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be real fp32
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    generator = torch.Generator(device=device).manual_seed(1234 + index)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    c = torch.empty(size, size, device=device, dtype=dtype)

    def step() -> None:
        torch.matmul(a, b, out=c)

    iterations, elapsed = _timed(torch, step, seconds)
    finite = bool(torch.isfinite(c).all().item())
    # fp32 reference on a sample of rows and columns spread over the output.
    sample = min(size, 256)
    rows = torch.randperm(size, device=device, generator=generator)[:sample]
    cols = torch.randperm(size, device=device, generator=generator)[:sample]
    reference = a[rows].float() @ b[:, cols].float()
    got = c[rows][:, cols].float()
    error = relative_error(float(torch.linalg.norm(got - reference)), float(torch.linalg.norm(reference)))
    value = tflops(size, iterations, elapsed)
    return {
        "index": index,
        "name": torch.cuda.get_device_name(device),
        "dtype": str(dtype).replace("torch.", ""),
        "size": size,
        "iterations": iterations,
        "seconds": round(elapsed, 4),
        "tflops": round(value, 2),
        "finite": finite,
        "rel_error": round(error, 6) if math.isfinite(error) else None,
        "ok": result_ok(value, finite, error, MATMUL_MAX_REL_ERROR),
    }


def membw(torch: Any, index: int, mib: int, seconds: float) -> dict[str, Any]:
    device = torch.device("cuda", index)
    torch.cuda.set_device(device)
    free, _total = torch.cuda.mem_get_info(device)
    nbytes = min(mib * 2**20, int(free * 0.2)) // 4 * 4  # two buffers: at most 40 % of free memory
    count = nbytes // 4
    # A known pattern (exact in int32), so the copy can be checked.
    source = torch.arange(count, device=device, dtype=torch.int32)
    target = torch.empty_like(source)

    def step() -> None:
        target.copy_(source)

    iterations, elapsed = _timed(torch, step, seconds)
    same = bool(torch.equal(target, source))
    # And a few elements on the host against what they must be.
    picks = [0, count // 3, count // 2, count - 1]
    host = target[torch.tensor(picks, device=device)].cpu().tolist()
    ok_values = same and host == picks
    value = copy_gbs(nbytes, iterations, elapsed)
    return {
        "index": index,
        "name": torch.cuda.get_device_name(device),
        "bytes": nbytes,
        "iterations": iterations,
        "seconds": round(elapsed, 4),
        "gbs": round(value, 1),
        "finite": ok_values,
        "rel_error": None,
        "ok": ok_values and result_ok(value, True, None, 0.0),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpu_probe")
    parser.add_argument("probe", choices=["matmul", "membw"])
    parser.add_argument("--seconds", type=float, default=2.0, help="timed part per GPU")
    parser.add_argument("--size", type=int, default=8192, help="matmul: square matrix size")
    parser.add_argument("--mib", type=int, default=1024, help="membw: buffer size in MiB")
    args = parser.parse_args(argv)
    torch, error = load_torch()
    if error:
        payload: dict[str, Any] = {"probe": args.probe, "error": error}
        if torch is not None:
            payload["torch"] = str(torch.__version__)
        emit(payload)
        return 0
    results = []
    for index in range(torch.cuda.device_count()):
        try:
            if args.probe == "matmul":
                results.append(matmul(torch, index, args.size, args.seconds))
            else:
                results.append(membw(torch, index, args.mib, args.seconds))
        except Exception as exc:  # one broken GPU must not hide the others' figures
            results.append({"index": index, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
    emit({"probe": args.probe, "torch": str(torch.__version__), "gpus": results})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
