"""Device functions with array parameters and several results, and tuple assignment (spec section
6): the CPU backend against NumPy at sizes that are not multiples of the group, the run-time checks
through array parameters (check_bounds), the emitted C, and NVRTC (no warnings, no spills)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError, SourceFile, TesseraError
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

# A block scan (Hillis-Steele, barriers inside the helper), a shared-memory reduction over one row
# of a 2-D shared array, and a bitonic compare-and-swap over a shared array.
SHARED = """
@device
def scan256(s: mut f32[256], t: i32):
    d = 1
    while d < 256:
        v = s[t]
        if t >= d:
            v += s[t - d]
        tbarrier()
        s[t] = v
        tbarrier()
        d *= 2

@device
def row_sum(s: mut f32[rows, 256], row: i32, t: i32) -> f32:
    k = 128
    while k > 0:
        if t < k:
            s[row, t] += s[row, t + k]
        tbarrier()
        k //= 2
    return s[row, 0]

@device
def compare_swap(s: mut i32[256], i: i32, j: i32, up: bool):
    a, b = s[i], s[j]
    if (a > b) == up:
        s[i], s[j] = b, a

@kernel tile[(256,)]
def scan(x: f32[n], out: mut f32[n], sums: mut f32[g]):
    s = tshared.alloc(f32[256])
    r = tshared.alloc(f32[2, 256])
    t = tile_linear_id()
    i = group_id(0) * 256 + t
    v = 0.0
    if i < n:
        v = x[i]
    s[t] = v
    r[0, t] = 0.0
    r[1, t] = v
    tbarrier()
    scan256(s, t)
    if i < n:
        out[i] = s[t]
    total = row_sum(r, 1, t)
    if t == 0:
        sums[group_id(0)] = total

@kernel tile[(256,)]
def bitonic(x: i32[n], out: mut i32[n]):
    s = tshared.alloc(i32[256])
    t = tile_linear_id()
    i = group_id(0) * 256 + t
    s[t] = x[i] if i < n else 2147483647
    tbarrier()
    k = 2
    while k <= 256:
        j = k // 2
        while j > 0:
            p = t ^ j
            if p > t:
                compare_swap(s, t, p, (t & k) == 0)
            tbarrier()
            j //= 2
        k *= 2
    if i < n:
        out[i] = s[t]
"""

# Tensor parameters (2-D with a shape symbol, mut), several results, tuple assignment.
TENSORS = """
@device
def row_dot(a: f32[r, c], row: i32, w: f32[c]) -> f32:
    acc = 0.0
    for j in range(c):
        acc += a[row, j] * w[j]
    return acc

@device
def put(out: mut f32[m], i: i32, v: f32):
    out[i] = v

@device
def cmul(ar: f32, ai: f32, br: f32, bi: f32) -> (f32, f32):
    return ar * br - ai * bi, ar * bi + ai * br

@device
def mix(key: u32, ctr: u32) -> (u32, u32, u32, u32):
    # A Philox-like round: four 32-bit words from a key and a counter.
    lo = ctr * 3528531795
    hi = (ctr >> 16) ^ key
    return lo ^ key, hi, lo + hi, key * 2654435769

@device
def divmod7(x: i32) -> (i32, i32):
    if x < 0:
        return -1, -1
    return x // 7, x % 7

@kernel tile[(64,)]
def matvec(a: f32[r, c], w: f32[c], y: mut f32[r]):
    i = global_linear_id()
    if i < r:
        put(y, i, row_dot(a, i, w))

@kernel tile[(64,)]
def complex_mul(re: f32[n], im: f32[n], out_re: mut f32[n], out_im: mut f32[n]):
    i = global_linear_id()
    if i < n:
        out_re[i], out_im[i] = cmul(re[i], im[i], 0.5, -2.0)

@kernel tile[(64,)]
def philox(key: u32, out: mut u32[n, 4]):
    i = global_linear_id()
    if i < n:
        a, b, c, d = mix(key, u32(i))
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = a, b, c, d

@kernel tile[(64,)]
def swaps(x: i32[n], out: mut i32[n, 3]):
    i = global_linear_id()
    if i < n:
        a = x[i]
        b = i
        a, b = b, a
        q, r = divmod7(a + b)
        divmod7(a)
        out[i, 0], out[i, 1], out[i, 2] = a * 1000 + b, q, r
"""


@functools.cache
def _module(which: str, check_bounds: bool = False) -> tessera.api.Module:
    return tessera.compile(SHARED if which == "shared" else TENSORS, backend="cpu", check_bounds=check_bounds)


@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("n", [1, 255, 257, 1000])
def test_scan_and_reduction_helpers_over_shared_arrays(n: int, check_bounds: bool) -> None:
    m = _module("shared", check_bounds)
    g = (n + 255) // 256
    x = (np.arange(n) % 7 - 3).astype(np.float32)
    out, sums = np.zeros(n, np.float32), np.zeros(g, np.float32)
    m.scan(x, out, sums, grid=g)
    padded = np.zeros(g * 256, np.float32)
    padded[:n] = x
    assert np.array_equal(out, np.cumsum(padded.reshape(g, 256), axis=1).reshape(-1)[:n])
    assert np.array_equal(sums, padded.reshape(g, 256).sum(axis=1))


@pytest.mark.parametrize("n", [3, 256, 700])
def test_bitonic_compare_and_swap_helper(n: int) -> None:
    m = _module("shared", True)
    g = (n + 255) // 256
    x = np.random.default_rng(n).integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros(n, np.int32)
    m.bitonic(x, out, grid=g)
    for b in range(g):
        lo, hi = b * 256, min(n, (b + 1) * 256)
        assert np.array_equal(out[lo:hi], np.sort(x[lo:hi]))


@pytest.mark.parametrize("check_bounds", [False, True])
def test_2d_tensor_parameter_with_shape_symbol_and_mut_tensor_parameter(check_bounds: bool) -> None:
    m = _module("tensors", check_bounds)
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (67, 13)).astype(np.float32)
    w = rng.integers(-3, 4, 13).astype(np.float32)
    y = np.zeros(67, np.float32)
    m.matvec(a, w, y, grid=2)
    assert np.array_equal(y, a @ w)


def test_complex_multiply_returns_two_values() -> None:
    rng = np.random.default_rng(1)
    re, im = rng.standard_normal(101).astype(np.float32), rng.standard_normal(101).astype(np.float32)
    o_re, o_im = np.zeros(101, np.float32), np.zeros(101, np.float32)
    _module("tensors").complex_mul(re, im, o_re, o_im, grid=2)
    z = (re.astype(np.complex64) + 1j * im) * np.complex64(0.5 - 2j)
    assert np.allclose(o_re, z.real, rtol=1e-6, atol=1e-6) and np.allclose(o_im, z.imag, rtol=1e-6, atol=1e-6)


def test_four_results() -> None:
    n = 130
    out = np.zeros((n, 4), np.uint32)
    key = 0x9E3779B9
    _module("tensors").philox(np.uint32(key), out, grid=3)
    ctr = np.arange(n, dtype=np.uint64)
    lo = (ctr * 3528531795) & 0xFFFFFFFF
    hi = (ctr >> 16) ^ key
    want = np.stack([lo ^ key, hi, (lo + hi) & 0xFFFFFFFF, np.full(n, (key * 2654435769) & 0xFFFFFFFF)], axis=1)
    assert np.array_equal(out, want.astype(np.uint32))


def test_swap_and_tuple_results_as_statements() -> None:
    n = 77
    x = (np.arange(n) * 5 - 100).astype(np.int32)
    out = np.zeros((n, 3), np.int32)
    _module("tensors", True).swaps(x, out, grid=2)
    i = np.arange(n)
    s = x + i
    want = np.stack([i * 1000 + x, np.where(s < 0, -1, s // 7), np.where(s < 0, -1, s % 7)], axis=1)
    assert np.array_equal(out, want)


def test_nested_calls_and_tuple_assignments_in_blocks() -> None:
    src = """
@device
def two(a: i32) -> (i32, f32):
    if a > 3:
        return a * 2, 0.5
    return a, 1

@device
def inner(v: mut f32[k], i: i32):
    q, r = two(i)
    v[i] = f32(q) + r

@device
def outer(v: mut f32[k], i: i32):
    inner(v, i)

@kernel tile[(32,)]
def k(out: mut f32[n]):
    i = global_linear_id()
    if i < n:
        a, b = two(i)
        outer(out, i)
        if i > 1:
            c, d = b, a
        else:
            c, d = 0.0, 0
        out[i] += c + f32(d) * 100.0
"""
    n = 50
    out = np.zeros(n, np.float32)
    tessera.compile(src, backend="cpu", check_bounds=True).k(out, grid=2)
    i = np.arange(n)
    q, r = np.where(i > 3, i * 2, i), np.where(i > 3, 0.5, 1.0)
    assert np.array_equal(out, (q + r + np.where(i > 1, r + q * 100.0, 0)).astype(np.float32))


def test_bounds_check_inside_a_device_function() -> None:
    src = """
@device
def peek(v: f32[n], i: i32) -> f32:
    return v[i + 1]

@kernel tile[(32,)]
def k(x: f32[n], out: mut f32[n]):
    i = global_linear_id()
    if i < n:
        out[i] = peek(x, i)
"""
    m = tessera.compile(src, backend="cpu", check_bounds=True)
    x, out = np.zeros(40, np.float32), np.zeros(40, np.float32)
    with pytest.raises(TesseraError, match=r"peek.*index 40.*'v'|out of range"):
        m.k(x, out, grid=2)


def test_race_through_a_shared_array_parameter_is_reported() -> None:
    src = """
@device
def shift(s: mut f32[64], t: i32):
    v = s[(t + 1) % 64]
    s[t] = v

@kernel tile[(64,)]
def k(out: mut f32[n]):
    s = tshared.alloc(f32[64])
    t = tile_linear_id()
    s[t] = f32(t)
    tbarrier()
    shift(s, t)
    tbarrier()
    out[t] = s[t]
"""
    m = tessera.compile(src, backend="cpu", check_bounds=True)
    with pytest.raises(LaunchError, match="race"):
        m.k(np.zeros(64, np.float32), grid=1)
    # The same helper given a global tensor is not routed through the race detector.
    src2 = src.replace("shift(s, t)", "shift2(out, t)").replace(
        "@kernel", "@device\ndef shift2(o: mut f32[m], t: i32):\n    o[t] = o[t] + 1.0\n\n@kernel")
    out = np.zeros(64, np.float32)
    tessera.compile(src2, backend="cpu", check_bounds=True).k(out, grid=1)
    assert np.array_equal(out, np.arange(64, dtype=np.float32))


def test_emitted_c_passes_pointers_and_strides() -> None:
    result = compile_source(SourceFile("d.tsr", SHARED), options=CompileOptions(arch="sm_90"))
    cuda = result.cuda
    assert "row_sum(float* s, int tsr_stride0_s, int row, int t, int rows)" in cuda
    assert "row_sum(&r[0][0], 256, 1, t, 2)" in cuda
    assert "scan256(&s[0], t)" in cuda
    result = compile_source(SourceFile("t.tsr", TENSORS), options=CompileOptions(arch="sm_90"))
    assert "row_dot(const float* a, int tsr_stride0_a, int row, const float* w, int r, int c)" in result.cuda
    assert "row_dot(a, c, i, w, r, c)" in result.cuda
    assert "cmul(float ar, float ai, float br, float bi, float* tsr_result0, float* tsr_result1)" in result.cuda


def _nvrtc(arch: str, source: str):
    result = compile_source(SourceFile("dev.tsr", source), options=CompileOptions(arch=arch))
    return result, compile_cuda(result.cuda, name="dev.cu", arch=arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("which", ["shared", "tensors"])
def test_nvrtc_no_warnings_and_no_spills(arch: str, which: str) -> None:
    try:
        result, nv = _nvrtc(arch, SHARED if which == "shared" else TENSORS)
    except TesseraError as e:  # no NVRTC on this machine
        if "NVRTC" in str(e) or "nvrtc" in str(e):
            pytest.skip(str(e))
        raise
    assert nv.warnings == ()
    for k in result.kernels:
        res = nv.kernel(k.c_name)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, (k.c_name, res)
