"""Reductions of elementwise expressions (spec section 14; Triton's `tl.sum(x * x, axis=1)`):
`tsum(S * S, axis=1)`, `tmax(EXPR, axis=0)`. The compiler assigns the expression to a temporary
fragment and reduces that (checks/frag_vectors.py, passes/frag_temps.py), so on the CPU
backend the results equal the form with a temporary written out, bit for bit, and NumPy's; NVRTC
compiles them for sm_80 and sm_90 without spills; misuse is a located error. A random generator
(reduce_expr_gen.py) attacks both axes, nested reductions, loops, conditions and rows spread over
several warps."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.reduce_expr_gen import ReduceGen, inputs

NORMS = """
@kernel tile[(128,)]
def norms(X: f32[M, N], b: f32[N], R: mut f32[M], C: mut f32[G, N], Y: mut f32[M, N]):
    S = tfrag(f32[64, 32], 0.0)
    TEMPS
    l = tfrag(f32[64], 0.0)
    c = tfrag(f32[1, 32], -inf)
    m0 = group_id(0) * 64
    tload(S, X[m0:m0 + 64, 0:32])
    for it in range(2):
        ROWS
        if it == 1:
            COLS
    BCAST
    tstore(R[m0:m0 + 64], l)
    tstore(C[group_id(0), 0:32], c)
    tstore(Y[m0:m0 + 64, 0:32], S)
"""
WRITTEN = {"TEMPS": "pass",
           "ROWS": "l[:] = l + tsum(S * S, axis=1)",
           "COLS": "c[:] = max(c, tmax(S * 2.0 + b[0:32][None, :], axis=0))",
           "BCAST": "S[:] = S - tmin(S - l[:, None] * 0.5, axis=1)[:, None] + tsum(S * c[None, :], axis=0)[None, :]"}
TEMPORARY = {"TEMPS": "T = tfrag(f32[64, 32])\n    U = tfrag(f32[64, 32])",
             "ROWS": "T[:] = S * S\n        l[:] = l + tsum(T, axis=1)",
             "COLS": "T[:] = S * 2.0 + b[0:32][None, :]\n            c[:] = max(c, tmax(T, axis=0))",
             "BCAST": "T[:] = S - l[:, None] * 0.5\n    U[:] = S * c[None, :]\n"
                      "    S[:] = S - tmin(T, axis=1)[:, None] + tsum(U, axis=0)[None, :]"}


def _source(parts: dict[str, str]) -> str:
    src = NORMS
    for k, v in parts.items():
        src = src.replace(k, v)
    return src


def _run(src: str, x: np.ndarray, b: np.ndarray, check_bounds: bool) -> tuple[np.ndarray, ...]:
    m, n = x.shape
    r, c, y = np.zeros(m, np.float32), np.zeros((2, n), np.float32), np.zeros((m, n), np.float32)
    tessera.compile(src, backend="cpu", check_bounds=check_bounds, path="norms.tsr").norms(x, b, r, c, y,
                                                                                          grid=(2,))
    return r, c, y


@pytest.mark.parametrize("check_bounds", [False, True])
def test_reductions_of_expressions_equal_the_temporary_fragment_form_bit_for_bit(check_bounds: bool) -> None:
    m, n = 100, 30  # ragged: a partial block of rows, two columns outside (zero)
    rng = np.random.default_rng(5)
    x, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    written = _run(_source(WRITTEN), x, b, check_bounds)
    temporary = _run(_source(TEMPORARY), x, b, check_bounds)
    for a, t in zip(written, temporary):
        np.testing.assert_array_equal(a.view(np.uint32), t.view(np.uint32))
    r, c, y = written  # and NumPy's values, on the zero-padded blocks the fragments hold
    xp, bp = np.zeros((128, 32)), np.zeros(32)
    xp[:m, :n], bp[:n] = x, b
    lv = 2 * (xp * xp).sum(1)
    cv = [(xp[64 * g:64 * g + 64] * 2.0 + bp).max(0) for g in range(2)]
    np.testing.assert_allclose(r, lv[:m], rtol=1e-5)
    np.testing.assert_array_equal(c, np.vstack(cv)[:, :n].astype(np.float32))
    blocks = []
    for g in range(2):
        s = xp[64 * g:64 * g + 64]
        blocks.append(s - (s - lv[64 * g:64 * g + 64, None] * 0.5).min(1)[:, None] + (s * cv[g][None, :]).sum(0)[None, :])
    np.testing.assert_allclose(y, np.vstack(blocks)[:m, :n], rtol=1e-4, atol=1e-4)


OTHER_TYPES = """
@kernel tile[(128,)]
def k(X: f32[M, N], I: i32[M, N], R: mut f32[M], Q: mut i32[M]):
    H = tfrag(f16[64, 32])
    A = tfrag(i32[64, 32], 0)
    r = tfrag(f32[64], 0.0)
    q = tfrag(i32[64], 0)
    tload(H, X[0:64, 0:32])
    tload(A, I[0:64, 0:32])
    r[:] = tsum(H * H, axis=1)
    q[:] = tmax(A * 3 - col_index(), axis=1)
    tstore(R[0:64], r)
    tstore(Q[0:64], q)
"""


def test_f16_and_i32_expressions_reduce_as_f32_and_i32_values() -> None:
    """An f16 expression is rounded to f16 (as f16 * f16 is), then reduced in f32, as it would be
    from a temporary f32 fragment; an i32 one in i32."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 32)).astype(np.float32)
    i = rng.integers(-100, 100, (64, 32)).astype(np.int32)
    r, q = np.zeros(64, np.float32), np.zeros(64, np.int32)
    tessera.compile(OTHER_TYPES, backend="cpu", path="types.tsr").k(x, i, r, q, grid=1)
    h = x.astype(np.float16)
    np.testing.assert_allclose(r, (h * h).astype(np.float32).astype(np.float64).sum(1), rtol=1e-5)
    np.testing.assert_array_equal(q, (i * 3 - np.arange(32)[None, :]).max(1))


DEVICE = """
@device
def sumsq(S: mut frag f32[64, 32], v: mut frag f32[64]):
    v[:] = tsum(S * S + tmax(S * 0.5, axis=1)[:, None], axis=1)

@kernel tile[(128,)]
def k(X: f32[M, N], R: mut f32[M]):
    S = tfrag(f32[64, 32], 0.0)
    v = tfrag(f32[64], 0.0)
    tload(S, X[0:64, 0:32])
    sumsq(S, v)
    tstore(R[0:64], v)
"""


def test_a_nested_reduction_of_an_expression_in_a_device_function() -> None:
    x = np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32)
    r = np.zeros(64, np.float32)
    tessera.compile(DEVICE, backend="cpu", check_bounds=True, path="dev.tsr").k(x, r, grid=1)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(r, (xd * xd + (xd * 0.5).max(1)[:, None]).sum(1), rtol=1e-5)


ERR_HEAD = """
@kernel tile[(128,)]
def k(X: f32[M, N], Y: mut f32[M, N]):
    S = tfrag(f32[64, 32], 0.0)
    W = tfrag(f32[64, 16], 0.0)
    c = tfrag(f32[1, 32], 0.0)
    v = tfrag(f32[64], 0.0)
"""


@pytest.mark.parametrize(("body", "message"), [
    ("v[:] = tsum(row_index() * 2.0, axis=1)",
     "tsum() reduces a 2-D fragment, or an elementwise expression of 2-D fragments (tsum(S * S, axis=1)); this "
     "expression reads none"),
    ("v[:] = tsum(S > 0.0, axis=1)", "tsum() reduces numbers, not bool values"),
    ("c[:] = tmax(S * S, axis=1)", "tmax(F, axis=1) is a row vector"),
    ("c[:] = tsum(W * 2.0, axis=0)", "tsum() reduces a 2-D fragment of 32 columns here, not an expression of [64, 16]"),
    ("v[:] = tsum(S + W, axis=1)", "'W' is a [64, 16] fragment but the statement assigns a [64, 32] one"),
    ("v[:] = tsum(S + v, axis=1)", "'v' is a row vector: broadcast it along the columns with v[:, None]"),
])
def test_misused_reductions_of_expressions_are_located_errors(body: str, message: str) -> None:
    with pytest.raises(CompileError) as info:
        compile_source(SourceFile("err.tsr", ERR_HEAD + "    " + body + "\n"), CompileOptions())
    text = str(info.value)
    assert re.search(r"err\.tsr:8:\d+: error: [^\n]*" + re.escape(message), text), text


# ---- the random generator (reduce_expr_gen.py) ------------------------------------------------------------

CASES = int(os.environ.get("TESSERA_REDUCE_EXPR_CASES", "6"))


def run_generated(seed: int) -> None:
    gen = ReduceGen(seed, rows_only=seed % 3 == 2)
    written, temporary, model = gen.forms(5)
    x, b, k = inputs(gen, seed)
    m, n = x.shape
    outs = []
    for src in (written, temporary):
        y, c, r = np.zeros((m, n), np.float32), np.zeros(n, np.float32), np.zeros((2, m), np.float32)
        tessera.compile(src, backend="cpu", check_bounds=seed % 4 == 3, path=f"redgen{seed}.tsr").gen(
            x, b, y, c, r, k, grid=(-(-n // gen.shape.bn),))
        outs.append((y, c, r))
    for a, t in zip(*outs):
        np.testing.assert_array_equal(a.view(np.uint32), t.view(np.uint32), err_msg=written)
    for a, w in zip(outs[0], model(x.astype(np.float64), b.astype(np.float64), k)):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5, err_msg=written)


@pytest.mark.parametrize("seed", range(CASES))
def test_generated_reductions_of_expressions_match_the_temporary_form_and_the_model(seed: int) -> None:
    run_generated(seed)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_reductions_of_expressions_compile_with_nvrtc_without_spills(arch: str) -> None:
    sources = [_source(WRITTEN), *(ReduceGen(seed, rows_only=seed % 3 == 2).forms(5)[0] for seed in range(3))]
    for k, src in enumerate(sources):
        result = compile_source(SourceFile(f"red{k}.tsr", src), options=CompileOptions(arch=arch))
        nv = compile_cuda(result.cuda, name="red.cu", arch=arch)
        assert nv.warnings == (), (nv.warnings, src)
        res = nv.kernel(result.kernels[0].c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, (res, src)
