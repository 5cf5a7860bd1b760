"""`python samples/runner.py samples/NAME.tsr`: run a sample on random inputs and compare it with
NumPy. Each sample kernel has a case here: how to make inputs, launch, and the reference."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tessera.api import Kernel, Module

Arrays = dict[str, np.ndarray]  # by parameter name


@dataclass(frozen=True)
class Case:
    make: Callable[[np.random.Generator], Arrays]        # the inputs
    launch: Callable[[Kernel, Arrays], None]             # runs the kernel on the inputs
    expect: Callable[[Arrays], Arrays]                   # the expected arrays
    rtol: float = 1e-5
    atol: float = 1e-5


def _sum_reduce() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"x": rng.standard_normal(1 << 18).astype(np.float32), "out": np.zeros(8, np.float32)}
    # As in the seed, every group sums the whole input into its own element of out.
    return Case(make, lambda k, a: k(a["x"], a["out"]),
                lambda a: {"out": np.full(8, a["x"].astype(np.float64).sum(), np.float32)}, rtol=1e-4, atol=1e-2)


def _warp_reduce() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"x": rng.standard_normal(100_003).astype(np.float32), "out": np.zeros(1, np.float32)}
    return Case(make, lambda k, a: k(a["x"], a["out"], grid=16),
                lambda a: {"out": np.array([a["x"].astype(np.float64).sum()], np.float32)}, rtol=1e-4, atol=1e-2)


def _transpose() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        A = rng.standard_normal((100, 70)).astype(np.float32)
        return {"A": A, "B": np.zeros((70, 100), np.float32)}
    return Case(make, lambda k, a: k(a["A"], a["B"], grid=((70 + 31) // 32, (100 + 31) // 32)),
                lambda a: {"B": a["A"].T.copy()}, rtol=0, atol=0)


def _matmul() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"A": rng.standard_normal((130, 70)).astype(np.float32),
                "B": rng.standard_normal((70, 90)).astype(np.float32), "C": np.zeros((130, 90), np.float32)}
    return Case(make, lambda k, a: k(a["A"], a["B"], a["C"], grid=((90 + 63) // 64, (130 + 63) // 64)),
                lambda a: {"C": a["A"] @ a["B"]}, rtol=1e-4, atol=1e-4)


def _softmax() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        x = (rng.standard_normal((37, 300)) * 3).astype(np.float16)
        return {"x": x, "y": np.zeros_like(x)}

    def expect(a: Arrays) -> Arrays:
        x = a["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return {"y": (e / e.sum(axis=1, keepdims=True)).astype(np.float16)}
    return Case(make, lambda k, a: k(a["x"], a["y"], grid=a["x"].shape[0]), expect, rtol=2e-3, atol=1e-3)


def _histogram() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"data": rng.integers(0, 256, 50_000, dtype=np.uint8), "hist": np.zeros(256, np.uint32)}
    return Case(make, lambda k, a: k(a["data"], a["hist"], grid=12),
                lambda a: {"hist": np.bincount(a["data"], minlength=256).astype(np.uint32)}, rtol=0, atol=0)


# The tiles the sample runs use (fixed: see _sgemm).
SGEMM_TILES = {"BM": 64, "BN": 64, "BK": 8, "stages": 3}
TC_GEMM_TILES = {"BM": 64, "BN": 64, "BK": 32, "stages": 3}


def _sgemm() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"A": rng.standard_normal((300, 70)).astype(np.float32),
                "B": rng.standard_normal((70, 260)).astype(np.float32), "C": np.zeros((300, 260), np.float32)}
    # Tiles fixed here: a run of the sample checks the kernel, it does not tune it (tuning compiles
    # all 64 candidates with NVRTC first; tests/autotune/test_autotune.py covers it).
    return Case(make, lambda k, a: k(a["A"], a["B"], a["C"], **SGEMM_TILES,
                                     grid=lambda c: ((260 + c["BN"] - 1) // c["BN"], (300 + c["BM"] - 1) // c["BM"])),
                lambda a: {"C": a["A"] @ a["B"]}, rtol=1e-4, atol=1e-4)


def _tc_gemm_f16() -> Case:
    """tc_gemm_f16.tsr with 64 x 64 tiles (fixed, as for the SGEMM): three row blocks, the last
    partial, two column blocks, the last partial, and K not a multiple of BK;
    f32 sums of exact f16 products (only the order differs)."""
    def make(rng: np.random.Generator) -> Arrays:
        return {"A": rng.standard_normal((150, 72)).astype(np.float16),
                "B": rng.standard_normal((72, 100)).astype(np.float16), "C": np.zeros((150, 100), np.float32)}
    return Case(make, lambda k, a: k(a["A"], a["B"], a["C"], **TC_GEMM_TILES,
                                     grid=lambda c: ((100 + c["BN"] - 1) // c["BN"], (150 + c["BM"] - 1) // c["BM"])),
                lambda a: {"C": a["A"].astype(np.float32) @ a["B"].astype(np.float32)}, rtol=1e-4, atol=1e-4)


def _tc_gemm_bf16_bias_relu() -> Case:
    """relu(A @ B + bias) rounded to bf16 once; compared as bits, which order non-negative values
    (a different summation order may round to the neighbouring bf16 value)."""
    def make(rng: np.random.Generator) -> Arrays:
        return {"A": bf16_bits(rng.standard_normal((90, 80))), "B": bf16_bits(rng.standard_normal((80, 70))),
                "bias": rng.standard_normal(70).astype(np.float32), "C": np.zeros((90, 70), np.uint16)}

    def expect(a: Arrays) -> Arrays:
        y = bf16_values(a["A"]) @ bf16_values(a["B"]) + a["bias"]
        return {"C": bf16_bits(np.maximum(y, 0).astype(np.float32))}
    return Case(make, lambda k, a: k(a["A"], a["B"], a["bias"], a["C"], grid=(2, 2)), expect, rtol=0, atol=1)


def _tc_gemm_i8() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"A": rng.integers(-128, 128, (150, 96), dtype=np.int8),
                "Bt": rng.integers(-128, 128, (70, 96), dtype=np.int8), "C": np.zeros((150, 70), np.int32)}
    return Case(make, lambda k, a: k(a["A"], a["Bt"], a["C"], grid=(1, 2)),
                lambda a: {"C": a["A"].astype(np.int32) @ a["Bt"].astype(np.int32).T}, rtol=0, atol=0)


def _blur3() -> Case:
    def make(rng: np.random.Generator) -> Arrays:
        return {"x": rng.standard_normal((75, 100)).astype(np.float32), "out": np.zeros((73, 98), np.float32)}

    def expect(a: Arrays) -> Arrays:
        x = a["x"].astype(np.float64)
        total = np.zeros((73, 98))
        for i in range(3):
            for j in range(3):
                total += x[i:i + 73, j:j + 98]
        return {"out": (total / 9.0).astype(np.float32)}
    return Case(make, lambda k, a: k(a["x"], a["out"], grid=((98 + 31) // 32, 3)), expect)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as the uint16 bits a bf16 tensor takes."""
    f = np.asarray(x, np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bits."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


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


def r16(v: np.ndarray | float) -> np.ndarray:
    """One bf16 operation: computed in f32 and rounded to bf16 (as f32 values)."""
    return bf16_values(bf16_bits(np.asarray(v, np.float32)))


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
    "sum_reduce": _sum_reduce, "warp_reduce": _warp_reduce, "transpose": _transpose, "matmul": _matmul,
    "softmax": _softmax, "histogram": _histogram, "sgemm": _sgemm, "blur3": _blur3,
    "vadd_f32": lambda: _map(100_003, np.float32, False), "vadd_f16": lambda: _map(100_003, np.float16, False),
    "saxpy_f32": lambda: _map(100_003, np.float32, True), "saxpy_f16": lambda: _map(100_003, np.float16, True),
    "bias_gelu_bf16": _bias_gelu, "compact_warps": lambda: _compact(32), "compact_groups": lambda: _compact(256),
    "blend": _blend, "tc_gemm_f16": _tc_gemm_f16, "tc_gemm_bf16_bias_relu": _tc_gemm_bf16_bias_relu,
    "tc_gemm_i8": _tc_gemm_i8, "gemm_epilogue": _gemm_epilogue, "layer_norm": lambda: _norm(True),
    "rms_norm": lambda: _norm(False), "flash_attention": _flash_attention, "gelu_bf16": _gelu_x128, "layernorm_bf16": _layernorm_x128,
    "bias_relu_f32": lambda: _bias_row(False), "bias_row_gelu_bf16": lambda: _bias_row(True)}


def check_kernel(mod: Module, name: str, seed: int = 0) -> tuple[bool, str]:
    """Run one kernel's case; (ok, message)."""
    case = CASES[name]()
    args = case.make(np.random.default_rng(seed))
    want = case.expect({k: v.copy() for k, v in args.items()})
    t0 = time.perf_counter()
    case.launch(mod[name], args)
    ms = (time.perf_counter() - t0) * 1e3
    for param, expected in want.items():
        got = args[param]
        if not np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=case.rtol, atol=case.atol):
            err = np.abs(got.astype(np.float64) - expected.astype(np.float64)).max()
            return False, f"{name}: '{param}' differs from NumPy (max abs error {err:.3g})"
    return True, f"{name}: matches NumPy ({ms:.1f} ms on the {mod.backend} backend)"


def main(argv: list[str]) -> int:
    import tessera

    p = argparse.ArgumentParser(prog="python samples/runner.py",
                                description="Run a sample's kernels on random inputs and compare with NumPy.")
    p.add_argument("file", help="a .tsr file, such as samples/sum_reduce.tsr")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        mod = tessera.load(args.file, backend=args.backend)
    except tessera.CompileError as e:
        print(e.text, file=sys.stderr)
        return 1
    except tessera.TesseraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.file}: backend {mod.backend} ({mod.backend_reason})")
    status = 0
    for name in mod.kernels:
        if name not in CASES:
            print(f"{name}: no NumPy reference for this kernel; not run")
            continue
        try:
            ok, message = check_kernel(mod, name, args.seed)
        except tessera.TesseraError as e:
            ok, message = False, f"{name}: {e}"
        print(("ok    " if ok else "FAIL  ") + message)
        status |= 0 if ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
