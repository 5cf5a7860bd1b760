"""Shared-memory reuse (spec section 15; transpile/passes/plan_shared.py, lir/shared_lifetimes.py):
arrays whose lifetimes a barrier separates share memory, the footprint checked against the budget
and the architecture is the peak, the plan is in `--dump-after` and `--info`, the verifier refuses a
plan that overlaps arrays live together, and the CPU backend (race detector on) computes what NumPy
does with the arrays overlapping."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile
from tessera.base.options import CompileOptions
from tessera.cli.compile import run
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.dump import dump_lir
from tessera.transpile.lir.shared_layout import place_shared
from tessera.transpile.lir.verify import verify
from tessera.transpile.lir.verify_plans import PlanError, verify_plans
from tessera.transpile.pipeline import PASS_NAMES

# A WMMA GEMM as cuda-samples writes it: pipelined staging buffers for A and B, then, after a
# barrier, an f32 epilogue buffer that the accumulator goes through on its way out.
WMMA = """\
@kernel tile[(NT,)]
def wmma_gemm(A: f16[M, K], B: f16[K, N], C: mut f32[M, N], BM: const i32 = 128, BN: const i32 = 128,
              BK: const i32 = 32, stages: const i32 = 4, NT: const i32 = 256):
    As = tshared.alloc(f16[BM, BK])
    Bs = tshared.alloc(f16[BK, BN])
    Cs = tshared.alloc(f32[BM, BN], pad=4)
    acc = tfrag(f32[BM, BN], 0.0)
    m0 = group_id(1) * BM
    n0 = group_id(0) * BN
    for k0 in tpipeline(0, K, BK, stages=stages):
        tcopy_async(As, A[m0:m0 + BM, k0:k0 + BK])
        tcopy_async(Bs, B[k0:k0 + BK, n0:n0 + BN])
        tmma(acc, As, Bs)
    tbarrier()
    tstore(Cs, acc)
    tbarrier()
    for e in range(tile_linear_id(), BM * BN, NT):
        r = e // BN
        c = e % BN
        if m0 + r < M and n0 + c < N:
            C[m0 + r, n0 + c] = Cs[r, c] * 2.0
"""
STAGING = 4 * 128 * (32 + 8) * 2 + 4 * 32 * (128 + 8) * 2  # As and Bs, 4 stages, rows padded for tmma
EPILOGUE = 128 * (128 + 4) * 4


def compiled(text: str, last: str = PASS_NAMES[-1], **options: object) -> L.Module:
    return compile_source(SourceFile("t.tsr", text), CompileOptions(**options),  # type: ignore[arg-type]
                          stop_after=last, verify=verify).module


def test_a_wmma_gemm_needs_the_peak_of_its_staging_and_epilogue_buffers() -> None:
    fn = compiled(WMMA, "plan-shared", arch="sm_80").kernels[0]
    layout = fn.shared
    assert layout is not None
    assert layout.total_bytes == max(STAGING, EPILOGUE) == STAGING
    assert layout.slot("Cs").offset == 0 and layout.sharing("Cs") == ("As", "Bs")
    assert place_shared(fn, reuse=False).total_bytes == STAGING + EPILOGUE
    assert "shared Cs @ 0 (67584 bytes, shares memory with As, Bs)" in dump_lir(compiled(WMMA, "plan-shared"))


@pytest.mark.parametrize("arch", ["sm_86", "sm_89"])
def test_the_wmma_gemm_compiles_for_99_kib_architectures_only_with_reuse(arch: str) -> None:
    compiled(WMMA, arch=arch)
    with pytest.raises(CompileError, match=f"needs {STAGING + EPILOGUE} bytes of shared memory, over the 101376 "
                                           f"bytes a group can have on {arch}"):
        compiled(WMMA, arch=arch, shared_reuse=False)


def test_nvrtc_gives_the_kernel_the_peak_and_no_more() -> None:
    result = compile_source(SourceFile("t.tsr", WMMA), CompileOptions(arch="sm_86", alignment="generic"))
    (info,) = result.kernels
    assert info.dynamic_smem == STAGING
    assert "reinterpret_cast<float (*)[132]>(tsr_dynamic_smem + 0);  // 67584 bytes, shares memory with As, Bs" \
        in result.cuda
    nv = compile_cuda(result.cuda, arch="sm_86")
    assert nv.kernel(info.c_name).shared_bytes == 0 and nv.warnings == ()


SMALL = """\
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[m]):
    a = tshared.alloc(f32[64])
    b = tshared.alloc(f32[32])
    t = tile_id(0)
    a[t] = x[t]
    a[t + 32] = x[t + 32]
    tbarrier()
    v = a[63 - t] + a[31 - t]
    BARRIER
    b[t] = v * 2.0
    tbarrier()
    y[t] = b[(t + 1) % 32]
"""


def test_a_static_kernel_puts_arrays_that_share_memory_in_one_block() -> None:
    module = compiled(SMALL.replace("BARRIER", "tbarrier()"))
    layout = module.kernels[0].shared
    assert layout is not None and layout.sharing("b") == ("a",) and layout.total_bytes == 256
    cuda = compile_source(SourceFile("t.tsr", SMALL.replace("BARRIER", "tbarrier()"))).cuda
    assert "__shared__ __align__(16) unsigned char tsr_shared_pool[256];" in cuda
    assert "float *b = reinterpret_cast<float*>(tsr_shared_pool + 0);  // 128 bytes, shares memory with a" in cuda
    assert compile_cuda(cuda, arch="sm_80").kernels[0].shared_bytes == 256


def test_arrays_used_without_a_barrier_between_keep_their_own_memory() -> None:
    # The last read of `a` and the first write of `b` are in one barrier interval: another tile may
    # still read a[63 - t] while this one writes b[t].
    layout = compiled(SMALL.replace("    BARRIER\n", "")).kernels[0].shared
    assert layout is not None and not layout.shares and layout.total_bytes == 384
    cuda = compile_source(SourceFile("t.tsr", SMALL.replace("    BARRIER\n", ""))).cuda
    assert "tsr_shared_pool" not in cuda and "__shared__ __align__(16) float b[32];" in cuda


def test_an_array_live_across_a_loop_back_edge_is_live_for_the_whole_loop() -> None:
    text = """\
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[m]):
    a = tshared.alloc(f32[32])
    b = tshared.alloc(f32[32])
    t = tile_id(0)
    a[t] = 0.0
    acc = 0.0
    for i in range(4):
        tbarrier()
        acc += a[(t + 1) % 32]
        tbarrier()
        b[t] = acc
        tbarrier()
        a[t] = b[(t + 3) % 32]
    y[t] = acc
"""
    layout = compiled(text).kernels[0].shared
    assert layout is not None and not layout.shares  # a's value crosses the back edge, past b's use


def test_an_asynchronous_copy_never_waited_for_keeps_its_destination_live() -> None:
    # The copy into `a` may land at any time until the kernel ends: `b` must not be under it.
    text = """\
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[m]):
    a = tshared.alloc(f32[32])
    b = tshared.alloc(f32[32])
    t = tile_id(0)
    tcopy_async(a, x[0:32])
    tcommit()
    WAIT
    tbarrier()
    b[t] = x[t]
    tbarrier()
    y[t] = b[(t + 1) % 32]
"""
    layout = compiled(text.replace("    WAIT\n", "")).kernels[0].shared
    assert layout is not None and not layout.shares
    layout = compiled(text.replace("WAIT", "twait()")).kernels[0].shared
    assert layout is not None and layout.sharing("a") == ("b",)


def test_the_budget_is_checked_against_the_peak() -> None:
    text = SMALL.replace("BARRIER", "tbarrier()").replace("@kernel tile[(32,)]", "@kernel tile[(32,)] shared(256)")
    compiled(text)
    with pytest.raises(CompileError, match=r"need 384 bytes, over the kernel's budget of 256 bytes"):
        compiled(text.replace("tbarrier()\n    b[t]", "b[t]"))


def test_the_verifier_refuses_a_plan_that_overlaps_arrays_live_together() -> None:
    module = compiled(SMALL.replace("    BARRIER\n", ""), "plan-shared")
    fn = module.kernels[0]
    assert fn.shared is not None
    bad = dataclasses.replace(fn.shared, slots=(fn.shared.slots[0], L.SharedSlot("b", 0, 128)), total_bytes=256)
    planted = dataclasses.replace(module, functions=(dataclasses.replace(fn, shared=bad),))
    with pytest.raises(PlanError, match="'a' and 'b' share memory although they may be live in one barrier"):
        verify_plans(planted, ("plan-shared",))
    with pytest.raises(PlanError, match="none on a kernel"):
        verify_plans(dataclasses.replace(module, functions=(dataclasses.replace(fn, shared=None),)), ("plan-shared",))


def test_info_shows_the_placement(capsys, tmp_path) -> None:
    src = tmp_path / "w.tsr"
    src.write_text(WMMA)
    assert run([str(src), "--info", "--arch", "sm_86", "-o", str(tmp_path / "w.cu")]) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "shared Cs @ 0, 67584 bytes (shares memory with As, Bs)" in text
    assert f"shared memory: {STAGING} bytes at the peak ({STAGING + EPILOGUE} without reuse)" in text


@pytest.mark.usefixtures("shared_cache")
def test_the_cpu_backend_computes_the_wmma_gemm_with_shared_memory_reused() -> None:
    mod = tessera.compile(WMMA, backend="cpu", check_bounds=True, path="wmma.tsr")
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (70, 100)).astype(np.float16)
    b = rng.integers(-3, 4, (100, 50)).astype(np.float16)
    c = np.zeros((70, 50), np.float32)
    mod.wmma_gemm(a, b, c, BM=64, BN=32, BK=32, stages=2, NT=128, grid=(2, 2))
    np.testing.assert_array_equal(c, 2.0 * (a.astype(np.float32) @ b.astype(np.float32)))
