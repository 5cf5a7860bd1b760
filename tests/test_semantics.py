"""Differential tests of the language's arithmetic: random expressions, evaluated by the CPU backend
(the emitted CUDA C) and by a reference in Python/NumPy that follows spec section 6 (integer `//` and
`%` truncate toward zero, `/` of floats, f16 rounding after every operation)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera

N_INPUTS = 4


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def int_exprs():
    leaf = st.one_of(st.integers(0, N_INPUTS - 1).map(lambda i: (f"v[{i}]", ("v", i))),
                     st.integers(-50, 50).map(lambda k: (str(k) if k >= 0 else f"({k})", ("k", k))))

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "&", "|", "^"]), inner).map(
                lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})", (t[1], t[0][1], t[2][1]))),
            st.tuples(inner, st.sampled_from(["//", "%"]), st.integers(1, 9)).map(
                lambda t: (f"({t[0][0]} {t[1]} {t[2]})", (t[1], t[0][1], ("k", t[2])))),
            st.tuples(inner, st.integers(0, 6)).map(lambda t: (f"(({t[0][0]}) << {t[1]})", ("<<", t[0][1], ("k", t[1])))),
        )
    return st.recursive(leaf, extend, max_leaves=6)


def eval_int(tree, v) -> int:
    op = tree[0]
    if op == "v":
        return v[tree[1]]
    if op == "k":
        return tree[1]
    a, b = eval_int(tree[1], v), eval_int(tree[2], v)
    r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "&": lambda: a & b, "|": lambda: a | b,
         "^": lambda: a ^ b, "//": lambda: _tdiv(a, b), "%": lambda: a - _tdiv(a, b) * b,
         "<<": lambda: a << b}[op]()
    return (r + 2**31) % 2**32 - 2**31  # i32 wraps


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(exprs=st.lists(int_exprs(), min_size=40, max_size=40))
def test_integer_expressions_match_c_semantics(exprs, tmp_path_factory) -> None:
    import os

    os.environ["TESSERA_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "cache")
    body = "".join(f"        y[{i}] = {text}\n" for i, (text, _) in enumerate(exprs))
    mod = tessera.compile(f"@kernel tile[(32,)]\ndef k(v: i32[{N_INPUTS}], y: mut i32[{len(exprs)}]):\n"
                          f"    if tile_linear_id() == 0:\n{body}", backend="cpu")
    v = [7, -13, 100, -1]
    y = np.zeros(len(exprs), np.int32)
    mod.k(np.array(v, np.int32), y, grid=1)
    want = [eval_int(tree, v) for _, tree in exprs]
    assert y.tolist() == want


def test_f16_and_mixed_precision_follow_numpy() -> None:
    mod = tessera.compile("""
@kernel tile[(64,)]
def k(a: f16[n], b: bf16[n], c: f32[n], o16: mut f16[n], o32: mut f32[n], o64: mut f64[n]):
    i = tile_linear_id()
    o16[i] = a[i] * 3 - a[i] / 7 + 0.1
    o32[i] = f32(a[i]) * c[i] + 1.0
    o64[i] = f64(c[i]) * 2 + 0.5
""", backend="cpu")
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(64) * 10).astype(np.float16)
    b = np.zeros(64, np.uint16)
    c = rng.standard_normal(64).astype(np.float32)
    o16, o32, o64 = np.zeros(64, np.float16), np.zeros(64, np.float32), np.zeros(64, np.float64)
    mod.k(a, b, c, o16, o32, o64, grid=1)
    want16 = a * np.float16(3) - a / np.float16(7) + np.float16(0.1)
    assert np.array_equal(o16.view(np.uint16), want16.view(np.uint16))
    assert np.array_equal(o32, a.astype(np.float32) * c + np.float32(1))
    assert np.array_equal(o64, c.astype(np.float64) * 2 + 0.5)


@pytest.mark.parametrize("value,want", [(1e10, 2**31 - 1), (-1e10, -2**31), (float("nan"), 0), (-3.7, -3), (3.7, 3)])
def test_float_to_int_conversion_saturates(value: float, want: int) -> None:
    mod = tessera.compile("@kernel tile[(32,)]\ndef k(x: f32[1], y: mut i32[1]):\n    y[0] = i32(x[0])\n",
                          backend="cpu")
    y = np.zeros(1, np.int32)
    mod.k(np.array([value], np.float32), y, grid=1)
    assert y[0] == want
