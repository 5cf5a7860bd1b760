"""Fragments as register tiles (spec section 14): element coordinates in whole-fragment statements,
row vectors, row reductions and broadcasts. The CPU backend runs the emitted per-lane code (the
reductions' quad shuffles included), compared with NumPy (float64 references; sums in another order
than NumPy's, hence rtol 1e-5) at sizes that are not multiples of the blocks, with and without
check_bounds."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from samples.runner import check_kernel
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.host import library as cpu
from tessera.transpile.driver import compile_source
from tests.conftest import sample_of
from tests.language.tensor_cores.frag_expr_gen import Gen, model
from tests.language.tensor_cores.ptx_fragments import accumulator, whole_row_tile_owner

MASK = """
@kernel tile[(128,)]
def causal(X: f32[M, N], Y: mut f32[M, N], shift: i32):
    acc = tfrag(f32[64, 32], 0.0)
    m0 = group_id(1) * 64
    n0 = group_id(0) * 32
    tload(acc, X[m0:m0 + 64, n0:n0 + 32])
    acc[:] = acc * 2.0 if n0 + col_index() <= m0 + row_index() + shift else -1.0
    acc[:] += row_index() * 1000 + col_index()
    tstore(Y[m0:m0 + 64, n0:n0 + 32], acc)
"""


@pytest.mark.parametrize("check_bounds", [False, True])
def test_row_and_column_index_are_the_element_coordinates(check_bounds: bool) -> None:
    m, n = 100, 75
    x = np.random.default_rng(0).standard_normal((m, n)).astype(np.float32)
    y = np.zeros((m, n), np.float32)
    mod = tessera.compile(MASK, backend="cpu", check_bounds=check_bounds, path="mask.tsr")
    mod.causal(x, y, 3, grid=(-(-n // 32), -(-m // 64)))
    r, c = np.indices((m, n))
    want = np.where(c <= r + 3, x * 2.0, -1.0) + (r % 64) * 1000 + (c % 32)
    np.testing.assert_array_equal(y, want.astype(np.float32))


ROWS = """
@kernel tile[(128,)]
def rows(X: f32[M, N], b: f32[N], Y: mut f32[M, N], R: mut f32[M]):
    S = tfrag(f32[64, 32], 0.0)
    m = tfrag(f32[64], -inf)
    l = tfrag(f32[64], 0.0)
    m0 = group_id(0) * 64
    tload(S, X[m0:m0 + 64, 0:32])
    m[:] = max(m, tmax(S, axis=1))
    S[:] = exp(S - m[:, None]) + b[0:32][None, :]
    l[:] = tsum(S, axis=1) + row_index()
    S[:] = S / l[:, None]
    tstore(Y[m0:m0 + 64, 0:32], S)
    tstore(R[m0:m0 + 64], l)
"""


@pytest.mark.parametrize("check_bounds", [False, True])
def test_row_reductions_and_broadcasts_match_numpy(check_bounds: bool) -> None:
    m, n = 100, 30  # ragged: a partial block of rows, columns 30 and 31 outside (zero) but still in the rows
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, r = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    tessera.compile(ROWS, backend="cpu", check_bounds=check_bounds, path="rows.tsr").rows(x, b, y, r, grid=(2,))
    xp, bp = np.zeros((m, 32)), np.zeros(32)
    xp[:, :n], bp[:n] = x, b
    s = np.exp(xp - xp.max(1)[:, None]) + bp[None, :]
    lv = s.sum(1) + np.arange(m) % 64
    np.testing.assert_allclose(r, lv, rtol=1e-5)
    np.testing.assert_allclose(y, (s / lv[:, None])[:, :n], rtol=1e-5, atol=1e-7)


# ---- lane by lane against the PTX ISA's layouts (tests/language/tensor_cores/ptx_fragments.py) --------------

LANES = """
@kernel tile[(128,)]
def lanes(X: f32[64, 32], D: mut f32[2048], DR: mut f32[256], Y: mut f32[64, 32], R: mut f32[64]):
    S = tfrag(f32[64, 32], 0.0)
    m = tfrag(f32[64], 0.0)
    tload(S, X[0:64, 0:32])
    m[:] = tsum(S, axis=1)
    tstore(Y[0:64, 0:32], S)
    tstore(R[0:64], m)
"""

# (what the clean C says, what the planted C says instead)
ROW_PLANTS = {
    "quad-shuffle-mask": ("__shfl_xor_sync(0xffffffffu, tsr_v, 2)", "__shfl_xor_sync(0xffffffffu, tsr_v, 4)"),
    "slot-elements": ("(tsr_q & 1) * 2 + ((0) & 1)", "(tsr_q & 1) * 0 + ((0) & 1)"),
}


def _lane_dump(monkeypatch: pytest.MonkeyPatch, plant: tuple[str, str] | None, x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each lane's registers of S (16) and m (2), as the CPU backend computes them: the stores of
    the kernel replaced by a dump of every lane's array."""
    real = cpu.build_library

    def dumped(cuda: str, kernels):  # type: ignore[no-untyped-def]
        cuda, n = re.subn(r"if \([^\n]*\) tsr_p\[[^\n]*\] = S\[tsr_e\];", "D[tsr_tid * 16 + tsr_e] = S[tsr_e];", cuda)
        cuda, k = re.subn(r"if \([^\n]*\) tsr_p\[[^\n]*\] = m\[tsr_q\];", "DR[tsr_tid * 2 + tsr_q] = m[tsr_q];", cuda)
        assert n == 1 and k == 1
        if plant is not None:
            assert plant[0] in cuda
            cuda = cuda.replace(plant[0], plant[1])
        return real(cuda, kernels)

    monkeypatch.setattr(cpu, "build_library", dumped)
    d, dr = np.zeros(2048, np.float32), np.zeros(256, np.float32)
    y, r = np.zeros((64, 32), np.float32), np.zeros(64, np.float32)
    tag = f"# dump {plant}\n"  # other C: no library is reused from the cache (a cached one was built unplanted)
    tessera.compile(tag + LANES, backend="cpu", path="lanes.tsr").lanes(x, d, dr, y, r, grid=1)
    return d.reshape(4, 32, 16), dr.reshape(4, 32, 2)


def _model_mismatches(x: np.ndarray, d: np.ndarray, dr: np.ndarray) -> int:
    """Registers that differ from the PTX ISA's layout: 4 warps owning 16 whole rows each, 4 n8
    tiles per warp (per-lane array index j * 4 + i), a row vector's slot h = the row of c0 (0) or c2 (1)."""
    bad = 0
    for w in range(4):
        for lane in range(32):
            for j in range(4):
                for i in range(4):
                    row, col = accumulator(lane, i)
                    bad += d[w, lane, j * 4 + i] != x[w * 16 + row, j * 8 + col]
            for h in range(2):
                row, _ = accumulator(lane, 2 * h)
                assert whole_row_tile_owner(64, 4, w * 16 + row) == w
                bad += dr[w, lane, h] != x[w * 16 + row].sum()
    return int(bad)


def test_fragment_and_row_vector_registers_follow_the_ptx_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(2).integers(-50, 50, (64, 32)).astype(np.float32)  # sums exact in f32
    assert _model_mismatches(x, *_lane_dump(monkeypatch, None, x)) == 0


@pytest.mark.parametrize("plant", sorted(ROW_PLANTS))
def test_a_planted_row_layout_bug_is_caught_lane_by_lane(plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(3).integers(-50, 50, (64, 32)).astype(np.float32)
    assert _model_mismatches(x, *_lane_dump(monkeypatch, ROW_PLANTS[plant], x)) > 0


# ---- a random differential test of whole-fragment statements (tests/language/tensor_cores/frag_expr_gen.py) --

def run_generated(seed: int, check_bounds: bool) -> None:
    src, steps = Gen(seed).program(6)
    m, n = 100, 30
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, (m, n)).astype(np.float32)
    b, c = rng.uniform(-4, 4, n).astype(np.float32), rng.uniform(-4, 4, m).astype(np.float32)
    y, r = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    tessera.compile(src, backend="cpu", check_bounds=check_bounds, path=f"gen{seed}.tsr").gen(x, b, c, y, r, 1,
                                                                                             grid=(2,))
    want_y, want_r = model(steps, x, b, c)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-3, err_msg=src)
    np.testing.assert_allclose(r, want_r, rtol=1e-4, atol=1e-3, err_msg=src)


@pytest.mark.parametrize("seed", range(6))
def test_generated_fragment_programs_match_the_numpy_model(seed: int) -> None:
    run_generated(seed, check_bounds=seed % 2 == 1)


def test_the_race_detector_sees_fragment_loads_from_shared_memory() -> None:
    src = """
@kernel tile[(128,)]
def k(X: f32[M, N], Y: mut f32[M, N]):
    s = tshared.alloc(f32[64, 32])
    S = tfrag(f32[64, 32], 0.0)
    v = tfrag(f32[64], 0.0)
    tcopy(s, X[0:64, 0:32])
    BARRIER
    tload(S, s)
    v[:] = tsum(S, axis=1)
    tstore(Y[0:64, 0:32], S + v[:, None])
"""
    src = src.replace("tstore(Y[0:64, 0:32], S + v[:, None])", "S[:] = S + v[:, None]\n    tstore(Y[0:64, 0:32], S)")
    x, y = np.ones((64, 32), np.float32), np.zeros((64, 32), np.float32)
    with pytest.raises(LaunchError, match=r"k:9: shared-memory data race: tile \d+ writes it at line 7 and tile \d+ "
                                          r"reads it at line 9"):
        tessera.compile(src.replace("BARRIER", "pass"), backend="cpu", check_bounds=True, path="race.tsr").k(x, y, grid=1)
    tessera.compile(src.replace("BARRIER", "tbarrier()"), backend="cpu", check_bounds=True, path="race.tsr").k(
        x, y, grid=1)
    np.testing.assert_array_equal(y, np.full((64, 32), 33.0, np.float32))


@pytest.mark.parametrize("name", ["gemm_epilogue", "layer_norm", "rms_norm", "flash_attention"])
def test_the_register_tile_samples_match_numpy_with_check_bounds(name: str) -> None:
    """(test_cpu_backend.py runs every sample without check_bounds.)"""
    mod = tessera.load(sample_of(name), backend="cpu", check_bounds=True)
    ok, message = check_kernel(mod, name, seed=3)
    assert ok, message


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_generated_fragment_programs_compile_with_nvrtc(arch: str) -> None:
    for seed in range(3):
        src, _ = Gen(seed).program(6)
        result = compile_source(SourceFile(f"gen{seed}.tsr", src), options=CompileOptions(arch=arch))
        nv = compile_cuda(result.cuda, name="gen.cu", arch=arch)
        assert nv.warnings == (), (nv.warnings, src)
        for k in result.kernels:
            res = nv.kernel(k.c_name)
            assert res.spill_stores == 0 and res.spill_loads == 0, (res, src)
