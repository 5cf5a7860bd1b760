"""Row vectors and row reductions whose rows are spread over several warps (spec section 14: "and
otherwise reduces across warps correctly"): where a fragment has fewer rows than 16 per warp
(BM = 16 or 32 with 4 or 8 warps), the warps divide the rows first and the columns with the rest
(lir/frag_layout.py row_division), and a row reduction combines the parts of the warps that own
the row's columns through shared scratch after a barrier (passes/frag_scratch.py). Kernels that need
whole rows per warp (column vectors, operand fragments) give a located error naming the extents
and tile counts that work."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda import sass
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.frag_vector_helpers import launch_dumped, with_consts
from tests.language.tensor_cores.ptx_fragments import accumulator

ROWS = """
@kernel tile[(T,)]
def rows(X: f32[M, N], b: f32[N], Y: mut f32[M, N], R: mut f32[M], k: i32,
         T: const i32 = 128, BM: const i32 = 32, BN: const i32 = 32):
    S = tfrag(f32[BM, BN], 0.0)
    m = tfrag(f32[BM], -inf)
    l = tfrag(f32[BM], 0.0)
    for i in range(0, k):
        m0 = (group_id(0) * k + i) * BM
        tload(S, X[m0:m0 + BM, 0:BN])
        m[:] = max(m * 0.0 - 1000.0, tmax(S, axis=1))
        S[:] = exp(S - m[:, None]) + b[0:BN][None, :]
        if i % 2 == 0:
            l[:] = tsum(S, axis=1) + row_index()
        else:
            l[:] = tmin(S, axis=1) + 1.0
        S[:] = S / l[:, None] - tmax(S, axis=1)[:, None]
        tstore(Y[m0:m0 + BM, 0:BN], S)
        tstore(R[m0:m0 + BM], l)
"""


def _source(t: int, bm: int, bn: int) -> str:
    return with_consts(ROWS, T=t, BM=bm, BN=bn)


@pytest.mark.parametrize(("t", "bm", "bn", "check_bounds", "division"), [
    (128, 32, 32, False, "2x2"), (128, 16, 32, True, "1x4"), (64, 16, 16, False, "1x2"), (256, 32, 64, True, "2x4"),
    (256, 64, 16, False, "4x2")])
def test_rows_spread_over_warps_match_numpy(t: int, bm: int, bn: int, check_bounds: bool, division: str) -> None:
    src = _source(t, bm, bn)
    assert f"S: {division} warps" in compile_source(SourceFile("r.tsr", src)).cuda
    k, groups = 3, 2
    m, n = groups * k * bm - 5, bn - 3  # ragged: the last block's rows, the last columns
    rng = np.random.default_rng(t + bm + bn)
    x, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, r = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    tessera.compile(src, backend="cpu", check_bounds=check_bounds, path="r.tsr").rows(x, b, y, r, k, grid=(groups,))
    xp, bp = np.zeros((groups * k * bm, bn)), np.zeros(bn)
    xp[:m, :n], bp[:n] = x, b
    s = np.exp(xp - xp.max(1)[:, None]) + bp[None, :]
    block = np.arange(xp.shape[0]) // bm % k
    lv = np.where(block % 2 == 0, s.sum(1) + np.arange(xp.shape[0]) % bm, s.min(1) + 1.0)
    np.testing.assert_allclose(r, lv[:m], rtol=1e-5)
    want = s / lv[:, None] - s.max(1)[:, None]  # (the reductions of a statement: of S before it)
    np.testing.assert_allclose(y, want[:m, :n], rtol=1e-5, atol=1e-5)


# ---- lane by lane: a row vector's slots in a 2x2 division (ptx_fragments.py) ---------------------------

LANES = """
@kernel tile[(128,)]
def lanes(X: f32[32, 32], DR: mut f32[256], R: mut f32[32]):
    S = tfrag(f32[32, 32], 0.0)
    v = tfrag(f32[32], 0.0)
    tload(S, X[0:32, 0:32])
    v[:] = tsum(S, axis=1)
    tstore(R[0:32], v)
"""

PLANTS = {
    "part-row": ("[tsr_warp % 2][", "[tsr_warp / 2]["),
    "combined-parts": ("[tsr_w + 1][", "[tsr_w][")}


def _lane_dump(monkeypatch: pytest.MonkeyPatch, plant: tuple[str, str] | None, x: np.ndarray) -> np.ndarray:
    dr, r = np.zeros(256, np.float32), np.zeros(32, np.float32)
    launch_dumped(monkeypatch, LANES, r"if \([^\n]*\) tsr_p\[[^\n]*\] = v\[tsr_q\];",
                  "DR[tsr_tid * 2 + tsr_q] = v[tsr_q];", plant, x, dr, r)
    return dr.reshape(4, 32, 2)


def _mismatches(x: np.ndarray, dr: np.ndarray) -> int:
    """2x2 warps: warp w owns rows 16 (w // 2) ... + 15 (and columns 16 (w % 2) ... + 15); each lane
    holds the rows of its accumulator registers c0 (slot 0) and c2 (slot 1), summed over all 32
    columns, whichever warp owns them."""
    bad = 0
    for w in range(4):
        for lane in range(32):
            for h in range(2):
                row, _ = accumulator(lane, 2 * h)
                bad += dr[w, lane, h] != x[(w // 2) * 16 + row].sum()
    return int(bad)


def test_spread_row_vector_registers_follow_the_ptx_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(4).integers(-50, 50, (32, 32)).astype(np.float32)
    assert _mismatches(x, _lane_dump(monkeypatch, None, x)) == 0


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_spread_row_bug_is_caught_lane_by_lane(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(5).integers(-50, 50, (32, 32)).astype(np.float32)
    assert _mismatches(x, _lane_dump(monkeypatch, PLANTS[plant], x)) > 0


# ---- the scratch's barrier: the race detector, the machine code ------------------------------------------

def test_a_missing_scratch_barrier_is_a_reported_race(monkeypatch: pytest.MonkeyPatch) -> None:
    src = "# planted\n" + LANES
    line = src.splitlines().index("    v[:] = tsum(S, axis=1)") + 1
    real = cpu.build_library

    def planted(cuda: str, kernels):  # type: ignore[no-untyped-def]
        bar = f"    __syncthreads();  // line {line}\n"
        assert cuda.count(bar) == 1
        return real(cuda.replace(bar, ""), kernels)
    monkeypatch.setattr(cpu, "build_library", planted)
    x, dr, r = np.ones((32, 32), np.float32), np.zeros(256, np.float32), np.zeros(32, np.float32)
    with pytest.raises(LaunchError, match=rf"lanes:{line}: shared-memory data race: tile -?\d+ (reads|writes) it at "
                                          rf"line {line} and tile -?\d+ (reads|writes) it"):
        tessera.compile(src, backend="cpu", check_bounds=True, path="lanes.tsr").lanes(x, dr, r, grid=1)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_spread_rows_compile_with_nvrtc_without_spills(arch: str) -> None:
    for t, bm, bn in ((128, 32, 32), (128, 16, 64), (256, 32, 64)):
        result = compile_source(SourceFile("r.tsr", _source(t, bm, bn)), CompileOptions(arch=arch))
        nv = compile_cuda(result.cuda, name="r.cu", arch=arch)
        assert nv.warnings == ()
        res = nv.kernel(result.kernels[0].c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (res, t, bm, bn)
        if sass.find_nvdisasm() is not None and t == 128:
            ops = sass.instructions(sass.disassemble(nv.cubin))
            assert any(op.startswith("SHFL.BFLY") for op in ops), ops
            assert any(op.startswith("BAR.SYNC") for op in ops), ops


def test_whole_rows_need_no_scratch() -> None:
    """Where M allows whole rows per warp the row reduction stays quad shuffles: no barrier."""
    cuda = compile_source(SourceFile("r.tsr", _source(128, 64, 32))).cuda
    assert "tsr_rowpart" not in cuda and "__syncthreads();  // line" not in cuda


# ---- kernels that need whole rows per warp: located errors naming what works ----------------------------

@pytest.mark.parametrize(("extra", "message"), [
    ("    c = tfrag(f32[1, 32], 0.0)\n",
     "in a kernel with column vectors, operand fragments or column reductions each warp owns whole rows of every "
     "fragment: over 4 warps a 32 x 32 fragment needs M a multiple of 64 and N a multiple of 8 (groups of 32, 64 "
     "tiles give each warp whole rows)"),
    ("    P = tfrag(f16[32, 32])\n", "over 4 warps a 32 x 32 fragment needs M a multiple of 64"),
])
def test_kernels_that_need_whole_rows_say_which_extents_and_tile_counts_work(extra: str, message: str) -> None:
    src = LANES.replace("    v = tfrag(f32[32], 0.0)\n", "    v = tfrag(f32[32], 0.0)\n" + extra)
    with pytest.raises(CompileError) as info:
        compile_source(SourceFile("e.tsr", src))
    assert re.search(r"e\.tsr:\d+:\d+: error: [^\n]*" + re.escape(message), str(info.value)), str(info.value)


def test_spread_columns_that_do_not_fit_are_a_located_error() -> None:
    src = LANES.replace("tile[(128,)]", "tile[(256,)]").replace("f32[32, 32], 0.0", "f32[32, 24], 0.0") \
        .replace("X[0:32, 0:32]", "X[0:32, 0:24]")
    with pytest.raises(CompileError, match=r"e\.tsr:4:15: error: over 8 warps the 32 rows of a 32 x 24 fragment take 2 "
                                           r"warps, and its columns the other 4: N must be a multiple of 32, not 24 \(groups of 32, 64 tiles give each "
                                           r"warp whole rows\)"):
        compile_source(SourceFile("e.tsr", src))
