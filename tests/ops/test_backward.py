"""The backward passes of tessera.ops (tessera/ops/backward.py, tessera/ops/kernels/*_bwd.tsr) on the
CPU backend against float64 NumPy models of the same math: every operation at ragged sizes in f64
and f32, batched leading dimensions, each activation of matmul, f16 inputs, empty shapes, the
argument errors, a seeded random differential over shapes and options, and NVRTC builds of every
backward kernel for sm_80 and sm_90 (no warnings, no spills).

Tolerances: f64 results agree to 1e-12 relative to the largest magnitude (the kernels sum in
another order than NumPy); f32 to 2e-5 (sums of up to a few hundred f32 products); f16 inputs are
computed in f32 and rounded to f16, so 1e-2 (f16's 2^-11 rounding, with margin).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tessera.base.errors import TesseraError
from tessera.ops import backward as bw

pytestmark = pytest.mark.usefixtures("shared_cache")

TOL = {"float64": 1e-12, "float32": 2e-5, "float16": 1e-2}
_erf = np.vectorize(math.erf)


# ---- float64 NumPy models ----------------------------------------------------------------------

def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_bwd(y, dy, axis=-1):
    return y * (dy - (dy * y).sum(axis=axis, keepdims=True))


def layer_norm_bwd(x, w, dy, eps):
    lead = tuple(range(x.ndim - 1))
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    xh, g = (x - mu) * rstd, dy * w
    dx = rstd * (g - g.mean(-1, keepdims=True) - xh * (g * xh).mean(-1, keepdims=True))
    return dx, (dy * xh).sum(lead), dy.sum(lead)


def rms_norm_bwd(x, w, dy, eps):
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    g = dy * w
    return r * (g - x * r * r * (g * x).mean(-1, keepdims=True)), (dy * x * r).sum(tuple(range(x.ndim - 1)))


def act_grad(p: np.ndarray, act: str | None) -> np.ndarray:
    if act is None:
        return np.ones_like(p)
    if act == "relu":
        return (p > 0).astype(p.dtype)
    if act == "gelu":
        return 0.5 * (1 + _erf(p / np.sqrt(2))) + p * np.exp(-p * p / 2) / np.sqrt(2 * np.pi)
    s = 1 / (1 + np.exp(-p))
    return s * (1 + p * (1 - s))


def sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient of an array of `shape` that broadcasting stretched to g's shape."""
    lead = g.ndim - len(shape)
    g = g.sum(tuple(range(lead)))
    return g.sum(tuple(i for i, d in enumerate(shape) if d == 1), keepdims=True)


def matmul_bwd(a, b, bias, act, dy):
    p = a @ b + (0 if bias is None else bias)
    dp = dy * act_grad(p, act)
    da = sum_to(dp @ np.swapaxes(b, -1, -2), a.shape)
    db = sum_to(np.swapaxes(a, -1, -2) @ dp, b.shape)
    dbias = None if bias is None else dp.reshape(-1, dp.shape[-1]).sum(0)
    return da, db, dbias


def close(got, want, dtype: str, cond: float = 1.0) -> None:
    """got agrees with want to TOL[dtype] of want's largest magnitude, times `cond`: the condition of
    the computation where it can exceed 1 (a norm's 1 / sqrt(var + eps) multiplies the rounding errors
    of the row's sums; it is at most 1 / sqrt(eps))."""
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=TOL[dtype] * scale * cond)


def rand(rng, shape, dtype="float64"):
    return rng.standard_normal(shape).astype(dtype)


# ---- each operation ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,axis", [((7, 33), -1), ((3, 5, 130), 1), ((1, 1), 0), ((2, 3, 4), 0)])
def test_softmax_backward(dtype, shape, axis) -> None:
    rng = np.random.default_rng(1)
    y = softmax(rand(rng, shape), axis).astype(dtype)
    dy = rand(rng, shape, dtype)
    close(bw.softmax_backward(y, dy, axis), softmax_bwd(y.astype(float), dy.astype(float), axis), dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(5, 37), (2, 3, 130), (1, 1), (300, 3)])
def test_norm_backwards(dtype, shape) -> None:
    rng = np.random.default_rng(2)
    x, w, dy = rand(rng, shape, dtype), rand(rng, shape[-1:], dtype), rand(rng, shape, dtype)
    x64, w64, dy64 = (t.astype(float) for t in (x, w, dy))
    for got, want in zip(bw.layer_norm_backward(x, w, w, dy, 1e-5), layer_norm_bwd(x64, w64, dy64, 1e-5)):
        close(got, want, dtype)
    for got, want in zip(bw.rms_norm_backward(x, w, dy, 1e-6), rms_norm_bwd(x64, w64, dy64, 1e-6)):
        close(got, want, dtype)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_matmul_backward_activations(act, dtype) -> None:
    rng = np.random.default_rng(3)
    a, b, bias, dy = rand(rng, (19, 23), dtype), rand(rng, (23, 29), dtype), rand(rng, 29, dtype), rand(rng, (19, 29), dtype)
    want = matmul_bwd(*(t.astype(float) for t in (a, b, bias)), act, dy.astype(float))
    for got, ref in zip(bw.matmul_backward(a, b, bias, act, dy), want):
        close(got, ref, dtype)


@pytest.mark.parametrize("a_batch,b_batch", [((2, 3), (2, 3)), ((2, 3), ()), ((), (4,)), ((1, 3), (2, 1)),
                                              ((3,), (2, 1)), ((1, 1), (1,))])
def test_matmul_backward_broadcast_batches(a_batch, b_batch) -> None:
    rng = np.random.default_rng(4)
    a, b = rand(rng, a_batch + (17, 33)), rand(rng, b_batch + (33, 18))
    dy = rand(rng, np.broadcast_shapes(a_batch, b_batch) + (17, 18))
    da, db, dbias = bw.matmul_backward(a, b, None, "silu", dy)
    want = matmul_bwd(a, b, None, "silu", dy)
    close(da, want[0], "float64")
    close(db, want[1], "float64")
    assert dbias is None


def test_relu_derivative_at_zero_is_zero() -> None:
    a, b = np.zeros((2, 3)), np.zeros((3, 4))
    da, db, dbias = bw.matmul_backward(a, b, np.zeros(4), "relu", np.ones((2, 4)))
    assert not da.any() and not db.any() and not dbias.any()


def test_f16_inputs_compute_in_f32_and_return_f16() -> None:
    rng = np.random.default_rng(5)
    x, w, dy = rand(rng, (6, 40), "float16"), rand(rng, 40, "float16"), rand(rng, (6, 40), "float16")
    for got, want in zip(bw.rms_norm_backward(x, w, dy), rms_norm_bwd(*(t.astype(float) for t in (x, w, dy)), 1e-6)):
        close(got, want, "float16")


def test_each_gradient_has_its_arguments_type() -> None:
    """f16 x with f32 weight and bias (as tessera.ops.layer_norm takes them): dx is f16, the others f32."""
    rng = np.random.default_rng(6)
    x, dy = rand(rng, (3, 20), "float16"), rand(rng, (3, 20), "float16")
    w, b = rand(rng, 20, "float32"), rand(rng, 20, "float32")
    want = layer_norm_bwd(x.astype(float), w.astype(float), dy.astype(float), 1e-5)
    for got, ref, dtype in zip(bw.layer_norm_backward(x, w, b, dy), want, ("float16", "float32", "float32")):
        close(got, ref, dtype)


def test_no_weight_or_bias_means_ones_and_zeros() -> None:
    rng = np.random.default_rng(7)
    x, dy = rand(rng, (4, 9)), rand(rng, (4, 9))
    dx, dw, db = bw.layer_norm_backward(x, None, None, dy)
    close(dx, layer_norm_bwd(x, np.ones(9), dy, 1e-5)[0], "float64")
    assert dw is None and db is None
    dx, dw = bw.rms_norm_backward(x, None, dy)
    close(dx, rms_norm_bwd(x, np.ones(9), dy, 1e-6)[0], "float64")
    assert dw is None


def test_empty_shapes_give_zero_gradients() -> None:
    dx, dw, db = bw.layer_norm_backward(np.zeros((0, 5)), np.ones(5), np.ones(5), np.zeros((0, 5)))
    assert dx.shape == (0, 5) and dw.tolist() == [0.0] * 5 and db.tolist() == [0.0] * 5
    assert bw.softmax_backward(np.zeros((3, 0)), np.zeros((3, 0))).shape == (3, 0)
    da, db2, dbias = bw.matmul_backward(np.ones((2, 3)), np.ones((3, 0)), np.ones(0), "relu", np.ones((2, 0)))
    assert da.tolist() == [[0.0] * 3] * 2 and db2.shape == (3, 0) and dbias.shape == (0,)
    da, db2, _ = bw.matmul_backward(np.ones((2, 0)), np.ones((0, 4)), None, None, np.ones((2, 4)))
    assert da.shape == (2, 0) and db2.shape == (0, 4)


# ---- argument errors ---------------------------------------------------------------------------

@pytest.mark.parametrize("call,names", [
    (lambda: bw.softmax_backward(np.zeros((2, 3), np.int32), np.zeros((2, 3), np.int32)), ("'y'", "i32")),
    (lambda: bw.softmax_backward(np.zeros((2, 3)), np.zeros((2, 4))), ("'dy'", "[2, 4]")),
    (lambda: bw.softmax_backward(np.zeros((2, 3)), np.zeros((2, 3), bool)), ("'dy'", "bool")),
    (lambda: bw.softmax_backward(np.zeros((2, 3)), np.zeros((2, 3)), axis=2), ("'axis'", "2")),
    (lambda: bw.softmax_backward([[1.0]], [[1.0]]), ("'y'", "list")),
    (lambda: bw.layer_norm_backward(np.zeros((2, 3)), np.zeros(4), None, np.zeros((2, 3))), ("'weight'", "[4]")),
    (lambda: bw.layer_norm_backward(np.zeros((2, 3)), None, np.zeros(2), np.zeros((2, 3))), ("'bias'", "[2]")),
    (lambda: bw.layer_norm_backward(np.zeros((2, 3)), np.zeros(3), None, np.zeros((2, 3)), eps=-1.0), ("'eps'",)),
    (lambda: bw.rms_norm_backward(np.zeros(()), np.zeros(()), np.zeros(())), ("'x'", "at least one axis")),
    (lambda: bw.matmul_backward(np.zeros((2, 3)), np.zeros((4, 5)), None, None, np.zeros((2, 5))), ("'b'", "4 rows")),
    (lambda: bw.matmul_backward(np.zeros(3), np.zeros((3, 5)), None, None, np.zeros(5)), ("'a'", "at least two axes")),
    (lambda: bw.matmul_backward(np.zeros((2, 2, 3)), np.zeros((3, 3, 5)), None, None, np.zeros((2, 2, 5))), ("'b'", "broadcast")),
    (lambda: bw.matmul_backward(np.zeros((2, 3)), np.zeros((3, 5), np.int8), None, None, np.zeros((2, 5))), ("'b'", "i8")),
    (lambda: bw.matmul_backward(np.zeros((2, 3)), np.zeros((3, 5)), np.zeros(4), None, np.zeros((2, 5))), ("'bias'",)),
    (lambda: bw.matmul_backward(np.zeros((2, 3)), np.zeros((3, 5)), None, "tanh", np.zeros((2, 5))), ("'activation'", "tanh")),
    (lambda: bw.matmul_backward(np.zeros((2, 3)), np.zeros((3, 5)), None, None, np.zeros((5, 2))), ("'dy'",)),
])
def test_unsupported_arguments_raise_a_tessera_error_naming_them(call, names) -> None:
    with pytest.raises(TesseraError) as e:
        call()
    for name in names:
        assert name in str(e.value)


# ---- a seeded random differential --------------------------------------------------------------

def run_case(rng: np.random.Generator) -> None:
    """One random operation, shape and options, against the NumPy model."""
    cond = 1.0
    dtype = str(rng.choice(["float64", "float32"]))
    lead = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    n = int(rng.choice([1, 2, 15, 16, 17, 31, 33, 127, 129, 200]))
    op = str(rng.choice(["softmax", "layer_norm", "rms_norm", "matmul"]))
    if op == "matmul":
        m, k = (int(rng.choice([1, 5, 16, 17, 40])) for _ in range(2))
        act = [None, "relu", "gelu", "silu"][int(rng.integers(4))]
        a = rand(rng, tuple(d if rng.random() < 0.7 else 1 for d in lead) + (m, k), dtype)
        b = rand(rng, (tuple(d if rng.random() < 0.7 else 1 for d in lead) if rng.random() < 0.5 else ()) + (k, n), dtype)
        bias = rand(rng, n, dtype) if rng.random() < 0.5 else None
        dy = rand(rng, np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n), dtype)
        got = bw.matmul_backward(a, b, bias, act, dy)
        want = matmul_bwd(a.astype(float), b.astype(float), None if bias is None else bias.astype(float), act,
                          dy.astype(float))
    else:
        x, dy = rand(rng, lead + (n,), dtype), rand(rng, lead + (n,), dtype)
        x64, dy64 = x.astype(float), dy.astype(float)
        if op == "softmax":
            axis = int(rng.integers(-x.ndim, x.ndim))
            y = softmax(x64, axis).astype(dtype)
            got, want = (bw.softmax_backward(y, dy, axis),), (softmax_bwd(y.astype(float), dy64, axis),)
        else:
            w = rand(rng, (n,), dtype)
            eps = float(rng.choice([1e-6, 1e-5, 0.1]))
            spread = x64.var(-1) if op == "layer_norm" else (x64 * x64).mean(-1)
            cond = max(1.0, float((1.0 / np.sqrt(spread + eps)).max())) if x.size else 1.0
            if op == "layer_norm":
                got, want = bw.layer_norm_backward(x, w, w, dy, eps), layer_norm_bwd(x64, w.astype(float), dy64, eps)
            else:
                got, want = bw.rms_norm_backward(x, w, dy, eps), rms_norm_bwd(x64, w.astype(float), dy64, eps)
    for g, w_ in zip(got, want):
        if w_ is None:
            assert g is None
        else:
            close(g, w_, dtype, cond)


def test_random_differential(seed: int = 2027, count: int = 40) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        run_case(rng)


# ---- NVRTC ---------------------------------------------------------------------------------------

BWD_VARIANTS = [("softmax_bwd.tsr", "softmax_bwd", {}), ("layer_norm_bwd.tsr", "layer_norm_bwd_dx", {}),
                ("layer_norm_bwd.tsr", "layer_norm_bwd_dwb", {}), ("rms_norm_bwd.tsr", "rms_norm_bwd_dx", {}),
                ("rms_norm_bwd.tsr", "rms_norm_bwd_dw", {}), ("matmul_bwd.tsr", "matmul_dpre", {"ACT": 2}),
                ("matmul_bwd.tsr", "matmul_dpre", {"ACT": 3}), ("matmul_bwd.tsr", "matmul_nt", {}),
                ("matmul_bwd.tsr", "matmul_tn", {}), ("matmul_bwd.tsr", "col_sum", {})]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("file,kernel,consts", BWD_VARIANTS, ids=[f"{k}-{c}" for _, k, c in BWD_VARIANTS])
def test_backward_kernels_compile_with_nvrtc_without_warnings_or_spills(file, kernel, consts, arch) -> None:
    from tessera.ops import launcher

    for t in ("f32", "f64"):
        figures = launcher.figures(file, kernel, {**consts, "T": t}, arch)
        assert figures["warnings"] == () and figures["spills"] == 0, (t, figures)
