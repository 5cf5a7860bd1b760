"""The sm_90a rows of bench/gpu_bench.py (spec section 16): the tensor-core f16 GEMM of
samples/tc_gemm_f16.tsr compiled for sm_90a (warpgroup MMA reading swizzled shared memory that the
tensor memory accelerator fills) at 8192^3 against cuBLAS's f16 GEMM (PyTorch's torch.matmul, or
CuPy's @), goal >= 0.8 of it; and FlashAttention (samples/flash_attention.tsr, the non-causal row of
bench/attention_bench.py: B=4, H=16, N=4096, D=128) compiled for sm_90a against PyTorch's flash
SDPA, goal >= 0.7 of it.

Runs only on a Hopper GPU (compute capability 9.0): elsewhere it prints why it skipped. The dry
runs check the rows without a GPU: the variants at full size use wgmma (and, in the aligned
variant, swizzled bulk tensor copies; the attention kernel's NVRTC compile without warnings or
spills), their launch configuration and shared memory against the sm_90 limit, and the kernels on
the CPU backend with arch="sm_90a" at a small size give NumPy's result.
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


def dry_run_hopper(check: tuple[int, int, int] = (200, 144, 144)) -> bool:
    """The row without a GPU (see the module docstring); K and N of `check` multiples of 16, so that
    the CPU backend runs the aligned variant (wgmma fed by swizzled bulk tensor copies)."""
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
    swizzled = bool(k.tensor_maps) and all(mode for _, _, mode in k.tensor_maps)
    ok = uses_wgmma and swizzled and k.dynamic_smem <= 227 * 1024 \
        and np.allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-3)
    grid = _grid(SIZE, SIZE)
    print(f"{'ok' if ok else 'FAILED':<6} hgemm_{SIZE}_sm90a grid {grid[0]} x {grid[1]} x {k.tile[0]} threads, "
          f"{k.dynamic_smem} bytes of shared memory, wgmma {'used' if uses_wgmma else 'NOT used'} "
          f"{'with' if swizzled else 'WITHOUT'} swizzled bulk copies; CPU backend "
          f"(arch sm_90a) at {m}x{kk}x{n} {'matches' if ok else 'differs from'} NumPy")
    return ok


# ---- attention: the non-causal row of bench/attention_bench.py, compiled for sm_90a -------------------

ATTENTION_GOAL = 0.7  # of FlashAttention (PyTorch's flash SDPA): its time over ours


def _attention_row(attention: Any) -> Any:
    """bench/attention_bench.py's non-causal row (`attention`: that module)."""
    return next(row for row in attention.ROWS if not row.causal)


def bench_hopper_attention(tessera: Any, attention: Any, repeat: int, record: Callable[..., None]) -> None:
    """The attention_full_sm90a row, on a Hopper GPU with PyTorch's CUDA build."""
    from tessera.runtime.cuda.driver import device

    row = _attention_row(attention)
    name = f"{row.name}_sm90a"
    arch = device().arch
    torch = attention.torch_flash()
    if not arch.startswith("sm_90") or torch is None:
        print(f"{name}: skipped ({'PyTorch with CUDA is not installed' if torch is None else f'the device is {arch}'})")
        return
    mod = tessera.load(attention.SAMPLE, backend="cuda", arch=ARCH)
    ms, ref_ms, err = attention._measure_row(torch, mod, row, repeat)
    record(name, ms, 0.0, "torch flash SDPA", ref_ms, "torch flash SDPA",
           f"torch/tessera >= {ATTENTION_GOAL} (wgmma, TMA)")
    print(f"{name:<22} {ms:9.3f} ms  {row.flops / (ms / 1e3) / 1e12:7.1f} TFLOP/s  {ref_ms / ms:.2f} of torch's "
          f"flash SDPA ({ref_ms:.3f} ms); goal >= {ATTENTION_GOAL}; max |O - torch| {err:.1e}")


def dry_run_hopper_attention(attention: Any, heads: int = 2, n: int = 200) -> bool:
    """The attention row without a GPU: NVRTC's sm_90a compile of its configuration (the aligned
    variant with warpgroup MMAs and swizzled bulk tensor copies; no warnings or spills, shared
    memory within the limit) and the configuration on the CPU backend for sm_90a at a small ragged
    size against NumPy."""
    import math

    import tessera
    from tessera.runtime.cuda.nvrtc import compile_cuda
    from tessera.transpile.driver import compile_source, load_source

    row = _attention_row(attention)
    result = compile_source(load_source(str(attention.SAMPLE)), options=CompileOptions(arch=ARCH),
                            variants={"flash_attention": row.consts}, only_kernel="flash_attention")
    nv = compile_cuda(result.cuda, name="flash_attention.cu", arch=ARCH)
    k = next(k for k in result.kernels if k.aligned)
    res = nv.kernel(k.c_name)
    swizzled = bool(k.tensor_maps) and all(mode for _, _, mode in k.tensor_maps)
    ok = "wgmma.mma_async" in result.cuda and swizzled and not nv.warnings and res.spill_stores + res.spill_loads == 0 \
        and k.dynamic_smem <= attention.SMEM_LIMIT and k.tile == (row.threads,)
    rng = np.random.default_rng(0)
    q, kk, v = (rng.standard_normal((heads, n, row.d)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    mod = tessera.load(attention.SAMPLE, backend="cpu", arch=ARCH)
    mod.flash_attention(q, kk, v, o, 1 / math.sqrt(row.d), grid=(row.grid(n)[0], heads), **row.consts)
    cpu = bool(np.allclose(o.astype(np.float64), attention.reference(q, kk, v, row.causal), atol=2e-2, rtol=2e-2))
    ok = ok and cpu
    print(f"{'ok' if ok else 'FAILED':<6} {row.name}_sm90a grid {row.grid()[0]} x {row.grid()[1]} x {row.threads} "
          f"threads, {res.registers} registers, {k.dynamic_smem} bytes shared, "
          f"{res.spill_stores + res.spill_loads} spill bytes, wgmma {'with' if swizzled else 'WITHOUT'} swizzled "
          f"bulk copies; CPU backend (arch sm_90a) at N={n} {'matches' if cpu else 'differs from'} NumPy")
    return ok


__all__ = ["ATTENTION_GOAL", "bench_hopper", "bench_hopper_attention", "dry_run_hopper", "dry_run_hopper_attention"]
