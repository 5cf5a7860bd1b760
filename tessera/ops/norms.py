"""`softmax`, `layer_norm` and `rms_norm` of `tessera.ops`: row kernels over the last axis
(`tessera/ops/kernels/rows.tsr`), every leading axis flattened into rows."""

from __future__ import annotations

import math
from typing import Any

from tessera.ops import launcher
from tessera.ops.arrays import OpArgumentError, Operand, same_place

FLOATS = ("f32", "f16", "bf16")


def check_dtype(op: str, name: str, o: Operand, allowed: tuple[str, ...]) -> None:
    if o.dtype not in allowed:
        raise OpArgumentError(op, name, f"element type {o.dtype} is not supported (supported: {', '.join(allowed)})")


def check_eps(op: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise OpArgumentError(op, "eps", f"must be a finite number >= 0, not {eps!r}"[:200])
    return float(eps)


def _rows(x: Operand) -> tuple[int, int]:
    cols = x.shape[-1]
    return math.prod(x.shape[:-1]), cols


def softmax(x: Any, axis: int = -1) -> Any:
    """softmax(x, axis) = exp(x - max) / sum(exp(x - max)) along `axis`; f32, f16 or bf16, computed in
    f32; any shape; the result has x's kind, shape and element type."""
    op = "softmax"
    xo = Operand.of(op, "x", x)
    check_dtype(op, "x", xo, FLOATS)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -max(1, len(xo.shape)) <= axis < max(1, len(xo.shape)):
        raise OpArgumentError(op, "axis", f"must be an int naming one of x's {len(xo.shape)} axes, not {axis!r}"[:200])
    if not xo.shape:
        raise OpArgumentError(op, "x", "must have at least one axis")
    axis %= len(xo.shape)
    last = axis == len(xo.shape) - 1
    src = xo if last else Operand.of(op, "x", xo.moved(axis, -1))
    rows, cols = _rows(src)
    out = src.empty(src.shape, src.dtype)
    if rows and cols:
        k = launcher.kernel("rows.tsr", "softmax", src.on_device)
        launcher.launch(k, (src.reshaped((rows, cols)), out.reshape(rows, cols)), {}, rows, types={"T": src.dtype})
    if last:
        return out
    return Operand.of(op, "x", out).moved(-1, axis)


def _vector(op: str, name: str, value: Any, x: Operand) -> Operand:
    """A weight or bias: one value per element of x's last axis, in the same place as x."""
    o = Operand.of(op, name, value)
    check_dtype(op, name, o, FLOATS)
    if o.shape != x.shape[-1:]:
        raise OpArgumentError(op, name, f"has shape {list(o.shape)}; it needs [{x.shape[-1]}], x's last axis")
    same_place(op, x, {name: o})
    return o


def _normalized_input(op: str, x: Any) -> Operand:
    xo = Operand.of(op, "x", x)
    check_dtype(op, "x", xo, FLOATS)
    if not xo.shape:
        raise OpArgumentError(op, "x", "must have at least one axis (the normalized one)")
    return xo


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias (var biased, as
    PyTorch's). `weight` and `bias` have x's last axis as their shape (f32, f16 or bf16; None means
    ones and zeros); statistics in f32; the result has x's kind, shape and element type."""
    return layer_norm_forward(x, weight, bias, eps)[0]


def layer_norm_forward(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """`layer_norm` and its row statistics for a backward pass: (y, mean, rstd), mean and rstd f32
    arrays of x's kind with one value per row (x's shape without its last axis)."""
    op = "layer_norm"
    xo = _normalized_input(op, x)
    e = check_eps(op, eps)
    rows, cols = _rows(xo)
    w = _vector(op, "weight", weight, xo).as_f32() if weight is not None else xo.zeros((cols,), "f32") + 1
    b = _vector(op, "bias", bias, xo).as_f32() if bias is not None else xo.zeros((cols,), "f32")
    out = xo.empty(xo.shape, xo.dtype)
    mean, rstd = xo.empty((rows,), "f32"), xo.empty((rows,), "f32")
    if rows and cols:
        k = launcher.kernel("rows.tsr", "layer_norm", xo.on_device)
        launcher.launch(k, (xo.reshaped((rows, cols)), w, b, out.reshape(rows, cols), mean, rstd, e), {}, rows,
                        types={"T": xo.dtype})
    return out, mean.reshape(xo.shape[:-1]), rstd.reshape(xo.shape[:-1])


def rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    """RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight. `weight` has x's last axis as
    its shape (f32, f16 or bf16; None means ones); the result has x's kind, shape and element type."""
    return rms_norm_forward(x, weight, eps)[0]


def rms_norm_forward(x: Any, weight: Any, eps: float = 1e-6) -> tuple[Any, Any]:
    """`rms_norm` and its row statistic for a backward pass: (y, rstd), rstd an f32 array of x's
    kind with one value per row (x's shape without its last axis)."""
    op = "rms_norm"
    xo = _normalized_input(op, x)
    e = check_eps(op, eps)
    rows, cols = _rows(xo)
    w = _vector(op, "weight", weight, xo).as_f32() if weight is not None else xo.zeros((cols,), "f32") + 1
    out = xo.empty(xo.shape, xo.dtype)
    rstd = xo.empty((rows,), "f32")
    if rows and cols:
        k = launcher.kernel("rows.tsr", "rms_norm", xo.on_device)
        launcher.launch(k, (xo.reshaped((rows, cols)), w, out.reshape(rows, cols), rstd, e), {}, rows,
                        types={"T": xo.dtype})
    return out, rstd.reshape(xo.shape[:-1])
