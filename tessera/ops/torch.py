"""`tessera.ops.torch`: the operators of `tessera.ops` as PyTorch custom operators (`torch.library`,
namespace `tessera`), usable in eager mode, under autograd and under `torch.compile`:

    import tessera.ops.torch as tops          # registers torch.ops.tessera.*
    y = tops.matmul(a, b, bias, "gelu")        # the same as torch.ops.tessera.matmul(a, b, bias, "gelu")
    y = tops.layer_norm(x, weight, bias, 1e-5)
    y.sum().backward()                         # the backward kernels of tessera/ops/kernels/*_bwd.tsr

Each operator runs the function of the same name in `tessera.ops` on the tensors (CPU tensors on
the CPU backend or copied to the GPU, CUDA tensors in place on the current stream). Its fake-tensor
implementation (`tessera/ops/torch_meta.py`) gives the result's shape, type and device without
running anything, and checks the arguments as the operator does, so that `torch.compile` traces
it (also with dynamic shapes). matmul, softmax, layer_norm and rms_norm have backward passes
(`tessera/ops/torch_autograd.py`); attention and depthwise_conv2d do not (calling backward through
them raises PyTorch's error for an operator without an autograd formula).

Importing this module needs PyTorch 2.4 or newer (`torch.library.custom_op`); docs/ops_torch.md
describes the operators, their gradients and their tolerances.
"""

from __future__ import annotations

import torch

from tessera import ops
from tessera.ops import torch_autograd, torch_meta

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


matmul.register_fake(torch_meta.matmul)
softmax.register_fake(torch_meta.softmax)
layer_norm.register_fake(torch_meta.layer_norm)
rms_norm.register_fake(torch_meta.rms_norm)
attention.register_fake(torch_meta.attention)
depthwise_conv2d.register_fake(torch_meta.depthwise_conv2d)
torch_autograd.attach(matmul, softmax, layer_norm, rms_norm)
