"""Fragments as register tiles (spec section 14): element coordinates in whole-fragment statements,
row vectors, row reductions and broadcasts. The CPU backend runs the emitted per-lane code (the
reductions' quad shuffles included), compared with NumPy (float64 references; sums in another order
than NumPy's, hence rtol 1e-5) at sizes that are not multiples of the blocks, with and without
check_bounds."""

from __future__ import annotations

import numpy as np
import pytest

import tessera

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
