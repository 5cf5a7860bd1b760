"""The backward passes of `tessera.ops`' matmul, softmax, layer_norm and rms_norm.

Each function takes the forward's inputs (and, for softmax, its output) with the gradient of the
output, as NumPy arrays or PyTorch tensors, and returns the input gradients of the same kind, each
in its own argument's element type. The work is done by the kernels in
`tessera/ops/kernels/*_bwd.tsr` (what each computes is written at its top); this module checks
the arguments, folds leading dimensions into rows, launches, and unfolds. The forward saves
nothing for them: the norms recompute their row statistics and matmul its pre-activation
`a @ b + bias`.

The kernels compute in f64 when an argument is f64 and in f32 otherwise (f16 and bf16 are
widened). Any other element type, and shapes that do not fit the operation, raise a
`TesseraError` naming the argument.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

import tessera
from tessera.base.errors import TesseraError
from tessera.ops import grad_arrays as ga

KERNELS = Path(__file__).resolve().parent / "kernels"

# The activations of matmul and each one's ACT code in kernels/matmul_bwd.tsr.
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}

_BLOCK = 16  # the 16x16 blocks of kernels/matmul_bwd.tsr
_COLUMNS = 128  # the tiles per group of the column sums


@functools.cache
def _module(name: str) -> Any:
    """The compiled module kernels/NAME.tsr (loaded once per process, backend "auto")."""
    return tessera.load(str(KERNELS / f"{name}.tsr"))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _float(op: str, name: str, x: Any, min_rank: int = 0) -> str:
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


def _like(op: str, name: str, x: Any, ref_name: str, ref: Any, shape: tuple[int, ...]) -> str:
    """The dtype of `x` after checking that it is a float array of `ref`'s kind and of shape `shape`."""
    dtype = _float(op, name, x)
    if ga.kind(x) != ga.kind(ref):
        raise TesseraError(f"{op}: argument '{name}' is a {ga.kind(x)} array; it must be a {ga.kind(ref)} "
                           f"array like '{ref_name}'")
    if tuple(x.shape) != shape:
        raise TesseraError(f"{op}: argument '{name}' has shape {tuple(x.shape)}; expected {shape}")
    return dtype


def softmax_backward(y: Any, dy: Any, axis: int = -1) -> Any:
    """dx of `y = softmax(x, axis)`, from the forward's output `y` and the gradient `dy`."""
    op = "tessera.ops.softmax_backward"
    dtype = _float(op, "y", y, 1)
    ctype = ga.compute_type(dtype, _like(op, "dy", dy, "y", y, tuple(y.shape)))
    rank = len(y.shape)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise TesseraError(f"{op}: argument 'axis' is {axis!r}; it must be an int in [{-rank}, {rank})")
    axis %= rank
    yw, dyw = (ga.compute(ga.moveaxis(a, axis, -1), ctype) for a in (y, dy))
    moved = tuple(yw.shape)
    rows, cols = ga.prod(moved[:-1]), moved[-1]
    dx = ga.empty_like_shape(yw, (rows, cols))
    if rows and cols:
        _module("softmax_bwd").softmax_bwd(yw.reshape(rows, cols), dyw.reshape(rows, cols), dx, grid=rows)
    return ga.cast(ga.moveaxis(dx.reshape(moved), -1, axis), dtype)


def _norm_args(op: str, x: Any, weight: Any, dy: Any, eps: Any) -> tuple[str, str, Any, Any, Any, float]:
    """(x's dtype, weight's dtype, x, weight, dy as the kernels read them, eps); a weight of None is
    ones."""
    dtype = _float(op, "x", x, 1)
    n = x.shape[-1]
    wtype = dtype if weight is None else _like(op, "weight", weight, "x", x, (n,))
    ctype = ga.compute_type(dtype, wtype, _like(op, "dy", dy, "x", x, tuple(x.shape)))
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise TesseraError(f"{op}: argument 'eps' is {eps!r}; it must be a number >= 0")
    rows = ga.prod(tuple(x.shape[:-1]))
    xw = ga.compute(x, ctype).reshape(rows, n)
    w = ga.compute(weight, ctype) if weight is not None else ga.zeros_like_shape(xw, (n,)) + 1
    return dtype, wtype, xw, w, ga.compute(dy, ctype).reshape(rows, n), float(eps)


def layer_norm_backward(x: Any, weight: Any, bias: Any, dy: Any, eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) of `layer_norm(x, weight, bias, eps)` over the last dimension; dweight
    (dbias) is None when weight (bias) is."""
    op = "tessera.ops.layer_norm_backward"
    dtype, wtype, xw, w, dyw, eps = _norm_args(op, x, weight, dy, eps)
    btype = None if bias is None else _like(op, "bias", bias, "x", x, (x.shape[-1],))
    rows, n = xw.shape
    dx = ga.empty_like_shape(xw, (rows, n))
    dw, db = ga.zeros_like_shape(xw, (n,)), ga.zeros_like_shape(xw, (n,))
    if rows and n:
        mod = _module("layer_norm_bwd")
        mean, rstd = ga.empty_like_shape(xw, (rows,)), ga.empty_like_shape(xw, (rows,))
        mod.layer_norm_bwd_dx(xw, w, dyw, dx, mean, rstd, eps, grid=rows)
        mod.layer_norm_bwd_dwb(xw, dyw, mean, rstd, dw, db, grid=_cdiv(n, _COLUMNS))
    return (ga.cast(dx.reshape(tuple(x.shape)), dtype), None if weight is None else ga.cast(dw, wtype),
            None if btype is None else ga.cast(db, btype))


def rms_norm_backward(x: Any, weight: Any, dy: Any, eps: float = 1e-6) -> tuple[Any, Any]:
    """(dx, dweight) of `rms_norm(x, weight, eps)` over the last dimension; dweight is None when
    weight is."""
    op = "tessera.ops.rms_norm_backward"
    dtype, wtype, xw, w, dyw, eps = _norm_args(op, x, weight, dy, eps)
    rows, n = xw.shape
    dx = ga.empty_like_shape(xw, (rows, n))
    dw = ga.zeros_like_shape(xw, (n,))
    if rows and n:
        mod = _module("rms_norm_bwd")
        rs = ga.empty_like_shape(xw, (rows,))
        mod.rms_norm_bwd_dx(xw, w, dyw, dx, rs, eps, grid=rows)
        mod.rms_norm_bwd_dw(xw, dyw, rs, dw, grid=_cdiv(n, _COLUMNS))
    return ga.cast(dx.reshape(tuple(x.shape)), dtype), None if weight is None else ga.cast(dw, wtype)


def matmul_shapes(op: str, a: Any, b: Any, bias: Any, activation: Any) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) of `matmul(a, b, bias, activation)` after checking its arguments:
    `a` is [..., M, K], `b` [..., K, N] with batch dimensions that broadcast with a's (NumPy's rules),
    `bias` None or [N], `activation` one of ACTIVATIONS."""
    _float(op, "a", a, 2)
    _like(op, "b", b, "a", a, tuple(b.shape))
    _float(op, "b", b, 2)
    (m, k), (kb, n) = tuple(a.shape[-2:]), tuple(b.shape[-2:])
    try:
        batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    except ValueError:
        batch = None
    if kb != k or batch is None:
        raise TesseraError(f"{op}: argument 'b' has shape {tuple(b.shape)}, which does not multiply 'a' of "
                           f"shape {tuple(a.shape)}: it needs {k} rows and batch dimensions that broadcast")
    if bias is not None:
        _like(op, "bias", bias, "a", a, (n,))
    if activation not in ACTIVATIONS:
        raise TesseraError(f"{op}: argument 'activation' is {activation!r}; it must be one of "
                           f"{', '.join(repr(x) for x in ACTIVATIONS)}")
    return batch, m, k, n


def _batched(x: Any, batch: tuple[int, ...], rows: int, cols: int) -> Any:
    """`x` ([..., rows, cols]) as [B, rows, cols]: its own batches when it has the full batch or one,
    else a copy broadcast to the full batch (its gradient is then summed back by `ga.sum_to`)."""
    own = tuple(x.shape[:-2])
    if own != batch and ga.prod(own) != 1:
        x = ga.expand(x, batch + (rows, cols))
    return x.reshape(ga.prod(tuple(x.shape[:-2])), rows, cols)


def matmul_backward(a: Any, b: Any, bias: Any, activation: str | None, dy: Any) -> tuple[Any, Any, Any]:
    """(da, db, dbias) of `y = activation(a @ b + bias)` (dbias is None when bias is None)."""
    op = "tessera.ops.matmul_backward"
    batch, m, k, n = matmul_shapes(op, a, b, bias, activation)
    types = [ga.dtype_name(op, "a", a), ga.dtype_name(op, "b", b), _like(op, "dy", dy, "a", a, batch + (m, n))]
    ctype = ga.compute_type(*types, *([] if bias is None else [ga.dtype_name(op, "bias", bias)]))
    z = ga.prod(batch)
    aw = _batched(ga.compute(a, ctype), batch, m, k)
    bw = _batched(ga.compute(b, ctype), batch, k, n)
    dp = ga.compute(dy, ctype).reshape(z, m, n)
    da, db = ga.zeros_like_shape(aw, tuple(aw.shape)), ga.zeros_like_shape(bw, tuple(bw.shape))
    dbias = ga.zeros_like_shape(aw, (n,))
    mod = _module("matmul_bwd")
    if z and m and n:
        if activation is not None:
            bias_w = ga.compute(bias, ctype) if bias is not None else ga.zeros_like_shape(aw, (n,))
            pre = ga.empty_like_shape(aw, (z, m, n))
            mod.matmul_dpre(aw, bw, bias_w, dp, pre, ACT=ACTIVATIONS[activation],
                            grid=(_cdiv(n, _BLOCK), _cdiv(m, _BLOCK), z))
            dp = pre
        if k:
            mod.matmul_nt(dp, bw, da, grid=(_cdiv(k, _BLOCK), _cdiv(m, _BLOCK), aw.shape[0]))
            mod.matmul_tn(aw, dp, db, grid=(_cdiv(n, _BLOCK), _cdiv(k, _BLOCK), bw.shape[0]))
        if bias is not None:
            mod.col_sum(dp.reshape(z * m, n), dbias, grid=_cdiv(n, _COLUMNS))
    da = ga.sum_to(da.reshape(_full(a, batch, m, k, aw)), tuple(a.shape))
    db = ga.sum_to(db.reshape(_full(b, batch, k, n, bw)), tuple(b.shape))
    return (ga.cast(da, types[0]), ga.cast(db, types[1]),
            None if bias is None else ga.cast(dbias, ga.dtype_name(op, "bias", bias)))


def _full(x: Any, batch: tuple[int, ...], rows: int, cols: int, w: Any) -> tuple[int, ...]:
    """The shape of the gradient `_batched` computed for `x`: x's own shape, or the full batch's."""
    return tuple(x.shape) if w.shape[0] == ga.prod(tuple(x.shape[:-2])) else batch + (rows, cols)
