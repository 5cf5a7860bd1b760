"""A seeded random differential test of `tessera.ops` on the CPU backend: random operators, ragged
shapes, element types, options and configurations of each kernel's @autotune space (drawn instead
of tuned, so that every candidate a GPU could pick gets checked), against the float64 NumPy
references within the documented tolerances.

`python -m tests.ops.test_ops_random COUNT SEED` (from the repository root) runs a longer form and
prints each case."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tessera import ops
from tessera.base.errors import CompileError
from tessera.ops import launcher
from tests.ops import reference as ref
from tests.ops.reference import make

COUNT, SEED = 6, 20261127


def draw_config(rng: np.random.Generator) -> Callable[..., dict[str, Any]]:
    """A stand-in for launcher.config: a random candidate of the kernel's space among those that
    compile (the tuner prunes the others: groups over 1024 tiles, too much shared memory)."""
    def config(k: Any, args: tuple, consts: dict[str, Any], types: dict[str, str], grid: Any) -> dict[str, Any]:
        space = k.tune_space
        if space is None:
            return {}
        while True:
            cfg = {n: (consts[n] if n in consts else vals[int(rng.integers(len(vals)))]) for n, vals in space.axes}
            try:
                k.info(**{**consts, **cfg, **types})
                return cfg
            except CompileError:
                continue
    return config


FIRST: list[Any] = []   # the first array of the latest case (the operator's first argument)


def _array(rng: np.random.Generator, kind: str) -> Callable[..., Any]:
    """`make` for one case: NumPy arrays or PyTorch tensors (bf16 always), sometimes not contiguous
    (the same values with the last two axes' strides exchanged)."""
    FIRST.clear()

    def array(shape: tuple[int, ...], dtype: str) -> Any:
        x = make(rng, shape, dtype, kind)
        if len(shape) >= 2 and rng.random() < 0.25:
            t = x.swapaxes(-1, -2)
            x = (t.contiguous() if hasattr(t, "contiguous") else t.copy()).swapaxes(-1, -2)
        FIRST.append(x)
        return x
    return array


def case(rng: np.random.Generator) -> tuple[str, Callable[[], Any], np.ndarray, str, dict | None]:
    """(description, the call, its reference, the result's element type, tolerances)."""
    op = ["matmul", "softmax", "layer_norm", "rms_norm", "attention", "depthwise_conv2d"][int(rng.integers(6))]
    dim = lambda lo, hi: int(rng.integers(lo, hi + 1))  # noqa: E731
    kind = ["numpy", "torch"][int(rng.integers(2))]
    array = _array(rng, kind)
    floats = ["f32", "f16", "bf16"]
    if op == "matmul":
        dt = ["f32", "f16", "bf16", "i8"][int(rng.integers(4))]
        m, n, k = dim(1, 70), dim(1, 70), dim(1, 90)
        lead = tuple(dim(1, 3) for _ in range(dim(0, 2)))
        a = array(lead + (m, k), dt)
        b = array((lead if rng.random() < 0.5 else ()) + (k, n), dt)
        act = [None, "relu"] if dt == "i8" else [None, "relu", "gelu", "silu"]
        activation = act[int(rng.integers(len(act)))]
        bias = None
        if rng.random() < 0.5:
            bias = rng.integers(-500, 500, n).astype(np.int32) if dt == "i8" else array((n,), "f32")
        return (f"matmul {dt} a{list(a.shape)} b{list(b.shape)} bias={bias is not None} {activation}",
                lambda: ops.matmul(a, b, bias, activation), ref.matmul(a, b, bias, activation),
                "i32" if dt == "i8" else dt, None)
    if op == "attention":
        dt = floats[1 + int(rng.integers(2))]
        shape = (dim(1, 2), dim(1, 2), dim(1, 150), [64, 128][int(rng.integers(2))])
        q, k, v = (array(shape, dt) for _ in range(3))
        causal, scale = bool(rng.integers(2)), (None if rng.random() < 0.5 else float(rng.uniform(0.02, 0.2)))
        return (f"attention {dt} {list(shape)} causal={causal} scale={scale}",
                lambda: ops.attention(q, k, v, causal, scale), ref.attention(q, k, v, causal, scale), dt,
                ref.ATTENTION_TOLERANCE)
    dt = floats[int(rng.integers(3))]
    if op == "depthwise_conv2d":
        kh, stride, pad = [1, 3, 5][int(rng.integers(3))], dim(1, 2), dim(0, 2)
        x = array((dim(1, 2), dim(1, 3), dim(kh, 40), dim(kh, 40)), dt)
        w = array((x.shape[1], 1, kh, kh), floats[int(rng.integers(3))])
        return (f"depthwise_conv2d {dt} x{list(x.shape)} k={kh} stride={stride} padding={pad}",
                lambda: ops.depthwise_conv2d(x, w, stride, pad), ref.depthwise_conv2d(x, w, stride, pad), dt, None)
    shape = tuple(dim(1, 4) for _ in range(dim(0, 2))) + (dim(1, 700),)
    x = array(shape, dt)
    w, b = array(shape[-1:], floats[int(rng.integers(3))]), array(shape[-1:], "f32")
    if op == "softmax":
        axis = int(rng.integers(-len(shape), len(shape)))
        return f"softmax {dt} {list(shape)} axis={axis}", lambda: ops.softmax(x, axis), ref.softmax(x, axis), dt, None
    if op == "layer_norm":
        return (f"layer_norm {dt} {list(shape)}", lambda: ops.layer_norm(x, w, b), ref.layer_norm(x, w, b), dt, None)
    return f"rms_norm {dt} {list(shape)}", lambda: ops.rms_norm(x, w), ref.rms_norm(x, w), dt, None


def run(count: int, seed: int, verbose: bool = False) -> None:
    rng = np.random.default_rng(seed)
    for i in range(count):
        what, call, want, dtype, tol = case(rng)
        what += f" ({type(FIRST[0]).__name__})"
        if verbose:
            print(f"{i}: {what}", flush=True)
        try:
            got = call()
            ref.close(got, want, dtype, tol)
            assert type(got) is type(FIRST[0]), f"{type(got).__name__} out of {type(FIRST[0]).__name__} in"
        except AssertionError as e:
            raise AssertionError(f"case {i} (seed {seed}): {what}: {e}") from None


@pytest.mark.torch
def test_random_operators_match_numpy(shared_cache, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_BACKEND", "cpu")
    monkeypatch.setattr(launcher, "config", draw_config(np.random.default_rng(SEED + 1)))
    run(COUNT, SEED)


if __name__ == "__main__":  # the long form
    import os

    os.environ["TESSERA_BACKEND"] = "cpu"
    n, s = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (200, SEED)
    launcher.config = draw_config(np.random.default_rng(s + 1))  # type: ignore[assignment]
    run(n, s, verbose=True)
