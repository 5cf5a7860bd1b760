"""`tmma` on constant-extent views of shared arrays (spec section 14, v3): K sub-tiles
(`tmma(acc, As[:, kk:kk + 16], Bs[kk:kk + 16, :])`), row and column blocks, `trans_b` views, views of
arrays that a `tpipeline` loop keeps several times; every operand kind (f16, bf16, f32 as TF32,
i8). Results on the CPU backend against NumPy at ragged sizes with check_bounds on and off; a start
outside the array fails the launch in check_bounds builds; NVRTC sm_80/sm_90 without warnings or
spills, with ldmatrix where the layout allows; a catalog of the misuses (located errors)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits, bf16_values
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.test_tf32 import tf32
from tests.transpile.checks.catalog import (
    Case,
    check_catalog_case,
)

pytestmark = pytest.mark.usefixtures("shared_cache")

# One block of C per group, the K step of BK staged in shared memory and multiplied in sub-tiles
# of KS; the top and bottom halves of the block use row views of As and two accumulators.
VIEWS = """\
@kernel tile[(128,)]
def mm(A: {t}[M, K], B: {t}[K, N], C: mut {acc}[M, N], BK: const i32 = {bk}, KS: const i32 = {ks}):
    As = tshared.alloc({t}[64, BK])
    Bs = tshared.alloc({t}[BK, 32])
    top = tfrag({acc}[32, 32], 0)
    bottom = tfrag({acc}[32, 32], 0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 32
    for k in range(0, K, BK):
        tcopy(As, A[m0:m0 + 64, k:k + BK])
        tcopy(Bs, B[k:k + BK, n0:n0 + 32])
        tbarrier()
        for kk in static_range(0, BK, KS):
            tmma(top, As[0:32, kk:kk + KS], Bs[kk:kk + KS, :])
            tmma(bottom, As[32:64, kk:kk + KS], Bs[kk:kk + KS, 0:32])
        tbarrier()
    tstore(C[m0:m0 + 32, n0:n0 + 32], top)
    m1 = m0 + 32
    tstore(C[m1:m1 + 32, n0:n0 + 32], bottom)
"""

# The same with B transposed (Bt[N, K]) and a pipelined K loop: the views are of a stage.
PIPELINED_T = """\
@kernel tile[(64,)]
def mm_t(A: {t}[M, K], Bt: {t}[N, K], C: mut {acc}[M, N], S: const i32 = 2):
    As = tshared.alloc({t}[32, {bk}])
    Bs = tshared.alloc({t}[32, {bk}])
    acc = tfrag({acc}[32, 32], 0)
    m0 = group_id(1) * 32
    n0 = group_id(0) * 32
    for k in tpipeline(0, K, {bk}, stages=S):
        tcopy_async(As, A[m0:m0 + 32, k:k + {bk}])
        tcopy_async(Bs, Bt[n0:n0 + 32, k:k + {bk}])
        for kk in static_range(0, {bk}, {ks}):
            tmma(acc, As[:, kk:kk + {ks}], Bs[:, kk:kk + {ks}], trans_b=True)
    tstore(C[m0:m0 + 32, n0:n0 + 32], acc)
"""

KINDS = {  # element type -> (accumulator, BK, the sub-tile KS)
    "f16": ("f32", 64, 16), "bf16": ("f32", 32, 16), "f32": ("f32", 16, 8), "i8": ("i32", 64, 32),
}


def _inputs(t: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Inputs of element type `t` (bf16 as its uint16 bits, as the runner passes them)."""
    x = rng.integers(-3, 4, shape)
    if t == "bf16":
        return bf16_bits(x.astype(np.float32))
    if t == "f32":
        return (rng.standard_normal(shape)).astype(np.float32)
    return x.astype({"f16": np.float16, "i8": np.int8}[t])


def _reference(t: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if t == "bf16":
        a, b = bf16_values(a), bf16_values(b)
    if t == "i8":
        return a.astype(np.int32) @ b.astype(np.int32)
    if t == "f32":
        return (tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)).astype(np.float32)
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def _check(t: str, got: np.ndarray, want: np.ndarray) -> None:
    if t == "f32":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    else:
        np.testing.assert_array_equal(got, want)


def views(t: str) -> str:
    acc, bk, ks = KINDS[t]
    return VIEWS.format(t=t, acc=acc, bk=bk, ks=ks)


def pipelined_t(t: str) -> str:
    acc, bk, ks = KINDS[t]
    return PIPELINED_T.format(t=t, acc=acc, bk=bk, ks=ks)


@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("t", sorted(KINDS))
def test_k_sub_tiles_and_row_blocks_match_numpy(t: str, check_bounds: bool) -> None:
    mod = tessera.compile(views(t), backend="cpu", check_bounds=check_bounds, path="views.tsr")
    rng = np.random.default_rng(len(t))
    for m, k, n in ((70, 75, 40), (64, KINDS[t][1], 32), (5, 3, 9)):
        a, b = _inputs(t, (m, k), rng), _inputs(t, (k, n), rng)
        c = np.zeros((m, n), np.int32 if t == "i8" else np.float32)
        mod.mm(a, b, c, grid=(-(-n // 32), -(-m // 64)))
        _check(t, c, _reference(t, a, b))


@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("t", ["f16", "bf16", "f32", "i8"])
def test_views_of_pipelined_stages_with_trans_b_match_numpy(t: str, check_bounds: bool) -> None:
    mod = tessera.compile(pipelined_t(t), backend="cpu", check_bounds=check_bounds, path="views_t.tsr")
    rng = np.random.default_rng(7)
    m, k, n = 45, 2 * KINDS[t][1] + 5, 50
    a, bt = _inputs(t, (m, k), rng), _inputs(t, (n, k), rng)
    for stages in (1, 2, 3):
        c = np.zeros((m, n), np.int32 if t == "i8" else np.float32)
        mod.mm_t(a, bt, c, S=stages, grid=(-(-n // 32), -(-m // 32)))
        _check(t, c, _reference(t, a, bt.T))


RUNTIME_START = """\
@kernel tile[(32,)]
def shifted(A: f16[M, K], C: mut f32[M, M], block: i32):
    As = tshared.alloc(f16[16, 64])
    acc = tfrag(f32[16, 16], 0.0)
    tcopy(As, A[0:16, 0:64])
    tbarrier()
    off = block * 8
    tmma(acc, As[:, off:off + 16], As[:, off:off + 16], trans_b=True)
    tstore(C[0:16, 0:16], acc)
"""


def test_a_start_known_at_run_time_is_checked() -> None:
    mod = tessera.compile(RUNTIME_START, backend="cpu", check_bounds=True, path="shifted.tsr")
    a = np.random.default_rng(3).integers(-3, 4, (16, 64)).astype(np.float16)
    c = np.zeros((16, 16), np.float32)
    mod.shifted(a, c, 6, grid=1)
    part = a[:, 48:64].astype(np.float64)
    np.testing.assert_array_equal(c, part @ part.T)
    with pytest.raises(LaunchError, match=r"'As'.*dimension 1|dimension 1.*'As'|As"):
        mod.shifted(a, c, 7, grid=1)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("t", sorted(KINDS))
def test_views_compile_with_nvrtc_without_spills(t: str, arch: str) -> None:
    acc, bk, ks = KINDS[t]
    for src, name in ((views(t), f"mm_BK{bk}_KS{ks}"), (pipelined_t(t), "mm_t_S2")):
        cuda = compile_source(SourceFile("v.tsr", src), options=CompileOptions(arch=arch)).cuda
        nv = compile_cuda(cuda, name="v.cu", arch=arch)
        assert nv.warnings == ()
        assert nv.kernel(name).spill_stores == 0
        if t in ("f16", "bf16") and find_nvdisasm() is not None:
            assert "LDSM" in function_sass(disassemble(nv.cubin), name), "ldmatrix feeds the views"


# ---- misuse ----------------------------------------------------------------------------------------------

def _with(old: str, new: str) -> str:
    return views("f16").replace(old, new)


CATALOG = [
    Case("view-shapes-do-not-match", _with("As[0:32, kk:kk + KS]", "As[0:32, kk:kk + 32]"), 14, 13,
         ("tmma() shapes do not match", "got [32, 32] and [16, 32]")),
    Case("view-rows-do-not-match", _with("As[0:32, kk:kk + KS]", "As[0:16, kk:kk + KS]"), 14, 13,
         ("tmma() shapes do not match", "the first operand must be [32, K]")),
    Case("view-outside-constant", _with("As[32:64, kk:kk + KS]", "As[40:72, kk:kk + KS]"), 15, 26,
         ("reaches outside 'As' [64, 64]", "dimension 0 covers 40 to 71")),
    Case("view-outside-loop-range", _with("static_range(0, BK, KS)", "static_range(0, BK, 8)"), 14, 13,
         ("the first operand of tmma() reaches outside 'As' in dimension 1", "from 0 to 56")),
    Case("view-misaligned-for-ldmatrix", _with("static_range(0, BK, KS)", "static_range(4, BK - 16, KS)"), 14, 13,
         ("read with ldmatrix", "multiple of 8 elements (f16)")),
    Case("view-of-a-tensor", _with("As[0:32, kk:kk + KS]", "A[m0:m0 + 32, kk:kk + KS]"), 14, 23,
         ("the first operand of tmma() must be a shared array or a view of one", "'A' is a tensor")),
    Case("view-with-one-slice", _with("Bs[kk:kk + KS, :]", "Bs[kk, :]"), 14, 45,
         "the second operand of tmma() is a 2-D view (two sliced dimensions); this one has 1"),
    Case("view-extent-not-constant", _with("As[0:32, kk:kk + KS]", "As[0:32, kk:K]"), 14, 32,
         "the extent of a view (stop - start) must be a compile-time constant"),
]


@pytest.mark.parametrize("case", CATALOG, ids=lambda c: c.id)
def test_catalog(case: Case, tmp_path, capsys) -> None:
    check_catalog_case(case, tmp_path, capsys)
