"""Scalar device functions applied to each element of a whole-fragment statement (spec section 14;
docs/language.md section 8.12), as a Triton port calls a `@triton.jit` helper on a block
(`acc = gelu(acc)`): in 2-D, row-vector and column-vector statements, in a reduction's argument,
in a device function that takes fragments, generic and with array arguments read at the element's
coordinates. The CPU backend matches NumPy; NVRTC compiles the kernel for sm_80 and sm_90 with no
warnings and no spills. Operations that need whole warps or the whole group (warp and group
reductions, shuffles, barriers), called directly or through a device function, are located errors
in a whole-fragment statement: its elements are computed one by one in whichever lane holds each.
Generated programs (calls_gen.py) equal the same programs with each call's body written out, bit
for bit, and their NumPy model.
"""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.language.tensor_cores.calls_gen import CallGen
from tests.language.tensor_cores.frag_expr_gen import model
from tests.transpile.checks.catalog import Case, check_catalog_case

CALLS = """
@device
def gelu(x: f32) -> f32:
    return 0.5 * x * (1.0 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))

@device
def sq[T](x: T) -> T:
    return x * x

@device
def at(X: f32[M, N], i: i32, j: i32) -> f32:
    return X[i, j] if i < M and j < N else 0.0

@device
def act(S: mut frag f32[BM, BN], slope: f32):
    S[:] = gelu(S) if S > 0.0 else S * slope

@kernel tile[(64,)]
def k(X: f32[M, N], Y: mut f32[M, N], R: mut f32[M], C: mut f32[N], Z: mut f32[M, N]):
    F = tfrag(f32[32, 32])
    r = tfrag(f32[32])
    c = tfrag(f32[1, 32])
    I = tfrag(i32[32, 32])
    tload(F, X[0:32, 0:32])
    r[:] = tsum(gelu(F), axis=1)
    r[:] = gelu(r) + sq(r)
    c[:] = sq(tmax(F, axis=0))
    I[:] = sq(col_index()) + sq(i32(F))
    F[:] = gelu(F) + sq(F) - r[:, None] + c[None, :] + I
    act(F, 0.125)
    tstore(Y[0:32, 0:32], F)
    tstore(R[0:32], r)
    tstore(C[0:32], c)
    F[:] = at(X, row_index() + 1, col_index())
    tstore(Z[0:32, 0:32], F)
"""


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("check_bounds", [False, True])
def test_scalar_device_functions_apply_to_each_element(check_bounds: bool) -> None:
    rng = np.random.default_rng(11)
    x32 = rng.standard_normal((32, 32)).astype(np.float32)
    y, z = np.zeros_like(x32), np.zeros_like(x32)
    r, c = np.zeros(32, np.float32), np.zeros(32, np.float32)
    mod = tessera.compile(CALLS, backend="cpu", check_bounds=check_bounds, path="calls.tsr")
    mod.k(x32, y, r, c, z, grid=1)
    x = x32.astype(np.float64)
    rv = _gelu(x).sum(1)
    rv = _gelu(rv) + rv * rv
    cv = x.max(0) ** 2
    iv = np.arange(32)[None, :] ** 2 + np.trunc(x32).astype(np.int64) ** 2
    f = _gelu(x) + x * x - rv[:, None] + cv[None, :] + iv
    f = np.where(f > 0, _gelu(f), f * 0.125)
    np.testing.assert_allclose(r, rv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c, cv, rtol=1e-5)
    np.testing.assert_allclose(y, f, rtol=1e-4, atol=1e-4)
    below = np.zeros_like(x32)
    below[:-1] = x32[1:]
    np.testing.assert_array_equal(z, below)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_elementwise_calls_without_spills(arch: str) -> None:
    result = compile_source(SourceFile("calls.tsr", CALLS), options=CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, name="calls.cu", arch=arch)
    assert nv.warnings == ()
    for kern in result.kernels:
        res = nv.kernel(kern.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res


HEAD = "@kernel tile[(32,)]\ndef k(X: f32[16, 16], Y: mut f32[16, 16]):\n    F = tfrag(f32[16, 16])\n"
WARP_FN = "@device\ndef f(x: f32) -> f32:\n    return warp_sum(x)\n\n"
BARRIER_FN = "@device\ndef f(x: f32) -> f32:\n    tbarrier()\n    return x\n\n"
SCALAR_FN = "@device\ndef f(x: f32) -> f32:\n    return x\n\n"
COOP = "needs whole warps or the whole group, but a whole-fragment statement computes its elements one by one"

ERRORS = [
    Case("warp_sum", HEAD + "    F[:] = warp_sum(F)\n", 4, 12, ("warp_sum()", COOP, "tsum()")),
    Case("group_max", HEAD + "    F[:] = F + group_max(1.0)\n", 4, 16, ("group_max()", COOP)),
    Case("shfl_xor", HEAD + "    r = tfrag(f32[16])\n    r[:] = shfl_xor(tsum(F, axis=1), 1)\n", 5, 12,
         ("shfl_xor()", COOP)),
    Case("warp-fn", WARP_FN + HEAD + "    F[:] = f(F)\n", 8, 12, ("f()", COOP)),
    Case("barrier-fn", BARRIER_FN + HEAD + "    F[:] = f(F) * 2.0\n", 9, 12, ("f()", COOP)),
    Case("frag-outside", SCALAR_FN + HEAD + "    y = f(F)\n", 8, 11,
         ("'F' is a fragment, but parameter 'x' of f() is not", "F[:] = f(F)")),
]


@pytest.mark.parametrize("case", ERRORS, ids=lambda c: c.id)
def test_misuse_in_elementwise_statements_is_a_located_error(case: Case, tmp_path, capsys) -> None:
    check_catalog_case(case, tmp_path, capsys)


def _run(src: str, seed: int, x: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y, r = np.zeros(x.shape, np.float32), np.zeros(x.shape[0], np.float32)
    tessera.compile(src, backend="cpu", check_bounds=seed % 2 == 1, path=f"calls{seed}.tsr").gen(x, b, c, y, r, 1,
                                                                                               grid=(2,))
    return y, r


@pytest.mark.parametrize("seed", range(6))
def test_generated_calls_equal_their_bodies_written_out_and_the_model(seed: int) -> None:
    src, steps = CallGen(seed).program(6)
    written_out, _ = CallGen(seed, inline=True).program(6)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-4, 4, (100, 30)).astype(np.float32)
    b, c = rng.uniform(-4, 4, 30).astype(np.float32), rng.uniform(-4, 4, 100).astype(np.float32)
    y, r = _run(src, seed, x, b, c)
    y2, r2 = _run(written_out, seed, x, b, c)
    np.testing.assert_array_equal(y, y2, err_msg=src)
    np.testing.assert_array_equal(r, r2, err_msg=src)
    want_y, want_r = model(steps, x, b, c)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-3, err_msg=src)
    np.testing.assert_allclose(r, want_r, rtol=1e-4, atol=1e-3, err_msg=src)
