"""The CPU backend's own tanhf (runtime/host/host_libm.h: straight-line code that the host compiler
vectorizes): within one ulp of the correctly rounded tanh on random floats of every magnitude (0.5003
ulp over all floats, checked exhaustively when it was written), exact at the special values, odd, and
the same in region mode (vectorized) and fiber mode."""

from __future__ import annotations

import numpy as np
import pytest

import tessera

pytestmark = pytest.mark.usefixtures("shared_cache")

SRC = """@kernel tile[(128,)] vectorize(4)
def tanh_map(X: f32[n], Y: mut f32[n]):
    Y[:] = tanh(X)

@kernel tile[(64,)]
def tanh_loop(x: f32[n], y: mut f32[n]):
    for j in range(global_linear_id(), n, grid_tile_count()):
        y[j] = tanh(x[j])

@kernel tile[(64,)]
def tanh_f64(x: f64[n], y: mut f64[n]):
    for j in range(global_linear_id(), n, grid_tile_count()):
        y[j] = tanh(x[j])
"""


def _inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    near = rng.uniform(-12, 12, 1 << 14).astype(np.float32)  # where tanh is neither x nor +-1
    small = (rng.uniform(-1, 1, 1 << 12) * 10.0 ** rng.integers(-40, 0, 1 << 12)).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 9.01, -9.01, 10.0, 1e-45, -1e-45, 0.55, 88.0,
                        np.float32(3.4e38)], np.float32)
    return np.concatenate([x, near, small, special])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in representable floats (both finite)."""
    def key(a: np.ndarray) -> np.ndarray:
        i = a.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(key(got) - key(want))


@pytest.mark.parametrize("mode", ["regions", "fibers"])
def test_tanh_is_correctly_rounded_but_rarely_one_ulp_off(mode: str, monkeypatch) -> None:
    if mode == "fibers":
        monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    m = tessera.compile(SRC, backend="cpu", path=f"tanh_{mode}.tsr")
    x = _inputs(5)
    with np.errstate(invalid="ignore"):  # signalling NaNs among the random bits
        d = x.astype(np.float64)
    want = np.tanh(d).astype(np.float32)
    y1, y2 = np.zeros_like(x), np.zeros_like(x)
    m.tanh_map(x, y1)
    m.tanh_loop(x, y2, grid=3)
    assert y1.tobytes() == y2.tobytes()
    nan = np.isnan(x)
    assert np.isnan(y1[nan]).all() and not np.isnan(y1[~nan]).any()
    ulps = _ulps(y1[~nan], want[~nan])
    assert ulps.max() <= 1 and np.count_nonzero(ulps) <= 0.001 * ulps.size, (ulps.max(), np.count_nonzero(ulps))
    assert np.array_equal(np.signbit(y1[~nan]), np.signbit(x[~nan]))  # odd, -0.0 included
    m.tanh_map(-x, y2)
    assert np.array_equal(y2[~nan], -y1[~nan])
    yd = np.zeros_like(d)
    m.tanh_f64(d, yd, grid=2)  # f64 keeps the C library's tanh
    assert np.allclose(yd[~nan], np.tanh(d[~nan]), rtol=1e-15, atol=0)


def test_region_and_fiber_mode_agree_bit_for_bit(monkeypatch) -> None:
    x = _inputs(6)
    out = []
    for regions in ("1", "0"):
        monkeypatch.setenv("TESSERA_CPU_REGIONS", regions)
        m = tessera.compile(SRC, backend="cpu", path=f"tanh_agree_{regions}.tsr")
        y = np.zeros_like(x)
        m.tanh_map(x, y)
        out.append(y.tobytes())
    assert out[0] == out[1]
