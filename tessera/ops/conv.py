"""`depthwise_conv2d` of `tessera.ops` (`tessera/ops/kernels/depthwise.tsr`): NCHW input, one
KH x KW filter per channel."""

from __future__ import annotations

from typing import Any

from tessera.ops import launcher
from tessera.ops.arrays import OpArgumentError, Operand, same_place
from tessera.ops.norms import FLOATS, check_dtype

MAX_FILTER = 15     # KH and KW: the filter is unrolled into each tile's registers
ROW_BLOCKS = 4      # row blocks per group: a group pipelines the windows of up to this many blocks


def _small_int(op: str, name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise OpArgumentError(op, name, f"must be an int from {low} to {high}, not {value!r}"[:200])
    return value


def depthwise_conv2d(x: Any, w: Any, stride: int = 1, padding: int = 0) -> Any:
    """y[n, c] = x[n, c] (zero-padded by `padding`) cross-correlated with w[c, 0], every `stride`-th
    position (PyTorch's conv2d with groups = C). x: [N, C, H, W], w: [C, 1, KH, KW] with KH, KW up
    to 15; f32, f16 or bf16 (w of any of them, converted to f32; f32 accumulation). The result has
    x's kind and element type, shape [N, C, OH, OW] with OH = (H + 2 padding - KH) // stride + 1
    (OW likewise)."""
    op = "depthwise_conv2d"
    xo, wo = Operand.of(op, "x", x), Operand.of(op, "w", w)
    check_dtype(op, "x", xo, FLOATS)
    check_dtype(op, "w", wo, FLOATS)
    same_place(op, xo, {"w": wo})
    if len(xo.shape) != 4:
        raise OpArgumentError(op, "x", f"has shape {list(xo.shape)}; it needs [N, C, H, W]")
    n, c, h, wd = xo.shape
    if len(wo.shape) != 4 or wo.shape[:2] != (c, 1):
        raise OpArgumentError(op, "w", f"has shape {list(wo.shape)}; it needs [{c}, 1, KH, KW] (C = x's channels)")
    kh, kw = wo.shape[2:]
    if not (1 <= kh <= MAX_FILTER and 1 <= kw <= MAX_FILTER):
        raise OpArgumentError(op, "w", f"has a {kh} x {kw} filter; each side must be from 1 to {MAX_FILTER}")
    s = _small_int(op, "stride", stride, 1, 16)
    p = _small_int(op, "padding", padding, 0, 64)
    oh, ow = (h + 2 * p - kh) // s + 1, (wd + 2 * p - kw) // s + 1
    if oh < 1 or ow < 1:
        raise OpArgumentError(op, "x", f"its {h} x {wd} planes padded by {p} are smaller than the {kh} x {kw} filter")
    out = xo.empty((n, c, oh, ow), xo.dtype)
    if n * c:
        filt = Operand.of(op, "w", wo.as_f32()).reshaped((c, kh * kw))
        k = launcher.kernel("depthwise.tsr", "depthwise", xo.on_device)

        def grid(cfg: dict[str, Any]) -> tuple[int, int, int]:
            blocks = (oh + cfg["BH"] - 1) // cfg["BH"]
            return (ow + cfg["BW"] - 1) // cfg["BW"], (blocks + ROW_BLOCKS - 1) // ROW_BLOCKS, n * c

        launcher.launch(k, (xo.reshaped((n * c, h, wd)), filt, out.reshape(n * c, oh, ow)),
                        {"KH": kh, "KW": kw, "S": s, "P": p}, grid, types={"T": xo.dtype})
    return out
