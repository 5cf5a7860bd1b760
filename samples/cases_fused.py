"""The cases (samples/case.py) of the fused-operation samples: elementwise maps, bias and activation
rows, llm.c's bf16 kernels, stream compaction, the generic blend, the block scan, the GEMM epilogue,
the norms and flash attention.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from samples.case import Arrays, Case, bf16_bits, bf16_values, r16

if TYPE_CHECKING:
    from tessera.api import Kernel

def _map(n: int, dtype: type, saxpy: bool) -> Case:
    """The map samples (elementwise.tsr) on an odd size: exact, as NumPy computes f16 (in f32,
    rounding each operation)."""
    def make(rng: np.random.Generator) -> Arrays:
        x: np.ndarray = rng.standard_normal(n).astype(dtype)
        y: np.ndarray = rng.standard_normal(n).astype(dtype)
        return {"X": x, "Y": y} if saxpy else {"X": x, "Y": y, "Z": np.zeros(n, dtype)}
    if saxpy:
        return Case(make, lambda k, a: k(1.5, a["X"], a["Y"]), lambda a: {"Y": dtype(1.5) * a["X"] + a["Y"]}, 0, 0)
    return Case(make, lambda k, a: k(a["X"], a["Y"], a["Z"]), lambda a: {"Z": a["X"] + a["Y"]}, 0, 0)


def _bias_gelu() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        x, b = (bf16_bits(rng.standard_normal((129, 1001))) for _ in range(2))
        return {"X": x, "B": b, "Y": np.zeros_like(x)}

    def expect(a: Arrays) -> Arrays:
        def r(v: np.ndarray | float) -> np.ndarray:  # one bf16 operation: computed in f32, rounded
            return bf16_values(bf16_bits(np.asarray(v, np.float32)))
        h = r(bf16_values(a["X"]) + bf16_values(a["B"]))
        t = r(np.tanh(r(r(0.7978845608) * r(h + r(r(r(r(0.044715) * h) * h) * h)))))
        return {"Y": bf16_bits(r(r(r(0.5) * h) * r(r(1.0) + t)))}
    return Case(make, lambda k, a: k(a["X"], a["B"], a["Y"]), expect, 0, 0)


def _bias_row(bf16: bool) -> Case:
    """samples/bias_act.tsr: a bias row over a matrix (broadcast), then ReLU in f32 or GELU in bf16."""
    m, n = 129, 1001

    def make(rng: np.random.Generator) -> Arrays:
        if bf16:
            x, b = bf16_bits(rng.standard_normal((m, n))), bf16_bits(rng.standard_normal(n))
        else:
            x, b = rng.standard_normal((m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        return {"X": x, "b": b, "Y": np.zeros_like(x)}

    def expect(a: Arrays) -> Arrays:
        if not bf16:
            return {"Y": np.maximum(a["X"] + a["b"], np.float32(0))}
        return {"Y": _gelu_bits(r16(bf16_values(a["X"]) + bf16_values(a["b"])))}
    return Case(make, lambda k, a: k(a["X"], a["b"], a["Y"]), expect, 0, 0)


def _gelu_bits(h: np.ndarray) -> np.ndarray:
    """GELU (tanh approximation) of bf16 values `h`, every operation rounded to bf16, as bits."""
    t = r16(np.tanh(r16(r16(0.7978845608) * r16(h + r16(r16(r16(r16(0.044715) * h) * h) * h)))))
    return bf16_bits(r16(r16(r16(0.5) * h) * r16(r16(1.0) + t)))


def _gelu_x128() -> Case:
    """samples/llmc_bf16.tsr gelu_bf16: computed in f32, rounded to bf16 once; compared as bf16
    bits within one unit (tanhf and NumPy's tanh may differ in the last f32 bit)."""
    n = 100_003

    def make(rng: np.random.Generator) -> Arrays:
        # Within [-3, 3]: below, 1 + tanh(...) cancels and the last f32 bit of tanh decides the result.
        return {"X": bf16_bits(np.clip(rng.standard_normal(n) * 2, -3, 3)), "Y": np.zeros(n, np.uint16)}

    def expect(a: Arrays) -> Arrays:
        v = bf16_values(a["X"]).astype(np.float32)
        inner = np.float32(0.7978845608) * (v + np.float32(0.044715) * v * v * v)
        return {"Y": bf16_bits(np.float32(0.5) * v * (np.float32(1.0) + np.tanh(inner)))}
    return Case(make, lambda k, a: k(a["X"], a["Y"], grid=-(-n // 2048)), expect, 0, 1)


def _layernorm_x128() -> Case:
    """samples/llmc_bf16.tsr layernorm_bf16: rows of bf16 channels normalized in f32 (a channel
    count that is not a multiple of 8: the last access of each row is partly outside)."""
    rows, c = 77, 771

    def make(rng: np.random.Generator) -> Arrays:
        return {"X": bf16_bits(rng.standard_normal((rows, c)) * 3 + 1), "w": bf16_bits(rng.standard_normal(c)),
                "b": bf16_bits(rng.standard_normal(c)), "Y": np.zeros((rows, c), np.float32),
                "mean": np.zeros(rows, np.float32), "rstd": np.zeros(rows, np.float32)}

    def expect(a: Arrays) -> Arrays:
        x = bf16_values(a["X"]).astype(np.float64)
        mean = x.mean(axis=1)
        rstd = 1 / np.sqrt(((x - mean[:, None]) ** 2).mean(axis=1) + 1e-5)
        y = (x - mean[:, None]) * rstd[:, None] * bf16_values(a["w"]) + bf16_values(a["b"])
        return {"Y": y.astype(np.float32), "mean": mean.astype(np.float32), "rstd": rstd.astype(np.float32)}
    return Case(make, lambda k, a: k(a["X"], a["w"], a["b"], a["Y"], a["mean"], a["rstd"], grid=-(-rows // 8)),
                expect, 1e-4, 1e-4)


def _compact(chunk: int) -> Case:
    """compact.tsr: the positive values of each chunk (a warp's or a group's slice), packed."""
    n = 100_003
    groups = -(-n // 256)

    def make(rng: np.random.Generator) -> Arrays:
        return {"x": rng.standard_normal(n).astype(np.float32), "out": np.zeros(n, np.float32),
                "count": np.zeros(groups * 256 // chunk, np.int32)}

    def expect(a: Arrays) -> Arrays:
        out, count = np.zeros(n, np.float32), np.zeros(len(a["count"]), np.int32)
        for c in range(len(count)):
            seg = a["x"][c * chunk:(c + 1) * chunk]
            kept = seg[seg > 0]
            out[c * chunk:c * chunk + len(kept)] = kept
            count[c] = len(kept)
        return {"out": out, "count": count}

    def launch(k: Kernel, a: Arrays) -> None:
        k(a["x"], a["out"], a["count"], grid=groups)
    return Case(make, launch, expect, 0, 0)


def _blend() -> Case:
    """samples/generic_blend.tsr: one launch per element type (bf16 as uint16 bits, named by T=)."""
    n = 10_007
    kinds = (("f16", np.float16), ("f32", np.float32), ("f64", np.float64))

    def make(rng: np.random.Generator) -> Arrays:
        out: Arrays = {}
        for name, dtype in kinds:
            out[f"x_{name}"], out[f"y_{name}"] = (rng.standard_normal(n).astype(dtype) for _ in range(2))
            out[f"out_{name}"] = np.zeros(n, dtype)
        out["x_bf16"], out["y_bf16"] = (bf16_bits(rng.standard_normal(n)) for _ in range(2))
        out["out_bf16"] = np.zeros(n, np.uint16)
        return out

    def launch(k: Kernel, a: Arrays) -> None:
        for name in ("f16", "bf16", "f32", "f64"):
            types: dict[str, Any] = {"T": "bf16"} if name == "bf16" else {}
            k(a[f"x_{name}"], a[f"y_{name}"], a[f"out_{name}"], 0.25, grid=(n + 255) // 256, **types)

    def expect(a: Arrays) -> Arrays:
        def lerp(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            x, y = x.astype(np.float32), y.astype(np.float32)
            return x + (y - x) * np.float32(0.25)
        out = {f"out_{name}": lerp(a[f"x_{name}"], a[f"y_{name}"]).astype(dtype) for name, dtype in kinds}
        out["out_bf16"] = bf16_values(bf16_bits(lerp(bf16_values(a["x_bf16"]), bf16_values(a["y_bf16"]))))
        return out

    def launch_and_decode(k: Kernel, a: Arrays) -> None:
        launch(k, a)
        a["out_bf16"] = bf16_values(a["out_bf16"])
    return Case(make, launch_and_decode, expect, rtol=0, atol=0)


def _block_scan() -> Case:
    n, g = 1000, 4  # n not a multiple of the group of 256

    def make(rng: np.random.Generator) -> Arrays:
        x = rng.integers(-4, 5, n).astype(np.float32)  # small integers: every sum is exact
        padded = np.zeros(g * 256, np.float32)
        padded[:n] = x
        return {"x": x, "totals": padded.reshape(g, 256).sum(axis=1), "out": np.zeros(n, np.float32)}
    return Case(make, lambda k, a: k(a["x"], a["totals"], a["out"], grid=g),
                lambda a: {"out": np.cumsum(a["x"]).astype(np.float32)}, rtol=0, atol=0)


def _typed(rng: np.random.Generator, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Standard normal values of element type `name` (bf16 as its uint16 bits)."""
    x = rng.standard_normal(shape)
    return bf16_bits(x) if name == "bf16" else x.astype(np.float16 if name == "f16" else np.float32)


def _as_f64(x: np.ndarray, name: str) -> np.ndarray:
    return (bf16_values(x) if name == "bf16" else x).astype(np.float64)


def _by_type(kinds: tuple[str, ...], make: Callable[[np.random.Generator, str], Arrays],
             run: Callable[[Kernel, Arrays, dict[str, Any]], np.ndarray],
             reference: Callable[[Arrays, str], np.ndarray], tol: float) -> Case:
    """One launch per element type T (`run` returns what it computed as float64 values); compared
    with the float64 reference within `tol` relative and absolute: the rounding of the output type
    and f32 sums in another order."""
    def make_all(rng: np.random.Generator) -> Arrays:
        return {f"{k}_{t}": v for t in kinds for k, v in make(rng, t).items()}

    def launch(k: Kernel, a: Arrays) -> None:
        for t in kinds:
            own = {key[:-len(t) - 1]: v for key, v in a.items() if key.endswith("_" + t)}
            a[f"values_{t}"] = run(k, own, {"T": t} if t == "bf16" else {})

    return Case(make_all, launch, lambda a: {f"values_{t}": reference(
        {key[:-len(t) - 1]: v for key, v in a.items() if key.endswith("_" + t)}, t) for t in kinds}, rtol=tol, atol=tol)


def _gemm_epilogue() -> Case:
    """samples/gemm_epilogue.tsr: GELU for f16, SiLU for bf16 (act=1), ragged M, N and K."""
    def make(rng: np.random.Generator, t: str) -> Arrays:
        return {"A": _typed(rng, (90, 80), t), "B": _typed(rng, (80, 70), t),
                "bias": rng.standard_normal(70).astype(np.float32), "C": np.zeros((90, 70), _typed(rng, (1,), t).dtype)}

    def run(k: Kernel, a: Arrays, types: dict[str, Any]) -> np.ndarray:
        k(a["A"], a["B"], a["bias"], a["C"], act=int(bool(types)), grid=(2, 2), **types)
        return _as_f64(a["C"], "bf16" if types else "f16")

    def reference(a: Arrays, t: str) -> np.ndarray:
        y = _as_f64(a["A"], t) @ _as_f64(a["B"], t) + a["bias"]
        if t == "bf16":
            return y / (1 + np.exp(-y))
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    return _by_type(("f16", "bf16"), make, run, reference, tol=2e-2)  # values up to 32: a bf16 ulp is 0.125


def _norm(layer: bool) -> Case:
    """samples/layer_norm.tsr and rms_norm.tsr on 100 x 150 (ragged in both), for f32, f16 and bf16."""
    def make(rng: np.random.Generator, t: str) -> Arrays:
        x = _typed(rng, (100, 150), t)
        out = {"X": x, "gamma": rng.standard_normal(150).astype(np.float32), "Y": np.zeros_like(x)}
        if layer:
            out |= {"beta": rng.standard_normal(150).astype(np.float32), "Mean": np.zeros(100, np.float32),
                    "Rstd": np.zeros(100, np.float32)}
        return out

    def run(k: Kernel, a: Arrays, types: dict[str, Any]) -> np.ndarray:
        t = "bf16" if types else {np.float16: "f16", np.float32: "f32"}[a["X"].dtype.type]
        if not layer:
            k(a["X"], a["gamma"], a["Y"], 1e-5, grid=(2,), **types)
            return _as_f64(a["Y"], t)
        k(a["X"], a["gamma"], a["beta"], a["Y"], a["Mean"], a["Rstd"], 1e-5, grid=(2,), **types)
        return np.concatenate([_as_f64(a["Y"], t).ravel(), a["Mean"], a["Rstd"]])  # Y, then the saved statistics

    def reference(a: Arrays, t: str) -> np.ndarray:
        x = _as_f64(a["X"], t)
        if not layer:
            return x / np.sqrt((x ** 2).mean(1)[:, None] + 1e-5) * a["gamma"]
        mean, rstd = x.mean(1), 1 / np.sqrt(x.var(1) + 1e-5)
        return np.concatenate([((x - mean[:, None]) * rstd[:, None] * a["gamma"] + a["beta"]).ravel(), mean, rstd])
    return _by_type(("f32", "f16", "bf16"), make, run, reference, tol=2e-2)  # |y| < 8: a bf16 ulp is 1/32


def _flash_attention() -> Case:
    """samples/flash_attention.tsr: f16 with head dim 64, bf16 causal with head dim 128; 2 heads of
    100 queries and keys (ragged: the second block of keys and queries is partial)."""
    heads, n = 2, 100

    def make(rng: np.random.Generator, t: str) -> Arrays:
        hd = 64 if t == "f16" else 128
        q, k, v = (_typed(rng, (heads, n, hd), t) for _ in range(3))
        return {"Q": q, "K": k, "V": v, "O": np.zeros_like(q)}

    def run(k: Kernel, a: Arrays, types: dict[str, Any]) -> np.ndarray:
        hd = a["Q"].shape[2]
        k(a["Q"], a["K"], a["V"], a["O"], float(1 / np.sqrt(hd)), causal=int(bool(types)), HD=hd, grid=(2, heads),
          **types)
        return _as_f64(a["O"], "bf16" if types else "f16")

    def reference(a: Arrays, t: str) -> np.ndarray:
        q, k, v = (_as_f64(a[x], t) for x in "QKV")
        s = np.einsum("hnd,hmd->hnm", q, k) / np.sqrt(q.shape[2])
        if t == "bf16":  # causal
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        return np.einsum("hnm,hmd->hnd", p / p.sum(-1, keepdims=True), v)
    return _by_type(("f16", "bf16"), make, run, reference, tol=2e-2)


CASES: dict[str, Callable[[], Case]] = {
    "block_scan": _block_scan,
    "vadd_f32": lambda: _map(100_003, np.float32, False), "vadd_f16": lambda: _map(100_003, np.float16, False),
    "saxpy_f32": lambda: _map(100_003, np.float32, True), "saxpy_f16": lambda: _map(100_003, np.float16, True),
    "bias_gelu_bf16": _bias_gelu, "compact_warps": lambda: _compact(32), "compact_groups": lambda: _compact(256),
    "blend": _blend, "gemm_epilogue": _gemm_epilogue, "layer_norm": lambda: _norm(True),
    "rms_norm": lambda: _norm(False), "flash_attention": _flash_attention, "gelu_bf16": _gelu_x128, "layernorm_bf16": _layernorm_x128,
    "bias_relu_f32": lambda: _bias_row(False), "bias_row_gelu_bf16": lambda: _bias_row(True)}
