"""The fake-tensor (meta) implementations of `tessera.ops.torch`'s forward operators: each checks
its arguments' element types and shapes as the operator of `tessera.ops` does, raising the same
`OpArgumentError` naming the argument, and returns an empty tensor of the result's shape, type and
device. They read metadata only, so they also run on FakeTensors with symbolic sizes
(`torch.compile` with dynamic shapes).
"""

from __future__ import annotations

import math

import torch

from tessera.ops.arrays import OpArgumentError

FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
          torch.int8: "i8", torch.int32: "i32", torch.uint8: "u8", torch.int64: "i64"}
ACTIVATIONS = (None, "relu", "gelu", "silu")
HEAD_DIMS = (64, 128)
MAX_FILTER = 15  # tessera.ops.conv's limit on KH and KW


def _type(t: torch.Tensor) -> str:
    return _NAMES.get(t.dtype, str(t.dtype).removeprefix("torch."))


def _dtype(op: str, name: str, t: torch.Tensor, allowed: tuple) -> None:
    if t.dtype not in allowed:
        raise OpArgumentError(op, name, f"element type {_type(t)} is not supported "
                                        f"(supported: {', '.join(_NAMES[d] for d in allowed)})")


def _rank(op: str, name: str, t: torch.Tensor, least: int, what: str) -> None:
    if t.dim() < least:
        raise OpArgumentError(op, name, f"has shape {list(t.shape)}; it needs {what}")


def _place(op: str, first: torch.Tensor, **others: torch.Tensor | None) -> None:
    for name, t in others.items():
        if t is not None and t.device != first.device:
            raise OpArgumentError(op, name, f"is on {t.device} but the first array argument is on {first.device}; "
                                            "pass every array from the same place")


def _vector(op: str, name: str, t: torch.Tensor | None, x: torch.Tensor) -> None:
    """A weight or bias of a norm: x's last axis as its shape, a float type."""
    if t is None:
        return
    _dtype(op, name, t, FLOATS)
    if tuple(t.shape) != (x.shape[-1],):
        raise OpArgumentError(op, name, f"has shape {list(t.shape)}; it needs [{x.shape[-1]}], x's last axis")


def _eps(op: str, eps: float) -> None:
    if not math.isfinite(eps) or eps < 0:
        raise OpArgumentError(op, "eps", f"must be a finite number >= 0, not {eps!r}")


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> torch.Tensor:
    op = "matmul"
    _dtype(op, "a", a, FLOATS + (torch.int8,))
    if b.dtype != a.dtype:
        raise OpArgumentError(op, "b", f"element type {_type(b)} differs from a's {_type(a)}; pass both of one type")
    _place(op, a, b=b, bias=bias)
    if activation not in ACTIVATIONS:
        raise OpArgumentError(op, "activation", f"must be None, 'relu', 'gelu' or 'silu', not {activation!r}")
    if a.dtype == torch.int8 and activation not in (None, "relu"):
        raise OpArgumentError(op, "activation", f"{activation!r} is not defined on i8 inputs (i32 results): "
                                                "use None or 'relu'")
    for name, t in (("a", a), ("b", b)):
        _rank(op, name, t, 2, "at least two axes ([..., rows, cols])")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise OpArgumentError(op, "b", f"has {k2} rows but a has {k} columns (a: {list(a.shape)}, b: {list(b.shape)})")
    try:
        batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except RuntimeError:
        raise OpArgumentError(op, "b", f"batch axes {list(b.shape[:-2])} do not broadcast with a's "
                                       f"{list(a.shape[:-2])}") from None
    if bias is not None:
        _dtype(op, "bias", bias, (torch.int32, torch.int8) if a.dtype == torch.int8 else FLOATS)
        if tuple(bias.shape) != (n,):
            raise OpArgumentError(op, "bias", f"has shape {list(bias.shape)}; it needs [{n}] (b's columns)")
    return a.new_empty(batch + (m, n), dtype=torch.int32 if a.dtype == torch.int8 else a.dtype)


def softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    op = "softmax"
    _dtype(op, "x", x, FLOATS)
    if not -max(1, x.dim()) <= axis < max(1, x.dim()):
        raise OpArgumentError(op, "axis", f"must be an int naming one of x's {x.dim()} axes, not {axis!r}")
    _rank(op, "x", x, 1, "at least one axis")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _normalized(op: str, x: torch.Tensor, eps: float, **vectors: torch.Tensor | None) -> torch.Tensor:
    _dtype(op, "x", x, FLOATS)
    _rank(op, "x", x, 1, "at least one axis (the normalized one)")
    _eps(op, eps)
    for name, t in vectors.items():
        _vector(op, name, t, x)
    _place(op, x, **vectors)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = 1e-5) -> torch.Tensor:
    return _normalized("layer_norm", x, eps, weight=weight, bias=bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    return _normalized("rms_norm", x, eps, weight=weight)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    op = "attention"
    _dtype(op, "q", q, (torch.float16, torch.bfloat16))
    if q.dim() != 4:
        raise OpArgumentError(op, "q", f"has shape {list(q.shape)}; it needs [B, H, N, D]")
    if q.shape[3] not in HEAD_DIMS:
        raise OpArgumentError(op, "q", f"has head dimension D = {q.shape[3]}; supported: 64, 128")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise OpArgumentError(op, name, f"element type {_type(t)} differs from q's {_type(q)}")
        if t.shape != q.shape:
            raise OpArgumentError(op, name, f"has shape {list(t.shape)}; it needs q's {list(q.shape)}")
    _place(op, q, k=k, v=v)
    if scale is not None and not math.isfinite(scale):
        raise OpArgumentError(op, "scale", f"must be a finite number or None, not {scale!r}")
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def depthwise_conv2d(x: torch.Tensor, w: torch.Tensor, stride: int = 1, padding: int = 0) -> torch.Tensor:
    op = "depthwise_conv2d"
    _dtype(op, "x", x, FLOATS)
    _dtype(op, "w", w, FLOATS)
    _place(op, x, w=w)
    if x.dim() != 4:
        raise OpArgumentError(op, "x", f"has shape {list(x.shape)}; it needs [N, C, H, W]")
    n, c, h, wd = x.shape
    if w.dim() != 4 or tuple(w.shape[:2]) != (c, 1):
        raise OpArgumentError(op, "w", f"has shape {list(w.shape)}; it needs [{c}, 1, KH, KW] (C = x's channels)")
    kh, kw = w.shape[2:]
    if not (1 <= kh <= MAX_FILTER and 1 <= kw <= MAX_FILTER):
        raise OpArgumentError(op, "w", f"has a {kh} x {kw} filter; each side must be from 1 to {MAX_FILTER}")
    for name, value, low, high in (("stride", stride, 1, 16), ("padding", padding, 0, 64)):
        if not low <= value <= high:
            raise OpArgumentError(op, name, f"must be an int from {low} to {high}, not {value!r}")
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    if oh < 1 or ow < 1:
        raise OpArgumentError(op, "x", f"its {h} x {wd} planes padded by {padding} are smaller than the "
                                       f"{kh} x {kw} filter")
    return x.new_empty((n, c, oh, ow))
