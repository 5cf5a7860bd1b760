"""The backward passes of `tessera.ops`' matmul, softmax, layer_norm and rms_norm.

Each function takes the forward's inputs (and, for softmax, its output) with the gradient of the
output, as NumPy arrays or PyTorch tensors, and returns the input gradients of the same kind. The
work is done by the kernels in `tessera/ops/kernels/*_bwd.tsr` (what each computes is written at
its top); this module checks the arguments, folds leading dimensions into rows, launches, and
unfolds. The forward saves nothing for them: the norms recompute their row statistics and matmul
recomputes its pre-activation `a @ b + bias`.

The kernels compute in f32 or f64. Gradients of f16 and bf16 arrays are computed in f32 and
rounded back to the input's type. Any other dtype, and shapes that do not fit the operation,
raise a `TesseraError` naming the argument.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import tessera
from tessera.base.errors import TesseraError
from tessera.ops import grad_arrays as ga

KERNELS = Path(__file__).resolve().parent / "kernels"

# The activations of matmul and each one's ACT code in kernels/matmul_bwd.tsr.
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

_BLOCK = 16  # the 16x16 blocks of kernels/matmul_bwd.tsr
_COLUMNS = 128  # the tiles per group of the column sums


@functools.cache
def _module(name: str) -> Any:
    """The compiled module kernels/NAME.tsr (loaded once per process, backend "auto")."""
    return tessera.load(str(KERNELS / f"{name}.tsr"))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_rows(op: str, name: str, x: Any, min_rank: int = 1) -> str:
    """The dtype name of `x` after checking that it is an array of at least `min_rank` dimensions with
    a floating-point type the backward passes support."""
    dtype = ga.dtype_name(op, name, x)
    if dtype not in ga.FLOATS:
        raise TesseraError(f"{op}: argument '{name}' has dtype {dtype}; the backward pass supports "
                           f"{', '.join(ga.FLOATS)}")
    if len(x.shape) < min_rank:
        raise TesseraError(f"{op}: argument '{name}' has shape {tuple(x.shape)}; it needs at least "
                           f"{min_rank} dimension{'s' if min_rank > 1 else ''}")
    return dtype


def _same(op: str, name: str, x: Any, ref_name: str, ref: Any, shape: tuple[int, ...] | None = None) -> None:
    """Checks that `x` is an array of `ref`'s kind and dtype and of shape `shape` (default ref's)."""
    want = tuple(ref.shape) if shape is None else shape
    dtype = ga.dtype_name(op, name, x)
    if ga.kind(x) != ga.kind(ref) or dtype != ga.dtype_name(op, ref_name, ref):
        raise TesseraError(f"{op}: argument '{name}' is a {ga.kind(x)} {dtype} array; it must be a "
                           f"{ga.kind(ref)} {ga.dtype_name(op, ref_name, ref)} array like '{ref_name}'")
    if tuple(x.shape) != want:
        raise TesseraError(f"{op}: argument '{name}' has shape {tuple(x.shape)}; expected {want}")


def softmax_backward(y: Any, dy: Any, axis: int = -1) -> Any:
    """dx of `y = softmax(x, axis)`, from the forward's output `y` and the gradient `dy`."""
    op = "tessera.ops.softmax_backward"
    dtype = _check_rows(op, "y", y)
    _same(op, "dy", dy, "y", y)
    rank = len(y.shape)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise TesseraError(f"{op}: argument 'axis' is {axis!r}; it must be an int in [{-rank}, {rank})")
    axis %= rank
    yw, dyw = (ga.compute(ga.moveaxis(a, axis, -1)) for a in (y, dy))
    moved = tuple(yw.shape)
    rows, cols = ga.prod(moved[:-1]), moved[-1]
    dx = ga.empty_like_shape(yw, (rows, cols))
    if dx.shape[0] and cols:
        _module("softmax_bwd").softmax_bwd(yw.reshape(rows, cols), dyw.reshape(rows, cols), dx, grid=rows)
    return ga.cast(ga.moveaxis(dx.reshape(moved), -1, axis), dtype)


def _norm_args(op: str, x: Any, weight: Any, dy: Any, eps: Any) -> tuple[str, Any, Any, Any, float]:
    dtype = _check_rows(op, "x", x)
    _same(op, "weight", weight, "x", x, (x.shape[-1],))
    _same(op, "dy", dy, "x", x)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise TesseraError(f"{op}: argument 'eps' is {eps!r}; it must be a number >= 0")
    n = x.shape[-1]
    rows = ga.prod(tuple(x.shape[:-1]))
    xw = ga.compute(x).reshape(rows, n)
    return dtype, xw, ga.compute(weight), ga.compute(dy).reshape(rows, n), float(eps)


def layer_norm_backward(x: Any, weight: Any, dy: Any, eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) of `layer_norm(x, weight, bias, eps)` over the last dimension."""
    op = "tessera.ops.layer_norm_backward"
    dtype, xw, w, dyw, eps = _norm_args(op, x, weight, dy, eps)
    rows, n = xw.shape
    dx = ga.empty_like_shape(xw, (rows, n))
    dw, db = ga.zeros_like_shape(xw, (n,)), ga.zeros_like_shape(xw, (n,))
    if rows and n:
        mod = _module("layer_norm_bwd")
        mean, rstd = ga.empty_like_shape(xw, (rows,)), ga.empty_like_shape(xw, (rows,))
        mod.layer_norm_bwd_dx(xw, w, dyw, dx, mean, rstd, eps, grid=rows)
        mod.layer_norm_bwd_dwb(xw, dyw, mean, rstd, dw, db, grid=_cdiv(n, _COLUMNS))
    return ga.cast(dx.reshape(tuple(x.shape)), dtype), ga.cast(dw, dtype), ga.cast(db, dtype)


def rms_norm_backward(x: Any, weight: Any, dy: Any, eps: float = 1e-6) -> tuple[Any, Any]:
    """(dx, dweight) of `rms_norm(x, weight, eps)` over the last dimension."""
    op = "tessera.ops.rms_norm_backward"
    dtype, xw, w, dyw, eps = _norm_args(op, x, weight, dy, eps)
    rows, n = xw.shape
    dx = ga.empty_like_shape(xw, (rows, n))
    dw = ga.zeros_like_shape(xw, (n,))
    if rows and n:
        mod = _module("rms_norm_bwd")
        rs = ga.empty_like_shape(xw, (rows,))
        mod.rms_norm_bwd_dx(xw, w, dyw, dx, rs, eps, grid=rows)
        mod.rms_norm_bwd_dw(xw, dyw, rs, dw, grid=_cdiv(n, _COLUMNS))
    return ga.cast(dx.reshape(tuple(x.shape)), dtype), ga.cast(dw, dtype)


def matmul_shapes(op: str, a: Any, b: Any, bias: Any, activation: Any) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) of `matmul(a, b, bias, activation)` after checking its arguments:
    `a` is [..., M, K]; `b` is [K, N] or has a's leading dimensions, [..., K, N]; `bias` is None or
    [N]; `activation` one of ACTIVATIONS."""
    _check_rows(op, "a", a, 2)
    _check_rows(op, "b", b, 2)
    _same(op, "b", b, "a", a, tuple(b.shape))
    batch, (m, k) = tuple(a.shape[:-2]), tuple(a.shape[-2:])
    kb, n = tuple(b.shape[-2:])
    if kb != k or (len(b.shape) > 2 and tuple(b.shape[:-2]) != batch):
        raise TesseraError(f"{op}: argument 'b' has shape {tuple(b.shape)}; with 'a' of shape "
                           f"{tuple(a.shape)} it must be ({k}, N) or {batch + (k,)} + (N,)")
    if bias is not None:
        _same(op, "bias", bias, "a", a, (n,))
    if activation not in ACTIVATIONS:
        raise TesseraError(f"{op}: argument 'activation' is {activation!r}; it must be one of "
                           f"{', '.join(repr(x) for x in ACTIVATIONS)}")
    return batch, m, k, n


def matmul_backward(a: Any, b: Any, bias: Any, activation: str | None, dy: Any) -> tuple[Any, Any, Any]:
    """(da, db, dbias) of `y = activation(a @ b + bias)` (dbias is None when bias is None)."""
    op = "tessera.ops.matmul_backward"
    batch, m, k, n = matmul_shapes(op, a, b, bias, activation)
    _same(op, "dy", dy, "a", a, batch + (m, n))
    dtype = ga.dtype_name(op, "a", a)
    ba, shared_b = ga.prod(batch), len(b.shape) == 2
    aw = ga.compute(a).reshape(ba, m, k)
    bw = ga.compute(b).reshape(1 if shared_b else ba, k, n)
    dp = ga.compute(dy).reshape(ba, m, n)
    da = ga.zeros_like_shape(aw, (ba, m, k))
    dbw = ga.zeros_like_shape(aw, (1 if shared_b else ba, k, n))
    dbias = ga.zeros_like_shape(aw, (n,))
    mod = _module("matmul_bwd")
    if ba and m and n:
        if activation is not None:
            bias_w = ga.compute(bias) if bias is not None else ga.zeros_like_shape(aw, (n,))
            pre = ga.empty_like_shape(aw, (ba, m, n))
            mod.matmul_dpre(aw, bw, bias_w, dp, pre, ACT=ACTIVATIONS[activation],
                            grid=(_cdiv(n, _BLOCK), _cdiv(m, _BLOCK), ba))
            dp = pre
        if k:
            mod.matmul_nt(dp, bw, da, grid=(_cdiv(k, _BLOCK), _cdiv(m, _BLOCK), ba))
            if shared_b:  # b's gradient sums over every batch: fold the batches into rows
                mod.matmul_tn(aw.reshape(1, ba * m, k), dp.reshape(1, ba * m, n), dbw,
                              grid=(_cdiv(n, _BLOCK), _cdiv(k, _BLOCK), 1))
            else:
                mod.matmul_tn(aw, dp, dbw, grid=(_cdiv(n, _BLOCK), _cdiv(k, _BLOCK), ba))
        if bias is not None:
            mod.col_sum(dp.reshape(ba * m, n), dbias, grid=_cdiv(n, _COLUMNS))
    return (ga.cast(da.reshape(tuple(a.shape)), dtype), ga.cast(dbw.reshape(tuple(b.shape)), dtype),
            None if bias is None else ga.cast(dbias, dtype))
