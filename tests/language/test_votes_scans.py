"""Warp votes and scans, the group scan and atomic_inc/atomic_dec (spec section 7, version 2):
the CPU backend against NumPy (sizes that are not multiples of the group, several groups), the
summation order of the float scans reproduced exactly, CUDA's wrap-around semantics of the
atomics, and what NVRTC makes of them (VOTE, SHFL.UP, ATOMG.E.INC/DEC) on sm_80 and sm_90."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import tessera
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.runtime.cuda.sass import disassemble, find_nvdisasm, function_sass, instructions
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")


def compile_cpu(text: str) -> tessera.api.Module:
    return tessera.compile(text, backend="cpu")


def _padded(x: np.ndarray, total: int) -> np.ndarray:
    out = np.zeros(total, x.dtype)
    out[:len(x)] = x
    return out


# ---- reference scans, in the order the compiler documents (docs/language.md) -------------------

def warp_scan(v: np.ndarray) -> np.ndarray:
    """Hillis-Steele over 32 lanes: step o = 1, 2, 4, 8, 16, lane i += (lane i - o) for i >= o."""
    v = v.copy()
    for o in (1, 2, 4, 8, 16):
        u = v.copy()
        v[o:] = v[o:] + u[:-o]
    return v


def group_scan(v: np.ndarray) -> np.ndarray:
    """One group: whole warps scan themselves and add the earlier warps' totals left to right;
    otherwise a sequential left-to-right sum (np.cumsum's order)."""
    nt = len(v)
    if nt % 32:
        return np.cumsum(v, dtype=v.dtype)
    warps = [warp_scan(v[w:w + 32]) for w in range(0, nt, 32)]
    out = [warps[0]]
    for w in range(1, len(warps)):
        p = warps[0][31]
        for i in range(1, w):
            p = p + warps[i][31]
        out.append(p + warps[w])
    return np.concatenate(out).astype(v.dtype)


# ---- votes and shfl_up --------------------------------------------------------------------------

VOTES = """
@kernel tile[(64,)]
def votes(p: i32[n], f: f32[n], an: mut bool[n], al: mut bool[n], b: mut u32[n], bf: mut u32[n],
          u: mut i64[n], ud: mut f64[n]):
    i = global_linear_id()
    q = p[i] if i < n else 0
    y = f[i] if i < n else 0.0
    aa = warp_any(q)
    ll = warp_all(q != 0)
    bb = warp_ballot(q > 0)
    bfl = warp_ballot(y)
    uu = shfl_up(i64(q) * 10000000000, 5)
    dd = shfl_up(f64(y), lane_id() % 7)
    if i < n:
        an[i] = aa
        al[i] = ll
        b[i] = bb
        bf[i] = bfl
        u[i] = uu
        ud[i] = dd
"""


def test_votes_ballots_and_shfl_up_match_numpy() -> None:
    mod = compile_cpu(VOTES)
    n, grid = 300, 5  # 320 tiles: the last warp has 12 live elements and 20 padded lanes
    rng = np.random.default_rng(7)
    p = rng.integers(-2, 3, n).astype(np.int32)
    p[0:32] = 1      # a warp where every lane is non-zero
    p[32:64] = 0     # a warp where none is
    p[64:96] = 0
    p[70] = 5        # a single lane
    f = rng.choice(np.array([0.0, -0.0, 0.5, -1.0, np.nan], np.float32), n)
    outs = [np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, np.uint32), np.zeros(n, np.uint32),
            np.zeros(n, np.int64), np.zeros(n, np.float64)]
    mod.votes(p, f, *outs, grid=grid)
    an, al, b, bf, u, ud = outs
    P, F = _padded(p, 320).reshape(-1, 32), _padded(f, 320).reshape(-1, 32)
    bits = np.uint32(1) << np.arange(32, dtype=np.uint32)
    lanes = np.arange(32)
    want_u = np.empty_like(P, dtype=np.int64)
    want_d = np.empty_like(F, dtype=np.float64)
    for w in range(len(P)):
        src = lanes - 5
        want_u[w] = np.where(src >= 0, P[w][np.maximum(src, 0)].astype(np.int64) * 10**10, P[w].astype(np.int64) * 10**10)
        src = lanes - lanes % 7
        want_d[w] = F[w][src].astype(np.float64)
    rep = lambda a: np.repeat(a, 32)[:n]  # noqa: E731
    assert np.array_equal(an, rep((P != 0).any(1)))
    assert np.array_equal(al, rep((P != 0).all(1)))
    assert an[70] and not an[40] and al[5] and not al[70]
    assert np.array_equal(b, rep(((P > 0) * bits).sum(1, dtype=np.uint32)))
    # A float predicate is true where it is non-zero: 0.5 and NaN count, 0.0 and -0.0 do not.
    assert np.array_equal(bf, rep(((F != 0) | np.isnan(F)) @ bits.astype(np.uint64)).astype(np.uint32))
    assert np.array_equal(u, want_u.ravel()[:n])
    assert np.array_equal(ud, want_d.ravel()[:n], equal_nan=True)


# ---- warp and group scans ------------------------------------------------------------------------

SCAN = """
@kernel tile[{tile}]
def scan(x: {T}[n], c: mut {T}[n], g: mut {T}[n]):
    i = global_linear_id()
    v = x[i] if i < n else {T}(0)
    {warp}
    gg = group_cumsum(v)
    if i < n:
        {store}
        g[i] = gg
"""


@functools.cache
def _scan_module(ty: str, tile: tuple[int, ...]) -> tessera.api.Module:
    whole = math.prod(tile) % 32 == 0
    return compile_cpu(SCAN.format(T=ty, tile=tile, warp="cc = warp_cumsum(v)" if whole else "pass",
                                   store="c[i] = cc" if whole else "pass"))


def _values(ty: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if ty in ("f32", "f64", "f16"):
        return rng.standard_normal(n).astype({"f32": np.float32, "f64": np.float64, "f16": np.float16}[ty])
    lo = -1000 if ty.startswith("i") else 0
    return rng.integers(lo, 1000, n).astype({"i32": np.int32, "i64": np.int64, "u32": np.uint32,
                                             "u64": np.uint64}[ty])


@pytest.mark.parametrize("tile", [(64,), (96,), (8, 16), (48,), (1,), (100,)], ids=str)
@pytest.mark.parametrize("ty", ["i32", "i64", "u32", "u64", "f32", "f64", "f16"])
def test_scans_match_numpy(ty: str, tile: tuple[int, ...]) -> None:
    nt = math.prod(tile)
    mod = _scan_module(ty, tile)
    grid = 4
    n = grid * nt - (nt // 3 + 1)  # not a multiple of the group: the last group is partly padding
    x = _values(ty, n, np.random.default_rng(nt))
    c, g = np.zeros_like(x), np.zeros_like(x)
    mod.scan(x, c, g, grid=grid)
    # f16 is scanned in f32 and rounded once at the end (as warp_sum and group_sum)
    xs = _padded(x, grid * nt).astype(np.float32 if ty == "f16" else x.dtype)
    if x.dtype.kind in "iu":  # integers: exactly np.cumsum, per warp and per group
        want_c = np.cumsum(xs.reshape(-1, 32), 1, dtype=x.dtype).ravel() if nt % 32 == 0 else None
        want_g = np.cumsum(xs.reshape(-1, nt), 1, dtype=x.dtype).ravel()
    else:
        want_c = np.concatenate([warp_scan(w) for w in xs.reshape(-1, 32)]) if nt % 32 == 0 else None
        want_g = np.concatenate([group_scan(w) for w in xs.reshape(-1, nt)])
        # the documented order is close to np.cumsum's (a sanity check on the reference itself)
        close = np.cumsum(xs.reshape(-1, nt).astype(np.float64), 1).ravel()
        assert np.allclose(want_g, close, rtol=1e-2 if ty == "f16" else 1e-5, atol=1e-2 if ty == "f16" else 1e-5)
    want_g = want_g.astype(x.dtype)[:n]
    assert np.array_equal(g.view(f"u{x.itemsize}"), want_g.view(f"u{x.itemsize}")), ty
    if want_c is not None:
        want_c = want_c.astype(x.dtype)[:n]
        assert np.array_equal(c.view(f"u{x.itemsize}"), want_c.view(f"u{x.itemsize}")), ty


def test_group_cumsum_twice_and_after_a_reduction_reuses_the_scratch_safely() -> None:
    mod = compile_cpu("""
@kernel tile[(64,)]
def k(x: i32[n], a: mut i32[n], b: mut i32[n]):
    i = global_linear_id()
    v = x[i]
    s = group_sum(v)
    c1 = group_cumsum(v)
    c2 = group_cumsum(c1 + s)
    a[i] = c1
    b[i] = c2
""")
    x = np.random.default_rng(1).integers(-50, 50, 192).astype(np.int32)
    a, b = np.zeros_like(x), np.zeros_like(x)
    mod.k(x, a, b, grid=3)
    g = x.reshape(3, 64)
    c1 = np.cumsum(g, 1, dtype=np.int32)
    assert np.array_equal(a, c1.ravel())
    assert np.array_equal(b, np.cumsum(c1 + g.sum(1, keepdims=True), 1, dtype=np.int32).ravel())


def test_a_group_scan_is_per_tile_so_it_may_not_guard_a_barrier() -> None:
    # The scan differs from tile to tile (unlike a group reduction): a barrier under it is an error.
    with pytest.raises(tessera.base.errors.CompileError, match="must be reached by every tile"):
        compile_cpu("@kernel tile[(64,)]\ndef k(x: i32[n]):\n    if group_cumsum(x[0]) > 3:\n        tbarrier()\n")
    compile_cpu("@kernel tile[(64,)]\ndef k(x: i32[n]):\n    if group_sum(x[0]) > 3:\n        tbarrier()\n")


# ---- atomic_inc and atomic_dec -------------------------------------------------------------------

def _inc(old: int, bound: int) -> int:
    return 0 if old >= bound else old + 1


def _dec(old: int, bound: int) -> int:
    return bound if old == 0 or old > bound else old - 1


def test_atomic_inc_dec_return_old_values_with_cuda_wrap_around() -> None:
    mod = compile_cpu("""
@kernel tile[(1,)]
def seq(c: mut u32[4], inc: mut u32[n], dec: mut u32[n], bound: u32):
    for j in range(n):
        inc[j] = atomic_inc(c[0], bound)
        dec[j] = atomic_dec(c[1], bound, scope="group")
    atomic_inc(c[2], bound, scope="mesh")
    atomic_dec(c[3], bound, scope="device")
""")
    for start, bound in ((0, 5), (7, 5), (3, 0), (0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFE, 0xFFFFFFFF), (2, 1)):
        c = np.full(4, start, np.uint32)
        inc, dec = np.zeros(13, np.uint32), np.zeros(13, np.uint32)
        mod.seq(c, inc, dec, np.uint32(bound), grid=1)
        want_i, want_d, a, d = [], [], start, start
        for _ in range(13):
            want_i.append(a)
            want_d.append(d)
            a, d = _inc(a, bound), _dec(d, bound)
        assert inc.tolist() == want_i and dec.tolist() == want_d, (start, bound)
        assert c.tolist() == [a, d, _inc(start, bound), _dec(start, bound)], (start, bound)


def test_atomic_inc_dec_from_many_groups_and_on_shared_memory() -> None:
    mod = compile_cpu("""
@kernel tile[(128,)]
def k(c: mut u32[2], per: mut u32[grid_groups], olds: mut u32[n]):
    s = tshared.alloc(u32[1])
    t = tile_linear_id()
    if t == 0:
        s[0] = 0
    tbarrier()
    olds[global_linear_id()] = atomic_inc(s[0], 9)
    atomic_inc(c[0], 1000)
    atomic_dec(c[1], 1000)
    tbarrier()
    if t == 0:
        per[group_linear_id()] = s[0]
""")
    grid = 16
    c = np.zeros(2, np.uint32)
    per = np.zeros(grid, np.uint32)
    olds = np.zeros(grid * 128, np.uint32)
    mod.k(c, per, olds, grid=grid)
    total = grid * 128
    assert c.tolist() == [total % 1001, (1001 - total % 1001) % 1001]
    assert per.tolist() == [128 % 10] * grid
    for g in olds.reshape(grid, 128):  # 128 = 12 * 10 + 8: values 0..7 thirteen times, 8 and 9 twelve
        assert np.bincount(g, minlength=10).tolist() == [13] * 8 + [12] * 2


# ---- NVRTC and SASS ------------------------------------------------------------------------------

GPU = """
@kernel tile[(128,)]
def votes(x: f32[n], p: i32[n], a: mut bool[n], b: mut u32[n], c: mut f32[n], h: mut f16[n], gi: mut i64[n],
          ct: mut u32[4]):
    i = global_linear_id()
    v = x[i] if i < n else 0.0
    q = p[i] if i < n else 0
    aa = warp_any(q) and warp_all(v > 0.0)
    bb = warp_ballot(q)
    cc = warp_cumsum(v) + shfl_up(v, 3) + group_cumsum(v)
    hh = warp_cumsum(f16(v)) + group_cumsum(f16(v))
    g2 = group_cumsum(i64(q)) + warp_cumsum(i64(q))
    s = tshared.alloc(u32[1])
    o = atomic_inc(ct[0], 5) + atomic_dec(ct[1], 5, scope="group") + atomic_inc(ct[2], 9, scope="mesh")
    o += atomic_inc(s[0], 7) + atomic_dec(s[0], 7)
    if i < n:
        a[i] = aa
        b[i] = bb + o
        c[i] = cc
        h[i] = hh
        gi[i] = g2
"""


@functools.cache
def _nvrtc(arch: str):
    result = compile_source(SourceFile("votes.tsr", GPU), options=CompileOptions(arch=arch))
    return result, compile_cuda(result.cuda, name="votes.cu", arch=arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_without_warnings_or_spills(arch: str) -> None:
    result, nv = _nvrtc(arch)
    assert nv.warnings == ()
    res = nv.kernel(result.kernels[0].c_name)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_bytes == 0, res


@pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_sass_has_votes_shfl_up_and_inc_dec_atomics(arch: str) -> None:
    result, nv = _nvrtc(arch)
    assert nv.cubin is not None
    ops = instructions(function_sass(disassemble(nv.cubin), result.kernels[0].c_name))
    names = set(ops)
    assert "VOTE.ANY" in names and "VOTE.ALL" in names, names  # ballot is a VOTE.ANY into a register
    assert "SHFL.UP" in names, names
    # Global atomics at the device, group (SM) and system scopes; the old value is used, so no RED.
    assert {"ATOMG.E.INC.STRONG.GPU", "ATOMG.E.DEC.STRONG.SM", "ATOMG.E.INC.STRONG.SYS"} <= names, names
    shared = {op for op in names if op.startswith("ATOMS")}
    assert any(".INC" in op for op in shared) and any(".DEC" in op for op in shared), shared
