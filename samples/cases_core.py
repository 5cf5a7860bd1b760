"""The cases (samples/case.py) of the first samples: reductions, transpose, matmul, softmax,
histogram, the pipelined SIMT GEMM, the tensor-core GEMMs and the pipelined stencil.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from samples.case import Arrays, Case, bf16_bits, bf16_values


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


CASES: dict[str, Callable[[], Case]] = {
    "sum_reduce": _sum_reduce, "warp_reduce": _warp_reduce, "transpose": _transpose, "matmul": _matmul,
    "softmax": _softmax, "histogram": _histogram, "sgemm": _sgemm, "blur3": _blur3,
    "tc_gemm_f16": _tc_gemm_f16, "tc_gemm_bf16_bias_relu": _tc_gemm_bf16_bias_relu, "tc_gemm_i8": _tc_gemm_i8}
