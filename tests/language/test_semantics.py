"""Differential tests of the language's arithmetic: random expressions, evaluated by the CPU backend
(the emitted CUDA C) and by a reference in Python/NumPy that follows spec section 6 (integer `//` and
`%` truncate toward zero, `/` of floats, f16 rounding after every operation)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera
from tessera.base.errors import LaunchError, SourceFile
from tessera.transpile.driver import compile_source

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
            # Casts, unary minus and selects are printed without parentheses of their own: the C
            # precedence must come from what is printed (`2 * i32(a + 1)` was printed `2 * a + 1`).
            st.tuples(st.sampled_from(["+", "*", "-"]), inner, inner).map(
                lambda t: (f"({t[1][0]} {t[0]} i32({t[2][0]}))", (t[0], t[1][1], t[2][1]))),
            inner.map(lambda x: (f"i32(i64({x[0]}) * 3)", ("i64*3", x[1]))),
            inner.map(lambda x: (f"i32(f32({x[0]}) * 0.5)", ("f32/2", x[1]))),
            inner.map(lambda x: (f"(-i32({x[0]}))", ("neg", x[1]))),
            st.tuples(inner, inner, inner).map(
                lambda t: (f"({t[0][0]} if {t[1][0]} > 0 else {t[2][0]})", ("sel", t[0][1], t[1][1], t[2][1]))),
        )
    return st.recursive(leaf, extend, max_leaves=6)


class Undefined(Exception):
    """The expression overflows i32, which C leaves undefined (docs/language.md, section 7)."""


def _i32(r: int) -> int:
    if not -(2**31) <= r < 2**31:
        raise Undefined
    return r


def eval_int(tree, v) -> int:
    op = tree[0]
    if op == "v":
        return v[tree[1]]
    if op == "k":
        return tree[1]
    if op == "sel":
        return eval_int(tree[1], v) if eval_int(tree[2], v) > 0 else eval_int(tree[3], v)
    a = eval_int(tree[1], v)
    if op == "neg":
        return _i32(-a)
    if op == "i64*3":
        return (a * 3 + 2**31) % 2**32 - 2**31  # computed in i64, converted back: wraps
    if op == "f32/2":
        f = float(np.float32(np.float32(a) * np.float32(0.5)))
        return int(max(-(2**31), min(2**31 - 1, int(f))))  # toward zero, saturating
    b = eval_int(tree[2], v)
    if op == "<<":
        return _i32_shift(a, b)
    r = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "&": lambda: a & b, "|": lambda: a | b,
         "^": lambda: a ^ b, "//": lambda: _tdiv(a, b), "%": lambda: a - _tdiv(a, b) * b}[op]()
    return _i32(r)


def _i32_shift(a: int, b: int) -> int:
    # A left shift into or past the sign bit is undefined before C++20 as well.
    if a < 0 or (a << b) >= 2**31:
        raise Undefined
    return a << b


def _defined(tree, v) -> int | None:
    try:
        return eval_int(tree, v)
    except Undefined:
        return None


@pytest.mark.usefixtures("shared_cache")
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(exprs=st.lists(int_exprs(), min_size=40, max_size=40))
def test_integer_expressions_match_c_semantics(exprs) -> None:
    v = [7, -13, 100, -1]
    exprs = [(text, tree) for text, tree in exprs if _defined(tree, v) is not None]
    body = "".join(f"        y[{i}] = {text}\n" for i, (text, _) in enumerate(exprs)) or "        pass\n"
    mod = tessera.compile(f"@kernel tile[(32,)]\ndef k(v: i32[{N_INPUTS}], y: mut i32[{max(1, len(exprs))}]):\n"
                          f"    if tile_linear_id() == 0:\n{body}", backend="cpu")
    y = np.zeros(max(1, len(exprs)), np.int32)
    mod.k(np.array(v, np.int32), y, grid=1)
    want = [eval_int(tree, v) for _, tree in exprs]
    assert y.tolist()[:len(exprs)] == want, [t for t, _ in exprs]


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


def test_constant_conversions_fold_to_what_the_c_computes() -> None:
    """Casts of literals are folded from the literal's value in its type (a float literal is f32),
    rounded once to the target, as the C conversion they replace would."""
    mod = tessera.compile("""
@kernel tile[(1,)]
def k(d: mut f64[2], i: mut i32[2], f: mut f32[1]):
    d[0] = f64(0.1)
    d[1] = f64(f32(16777217))
    i[0] = i32(2.9999999999)
    i[1] = i32(16777217.0)
    f[0] = f32(1152921573326323713)
""", backend="cpu")
    d, i, f = np.zeros(2), np.zeros(2, np.int32), np.zeros(1, np.float32)
    mod.k(d, i, f, grid=1)
    assert d.tolist() == [float(np.float32(0.1)), 16777216.0]
    assert i.tolist() == [3, 16777216]
    assert int(f[0]) == 2**60 + 2**37  # 2**60 + 2**36 + 1, rounded once (not through a double)


def test_augmented_assignment_computes_in_the_type_of_the_operation() -> None:
    """`z += u` with z: i32, u: u32 is u32 arithmetic (it wraps, and no overflow is reported);
    `w += b` with b: i64 is i64 arithmetic; `x += y` on i32 is checked under check_bounds."""
    src = """
@kernel tile[(1,)]
def k(a: i32[2], u: u32[1], b: i64[1], o: mut bool[2]):
    z = a[0]
    z += u[0]
    o[0] = z > a[0]
    w = a[0]
    w += b[0]
    o[1] = w > a[0]
"""
    args = (np.array([2**31 - 1, 1], np.int32), np.array([1], np.uint32), np.array([1], np.int64))
    o = np.ones(2, bool)
    for check in (False, True):
        tessera.compile(src, backend="cpu", check_bounds=check).k(*args, o, grid=1)
        assert o.tolist() == [False, False]
    checked = tessera.compile(src + "    x = a[0]\n    x += a[1]\n", backend="cpu", check_bounds=True)
    with pytest.raises(LaunchError, match="signed integer overflow in '\\+'"):
        checked.k(*args, o, grid=1)


def test_conversions_to_f16_and_bf16_round_once() -> None:
    """f64 and wide integers convert straight to f16/bf16 (as NumPy and CUDA's __double2half do):
    through f32 first, 1 + 2**-11 + 2**-40 became the tie 1 + 2**-11 and then 1."""
    mod = tessera.compile("""
@kernel tile[(1,)]
def k(d: f64[2], i: i32[1], h: mut f16[2], b: mut bf16[3]):
    h[0] = d[0]
    x: f16 = f16(d[0]) * 1
    h[1] = x
    b[0] = d[1]
    b[1] = i[0]
    b[2] = bf16(i[0]) * 1
""", backend="cpu")
    d = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40])
    h, b = np.zeros(2, np.float16), np.zeros(3, np.uint16)
    mod.k(d, np.array([2**24 + 2**16 + 1], np.int32), h, b, grid=1)
    assert h.tolist() == [1 + 2**-10] * 2
    bf16_bits = [int(np.float32(v).view(np.uint32)) >> 16 for v in (1 + 2**-7, 2**24 + 2**17, 2**24 + 2**17)]
    assert b.tolist() == bf16_bits


def test_module_constant_used_as_a_wider_integer_computes_in_that_type() -> None:
    """`K * K` next to an i64 is i64, as with literals (K is declared `int` in the C): it printed
    as `K * K` and overflowed int; with check_bounds `tsr_checked_mul(K, (long long)...)` did not
    compile (ambiguous overload)."""
    src = """
const K = 100000
@kernel tile[(1,)]
def k(a: i64[1], o: mut i64[2]):
    o[0] = a[0] + K * K
    o[1] = a[0] * K + i64(a[0] < 0)
"""
    for check in (False, True):
        o = np.zeros(2, np.int64)
        tessera.compile(src, backend="cpu", check_bounds=check).k(np.array([1], np.int64), o, grid=1)
        assert o.tolist() == [10**10 + 1, 100000]


def test_narrow_integer_products_wrap_without_signed_overflow() -> None:
    """u16 * u16 wraps modulo 2**16 (docs/language.md section 7). C promotes both operands to
    int, where 65535 * 65535 overflows (undefined behaviour that gcc happens to hide and other
    compilers may exploit), so the product is computed in unsigned arithmetic."""
    src = """
@kernel tile[(1,)]
def k(a: u16[2], b: i8[2], y: mut u16[3], z: mut i8[1]):
    y[0] = a[0] * a[1]
    y[1] = a[0]
    y[1] *= a[1]
    y[2] = u16(65535) * u16(65535)
    z[0] = b[0] * b[1]
"""
    assert "(unsigned)a[0] * a[1]" in compile_source(SourceFile("t.tsr", src)).cuda
    mod = tessera.compile(src, backend="cpu")
    y, z = np.zeros(3, np.uint16), np.zeros(1, np.int8)
    mod.k(np.array([65535, 65533], np.uint16), np.array([-100, 77], np.int8), y, z, grid=1)
    assert y.tolist() == [(65535 * 65533) % 2**16, (65535 * 65533) % 2**16, 1]
    assert z.tolist() == [(-100 * 77 + 128) % 256 - 128]
