"""The sm_90a rows of bench/gpu_bench.py (spec section 16): the tensor-core f16 GEMM of
samples/tc_gemm_f16.tsr compiled for sm_90a (warpgroup MMA reading swizzled shared memory) at
8192^3 against cuBLAS's f16 GEMM (PyTorch's torch.matmul, or CuPy's @), goal >= 0.8 of it.

Runs only on a Hopper GPU (compute capability 9.0): elsewhere it prints why it skipped. `dry_run`
checks the row without a GPU: the variant at full size uses wgmma (its launch configuration and
shared memory against the sm_90 limit), and the kernel on the CPU backend with arch="sm_90a" at a
small size gives NumPy's result.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.base.options import CompileOptions

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "tc_gemm_f16.tsr"
ARCH = "sm_90a"
SIZE = 8192
GOAL = 0.8  # of cuBLAS
CONSTS = {"BM": 128, "BN": 128, "BK": 64, "stages": 4, "NT": 256}


def _grid(m: int, n: int) -> tuple[int, int]:
    return (-(-n // CONSTS["BN"]), -(-m // CONSTS["BM"]))


def _reference(size: int) -> tuple[Callable[[], Any], str] | None:
    """cuBLAS's f16 GEMM at `size`^3 (f32 accumulation) through PyTorch or CuPy, if installed."""
    try:
        import torch

        h = torch.rand(size, size, device="cuda", dtype=torch.float16)
        return (lambda: torch.matmul(h, h)), "PyTorch (cuBLAS)"
    except ImportError:
        pass
    try:
        import cupy

        c = cupy.random.rand(size, size).astype(cupy.float16)
        return (lambda: c @ c), "CuPy (cuBLAS)"
    except ImportError:
        return None


def bench_hopper(tessera: Any, repeat: int, reference_time: Callable[..., float | None],
                 record: Callable[..., None]) -> None:
    """The hgemm_8192_sm90a row, on a Hopper GPU."""
    from tessera.runtime.cuda.driver import device

    arch = device().arch
    if not arch.startswith("sm_90"):
        print(f"hgemm_{SIZE}_sm90a: skipped (the device is {arch}; warpgroup MMA needs sm_90a)")
        return
    mod = tessera.load(SAMPLE, backend="cuda", arch=ARCH)
    h = np.random.default_rng(0).random((SIZE, SIZE)).astype(np.float16)
    ms = mod.tc_gemm_f16.benchmark(h, h, np.empty((SIZE, SIZE), np.float32), grid=_grid(SIZE, SIZE), repeat=repeat,
                                   **CONSTS)
    tflops = 2 * SIZE**3 / (ms / 1e3) / 1e12
    ref = _reference(SIZE)
    ref_ms = reference_time(ref[0], repeat) if ref else None
    record(f"hgemm_{SIZE}_sm90a", ms, 0.0, "cuBLAS", ref_ms, ref[1] if ref else None,
           f"reference/tessera >= {GOAL} (cuBLAS f16, wgmma)")
    ratio = f"{ref_ms / ms:.2f} of cuBLAS ({ref[1]}, {ref_ms:.3f} ms)" if ref and ref_ms else "no reference installed"
    print(f"hgemm_{SIZE}_sm90a   {ms:9.3f} ms  {tflops:7.1f} TFLOP/s  {ratio}; goal >= {GOAL}")


def dry_run_hopper(check: tuple[int, int, int] = (200, 136, 136)) -> bool:
    """The row without a GPU (see the module docstring)."""
    import tessera
    from tessera.transpile.driver import compile_source, load_source

    result = compile_source(load_source(str(SAMPLE)), options=CompileOptions(arch=ARCH), variants={"tc_gemm_f16": CONSTS})
    k = next(k for k in result.kernels if k.aligned)
    uses_wgmma = "wgmma.mma_async" in result.cuda
    m, kk, n = check
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, kk)).astype(np.float16), rng.standard_normal((kk, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    tessera.load(SAMPLE, backend="cpu", arch=ARCH).tc_gemm_f16(a, b, c, grid=_grid(m, n), **CONSTS)
    ok = uses_wgmma and np.allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-3) \
        and k.dynamic_smem <= 227 * 1024
    grid = _grid(SIZE, SIZE)
    print(f"{'ok' if ok else 'FAILED':<6} hgemm_{SIZE}_sm90a grid {grid[0]} x {grid[1]} x {k.tile[0]} threads, "
          f"{k.dynamic_smem} bytes of shared memory, wgmma {'used' if uses_wgmma else 'NOT used'}; CPU backend "
          f"(arch sm_90a) at {m}x{kk}x{n} {'matches' if ok else 'differs from'} NumPy")
    return ok


__all__ = ["bench_hopper", "dry_run_hopper"]
