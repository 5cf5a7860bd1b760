"""Constant folding computes what the program computes at run time, for every scalar type and cast.

A random differential test (tests/language/scalar_model.py generates the expressions and models
their values from the contract) evaluates each expression three more ways, in one compile:
folded in a kernel (`o[j] = <literals>`: the fold-constants pass, or the C where it folds nothing),
as a module constant (`const C = <literals>`: the constant evaluator), and at run time over input
arrays (nothing folds), all on the CPU backend. All four must agree bit for bit; NaNs agree with
any NaN, and a zero from min/max of -0.0 and 0.0 with either zero. TESSERA_FOLD_FUZZ=N runs N
expressions instead of the suite's bounded, seeded number. Then one regression test per defect.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile
from tessera.transpile.driver import compile_source
from tests.language.scalar_model import INTS, NUMPY, TYPES, Expr, generate

FORMS = ("folded", "named", "runtime")


def _source(exprs: list[Expr], inputs: dict[str, list]) -> tuple[str, dict[str, list[int]]]:
    """The module: a constant per expression, three kernels writing outputs per type, and where
    each expression's result lands (its index in the outputs of its type)."""
    slots: dict[str, list[int]] = {t: [] for t in TYPES}
    for j, e in enumerate(exprs):
        slots[e.ty].append(j)
    lines = [f"const C{j} = {e.const_text}" for j, e in enumerate(exprs) if not (e.const_error or e.zero_sign)]
    outs = ", ".join(f"o_{t}: mut {t}[{max(1, len(slots[t]))}]" for t in TYPES)
    ins = ", ".join(f"a_{t}: {t}[{max(1, len(inputs[t]))}]" for t in TYPES)
    bodies: dict[str, list[str]] = {"folded": [], "named": [], "runtime": []}
    for t in TYPES:
        for k, j in enumerate(slots[t]):
            e = exprs[j]
            if not e.const_error:
                # in a loop, or as a condition, every third one: folding where statements nest
                if t == "bool" and j % 3 == 0:
                    bodies["folded"] += [f"    if {e.const_text}:", f"        o_{t}[{k}] = True", "    else:",
                                         f"        o_{t}[{k}] = False"]
                elif j % 3 == 1:
                    bodies["folded"] += ["    for rep in range(2):", f"        o_{t}[{k}] = {e.const_text}"]
                else:
                    bodies["folded"].append(f"    o_{t}[{k}] = {e.const_text}")
                if not e.zero_sign:
                    bodies["named"].append(f"    o_{t}[{k}] = C{j}")
            bodies["runtime"].append(f"    o_{t}[{k}] = {e.run_text}")
    for form in FORMS:
        params = f"{ins}, {outs}" if form == "runtime" else outs
        lines += ["@kernel tile[(1,)]", f"def {form}({params}):"] + (bodies[form] or ["    pass"])
    return "\n".join(lines) + "\n", slots


def _array(t: str, values: list) -> np.ndarray:
    if t == "bf16":
        bits = [int(np.float32(v).view(np.uint32)) >> 16 for v in values]
        return np.array(bits or [0], np.uint16)
    return np.array(values or [0], NUMPY[t])


def _agrees(e: Expr, got) -> bool:
    if e.ty == "bool":
        return bool(got) == e.value
    if e.ty in INTS:
        return int(got) == e.value
    g = float(np.uint32(int(got) << 16).view(np.float32)) if e.ty == "bf16" else float(got)
    if math.isnan(e.value) or math.isnan(g):
        return math.isnan(e.value) and math.isnan(g)
    return g == e.value and (e.zero_sign or math.copysign(1.0, g) == math.copysign(1.0, e.value))


def mismatches(exprs: list[Expr], inputs: dict[str, list]) -> list[str]:
    """Each disagreement between the model and the three evaluations, described."""
    src, slots = _source(exprs, inputs)
    mod = tessera.compile(src, backend="cpu")
    args = {t: _array(t, inputs[t]) for t in TYPES}
    found: list[str] = []
    for form in FORMS:
        outs = {t: _array(t, [0] * len(slots[t])) for t in TYPES}
        ins = [args[t] for t in TYPES] if form == "runtime" else []
        getattr(mod, form)(*ins, *[outs[t] for t in TYPES], grid=1)
        for t in TYPES:
            for k, j in enumerate(slots[t]):
                e = exprs[j]
                skipped = form != "runtime" and (e.const_error or (form == "named" and e.zero_sign))
                if not skipped and not _agrees(e, outs[t][k]):
                    found.append(f"{form}: {e.const_text if form != 'runtime' else e.run_text} is "
                                 f"{outs[t][k]!r} ({t}), the model says {e.value!r}")
    return found


@pytest.mark.usefixtures("shared_cache")
def test_random_scalar_expressions_fold_as_they_compute() -> None:
    total = int(os.environ.get("TESSERA_FOLD_FUZZ", "100"))
    rng = random.Random(20250715)
    found: list[str] = []
    for start in range(0, total, 150):
        exprs, inputs = generate(rng, min(150, total - start))
        found += mismatches(exprs, inputs)
    assert not found, "\n".join(found[:40])


# ---- one regression test per defect (each failed before its fix)
def _run(body: str, out: str) -> list:
    src = f"@kernel tile[(1,)]\ndef k(o: mut {out}[8]):\n" + \
        "".join(f"    {line}\n" for line in body.strip().splitlines())
    o = np.zeros(8, NUMPY[out])
    tessera.compile(src, backend="cpu").k(o, grid=1)
    return o.tolist()


def test_casts_in_module_constants_are_applied() -> None:
    """`convert()` ignored float casts and wrapped float to integer casts."""
    src = """
const H = f16(1.0001)
const F = f32(16777217)
const D = f64(f32(0.1))
const U = u8(300.0)
const I = i8(-200.5)
const S = u64(1) >> u16(-13.5)
const N = i32(nan)
const P = i32(inf)
@kernel tile[(1,)]
def k(d: mut f64[3], i: mut i64[5]):
    d[0] = H
    d[1] = F
    d[2] = D
    i[0] = U
    i[1] = I
    i[2] = S
    i[3] = N
    i[4] = P
"""
    d, i = np.zeros(3), np.zeros(5, np.int64)
    tessera.compile(src, backend="cpu").k(d, i, grid=1)
    assert d.tolist() == [1.0, 16777216.0, float(np.float32(0.1))]
    assert i.tolist() == [255, -128, 1, 0, 2**31 - 1]


def test_bool_in_arithmetic_counts_as_i32() -> None:
    assert _run("o[0] = True + i8(127)\no[1] = True - u16(5)\no[2] = i64(False - i8(1))", "i64")[:3] == [128, -4, -1]
    src = "const A = True + i8(127)\nconst B = True - u16(5)\n@kernel tile[(1,)]\ndef k(o: mut i32[2]):\n" \
          "    o[0] = A\n    o[1] = B\n"
    o = np.zeros(2, np.int32)
    tessera.compile(src, backend="cpu").k(o, grid=1)
    assert o.tolist() == [128, -4]
    x = np.zeros(2, np.int32)
    prog = "@kernel tile[(1,)]\ndef k(b: bool[1], c: i8[1], o: mut i32[2]):\n    o[0] = b[0] + c[0]\n    o[1] = b[0] - u16(c[0])\n"
    tessera.compile(prog, backend="cpu").k(np.array([True]), np.array([127], np.int8), x, grid=1)
    assert x.tolist() == [128, -126]


def test_folding_keeps_the_sign_of_zero() -> None:
    o = _run("o[0] = f32(-0.0) // 5.0\no[1] = -0.0 // 5.0\no[2] = f64(-0.0) // 3.0", "f32")
    assert [math.copysign(1.0, v) for v in o[:3]] == [-1.0, -1.0, -1.0]
    src = "const Z = f32(-0.0) // 5.0\n@kernel tile[(1,)]\ndef k(o: mut f32[1]):\n    o[0] = Z\n"
    o32 = np.ones(1, np.float32)
    tessera.compile(src, backend="cpu").k(o32, grid=1)
    assert math.copysign(1.0, o32[0]) == -1.0


def test_float_division_and_remainder_by_zero_are_ieee() -> None:
    """They were "division by zero" errors; only an integer division by a constant 0 is."""
    src = """
const INF = 1.0 / 0.0
const NAN = 5.0 % 0.0
@kernel tile[(1,)]
def k(x: f32[1], h: f16[1], o: mut f32[9]):
    o[0] = 1.0 / 0.0
    o[1] = -1.0 / 0.0
    o[2] = 0.0 / 0.0
    o[3] = 1.0 % 0.0
    o[4] = f32(3.0) // 0.0
    o[5] = x[0] / 0.0
    o[6] = x[0] % 0.0
    o[7] = INF + NAN
    o[8] = h[0] / 0.0
    y = x[0]
    y /= 0.0
"""
    o = np.zeros(9, np.float32)
    tessera.compile(src, backend="cpu").k(np.array([2.0], np.float32), np.array([-1.0], np.float16), o, grid=1)
    assert o[[0, 1, 4, 5, 8]].tolist() == [math.inf, -math.inf, math.inf, math.inf, -math.inf]
    assert all(math.isnan(v) for v in o[[2, 3, 6, 7]])
    with pytest.raises(CompileError, match="division by zero"):
        compile_source(SourceFile("t.tsr", "@kernel tile[(1,)]\ndef k(o: mut i32[1]):\n    o[0] = 7 // 0\n"))


def test_narrow_integer_constants_wrap_as_at_run_time() -> None:
    assert _run("o[0] = i8(100) + i8(100)\no[1] = i8(-128) // i8(-1)\no[2] = i16(300) * i16(300)\n"
                "o[3] = u16(40000) + u16(40000)\no[4] = -i8(-128)\no[5] = i8(127) + 1", "i32")[:6] == \
        [-56, -128, 24464, 14464, -128, -128]
    src = "const A = i8(100) + i8(100)\n@kernel tile[(1,)]\ndef k(o: mut i32[1]):\n    o[0] = A\n"
    o = np.zeros(1, np.int32)
    tessera.compile(src, backend="cpu").k(o, grid=1)
    assert o.tolist() == [-56]
    for bad in ("i32(2147483647) + 1", "i64(-9223372036854775807) - 2", "-i32(-2147483647 - 1)"):
        with pytest.raises(CompileError, match="constant expression overflows"):
            compile_source(SourceFile("t.tsr", f"@kernel tile[(1,)]\ndef k(o: mut i64[1]):\n    o[0] = {bad}\n"))


def test_literal_operations_in_constants_are_computed_in_the_type_they_take() -> None:
    """Found by the random test: in `f64(1) == ((-1) % 0)` the literals take the type f64, so `%` is
    fmod (NaN), but the module constant's evaluator computed `(-1) % 0` exactly first: "division by
    zero". Literal-only operations are computed in the type they meet, as the checker retypes them."""
    src = """
const A = f64(1) == ((-1) % 0)
const B = u8(1) + (200 + 100)
const C = f32(2) * (7 // 2)
const D = i64(1) << (30 + 10)
@kernel tile[(1,)]
def k(o: mut i64[4], p: mut i64[4]):
    o[0] = i64(A)
    o[1] = B
    o[2] = i64(C)
    o[3] = D
    p[0] = i64(f64(1) == ((-1) % 0))
    p[1] = u8(1) + (200 + 100)
    p[2] = i64(f32(2) * (7 // 2))
    p[3] = i64(1) << (30 + 10)
"""
    o, p = np.zeros(4, np.int64), np.zeros(4, np.int64)
    tessera.compile(src, backend="cpu").k(o, p, grid=1)
    assert o.tolist() == p.tolist() == [0, 45, 6, 2**40]


def test_zero_minus_a_converted_integer_is_positive_zero_at_run_time() -> None:
    """Found by the random test: GCC folded `0.0 - (double)b` into `-(double)b`, -0.0 for b == 0,
    where the folder (and the GPU) give 0.0 (runtime/host/recipe.py compiles with -frounding-math)."""
    src = """
@kernel tile[(1,)]
def k(b: bool[1], i: i32[1], o: mut f64[2], f: mut f32[1]):
    o[0] = 0 - f64(b[0])
    o[1] = 0.0 - f64(i[0])
    f[0] = 0.0 - f32(i[0])
"""
    o, f = np.ones(2), np.ones(1, np.float32)
    tessera.compile(src, backend="cpu").k(np.array([False]), np.array([0], np.int32), o, f, grid=1)
    assert [math.copysign(1.0, v) for v in [*o, *f]] == [1.0, 1.0, 1.0]


def test_bitwise_literals_retyped_to_a_float_are_a_located_error() -> None:
    """`x + (1 << 4)` with x: f32 retypes the literals to f32: the C was `1.0f << 4.0f`, which no C
    compiler accepts; now the constant evaluator reports it at the operator."""
    src = "@kernel tile[(1,)]\ndef k(x: f32[1], y: mut f32[1]):\n    y[0] = x[0] + (1 << 4)\n"
    with pytest.raises(CompileError, match=r"t.tsr:3:22: error: '<<' needs integer operands, but these literals "
                                           r"take the type f32"):
        compile_source(SourceFile("t.tsr", src))
