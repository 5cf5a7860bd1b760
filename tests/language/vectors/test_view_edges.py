"""Views that reach past a tensor's near edge (spec section 7: "parts of a view that fall outside
the tensor read as zero and are not written"): a stencil's halo `x[r0 - 1:r0 + BR + 1, ...]` at the
first group, an indexed dimension below 0, a copy to global memory that starts before the tensor.
Results on the CPU backend against NumPy, with check_bounds too; the lower-edge test is in the
emitted C only where a start is not proven non-negative (transpile/lir/signs.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source, load_source
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.signs import NonNegative
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("shared_cache")

HALO = """
const BN = 32
const BR = 8

@kernel tile[(BN, BR)]
def blur_same(x: f32[M, N], out: mut f32[M, N]):
    win = tshared.alloc(f32[BR + 2, BN + 2])
    tx = tile_id(0)
    ty = tile_id(1)
    c0 = group_id(0) * BN
    r0 = group_id(1) * BR
    tcopy(win, x[r0 - 1:r0 - 1 + BR + 2, c0 - 1:c0 - 1 + BN + 2])
    tbarrier()
    r = r0 + ty
    c = c0 + tx
    if r < M and c < N:
        s = 0.0
        for di in static_range(3):
            for dj in static_range(3):
                s += win[ty + di, tx + dj]
        out[r, c] = s

@kernel tile[(BN, BR)]
def blur_same_async(x: f32[M, N], out: mut f32[M, N], stages: const i32 = 2, H: const i32 = 1):
    win = tshared.alloc(f32[BR + 2 * H, BN + 2 * H])
    tx = tile_id(0)
    ty = tile_id(1)
    c0 = group_id(0) * BN
    for r0 in tpipeline(group_id(1) * BR, M, group_count(1) * BR, stages=stages):
        tcopy_async(win, x[r0 - H:r0 - H + BR + 2 * H, c0 - H:c0 - H + BN + 2 * H])
        r = r0 + ty
        c = c0 + tx
        if r < M and c < N:
            s = 0.0
            for di in static_range(2 * H + 1):
                for dj in static_range(2 * H + 1):
                    s += win[ty + di, tx + dj]
            out[r, c] = s

@kernel tile[(64,)]
def row_above(x: f32[M, N], out: mut f32[M, N]):
    buf = tshared.alloc(f32[64])
    r = group_id(0)
    c0 = group_id(1) * 64
    tcopy(buf, x[r - 1, c0:c0 + 64])
    tbarrier()
    c = c0 + tile_id(0)
    if c < N:
        out[r, c] = buf[tile_id(0)]

@kernel tile[(16,)]
def store_shifted(x: f32[n], y: mut f32[n], shift: i32):
    buf = tshared.alloc(f32[16])
    i0 = group_id(0) * 16
    tcopy(buf, x[i0:i0 + 16])
    tbarrier()
    tcopy(y[i0 - shift:i0 - shift + 16], buf)
"""


@pytest.fixture(scope="module")
def mod():
    return tessera.compile(HALO, backend="cpu", path="halo.tsr")


@pytest.fixture(scope="module")
def checked_mod():
    return tessera.compile(HALO, backend="cpu", path="halo.tsr", check_bounds=True)


def _box_sum(x: np.ndarray, h: int) -> np.ndarray:
    p = np.pad(x.astype(np.float64), h)
    m, n = x.shape
    return sum(p[i:i + m, j:j + n] for i in range(2 * h + 1) for j in range(2 * h + 1)).astype(np.float32)


@pytest.mark.parametrize("shape", [(37, 70), (8, 32), (1, 1), (17, 33)])
@pytest.mark.parametrize("which", ["mod", "checked_mod"])
def test_a_halo_before_the_tensor_reads_as_zero(request, which: str, shape) -> None:
    m, n = shape
    x = np.random.default_rng(m * n).random(shape, dtype=np.float32)
    k = request.getfixturevalue(which)
    grid = ((n + 31) // 32, (m + 7) // 8)
    for kernel, extra in (("blur_same", {}), ("blur_same_async", {}), ("blur_same_async", dict(stages=3, H=2))):
        out = np.full_like(x, np.nan)
        k[kernel](x, out, grid=grid, **extra)
        np.testing.assert_allclose(out, _box_sum(x, extra.get("H", 1)), rtol=1e-5, atol=1e-5, err_msg=kernel)


@pytest.mark.parametrize("which", ["mod", "checked_mod"])
def test_an_indexed_dimension_below_zero_copies_nothing(request, which: str) -> None:
    x = np.random.default_rng(3).random((5, 70), dtype=np.float32)
    out = np.full_like(x, np.nan)
    request.getfixturevalue(which).row_above(x, out, grid=(5, 2))
    np.testing.assert_array_equal(out, np.vstack([np.zeros((1, 70), np.float32), x[:-1]]))


@pytest.mark.parametrize("shift", [0, 3, 16, 40, -5])
def test_a_copy_to_global_memory_writes_nothing_before_the_tensor(mod, shift: int) -> None:
    n = 50
    x = np.arange(1, n + 1, dtype=np.float32)
    guarded = np.full(n + 64, -1.0, np.float32)  # 32 guard elements on each side
    y = guarded[32:32 + n]
    mod.store_shifted(x, y, shift, grid=(n + 15) // 16)
    want = np.full(n, -1.0, np.float32)
    for i in range(((n + 15) // 16) * 16):
        j = i - shift
        if 0 <= j < n:
            want[j] = x[i] if i < n else 0.0
    np.testing.assert_array_equal(y, want)
    assert (guarded[:32] == -1).all() and (guarded[32 + n:] == -1).all()


def _copy_calls(cuda: str, kernel: str) -> list[str]:
    body = cuda[cuda.index(f"{kernel}("):]
    body = body[:body.index("\n}\n")]
    return re.findall(r"tsr_copy(?:_async)?<[^;]*;", body)


def test_the_lower_edge_is_tested_only_where_a_start_may_be_negative() -> None:
    cuda = compile_source(SourceFile("halo.tsr", HALO)).cuda
    (blur,) = _copy_calls(cuda, "blur_same")
    assert "(int)(-(r0 - 1)), (int)(-(c0 - 1))" in blur  # both source dimensions start at -1 in group 0
    assert ", 1, 10, 34, 0, 0, 0, x + " in blur            # the shared destination never does
    (row,) = _copy_calls(cuda, "row_above")
    assert "((r - 1) >= 0 && (r - 1) < M) ? 1 : 0" in row
    sgemm = compile_source(load_source(str(ROOT / "samples" / "sgemm_pipelined.tsr"))).cuda
    calls = re.findall(r"tsr_copy(?:_async)?<[^;]*;", sgemm)
    assert calls and all("(int)(-(" not in c for c in calls)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_halo_copies_compile_without_warnings(arch: str) -> None:
    nv = compile_cuda(compile_source(SourceFile("halo.tsr", HALO), options=CompileOptions(arch=arch)).cuda, name="halo.cu", arch=arch)
    assert nv.warnings == ()


def test_which_values_are_proven_non_negative() -> None:
    src = """
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[n], s: i32):
    a = group_id(0) * 32 + tile_id(0)
    b = a - 1
    c = max(b, 0)
    d = min(a, s)
    e = a % 7
    f = 0
    for i in range(0, n, 4):
        f = f + i
    g = 5
    g = g - 6
    h = s & 15
    y[0] = x[0] + a + b + c + d + e + f + g + h
"""
    module = compile_source(SourceFile("t.tsr", src), stop_after="lower").module
    assert isinstance(module, L.Module)
    fn = next(f for f in module.functions if f.name == "k")
    nn = NonNegative(fn)
    assert {"a", "c", "e", "f", "i", "h"} <= nn.locals
    assert not {"b", "d", "g"} & nn.locals


FRAG_SHIFT = """
@kernel tile[(64,)]
def shift(X: f32[M, N], Y: mut f32[M, N], dr: i32, dc: i32):
    m0 = group_id(1) * 32
    n0 = group_id(0) * 16
    a = tfrag(f32[32, 16], 0.0)
    tload(a, X[m0 - dr:m0 - dr + 32, n0 - dc:n0 - dc + 16])
    a[:] = a + 1.0
    tstore(Y[m0:m0 + 32, n0:n0 + 16], a)

@kernel tile[(64,)]
def shift_store(X: f32[M, N], Y: mut f32[M, N], dr: i32, dc: i32):
    m0 = group_id(1) * 32
    n0 = group_id(0) * 16
    a = tfrag(f32[32, 16], 0.0)
    tload(a, X[m0:m0 + 32, n0:n0 + 16])
    tstore(Y[m0 - dr:m0 - dr + 32, n0 - dc:n0 - dc + 16], a)
"""


@pytest.mark.parametrize("dr, dc", [(3, 2), (0, 5), (40, 0), (-4, -3)])
def test_fragment_loads_and_stores_clip_at_the_near_edge(dr: int, dc: int) -> None:
    mod = tessera.compile(FRAG_SHIFT, backend="cpu", path="frag_shift.tsr")
    m, n = 45, 37
    x = np.random.default_rng(5).random((m, n), dtype=np.float32)
    grid = ((n + 15) // 16, (m + 31) // 32)
    shifted = np.zeros((m, n), np.float32)  # shifted[r, c] = x[r - dr, c - dc], zero outside
    rs, cs = np.arange(m)[:, None] - dr, np.arange(n)[None, :] - dc
    ok = (rs >= 0) & (rs < m) & (cs >= 0) & (cs < n)
    shifted[ok] = x[np.clip(rs, 0, m - 1), np.clip(cs, 0, n - 1)][ok]
    y = np.full((m, n), -7.0, np.float32)
    mod.shift(x, y, dr, dc, grid=grid)
    np.testing.assert_array_equal(y, shifted + 1.0)
    guarded = np.full((m + 2, n), -7.0, np.float32)  # a row of guards on each side
    y = guarded[1:-1]
    mod.shift_store(x, y, dr, dc, grid=grid)
    # Y[r - dr, c - dc] = X[r, c] where it is inside Y (tiles of X past its edge store zeros)
    want = np.full((m, n), -7.0, np.float32)
    for r in range(((m + 31) // 32) * 32):
        for c in range(((n + 15) // 16) * 16):
            if 0 <= r - dr < m and 0 <= c - dc < n:
                want[r - dr, c - dc] = x[r, c] if r < m and c < n else 0.0
    np.testing.assert_array_equal(y, want)
    assert (guarded[0] == -7).all() and (guarded[-1] == -7).all()
