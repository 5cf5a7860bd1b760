"""Assigning scalar parameters (spec sections 4 and 6: a scalar parameter is passed by value, so a
body may assign it, as a CUDA function may: `h ^= h >> 16` in a hash mixer). Ported programs on the
CPU backend against Python, the C they print (the parameter keeps its name and, in a kernel, its
`const`; the body works on a local copy), NVRTC without warnings on sm_80 and sm_90, the cooperation
rule through an assigned parameter, the errors that remain (shape symbols, array parameters,
conversions), and a seeded random differential generator (tests/language/param_assign_gen.py):
each function assigning its parameter against the same statements on an explicit local copy and
against a Python model."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile, TesseraError
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.language.param_assign_gen import M32, model, program

pytestmark = pytest.mark.usefixtures("shared_cache")

PORTS = """
@device
def fmix32(h: u32) -> u32:                 # MurmurHash3's finalizer, as CUDA code writes it
    h ^= h >> 16
    h *= 0x85ebca6b
    h ^= h >> 13
    h *= 0xc2b2ae35
    h ^= h >> 16
    return h

@device
def popcount_loop(v: u32) -> i32:          # Kernighan's loop: the parameter is the loop state
    c = 0
    while v != 0:
        v &= v - 1
        c += 1
    return c

@device
def gcd(a: i64, b: i64) -> i64:            # recursion with assigned parameters
    if a < 0: a = -a
    if b < 0: b = -b
    if b == 0:
        return a
    return gcd(b, a % b)

@device
def ordered(a: f32, b: f32) -> (f32, f32):
    if a > b:
        a, b = b, a
    return a, b

@kernel tile[(64,)]
def ports(x: u32[n], y: i64[n], o: mut u32[n, 2], g: mut i64[n], lohi: mut f32[n, 2], base: u32, scale: f32):
    i = global_linear_id()
    if i >= n:
        return
    base += u32(i)                          # the kernel's own parameter, per tile
    scale *= 2.0
    o[i, 0] = fmix32(x[i] ^ base)
    o[i, 1] = u32(popcount_loop(x[i]))
    g[i] = gcd(y[i], 84)
    lo, hi = ordered(f32(x[i] & 255) * scale, f32(y[i] & 255))
    lohi[i, 0] = lo
    lohi[i, 1] = hi

@kernel tile[(32, 2)]
def rows(x: f32[m, k], out: mut f32[m], start: i32):
    # group-wide: every tile assigns `start` the same way, then the group cooperates
    s = tshared.alloc(f32[64])
    start += group_linear_id() * 0
    t = tile_linear_id()
    r = group_linear_id()
    acc = 0.0
    for j in range(t + start, k, 64):
        acc += x[r, j]
    s[t] = acc
    tbarrier()
    if t == 0:
        total = 0.0
        for j in range(64):
            total += s[j]
        out[r] = total
"""


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = h * 0x85EBCA6B & M32
    h ^= h >> 13
    h = h * 0xC2B2AE35 & M32
    return h ^ (h >> 16)


def test_ported_functions_assign_their_parameters() -> None:
    mod = tessera.compile(PORTS, backend="cpu", check_bounds=True)
    rng = np.random.default_rng(5)
    n = 150
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x[:3] = [0, 1, M32]
    y = rng.integers(-(10**12), 10**12, n).astype(np.int64)
    o = np.zeros((n, 2), np.uint32)
    g = np.zeros(n, np.int64)
    lohi = np.zeros((n, 2), np.float32)
    base, scale = 0x9E3779B9, np.float32(0.75)
    mod.ports(x, y, o, g, lohi, base, scale, grid=3)
    import math
    for i in range(n):
        v = int(x[i])
        assert int(o[i, 0]) == _fmix(v ^ ((base + i) & M32)), i
        assert int(o[i, 1]) == bin(v).count("1"), i
        assert int(g[i]) == math.gcd(int(y[i]), 84), i
        a, b = float(np.float32(v & 255) * np.float32(scale * 2)), float(int(y[i]) & 255)
        assert list(lohi[i]) == sorted([a, b]), i
    x2 = rng.standard_normal((3, 200)).astype(np.float32)
    out = np.zeros(3, np.float32)
    mod.rows(x2, out, 5, grid=3)
    np.testing.assert_allclose(out, x2[:, 5:].sum(axis=1), rtol=1e-5)
    mod.rows(x2, out, start=0, grid=3)  # the launch passes it by its name
    np.testing.assert_allclose(out, x2.sum(axis=1), rtol=1e-5)


def test_the_parameter_keeps_its_name_and_const() -> None:
    cuda = compile_source(SourceFile("p.tsr", PORTS), options=CompileOptions(arch="sm_90")).cuda
    assert "fmix32(unsigned int h)" in cuda
    assert "unsigned int tsr_local_h = h;" in cuda
    assert "tsr_local_h ^= tsr_local_h >> 16u;" in cuda
    assert "const unsigned int base, const float scale" in cuda  # the kernel's stay const
    assert "unsigned int tsr_local_base = base;" in cuda
    info = {k.name: k for k in compile_source(SourceFile("p.tsr", PORTS)).kernels}
    assert [p.name for p in info["ports"].params][:8] == ["x", "y", "o", "g", "lohi", "base", "scale", "n"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_no_warnings(arch: str) -> None:
    result = compile_source(SourceFile("p.tsr", PORTS + program(1).source.replace("def run(", "def run2(")),
                            options=CompileOptions(arch=arch))
    try:
        nv = compile_cuda(result.cuda, name="p.cu", arch=arch)
    except TesseraError as e:  # no NVRTC on this machine
        if "NVRTC" in str(e) or "nvrtc" in str(e):
            pytest.skip(str(e))
        raise
    assert nv.warnings == ()


ERRORS = [
    # The assigned parameter is as tile-dependent as its argument, and then as what is assigned.
    ("@device\ndef sync_if(t: i32):\n    t += 1\n    if t > 0:\n        tbarrier()\n\n"
     "@kernel tile[(64,)]\ndef k(o: mut i32[n]):\n    sync_if(tile_linear_id())\n",
     9, 13, "depends on the tile index"),
    ("@kernel tile[(64,)]\ndef k(o: mut i32[n], s: i32):\n    if tile_linear_id() == 0:\n        s = 3\n"
     "    if s > 0:\n        tbarrier()\n", 6, 9, "under control flow that depends on the tile index"),
    ("@kernel tile[(64,)]\ndef k(o: mut i32[n], s: i32):\n    s = 2.5\n", 3, 5, "cannot convert f32 to i32"),
    ("@kernel tile[(64,)]\ndef k(o: mut i32[n], s: i32):\n    s: f32 = 2.5\n", 3, 5, "'s' is already declared as i32"),
    ("@kernel tile[(64,)]\ndef k(o: mut i32[n]):\n    n += 1\n", 3, 5, "cannot assign to the shape symbol 'n'"),
    ("@device\ndef f(v: f32[k]):\n    v = 1.0\n", 3, 5, "cannot assign to the parameter 'v'"),
    # a parameter that sizes shared memory at launch is fixed: assigning it makes it a local
    ("@kernel tile[(64,)]\ndef k(o: mut f32[n], m: i32):\n    m += 1\n    s = tshared.alloc(f32[m])\n",
     4, 27, "('m' is a variable)"),
]


@pytest.mark.parametrize("case", range(len(ERRORS)))
def test_what_stays_an_error(case: int) -> None:
    src, line, col, text = ERRORS[case]
    with pytest.raises(CompileError) as e:
        compile_source(SourceFile("e.tsr", src))
    d = e.value.diagnostics[0]
    assert (d.loc.line, d.loc.col) == (line, col) and text in e.value.text, e.value.text


def _check_generated(seed: int, n: int = 96) -> None:
    p = program(seed)
    mod = tessera.compile(p.source, backend="cpu")
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    x[:4] = [0, 1, 7, M32]
    o = np.zeros((n, 3 * len(p.bodies)), np.uint32)
    s = int(rng.integers(0, 2**32))
    mod.run(x, o, s, grid=(n + 63) // 64)
    for f, body in enumerate(p.bodies):
        want = [model(body, int(v)) for v in x]
        assert list(o[:, 3 * f]) == want, (seed, f, p.source)
        assert list(o[:, 3 * f + 1]) == want, (seed, f, p.source)
    assert list(o[:, 2]) == [model(p.bodies[0], (s + int(v)) & M32) for v in x], (seed, p.source)


@pytest.mark.parametrize("seed", range(3))
def test_random_parameter_assignments(seed: int) -> None:
    _check_generated(seed)
