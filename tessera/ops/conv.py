"""`depthwise_conv2d` of `tessera.ops` (`tessera/ops/kernels/depthwise.tsr`): NCHW input, one
KH x KW filter per channel."""

from __future__ import annotations

from typing import Any

from tessera.ops.arrays import OpArgumentError


def depthwise_conv2d(x: Any, w: Any, stride: int = 1, padding: int = 0) -> Any:
    """y[n, c] = x[n, c] (zero-padded by `padding`) cross-correlated with w[c, 0], every `stride`-th
    position. x: [N, C, H, W], w: [C, 1, KH, KW], of one element type (f32, f16 or bf16; f32
    accumulation). The result has x's kind and element type, shape [N, C, OH, OW] with
    OH = (H + 2 padding - KH) // stride + 1 (OW likewise)."""
    raise OpArgumentError("depthwise_conv2d", "x", "not built yet")
