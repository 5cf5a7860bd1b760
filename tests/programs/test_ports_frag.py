"""Register-tile programs written as a Triton or CUDA user would port them (spec sections 12 and
14; tests/programs/ports_frag/): a GEMM with a fused epilogue stored as f32, f16 and bf16,
FlashAttention over batched 4-D tensors on a 2-D group, layer norm with its rows in a fragment,
and a persistent GEMM with an epilogue device function. Each runs on the CPU backend with
check_bounds at ragged sizes against NumPy (float64 references; the conversions to f16 and bf16
exactly), and NVRTC compiles each for sm_80 and sm_90 with no warnings and no spills."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits
from tessera.api import Module
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source

DIR = Path(__file__).parent / "ports_frag"
PROGRAMS = sorted(p.stem for p in DIR.glob("*.tsr"))


def _load(name: str) -> Module:
    return tessera.load(str(DIR / f"{name}.tsr"), backend="cpu", check_bounds=True)


def test_gemm_epilogue() -> None:
    rng = np.random.default_rng(0)
    m, n, k = 100, 90, 72
    a = (rng.standard_normal((m, k)) * 0.3).astype(np.float16)
    b = (rng.standard_normal((k, n)) * 0.3).astype(np.float16)
    bias, res = rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float16)
    rs, cs = rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c16, cb, c32 = np.zeros((m, n), np.float16), np.zeros((m, n), np.uint16), np.zeros((m, n), np.float32)
    _load("gemm_epilogue").gemm_epi(a, b, bias, res, rs, cs, c16, cb, c32, 0.7, grid=(2, 2))
    x = (a.astype(np.float64) @ b.astype(np.float64)) * 0.7 + bias
    x = 0.5 * x * (1 + np.vectorize(math.erf)(x * 0.7071067811865476))
    x = (x + res) * rs[:, None] * cs[None, :]
    np.testing.assert_allclose(c32, x, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(c16, c32.astype(np.float16))
    np.testing.assert_array_equal(cb, bf16_bits(np.maximum(c32, 0)))


def test_batched_attention() -> None:
    rng = np.random.default_rng(5)
    nb, h, n, d = 2, 3, 70, 32
    q, k, v = (rng.standard_normal((nb, h, n, d)).astype(np.float16) for _ in range(3))
    bias = rng.standard_normal((h, n)).astype(np.float32)
    out = np.zeros((nb, h, n, d), np.float32)
    _load("batched_attention").bfa(q, k, v, bias, out, 0.3, grid=(2, h, nb))
    s = np.einsum("bhnd,bhmd->bhnm", q.astype(np.float64), k.astype(np.float64)) * 0.3 + bias[None, :, None, :]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, np.einsum("bhnm,bhmd->bhnd", p, v.astype(np.float64)), rtol=1e-2, atol=1e-2)


def test_layer_norm_rows() -> None:
    rng = np.random.default_rng(3)
    m, n = 100, 50
    x = rng.standard_normal((m, n)).astype(np.float32)
    w, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    y, mean, rstd = np.zeros((m, n), np.float16), np.zeros(m, np.float32), np.zeros(m, np.float32)
    _load("layer_norm_rows").ln(x, w, b, y, mean, rstd, 1e-5, grid=2)
    xd = x.astype(np.float64)
    mu = xd.mean(1)
    r = 1 / np.sqrt(((xd - mu[:, None]) ** 2).mean(1) + 1e-5)
    np.testing.assert_allclose(mean, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, r, rtol=1e-5)
    np.testing.assert_allclose(y, (xd - mu[:, None]) * r[:, None] * w + b, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(("act", "norm"), [(0, False), (1, True), (2, True)])
def test_persistent_gemm(act: int, norm: bool) -> None:
    rng = np.random.default_rng(6)
    m, n, k = 130, 60, 96
    a = (rng.standard_normal((m, k)) * .3).astype(np.float16)
    b = (rng.standard_normal((k, n)) * .3).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    c, rn = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    _load("persistent_gemm").pgemm(a, b, bias, c, rn, act, 0.1, grid=(3,), NORM=norm)
    x = a.astype(np.float64) @ b.astype(np.float64) + bias
    x = np.maximum(x, 0) if act == 1 else np.where(x > 0, x, x * 0.1) if act == 2 else x
    x = x * 0.25
    if norm:
        r = np.sqrt((x * x).sum(1)) + 1e-6
        np.testing.assert_allclose(rn, r, rtol=1e-4)
        x = x / r[:, None]
    np.testing.assert_allclose(c, x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_nvrtc_compiles_without_spills(name: str, arch: str) -> None:
    src = (DIR / f"{name}.tsr").read_text()
    result = compile_source(SourceFile(f"{name}.tsr", src), options=CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, name=f"{name}.cu", arch=arch)
    assert nv.warnings == ()
    for kern in result.kernels:
        res = nv.kernel(kern.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res
