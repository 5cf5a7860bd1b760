"""`attention` of `tessera.ops`: FlashAttention-2's forward (`tessera/ops/kernels/attention.tsr`)
over [B, H, N, D] queries, keys and values."""

from __future__ import annotations

import math
from typing import Any

from tessera.ops import launcher
from tessera.ops.arrays import OpArgumentError, Operand, same_place
from tessera.ops.norms import check_dtype

HEAD_DIMS = (64, 128)


def attention(q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None) -> Any:
    """softmax(scale * q @ k^T (+ causal mask)) @ v per batch and head. q, k, v: [B, H, N, D] of one
    element type (f16 or bf16: tensor cores, f32 accumulation), D 64 or 128. `causal`: query i sees
    keys 0..i. `scale`: default 1 / sqrt(D). The result has q's kind, shape and element type."""
    op = "attention"
    qo = Operand.of(op, "q", q)
    check_dtype(op, "q", qo, ("f16", "bf16"))
    if len(qo.shape) != 4:
        raise OpArgumentError(op, "q", f"has shape {list(qo.shape)}; it needs [B, H, N, D]")
    if qo.shape[3] not in HEAD_DIMS:
        raise OpArgumentError(op, "q", f"has head dimension D = {qo.shape[3]}; supported: 64, 128")
    others = {"k": Operand.of(op, "k", k), "v": Operand.of(op, "v", v)}
    for name, o in others.items():
        if o.dtype != qo.dtype:
            raise OpArgumentError(op, name, f"element type {o.dtype} differs from q's {qo.dtype}")
        if o.shape != qo.shape:
            raise OpArgumentError(op, name, f"has shape {list(o.shape)}; it needs q's {list(qo.shape)}")
    same_place(op, qo, others)
    if not isinstance(causal, bool):
        raise OpArgumentError(op, "causal", f"must be True or False, not {causal!r}"[:200])
    b, h, n, d = qo.shape
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise OpArgumentError(op, "scale", f"must be a finite number or None, not {scale!r}"[:200])
    out = qo.empty(qo.shape, qo.dtype)
    if b * h and n:
        flat = (b * h, n, d)
        kern = launcher.kernel("attention.tsr", "attention", qo.on_device)
        args = (qo.reshaped(flat), others["k"].reshaped(flat), others["v"].reshaped(flat), out.reshape(flat),
                float(scale))
        launcher.launch(kern, args, {"causal": int(causal), "HD": d},
                        lambda c: ((n + c["BM"] - 1) // c["BM"], b * h), types={"T": qo.dtype})
    return out
