"""The backward passes of `tessera.ops.torch`: the custom operators `tessera::*_backward` (over
`tessera.ops.backward`, whose kernels are `tessera/ops/kernels/*_bwd.tsr`), their fake-tensor
implementations, and `attach`, which registers them as the autograd formulas of the forward
operators matmul, softmax, layer_norm and rms_norm.

The forward operators save their inputs (softmax its output) and nothing else: the backward
kernels recompute the norms' row statistics and matmul's pre-activation. The backward operators
are custom operators themselves, so that `torch.compile` traces a backward graph through them
(AOTAutograd) as it does the forward. They take f16, bf16, f32 and f64 tensors (f16 and bf16
computed in f32) and return each gradient in its input's type; a gradient that has no input
(the weight of a layer_norm called without one) comes back as zeros and is dropped by `attach`'s
formulas.
"""

from __future__ import annotations

from typing import Any

import torch

from tessera.ops import backward


def _empty(like: torch.Tensor, shape: Any = None) -> torch.Tensor:
    """A new tensor of `like`'s type and device, of `shape` (default like's)."""
    return like.new_empty(tuple(like.shape) if shape is None else shape)


@torch.library.custom_op("tessera::softmax_backward", mutates_args=(),
                         schema="(Tensor y, Tensor dy, int axis) -> Tensor")
def softmax_backward(y: torch.Tensor, dy: torch.Tensor, axis: int) -> torch.Tensor:
    return backward.softmax_backward(y, dy, axis).contiguous()


@softmax_backward.register_fake
def _(y: torch.Tensor, dy: torch.Tensor, axis: int) -> torch.Tensor:
    return _empty(y)


@torch.library.custom_op("tessera::layer_norm_backward", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, Tensor? bias, Tensor dy, float eps) -> (Tensor, Tensor, Tensor)")
def layer_norm_backward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, dy: torch.Tensor,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dx, dw, db = backward.layer_norm_backward(x, weight, bias, dy, eps)
    n = x.shape[-1]
    return (dx.contiguous(), x.new_zeros(n) if dw is None else dw, x.new_zeros(n) if db is None else db)


@layer_norm_backward.register_fake
def _(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, dy: torch.Tensor,
      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = x.shape[-1]
    return _empty(x), _empty(weight if weight is not None else x, (n,)), _empty(bias if bias is not None else x, (n,))


@torch.library.custom_op("tessera::rms_norm_backward", mutates_args=(),
                         schema="(Tensor x, Tensor? weight, Tensor dy, float eps) -> (Tensor, Tensor)")
def rms_norm_backward(x: torch.Tensor, weight: torch.Tensor | None, dy: torch.Tensor,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = backward.rms_norm_backward(x, weight, dy, eps)
    return dx.contiguous(), x.new_zeros(x.shape[-1]) if dw is None else dw


@rms_norm_backward.register_fake
def _(x: torch.Tensor, weight: torch.Tensor | None, dy: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _empty(x), _empty(weight if weight is not None else x, (x.shape[-1],))


@torch.library.custom_op("tessera::matmul_backward", mutates_args=(),
                         schema="(Tensor a, Tensor b, Tensor? bias, str? activation, Tensor dy) -> (Tensor, Tensor, Tensor)")
def matmul_backward(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
                    dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    da, db, dbias = backward.matmul_backward(a, b, bias, activation, dy)
    return da.contiguous(), db.contiguous(), a.new_zeros(b.shape[-1]) if dbias is None else dbias


@matmul_backward.register_fake
def _(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
      dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _empty(a), _empty(b), _empty(bias if bias is not None else a, (b.shape[-1],))


# ---- the autograd formulas of the forward operators -------------------------------------------

def _matmul_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    a, b, bias, activation = inputs
    ctx.save_for_backward(a, b, bias)
    ctx.activation = activation


def _matmul_grad(ctx: Any, grad: torch.Tensor) -> tuple:
    a, b, bias = ctx.saved_tensors
    da, db, dbias = matmul_backward(a, b, bias, ctx.activation, grad)
    return da, db, None if bias is None else dbias, None


def _softmax_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    ctx.save_for_backward(output)
    ctx.axis = inputs[1]


def _softmax_grad(ctx: Any, grad: torch.Tensor) -> tuple:
    (y,) = ctx.saved_tensors
    return softmax_backward(y, grad, ctx.axis), None


def _layer_norm_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.eps = eps


def _layer_norm_grad(ctx: Any, grad: torch.Tensor) -> tuple:
    x, weight, bias = ctx.saved_tensors
    dx, dw, db = layer_norm_backward(x, weight, bias, grad, ctx.eps)
    return dx, None if weight is None else dw, None if bias is None else db, None


def _rms_norm_setup(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_norm_grad(ctx: Any, grad: torch.Tensor) -> tuple:
    x, weight = ctx.saved_tensors
    dx, dw = rms_norm_backward(x, weight, grad, ctx.eps)
    return dx, None if weight is None else dw, None


def attach(matmul: Any, softmax: Any, layer_norm: Any, rms_norm: Any) -> None:
    """Registers the backward operators as the autograd formulas of these forward operators."""
    matmul.register_autograd(_matmul_grad, setup_context=_matmul_setup)
    softmax.register_autograd(_softmax_grad, setup_context=_softmax_setup)
    layer_norm.register_autograd(_layer_norm_grad, setup_context=_layer_norm_setup)
    rms_norm.register_autograd(_rms_norm_grad, setup_context=_rms_norm_setup)
