"""Section 16 as an outside user writes it (a CUTLASS or Triton programmer's Hopper kernels): a TN
GEMM with a bias and ReLU epilogue stored as f16, a GEMM whose k-blocks are sliced in a
`static_range` (once kept on mma.sync), a batched GEMM over 3-D tensors indexed by the batch, and
pipelined bulk copies out of 4-D and 5-D tensors. Each compiles for sm_90a with NVRTC without
warnings or spills, its aligned variant's machine code has UTMALDG (and HGMMA for the GEMMs, where
nvdisasm is installed), and on the CPU backend it gives NumPy's result for sm_90a and sm_90."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

GEMM_TN = """
@kernel tile[(128,)]
def gemm_tn(A: f16[M, K], B: f16[N, K], bias: f32[N], C: mut f16[M, N]):
    As = tshared.alloc(f16[64, 64])
    Bs = tshared.alloc(f16[128, 64])
    acc = tfrag(f32[64, 128], 0.0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 128
    for k0 in tpipeline(0, K, 64, stages=3):
        tcopy_async(As, A[m0:m0 + 64, k0:k0 + 64])
        tcopy_async(Bs, B[n0:n0 + 128, k0:k0 + 64])
        tmma(acc, As, Bs, trans_b=True)
    acc[:] = max(acc + bias[n0:n0 + 128][None, :], 0.0)
    tstore(C[m0:m0 + 64, n0:n0 + 128], acc)
"""

GEMM_K_BLOCKS = """
@kernel tile[(256,)]
def gemm_kb(A: f16[M, K], B: f16[K, N], C: mut f32[M, N], alpha: f32):
    As = tshared.alloc(f16[128, 64])
    Bs = tshared.alloc(f16[64, 128])
    acc = tfrag(f32[128, 128], 0.0)
    m0 = group_id(1) * 128
    n0 = group_id(0) * 128
    for k0 in tpipeline(0, K, 64, stages=2):
        tcopy_async(As, A[m0:m0 + 128, k0:k0 + 64])
        tcopy_async(Bs, B[k0:k0 + 64, n0:n0 + 128])
        for kk in static_range(0, 64, 16):
            tmma(acc, As[:, kk:kk + 16], Bs[kk:kk + 16, :])
    acc[:] = acc * alpha
    tstore(C[m0:m0 + 128, n0:n0 + 128], acc)
"""

BATCHED = """
@kernel tile[(128,)]
def bgemm(A: f16[Bt, M, K], B: f16[Bt, K, N], C: mut f32[Bt, M, N]):
    As = tshared.alloc(f16[64, 64])
    Bs = tshared.alloc(f16[64, 64])
    acc = tfrag(f32[64, 64], 0.0)
    b = group_id(2)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 64
    for k0 in tpipeline(0, K, 64, stages=2):
        tcopy_async(As, A[b, m0:m0 + 64, k0:k0 + 64])
        tcopy_async(Bs, B[b, k0:k0 + 64, n0:n0 + 64])
        tmma(acc, As, Bs)
    tstore(C[b, m0:m0 + 64, n0:n0 + 64], acc)
"""

SUM_5D = """
@kernel tile[(64,)]
def sum4(X: f32[A, B, R, C], out: mut f32[A, B, 4, 32]):
    S = tshared.alloc(f32[4, 32])
    t = tile_linear_id()
    acc0: f32 = 0.0
    acc1: f32 = 0.0
    for r0 in tpipeline(0, R, 4, stages=3):
        tcopy_async(S, X[group_id(1), group_id(0), r0:r0 + 4, 0:32])
        acc0 += S[t // 32, t % 32]
        acc1 += S[2 + t // 32, t % 32]
        tbarrier()
    out[group_id(1), group_id(0), t // 32, t % 32] = acc0
    out[group_id(1), group_id(0), 2 + t // 32, t % 32] = acc1

@kernel tile[(64,)]
def sum5(X: f32[A, B, D, R, C], out: mut f32[A, B, 2, 4, 32]):
    S = tshared.alloc(f32[2, 4, 32])
    a = group_id(1)
    b = group_id(0)
    t = tile_linear_id()
    for r0 in tpipeline(0, R, 4, stages=2):
        tcopy_async(S, X[a, b, 0:2, r0:r0 + 4, 0:32])
        for e in static_range(4):
            q = t + 64 * e
            out[a, b, q // 128, (q // 32) % 4, q % 32] += S[q // 128, (q // 32) % 4, q % 32]
        tbarrier()
"""


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    return rng.integers(-3, 4, shape).astype(dtype)  # exact products and sums in every type


def _gemm_tn(mod: tessera.Module, rng: np.random.Generator) -> None:
    m, n, k = 150, 208, 144  # edges in M, N and K: boxes partly outside the tensors read zeros
    a, b = _ints(rng, (m, k), np.float16), _ints(rng, (n, k), np.float16)
    bias, c = rng.integers(-20, 20, n).astype(np.float32), np.zeros((m, n), np.float16)
    mod.gemm_tn(a, b, bias, c, grid=(2, 3))
    want = np.maximum(a.astype(np.float32) @ b.astype(np.float32).T + bias, 0).astype(np.float16)
    np.testing.assert_array_equal(c, want)


def _gemm_kb(mod: tessera.Module, rng: np.random.Generator) -> None:
    m, n, k = 130, 144, 208
    a, b = _ints(rng, (m, k), np.float16), _ints(rng, (k, n), np.float16)
    c = np.zeros((m, n), np.float32)
    mod.gemm_kb(a, b, c, 0.5, grid=(2, 2))
    np.testing.assert_array_equal(c, 0.5 * (a.astype(np.float32) @ b.astype(np.float32)))


def _bgemm(mod: tessera.Module, rng: np.random.Generator) -> None:
    bt, m, n, k = 2, 70, 80, 80
    a, b = _ints(rng, (bt, m, k), np.float16), _ints(rng, (bt, k, n), np.float16)
    c = np.zeros((bt, m, n), np.float32)
    mod.bgemm(a, b, c, grid=(2, 2, bt))
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


def _sums(mod: tessera.Module, rng: np.random.Generator) -> None:
    x4 = _ints(rng, (2, 3, 22, 48), np.float32)
    out4 = np.zeros((2, 3, 4, 32), np.float32)
    mod.sum4(x4, out4, grid=(3, 2))
    padded = np.zeros((2, 3, 24, 32), np.float32)
    padded[:, :, :22] = x4[..., :32]
    np.testing.assert_array_equal(out4, padded.reshape(2, 3, 6, 4, 32).sum(2))
    x5 = _ints(rng, (2, 2, 3, 9, 48), np.float32)
    out5 = np.zeros((2, 2, 2, 4, 32), np.float32)
    mod.sum5(x5, out5, grid=(2, 2))
    padded5 = np.zeros((2, 2, 2, 12, 32), np.float32)
    padded5[:, :, :, :9] = x5[:, :, :2, :, :32]
    np.testing.assert_array_equal(out5, padded5.reshape(2, 2, 2, 3, 4, 32).sum(3))


CASES: dict[str, tuple[str, Callable[[tessera.Module, np.random.Generator], None], bool]] = {
    # name: (source, its run against NumPy, whether its kernels use warpgroup MMA)
    "gemm_tn": (GEMM_TN, _gemm_tn, True),
    "gemm_k_blocks": (GEMM_K_BLOCKS, _gemm_kb, True),
    "batched": (BATCHED, _bgemm, True),
    "sum_4d_5d": (SUM_5D, _sums, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nvrtc_builds_them_for_sm_90a_with_bulk_copies_and_warpgroup_mma(name: str) -> None:
    src, _, wgmma = CASES[name]
    result = compile_source(SourceFile(f"{name}.tsr", src), CompileOptions(arch="sm_90a"))
    nv = compile_cuda(result.cuda, name=f"{name}.cu", arch="sm_90a")
    assert nv.warnings == () and nv.cubin is not None
    assert ("wgmma.mma_async" in result.cuda) == wgmma
    aligned = [k for k in result.kernels if k.aligned]
    assert aligned and all(k.tensor_maps for k in aligned), name
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (k.c_name, res)
    if find_nvdisasm() is None:
        return
    sass = disassemble(nv.cubin)
    for k in result.kernels:
        code = function_sass(sass, k.c_name)
        assert ("UTMALDG" in code) == k.aligned and ("LDGSTS" in code) != k.aligned, k.c_name
        if wgmma:
            assert "HGMMA.64x" in code and " HMMA" not in code, k.c_name


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("arch", ["sm_90a", "sm_90"])
def test_the_cpu_backend_gives_numpys_results(name: str, arch: str, launched) -> None:
    src, run, _ = CASES[name]
    run(tessera.compile(src, backend="cpu", path=f"{name}.tsr", arch=arch), np.random.default_rng(16))
    assert launched and all(c.endswith("_a16") for c in launched)  # the aligned variant: bulk copies on sm_90a
    # (shape symbols in the aligned tensors' row strides are multiples of 16: KernelInfo.align_symbols)
