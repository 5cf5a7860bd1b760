"""`tessera.ops.torch`: the operators of `tessera.ops` as PyTorch custom operators (`torch.library`,
namespace `tessera`), usable in eager mode, under autograd and under `torch.compile`:

    import tessera.ops.torch as tops          # registers torch.ops.tessera.*
    y = tops.matmul(a, b, bias, "gelu")        # the same as torch.ops.tessera.matmul(a, b, bias, "gelu")
    y = tops.layer_norm(x, weight, bias, 1e-5)
    y.sum().backward()                         # the backward kernels of tessera/ops/kernels/*_bwd.tsr

Each operator runs the function of the same name in `tessera.ops` on the tensors (CPU tensors on
the CPU backend or copied to the GPU, CUDA tensors in place on the current stream). Its fake-tensor
implementation (`_fake_<name>`, registered with `register_fake`) gives the result's shape, type and
device from the arguments' metadata without running anything, and checks the arguments as the
operator does, raising the same `OpArgumentError` naming the argument; it reads no data, so it also
runs on FakeTensors with symbolic sizes (`torch.compile` with dynamic shapes). matmul, softmax,
layer_norm and rms_norm have backward passes (`tessera/ops/torch_autograd.py`); attention and
depthwise_conv2d do not (calling backward through them raises PyTorch's error for an operator
without an autograd formula).

Importing this module needs PyTorch 2.4 or newer (`torch.library.custom_op`); docs/ops.md ("PyTorch
operators") describes the operators, their gradients and their tolerances.
"""

from __future__ import annotations

import math

try:
    import torch
except ModuleNotFoundError as e:  # PyTorch is optional: say what to install (tests/ops/test_without_torch.py)
    if e.name != "torch":
        raise
    raise ModuleNotFoundError('tessera.ops.torch needs PyTorch 2.4 or newer: pip install "tessera-tsr[torch]"',
                              name="torch") from None

from tessera import ops
from tessera.ops import torch_autograd
from tessera.ops.arrays import OpArgumentError
from tessera.ops.attention import HEAD_DIMS
from tessera.ops.conv import MAX_FILTER
from tessera.ops.linalg import ACTIVATIONS

__all__ = ["attention", "depthwise_conv2d", "layer_norm", "layer_norm_backward", "matmul", "matmul_backward",
           "rms_norm", "rms_norm_backward", "softmax", "softmax_backward"]

if not hasattr(torch.library, "custom_op"):  # pragma: no cover - PyTorch before 2.4
    raise ImportError(f"tessera.ops.torch needs PyTorch 2.4 or newer (torch.library.custom_op); "
                      f"this is {torch.__version__}")

softmax_backward = torch_autograd.softmax_backward
layer_norm_backward = torch_autograd.layer_norm_backward
rms_norm_backward = torch_autograd.rms_norm_backward
matmul_backward = torch_autograd.matmul_backward


@torch.library.custom_op("tessera::matmul", mutates_args=(),
                         schema="(Tensor a, Tensor b, Tensor? bias=None, str? activation=None) -> Tensor")
def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> torch.Tensor:
    return ops.matmul(a, b, bias=bias, activation=activation)


@torch.library.custom_op("tessera::softmax", mutates_args=(), schema="(Tensor x, int axis=-1) -> Tensor")
def softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    return ops.softmax(x, axis=axis).contiguous()


@torch.library.custom_op("tessera::layer_norm", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, Tensor? bias, float eps=1e-05) -> Tensor")
def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = 1e-5) -> torch.Tensor:
    return ops.layer_norm(x, weight, bias, eps=eps)


@torch.library.custom_op("tessera::rms_norm", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, float eps=1e-06) -> Tensor")
def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    return ops.rms_norm(x, weight, eps=eps)


@torch.library.custom_op("tessera::attention", mutates_args=(),
                         schema="(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None) -> Tensor")
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    return ops.attention(q, k, v, causal=causal, scale=scale)


@torch.library.custom_op("tessera::depthwise_conv2d", mutates_args=(),
                         schema="(Tensor x, Tensor w, int stride=1, int padding=0) -> Tensor")
def depthwise_conv2d(x: torch.Tensor, w: torch.Tensor, stride: int = 1, padding: int = 0) -> torch.Tensor:
    return ops.depthwise_conv2d(x, w, stride=stride, padding=padding)


# ---- the fake-tensor implementations ----------------------------------------------------------

FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64",
          torch.int8: "i8", torch.int32: "i32", torch.uint8: "u8", torch.int64: "i64"}


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


def _fake_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
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


def _fake_softmax(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    op = "softmax"
    _dtype(op, "x", x, FLOATS)
    if not -max(1, x.dim()) <= axis < max(1, x.dim()):
        raise OpArgumentError(op, "axis", f"must be an int naming one of x's {x.dim()} axes, not {axis!r}")
    _rank(op, "x", x, 1, "at least one axis")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_normalized(op: str, x: torch.Tensor, eps: float, **vectors: torch.Tensor | None) -> torch.Tensor:
    _dtype(op, "x", x, FLOATS)
    _rank(op, "x", x, 1, "at least one axis (the normalized one)")
    _eps(op, eps)
    for name, t in vectors.items():
        _vector(op, name, t, x)
    _place(op, x, **vectors)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     eps: float = 1e-5) -> torch.Tensor:
    return _fake_normalized("layer_norm", x, eps, weight=weight, bias=bias)


def _fake_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    return _fake_normalized("rms_norm", x, eps, weight=weight)


def _fake_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
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


def _fake_depthwise_conv2d(x: torch.Tensor, w: torch.Tensor, stride: int = 1, padding: int = 0) -> torch.Tensor:
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


for _op, _fake in ((matmul, _fake_matmul), (softmax, _fake_softmax), (layer_norm, _fake_layer_norm),
                   (rms_norm, _fake_rms_norm), (attention, _fake_attention),
                   (depthwise_conv2d, _fake_depthwise_conv2d)):
    _op.register_fake(_fake)
torch_autograd.attach(matmul, softmax, layer_norm, rms_norm)
