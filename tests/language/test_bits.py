"""Integers and bits (spec section 5): `popc`, `clz`, `ffs`, `brev`, `mulhi` on 32- and 64-bit
integers, `bitcast(x, T)`, and the constants `inf` and `nan`. On the CPU backend against Python's
exact integers and NumPy's views at the edge values (0, 1, -1, the minimum and maximum, every power of
two, NaN and infinity bit patterns) on sizes that are not a multiple of the group; the C they print
(no `inf` or `nan` text); NVRTC without warnings on sm_80 and sm_90; the SASS instructions they
become. The misuses are in tests/transpile/checks/test_diagnostics.py (group "integers and bits")."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import tessera
from samples.case import bf16_values
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass, instructions
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

BITS = """
@kernel tile[(128,)]
def bits32(x: i32[n], y: i32[n], u: u32[n], v: u32[n], o: mut i32[n, 8], p: mut u32[n, 2]):
    i = global_linear_id()
    if i < n:
        o[i, 0] = popc(x[i])
        o[i, 1] = clz(x[i])
        o[i, 2] = ffs(x[i])
        o[i, 3] = brev(x[i])
        o[i, 4] = mulhi(x[i], y[i])
        o[i, 5] = popc(u[i])
        o[i, 6] = clz(u[i])
        o[i, 7] = ffs(u[i])
        p[i, 0] = brev(u[i])
        p[i, 1] = mulhi(u[i], v[i])

@kernel tile[(128,)]
def bits64(x: i64[n], y: i64[n], u: u64[n], v: u64[n], o: mut i32[n, 6], p: mut i64[n, 2], q: mut u64[n, 2]):
    i = global_linear_id()
    if i < n:
        o[i, 0] = popc(x[i])
        o[i, 1] = clz(x[i])
        o[i, 2] = ffs(x[i])
        o[i, 3] = popc(u[i])
        o[i, 4] = clz(u[i])
        o[i, 5] = ffs(u[i])
        p[i, 0] = brev(x[i])
        p[i, 1] = mulhi(x[i], y[i])
        q[i, 0] = brev(u[i])
        q[i, 1] = mulhi(u[i], v[i])

@kernel tile[(128,)]
def literals(x: u32[n], o: mut u32[n], s: mut i64[n]):
    i = global_linear_id()
    if i < n:
        o[i] = mulhi(x[i], 3000000000) + u32(popc(255)) + brev(u32(1))
        s[i] = mulhi(i64(x[i]), 1 << 40)
"""

CASTS = """
@kernel tile[(128,)]
def casts(f: f32[n], d: f64[n], h: f16[n], b: bf16[n], w: u32[n], l: i64[n], s: u16[n],
          fw: mut u32[n], di: mut i64[n], du: mut u64[n], hs: mut u16[n], bs: mut i16[n],
          wf: mut f32[n], ld: mut f64[n], sh: mut f16[n], sb: mut bf16[n], wi: mut i32[n], hb: mut bf16[n]):
    i = global_linear_id()
    if i < n:
        fw[i] = bitcast(f[i], u32)
        di[i] = bitcast(d[i], i64)
        du[i] = bitcast(d[i], u64)
        hs[i] = bitcast(h[i], u16)
        bs[i] = bitcast(b[i], i16)
        wf[i] = bitcast(w[i], f32)
        ld[i] = bitcast(l[i], f64)
        sh[i] = bitcast(s[i], f16)
        sb[i] = bitcast(s[i], bf16)
        wi[i] = bitcast(w[i], i32)
        hb[i] = bitcast(h[i], bf16)
"""

INF = """
const NEG = -inf
const HUGE = inf * 2.0

@kernel tile[(128,)]
def infs(x: f32[n], h: f16[n], d: f64[n], m: mut f32[n], hh: mut f16[n], dd: mut f64[n], flags: mut i32[n]):
    i = global_linear_id()
    if i < n:
        best = -inf
        if x[i] > best:
            best = x[i]
        m[i] = best
        hh[i] = h[i] * inf
        dd[i] = max(d[i], -inf) + 0.0 * nan
        flags[i] = i32(x[i] > -inf) + 2 * i32(x[i] < inf) + 4 * i32(x[i] != x[i]) \\
            + 8 * i32(bitcast(inf, u32) == 0x7f800000) + 16 * i32(NEG == -HUGE) + 32 * i32(x[i] == NEG)
"""

MASK = {32: 2**32 - 1, 64: 2**64 - 1}


def _edges(bits: int, signed: bool, n: int, seed: int) -> np.ndarray:
    """0, 1, -1, the extremes, every power of two and its neighbours, then random values: n in all."""
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    vals = [0, 1, lo, hi, lo + 1, hi - 1, 0x55555555, 0xAAAAAAAA]
    if signed:
        vals.append(-1)
    for k in range(bits):
        vals += [1 << k, (1 << k) - 1, (1 << k) + 1]
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 2**63, size=n, dtype=np.uint64) * 2 + rng.integers(0, 2, size=n, dtype=np.uint64)
    vals += [int(w) for w in words]
    out = [((v & MASK[bits]) - (2**bits if signed and (v & MASK[bits]) >> (bits - 1) else 0)) for v in vals]
    return np.array(out[:n], dtype=f"{'i' if signed else 'u'}{bits // 8}")


def _popc(v: int, bits: int) -> int:
    return bin(v & MASK[bits]).count("1")


def _clz(v: int, bits: int) -> int:
    return bits - (v & MASK[bits]).bit_length()


def _ffs(v: int, bits: int) -> int:
    u = v & MASK[bits]
    return (u & -u).bit_length()


def _brev(v: int, bits: int) -> int:
    return int(format(v & MASK[bits], f"0{bits}b")[::-1], 2)


def _wrap(v: int, bits: int, signed: bool) -> int:
    u = v & MASK[bits]
    return u - 2**bits if signed and u >> (bits - 1) else u


def _mulhi(a: int, b: int, bits: int, signed: bool) -> int:
    return _wrap((a * b) >> bits, bits, signed)  # Python's >> of a negative product is arithmetic


@functools.cache
def _cpu(source: str):
    return tessera.compile(source, backend="cpu", path="bits.tsr")


def _grid(n: int) -> tuple[int]:
    return (max(1, -(-n // 128)),)


@pytest.mark.parametrize("n", [1, 127, 300])
def test_bits_32(n: int) -> None:
    x, u = _edges(32, True, n, 1), _edges(32, False, n, 2)
    y, v = x[::-1].copy(), np.roll(u, 7)
    o = np.full((n, 8), 12345, np.int32)
    p = np.full((n, 2), 12345, np.uint32)
    _cpu(BITS).bits32(x, y, u, v, o, p, grid=_grid(n))
    for i in range(n):
        a, b, c, d = int(x[i]), int(y[i]), int(u[i]), int(v[i])
        want = [_popc(a, 32), _clz(a, 32), _ffs(a, 32), _wrap(_brev(a, 32), 32, True), _mulhi(a, b, 32, True),
                _popc(c, 32), _clz(c, 32), _ffs(c, 32)]
        assert o[i].tolist() == want, (i, a, c)
        assert p[i].tolist() == [_brev(c, 32), _mulhi(c, d, 32, False)], (i, c, d)


@pytest.mark.parametrize("n", [1, 129, 400])
def test_bits_64(n: int) -> None:
    x, u = _edges(64, True, n, 3), _edges(64, False, n, 4)
    y, v = x[::-1].copy(), np.roll(u, 5)
    o = np.full((n, 6), 12345, np.int32)
    p = np.full((n, 2), 12345, np.int64)
    q = np.full((n, 2), 12345, np.uint64)
    _cpu(BITS).bits64(x, y, u, v, o, p, q, grid=_grid(n))
    for i in range(n):
        a, b, c, d = int(x[i]), int(y[i]), int(u[i]), int(v[i])
        assert o[i].tolist() == [_popc(a, 64), _clz(a, 64), _ffs(a, 64), _popc(c, 64), _clz(c, 64), _ffs(c, 64)]
        assert p[i].tolist() == [_wrap(_brev(a, 64), 64, True), _mulhi(a, b, 64, True)], (i, a, b)
        assert q[i].tolist() == [_brev(c, 64), _mulhi(c, d, 64, False)], (i, c, d)


def test_literals_take_the_other_operands_type() -> None:
    n = 70
    x = _edges(32, False, n, 5)
    o = np.zeros(n, np.uint32)
    s = np.zeros(n, np.int64)
    _cpu(BITS).literals(x, o, s, grid=_grid(n))
    for i in range(n):
        a = int(x[i])
        assert int(o[i]) == (_mulhi(a, 3000000000, 32, False) + 8 + (1 << 31)) & MASK[32]
        assert int(s[i]) == _mulhi(a, 1 << 40, 64, True)


def test_bits_types_and_c() -> None:
    cuda = compile_source(SourceFile("b.tsr", BITS)).cuda
    assert "__popc((unsigned int)x[i])" in cuda and "__clz(x[i])" in cuda and "__ffs(x[i])" in cuda
    assert "(int)__brev((unsigned int)x[i])" in cuda and "__mulhi(x[i], y[i])" in cuda
    assert "__umulhi(u[i], v[i])" in cuda and "__brev(u[i])" in cuda
    assert "__popcll((unsigned long long)x[i])" in cuda and "__clzll(x[i])" in cuda and "__ffsll(x[i])" in cuda
    assert "(long long)__brevll((unsigned long long)x[i])" in cuda and "__mul64hi(x[i], y[i])" in cuda
    assert "__umul64hi(u[i], v[i])" in cuda and "__clzll((long long)u[i])" in cuda
    # a literal too wide for the other operand widens the product (1 << 40 is an i64)
    assert "__mul64hi((long long)x[i], 1099511627776ll)" in cuda
    assert "__umulhi(x[i], 3000000000u)" in cuda


def _half_nan(bits: np.ndarray) -> np.ndarray:
    return ((bits & 0x7C00) == 0x7C00) & ((bits & 0x03FF) != 0)


def _bf16_nan(bits: np.ndarray) -> np.ndarray:
    return ((bits & 0x7F80) == 0x7F80) & ((bits & 0x007F) != 0)


@pytest.mark.parametrize("n", [3, 200])
def test_bitcast(n: int) -> None:
    rng = np.random.default_rng(n)
    w = np.concatenate([np.array([0, 1, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x80000000,
                                  0x00000001, 0x3F800000], np.uint32),
                        rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)])[:n]
    lw = np.concatenate([np.array([0, 1, -1, 0x7FF0000000000000, -(2**63), 0x7FF8000000000001, 0x3FF0000000000000],
                                  np.int64), rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)])[:n]
    sw = np.concatenate([np.array([0, 1, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0xFFFF, 0x3C00, 0x7F80, 0x3F80], np.uint16),
                         rng.integers(0, 2**16, n, dtype=np.uint64).astype(np.uint16)])[:n]
    f, d, h = w.view(np.float32).copy(), lw.view(np.float64).copy(), sw.view(np.float16).copy()
    # bf16 inputs that are not NaN: f16/bf16 values are held in f32 in the C, where a NaN keeps no payload
    b = np.where(_bf16_nan(sw), np.uint16(0x3F80), sw)
    h = np.where(np.isnan(h), np.float16(1.5), h)
    outs = dict(fw=np.zeros(n, np.uint32), di=np.zeros(n, np.int64), du=np.zeros(n, np.uint64),
                hs=np.zeros(n, np.uint16), bs=np.zeros(n, np.int16), wf=np.zeros(n, np.float32),
                ld=np.zeros(n, np.float64), sh=np.zeros(n, np.float16), sb=np.zeros(n, np.uint16),
                wi=np.zeros(n, np.int32), hb=np.zeros(n, np.uint16))
    _cpu(CASTS).casts(f, d, h, b, w, lw, sw, *outs.values(), grid=_grid(n))
    assert np.array_equal(outs["fw"], w)
    assert np.array_equal(outs["di"], lw) and np.array_equal(outs["du"], lw.view(np.uint64))
    assert np.array_equal(outs["hs"], h.view(np.uint16)) and np.array_equal(outs["bs"], b.view(np.int16))
    assert np.array_equal(outs["wf"].view(np.uint32), w)
    assert np.array_equal(outs["ld"].view(np.int64), lw)
    assert np.array_equal(outs["wi"], w.view(np.int32))
    assert np.array_equal(outs["hb"], h.view(np.uint16))
    sh = outs["sh"].view(np.uint16)
    keep = ~_half_nan(sw)
    assert np.array_equal(sh[keep], sw[keep]) and np.all(np.isnan(outs["sh"][~keep]))
    keep = ~_bf16_nan(sw)
    assert np.array_equal(outs["sb"][keep], sw[keep]) and np.all(np.isnan(bf16_values(outs["sb"][~keep])))


def test_bitcast_c() -> None:
    cuda = compile_source(SourceFile("c.tsr", CASTS)).cuda
    for text in ("fw[i] = __float_as_uint(f[i]);", "di[i] = __double_as_longlong(d[i]);",
                 "du[i] = (unsigned long long)__double_as_longlong(d[i]);",
                 "hs[i] = __half_as_ushort(__float2half_rn(__half2float(h[i])));",
                 "wf[i] = __uint_as_float(w[i]);", "ld[i] = __longlong_as_double(l[i]);",
                 "wi[i] = (int)w[i];"):
        assert text in cuda, (text, cuda)
    assert "__ushort_as_half(s[i])" in cuda and "__ushort_as_bfloat16(s[i])" in cuda


@pytest.mark.parametrize("n", [1, 130])
def test_inf_and_nan(n: int) -> None:
    x = np.concatenate([np.array([0.0, -np.inf, np.inf, np.nan, -1.0, 3.0e38], np.float32),
                        np.linspace(-5, 5, n, dtype=np.float32)])[:n]
    h = np.concatenate([np.array([0.0, -2.0, np.inf, 65504.0], np.float16), np.ones(n, np.float16)])[:n]
    d = np.concatenate([np.array([-np.inf, np.nan, 1e300], np.float64), np.arange(n, dtype=np.float64)])[:n]
    m, hh, dd, flags = np.zeros(n, np.float32), np.zeros(n, np.float16), np.zeros(n, np.float64), np.zeros(n, np.int32)
    _cpu(INF).infs(x, h, d, m, hh, dd, flags, grid=_grid(n))
    with np.errstate(invalid="ignore"):
        want_m = np.where(x > -np.inf, x, np.float32(-np.inf))
        want_hh = (h.astype(np.float32) * np.float32(np.inf)).astype(np.float16)
        want_flags = ((x > -np.inf).astype(np.int32) + 2 * (x < np.inf) + 4 * np.isnan(x) + 8 + 16
                      + 32 * (x == -np.inf))
    assert np.array_equal(m, want_m, equal_nan=True)
    assert np.array_equal(hh, want_hh, equal_nan=True)
    assert np.all(np.isnan(dd))
    assert np.array_equal(flags, want_flags)


def test_inf_and_nan_types_and_c() -> None:
    cuda = compile_source(SourceFile("i.tsr", INF)).cuda
    assert not re.search(r"\b(inf|nan|INFINITY|NAN|HUGE_VALF?)\b", cuda.split("extern \"C\"")[-1].replace(
        "infs", "")), cuda
    assert "float best = -__int_as_float(0x7f800000);" in cuda          # -inf alone is an f32
    assert "tsr_round_f16(__half2float(h[i]) * __int_as_float(0x7f800000))" in cuda  # h * inf stays f16
    assert "fmax(d[i], -__longlong_as_double(0x7ff0000000000000LL))" in cuda      # next to an f64: f64
    assert "__longlong_as_double(0x7ff8000000000000LL)" in cuda
    # the non-finite module constants are written out where they are used
    assert "NEG is not finite" in cuda and "HUGE is not finite" in cuda


def test_inf_folds_without_errors() -> None:
    src = ("const A = -inf\nconst B = A + 1.0\nconst C = abs(A)\nconst D = f64(inf)\nconst E = nan * 0.0\n"
           "const F = 1.0 / inf\nconst G = inf > 1e38\n"
           "@kernel tile[(32,)]\ndef k(y: mut f32[4], z: mut f64[1], b: mut bool[1]):\n"
           "    y[0] = A + B\n    y[1] = C - inf\n    y[2] = E + F + inf % 2.0 + inf // 2.0\n"
           "    y[3] = min(inf, -inf, nan)\n    z[0] = D\n    b[0] = G\n")
    cuda = compile_source(SourceFile("f.tsr", src)).cuda
    assert not re.search(r"\b(inf|nan)\b", cuda.split("extern \"C\"")[-1]), cuda
    y, z, b = np.zeros(4, np.float32), np.zeros(1, np.float64), np.zeros(1, np.bool_)
    tessera.compile(src, backend="cpu", path="f.tsr").k(y, z, b, grid=(1,))
    assert y[0] == -np.inf and np.isnan(y[1]) and np.isnan(y[2]) and y[3] == -np.inf
    assert z[0] == np.inf and b[0]


# ---- NVRTC and SASS -----------------------------------------------------------------------------

@functools.cache
def _nvrtc(arch: str, source: str):
    result = compile_source(SourceFile("bits.tsr", source), options=CompileOptions(arch=arch))
    return result, compile_cuda(result.cuda, name="bits.cu", arch=arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", [BITS, CASTS, INF], ids=["bits", "casts", "inf"])
def test_nvrtc_compiles_without_warnings(arch: str, source: str) -> None:
    _, nv = _nvrtc(arch, source)
    assert nv.cubin is not None and not nv.warnings, nv.warnings


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_sass(arch: str) -> None:
    result, nv = _nvrtc(arch, BITS)
    assert nv.cubin is not None
    text = disassemble(nv.cubin)
    ops = {k.name: instructions(function_sass(text, k.c_name)) for k in result.kernels}
    for name in ("bits32", "bits64"):
        kinds = {op.split(".")[0] for op in ops[name]}
        assert {"POPC", "FLO", "BREV"} <= kinds, (name, sorted(kinds))
    # mulhi: one IMAD.HI per 32-bit product; a 64-bit high half is built from wide 32-bit products
    assert "IMAD.HI" in ops["bits32"] and "IMAD.HI.U32" in ops["bits32"], ops["bits32"]
    assert "IMAD.WIDE.U32.X" in ops["bits64"], ops["bits64"]
    assert not any(op.split(".")[0] in ("LDL", "STL") for o in ops.values() for op in o)



def test_in_a_map_kernel() -> None:
    """The bit builtins are elementwise intrinsics: a map kernel may use them (both variants)."""
    src = ("@kernel tile[(128,)] vectorize(4)\ndef m(X: f32[n], Z: mut u32[n], P: mut i32[n], Y: mut f32[n]):\n"
           "    Z[:] = bitcast(X, u32)\n    P[:] = popc(bitcast(X, i32))\n    Y[:] = max(X, -inf)\n")
    mod = _cpu(src)
    for n in (1, 7, 515):
        x = np.resize(np.array([1.0, -np.inf, np.nan, 2.5, 0.0, -3.0, 7.0], np.float32), n)
        z, p, y = np.zeros(n, np.uint32), np.zeros(n, np.int32), np.zeros(n, np.float32)
        mod.m(x, z, p, y)
        assert np.array_equal(z, x.view(np.uint32))
        assert p.tolist() == [bin(int(v)).count("1") for v in x.view(np.uint32)]
        assert np.array_equal(y, np.where(np.isnan(x), np.float32(-np.inf), x))
        if n > 1:  # a misaligned view runs the generic variant
            z2 = np.zeros(n, np.uint32)
            mod.m(x[1:], z2[1:], p[1:], y[1:])
            assert np.array_equal(z2[1:], x[1:].view(np.uint32))
