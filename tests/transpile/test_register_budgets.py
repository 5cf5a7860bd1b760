"""Register budgets (spec section 15) and the aligned variant's assumptions: a kernel without
`launch_bounds` may use every register the architecture allows its group, the generic variant of a
GEMM with asynchronous copies uses about the registers of the aligned one, an attention kernel's
aligned variant asks only for the shape symbols its rows need, and no sample, test program or port
here spills on sm_80 or sm_90 (the ptxas report of an NVRTC build)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source, load_source
from tests.conftest import ROOT, SAMPLES
from tests.transpile.test_shared_reuse import WMMA

# Each tile keeps 24 values in registers through a loop: more than ptxas's occupancy target for a
# group of 256 (40 registers on sm_80 with `__launch_bounds__(256)` alone).
PRESSURE = """\
@kernel tile[(256,)]
def pressure(x: f32[n], y: mut f32[m], k: i32):
    acc = tregs(f32[24], 0.0)
    t = group_id(0) * 256 + tile_id(0)
    for j in static_range(24):
        acc[j] = x[(t + j * 7) % n]
    for i in range(k):
        for j in static_range(24):
            acc[j] = acc[j] * x[(i + j) % n] + acc[(j + 1) % 24]
    s = 0.0
    for j in static_range(24):
        s += acc[j] * f32(j)
    y[t % m] = s
"""

# PyTorch's depthwise-convolution backward (the gradient of the input), as a port writes it.
DWCONV = """\
@kernel tile[(256,)]
def dw_grad_input(gy: f32[N, C, OH, OW], w: f32[C, KH, KW], gx: mut f32[N, C, H, W], sh: i32, sw: i32, ph: i32,
                  pw: i32, dh: i32, dw: i32):
    total = i64(N) * i64(C) * i64(H) * i64(W)
    for li in range(i64(group_id(0)) * 256 + i64(tile_id(0)), total, i64(group_count(0)) * 256):
        x = li % i64(W)
        y = (li // i64(W)) % i64(H)
        c = (li // (i64(W) * i64(H))) % i64(C)
        n = li // (i64(W) * i64(H) * i64(C))
        acc = 0.0
        for kh in static_range(3):
            for kw in static_range(3):
                oys = y + i64(ph) - i64(kh * dh)
                oxs = x + i64(pw) - i64(kw * dw)
                if oys % i64(sh) == 0 and oxs % i64(sw) == 0:
                    oy = oys // i64(sh)
                    ox = oxs // i64(sw)
                    if oy >= 0 and oy < i64(OH) and ox >= 0 and ox < i64(OW):
                        acc += w[c, kh, kw] * gy[n, c, oy, ox]
        gx[n, c, y, x] = acc
"""

# Attention in the style of a FlashAttention port: a block of query rows per group, key and value
# blocks streamed through shared memory with asynchronous copies, an online softmax per row.
ATTENTION = """\
@kernel tile[(BM,)]
def attention(Q: f16[Z, H, N_CTX, D], K: f16[Z, H, N_CTX, D], V: f16[Z, H, N_CTX, D], O: mut f32[Z, H, N_CTX, D],
              scale: f32, BM: const i32 = 32, BN: const i32 = 32, HD: const i32 = 64):
    Qs = tshared.alloc(f16[BM, HD])
    Ks = tshared.alloc(f16[BN, HD])
    Vs = tshared.alloc(f16[BN, HD])
    z = group_id(2)
    h = group_id(1)
    m0 = group_id(0) * BM
    r = tile_id(0)
    tcopy_async(Qs, Q[z, h, m0:m0 + BM, 0:HD])
    tcommit()
    acc = tregs(f32[HD], 0.0)
    mx = -1.0e30
    l = 0.0
    for n0 in range(0, N_CTX, BN):
        tcopy_async(Ks, K[z, h, n0:n0 + BN, 0:HD])
        tcopy_async(Vs, V[z, h, n0:n0 + BN, 0:HD])
        tcommit()
        twait()
        for j in range(min(BN, N_CTX - n0)):
            s = 0.0
            for d in static_range(HD):
                s += f32(Qs[r, d]) * f32(Ks[j, d])
            mnew = max(mx, s * scale)
            c = exp(mx - mnew)
            p = exp(s * scale - mnew)
            l = l * c + p
            for d in static_range(HD):
                acc[d] = acc[d] * c + p * f32(Vs[j, d])
            mx = mnew
        tbarrier()
    if m0 + r < N_CTX:
        for d in static_range(HD):
            O[z, h, m0 + r, d] = acc[d] / l
"""


def _cuda(text: str, arch: str = "sm_80", **options: object) -> str:
    return compile_source(SourceFile("t.tsr", text), CompileOptions(arch=arch, **options)).cuda  # type: ignore[arg-type]


def test_a_kernel_without_launch_bounds_may_use_every_register_of_one_group() -> None:
    assert 'extern "C" __global__ void __launch_bounds__(256, 1)\npressure(' in _cuda(PRESSURE)
    bounded = PRESSURE.replace("tile[(256,)]", "tile[(256,)] launch_bounds(3)")
    assert 'extern "C" __global__ void __launch_bounds__(256, 3)\npressure(' in _cuda(bounded)
    for arch in ("sm_80", "sm_90"):
        default = compile_cuda(_cuda(PRESSURE, arch), arch=arch).kernel("pressure")
        one = compile_cuda(_cuda(PRESSURE.replace("tile[(256,)]", "tile[(256,)] launch_bounds(1)"), arch),
                           arch=arch).kernel("pressure")
        assert default.registers == one.registers > 48, (default, one)  # ptxas's occupancy target: 40 or 48


@pytest.mark.parametrize("sample", ["tc_gemm_bf16_bias_relu", "tc_gemm_f16", "tc_gemm_i8"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_generic_variant_of_an_async_gemm_needs_about_the_registers_of_the_aligned_one(sample: str,
                                                                                           arch: str) -> None:
    # The generic variant's copies test alignment and fall back to single elements; unrolled, that
    # fallback kept a whole tile's elements in registers (244-251 registers against 98-126).
    result = compile_source(load_source(f"samples/{sample}.tsr"), CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, arch=arch)
    generic, aligned = (nv.kernel(k.c_name).registers for k in result.kernels)
    assert generic <= aligned + 32, (generic, aligned)


def test_the_attention_kernel_asks_only_for_an_aligned_head_dimension() -> None:
    (generic, aligned) = compile_source(SourceFile("t.tsr", ATTENTION)).kernels
    assert (generic.align_tensors, generic.align_symbols) == (("Q", "K", "V"), ("D",))
    assert aligned.aligned and aligned.align_symbols == ("D",)
    # A head dimension that is a constant aligns every row by itself: nothing is asked of the shapes.
    constant = ATTENTION.replace("N_CTX, D]", "N_CTX, 64]")
    assert compile_source(SourceFile("t.tsr", constant)).kernels[0].align_symbols == ()


@pytest.mark.usefixtures("shared_cache")
def test_ordinary_attention_shapes_get_the_aligned_variant(launched: list[str]) -> None:
    mod = tessera.compile(ATTENTION, backend="cpu", check_bounds=True, path="attention.tsr")
    rng = np.random.default_rng(11)
    z, h, n, d = 1, 3, 50, 64  # H and N_CTX not multiples of 16
    q, k, v = (rng.standard_normal((z, h, n, d)).astype(np.float16) for _ in range(3))
    o = np.zeros((z, h, n, d), np.float32)
    mod.attention(q, k, v, o, 0.125, grid=(2, h, z))
    assert launched == ["attention_BM32_BN32_HD64_a16"]
    s = np.einsum("zhqd,zhkd->zhqk", q.astype(np.float32), k.astype(np.float32)) * 0.125
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = np.einsum("zhqk,zhkd->zhqd", p / p.sum(axis=-1, keepdims=True), v.astype(np.float32))
    np.testing.assert_allclose(o, want, rtol=2e-5, atol=2e-5)


PROGRAMS = {p.stem: p.read_text() for p in [*SAMPLES, ROOT / "tests" / "programs" / "features.tsr"]} | {
    "pressure": PRESSURE, "dwconv": DWCONV, "attention": ATTENTION, "wmma": WMMA}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_no_sample_or_test_kernel_spills(name: str, arch: str) -> None:
    result = compile_source(SourceFile(f"{name}.tsr", PROGRAMS[name]), CompileOptions(arch=arch))
    nv = compile_cuda(result.cuda, arch=arch)
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0, res
