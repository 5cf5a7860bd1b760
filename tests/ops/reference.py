"""float64 NumPy references of the operators of `tessera.ops`, the documented tolerances per element
type (docs/ops.md), and inputs of every element type (bf16 through PyTorch, which NumPy lacks)."""

from __future__ import annotations

import math

import numpy as np

# |result - reference| <= ATOL + RTOL * |reference|, per result element type (docs/ops.md).
TOLERANCE = {"f32": (1e-5, 1e-4), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2), "i32": (0.0, 0.0)}
# attention rounds the probabilities to the input type before the second product
ATTENTION_TOLERANCE = {"f16": (4e-3, 4e-3), "bf16": (3e-2, 3e-2)}
_erf = np.vectorize(math.erf)


def as_f64(x) -> np.ndarray:
    """Any operator input or result (NumPy array or PyTorch tensor, bf16 included) as float64."""
    if hasattr(x, "detach"):
        return x.detach().double().numpy()
    return np.asarray(x).astype(np.float64)


def make(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, kind: str = "numpy"):
    """Random normal values of a .tsr element type, as NumPy (not bf16) or PyTorch."""
    if dtype == "i8":
        vals = rng.integers(-100, 100, shape).astype(np.int8)
    else:
        vals = rng.standard_normal(shape).astype(np.float32)
    if kind == "torch" or dtype == "bf16":
        import torch

        t = torch.from_numpy(vals)
        return t.to({"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "i8": torch.int8}[dtype])
    return vals.astype({"f16": np.float16, "f32": np.float32, "i8": np.int8}[dtype])


def close(result, ref: np.ndarray, dtype: str, tolerance: dict | None = None) -> None:
    atol, rtol = (tolerance or TOLERANCE)[dtype]
    got = as_f64(result)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    err = np.abs(got - ref) - (atol + rtol * np.abs(ref))
    assert np.all(err <= 0), f"{dtype}: worst excess {err.max():.3g} at {np.unravel_index(err.argmax(), err.shape)}"


def matmul(a, b, bias=None, activation=None) -> np.ndarray:
    r = np.matmul(as_f64(a), as_f64(b))
    if bias is not None:
        r = r + as_f64(bias)
    if activation == "relu":
        r = np.maximum(r, 0.0)
    elif activation == "gelu":
        r = 0.5 * r * (1.0 + _erf(r / math.sqrt(2.0)))
    elif activation == "silu":
        r = r / (1.0 + np.exp(-r))
    return r


def softmax(x, axis: int = -1) -> np.ndarray:
    x = as_f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, weight, bias, eps: float = 1e-5) -> np.ndarray:
    x = as_f64(x)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * as_f64(weight) + as_f64(bias)


def rms_norm(x, weight, eps: float = 1e-6) -> np.ndarray:
    x = as_f64(x)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * as_f64(weight)


def attention(q, k, v, causal: bool = False, scale: float | None = None) -> np.ndarray:
    q, k, v = as_f64(q), as_f64(k), as_f64(v)
    s = q @ np.swapaxes(k, -1, -2) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    return softmax(s) @ v


def depthwise_conv2d(x, w, stride: int = 1, padding: int = 0) -> np.ndarray:
    x, w = as_f64(x), as_f64(w)
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += win * w[None, :, 0, i, j, None, None]
    return out
