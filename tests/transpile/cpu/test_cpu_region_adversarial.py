"""Adversarial kernels for region mode (transpile/cpu/region_plan.py, cpu/regions.py, emit/maps.py):
each gives the same bytes in region mode and in fiber mode (TESSERA_CPU_REGIONS=0) and what NumPy
computes. Runtime and negative steps, zero- and one-trip loops, bounds reassigned between loops,
locals declared in loop bodies, uniform loops inside barrier loops, tile-dependent code inside
interchanged loops, non-power-of-two and 3-D groups, map kernels, early returns, integer wrap-around
and division by negative numbers. A uniform loop whose step also makes it a
stride loop (a runtime step, one of at least the tile count, any step in a group of one tile) once
failed to compile in region mode."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.transpile.cpu.test_cpu_region_loops import both_modes, interchanged

pytestmark = pytest.mark.usefixtures("shared_cache")
Arrays = dict[str, np.ndarray]


def check(src: str, name: str, make: Callable[[], Arrays], launch: Callable[[object, Arrays], None],
          ref: Callable[[Arrays], Arrays], monkeypatch: pytest.MonkeyPatch) -> None:
    """Region mode and fiber mode give the same bytes (both_modes), and the bytes NumPy gives."""
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "1")
    got = both_modes(src, name, launch, make, monkeypatch)
    for key, w in ref(make()).items():
        assert np.asarray(w, got[key].dtype).tobytes() == got[key].tobytes(), f"{key}: {got[key]} != {w}"


f32 = np.float32


STEPS = """
@kernel tile[(8,)]
def steps(x: f32[n], y: mut f32[n], a: i32, b: i32, s: i32):
    t = tile_linear_id()
    g = group_id(0) * 8 + t
    acc = 0.0
    for i in range(a, b, s):                 # runtime step: interleaved stride loop
        acc = acc * 0.5 + x[(g + i * 8 + 1000) % n]
    m = a + 1
    for j in range(m):                       # bound from a uniform local...
        acc += x[g]
    m = b - a                                # ... reassigned before the next loop
    for j2 in range(m, 0, -1):
        acc = acc * 2.0 - f32(j2)
    y[g] = acc
"""


@pytest.mark.parametrize("a,b,s", [(0, 5, 1), (5, 0, -1), (5, -3, -2), (3, 3, 1), (3, 4, 7), (-2, 9, 3), (7, 2, -5)])
def test_runtime_negative_zero_and_one_trip_steps(a: int, b: int, s: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(STEPS, "j") and interchanged(STEPS, "j2")

    def ref(d: Arrays) -> Arrays:
        x, n = d["x"], 24
        y = np.zeros(n, f32)
        for g in range(n):
            acc = f32(0)
            for i in range(a, b, s):
                acc = f32(acc * f32(0.5)) + x[(g + i * 8 + 1000) % n]
            for _ in range(a + 1):
                acc = f32(acc + x[g])
            for j2 in range(b - a, 0, -1):
                acc = f32(f32(acc * f32(2)) - f32(j2))
            y[g] = acc
        return {"y": y}

    check(STEPS, "steps", lambda: {"x": np.linspace(-3, 3, 24, dtype=f32), "y": np.zeros(24, f32)},
          lambda k, d: k(d["x"], d["y"], a, b, s, grid=3), ref, monkeypatch)


GROUP3 = """
@kernel tile[(5, 3, 2)]
def group3(x: f32[n], y: mut f32[n], m: i32):
    sh = tshared.alloc(f32[30])
    t = tile_linear_id()
    tx = tile_id(0)
    ty = tile_id(1)
    tz = tile_id(2)
    g = group_linear_id() * 30 + t
    r = tregs(f32[3], 0.0)
    sh[t] = x[g]
    tbarrier()
    acc = 0.0
    for i in range(m):                       # interchanged, with tile-dependent code inside
        v = sh[(t + i) % 30]
        if tx == 2:
            v = v * 3.0
        k = ty
        while k > 0:
            v += 0.5
            k -= 1
        r[i % 3] += v
        for q in range(tz, 4, 2):
            acc += f32(q)
    tbarrier()
    y[g] = acc + r[0] * 2.0 + r[1] * 3.0 + r[2]
"""


@pytest.mark.parametrize("m", [0, 1, 4, 7])
def test_five_by_three_by_two_group_with_tile_dependent_body(m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(GROUP3, "i")

    def ref(d: Arrays) -> Arrays:
        x, y = d["x"], d["y"]
        for grp in range(2):
            sh = x[grp * 30:(grp + 1) * 30]
            for t in range(30):
                tx, ty, tz = t % 5, (t // 5) % 3, t // 15
                r = np.zeros(3, f32)
                acc = f32(0)
                for i in range(m):
                    v = sh[(t + i) % 30]
                    v = f32(v * 3) if tx == 2 else v
                    for _ in range(ty):
                        v = f32(v + f32(0.5))
                    r[i % 3] = f32(r[i % 3] + v)
                    for q in range(tz, 4, 2):
                        acc = f32(acc + f32(q))
                y[grp * 30 + t] = f32(f32(f32(acc + f32(r[0] * 2)) + f32(r[1] * 3)) + r[2])
        return {"y": y}

    check(GROUP3, "group3", lambda: {"x": np.linspace(-2, 2, 60, dtype=f32), "y": np.zeros(60, f32)},
          lambda k, d: k(d["x"], d["y"], m, grid=2), ref, monkeypatch)


BODY_LOCALS = """
@kernel tile[(4,)]
def body_locals(x: f32[n], y: mut f32[n], m: i32):
    t = tile_linear_id()
    acc = 0.0
    for i in range(m):
        if t % 2 == 0:
            v = x[t + i]                     # declared under a tile-dependent branch
        else:
            v = -x[t]
        for j in range(i):                   # triangular: its bound is the outer counter
            acc += v * f32(j)
        u = v + 1.0                          # declared in the loop body, used after it
        if i == 0:
            w = x[t]                         # kept from the first iteration
        acc += w
    y[t] = acc + u
"""


@pytest.mark.parametrize("m", [1, 3])
def test_locals_declared_in_an_interchanged_loop_body(m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(BODY_LOCALS, "i") and interchanged(BODY_LOCALS, "j")

    def ref(d: Arrays) -> Arrays:
        x, y = d["x"], d["y"]
        for t in range(4):
            acc = f32(0)
            for i in range(m):
                v = x[t + i] if t % 2 == 0 else -x[t]
                for j in range(i):
                    acc = f32(acc + f32(v * f32(j)))
                u = f32(v + 1)
                if i == 0:
                    w = x[t]
                acc = f32(acc + w)
            y[t] = f32(acc + u)
        return {"y": y}

    check(BODY_LOCALS, "body_locals", lambda: {"x": np.arange(8, dtype=f32) * 0.5 - 1, "y": np.zeros(8, f32)},
          lambda k, d: k(d["x"], d["y"], m, grid=1), ref, monkeypatch)


ROUNDS = """
@kernel tile[{shape}]
def rounds(x: f32[n], y: mut f32[n], rounds: i32):
    sh = tshared.alloc(f32[{tiles}])
    t = tile_linear_id()
    g = group_linear_id() * {tiles} + t
    v = x[g]
    lim = 1
    r = 0
    while r < rounds:                        # a barrier loop around uniform loops
        sh[t] = v
        tbarrier()
        for k in range(lim, -1, -1):         # bound from a local reassigned in the barrier loop
            for k2 in range(k, lim + 1):     # inner bounds from the outer counter
                v += sh[(t + k2) % {tiles}] * 0.125
        lim = lim * 2 + r
        r += 1
        tbarrier()
    y[g] = v + f32(lim)
"""


def _rounds_ref(rounds: int, tiles: int) -> Callable[[Arrays], Arrays]:
    def ref(d: Arrays) -> Arrays:
        x, y = d["x"], d["y"]
        for gi in range(2):
            v = x[gi * tiles:(gi + 1) * tiles].copy()
            lim = 1
            for r in range(rounds):
                sh = v.copy()
                for t in range(tiles):
                    for k in range(lim, -1, -1):
                        for k2 in range(k, lim + 1):
                            v[t] = f32(v[t] + f32(sh[(t + k2) % tiles] * f32(0.125)))
                lim = lim * 2 + r
            y[gi * tiles:(gi + 1) * tiles] = v + f32(lim)
        return {"y": y}
    return ref


def _rounds(shape: str, tiles: int, rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    src = ROUNDS.format(shape=shape, tiles=tiles)
    assert interchanged(src, "k") and interchanged(src, "k2")
    check(src, "rounds", lambda: {"x": np.linspace(-1, 1, 2 * tiles, dtype=f32), "y": np.zeros(2 * tiles, f32)},
          lambda k, d: k(d["x"], d["y"], rounds, grid=2), _rounds_ref(rounds, tiles), monkeypatch)


# (1,): a group of one tile, where every loop with a constant step is also a stride loop.
@pytest.mark.parametrize("shape,tiles", [("(7,)", 7), ("(4, 3)", 12), ("(1, 1, 3)", 3), ("(1,)", 1)])
@pytest.mark.parametrize("rounds", [0, 1, 3])
def test_uniform_loops_inside_a_barrier_while(shape: str, tiles: int, rounds: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _rounds(shape, tiles, rounds, monkeypatch)


STRIDED = """
@kernel tile[(8,)]
def strided(x: f32[n], y: mut f32[n], m: i32, st: i32):
    t = tile_linear_id()
    acc = 0.0
    for i in range(0, m, {step}):            # uniform, and a step that stride_loop takes for a stride loop
        v = x[t] * f32(i)
        for j in range(2):                   # a nested uniform loop splits i's body: v lives across it
            acc += v
    y[t] = acc
"""


@pytest.mark.parametrize("step", ["st", "8"])
def test_uniform_loop_with_a_stride_step(step: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src = STRIDED.format(step=step)

    def ref(d: Arrays) -> Arrays:
        y = d["y"]
        for t in range(8):
            acc = f32(0)
            for i in range(0, 17, 8):
                v = f32(d["x"][t] * f32(i))
                acc = f32(f32(acc + v) + v)
            y[t] = acc
        return {"y": y}

    check(src, "strided", lambda: {"x": np.arange(8, dtype=f32) + 1, "y": np.zeros(8, f32)},
          lambda k, d: k(d["x"], d["y"], 17, 8, grid=1), ref, monkeypatch)


COPIES = """
@kernel tile[(8, 2)]
def copies(x: f32[R, C], y: mut f32[R, C], nb: i32):
    sh = tshared.alloc(f32[4, 8])
    tx = tile_id(0)
    ty = tile_id(1)
    acc = 0.0
    for b in range(nb):
        tcopy(sh[0:4, 0:8], x[b * 4:b * 4 + 4, 0:8])
        tbarrier()
        acc += sh[ty, tx] + sh[ty + 2, tx]
        tbarrier()
    for b2 in range(nb):
        acc *= 0.5
    y[ty, tx] = acc
"""


@pytest.mark.parametrize("nb", [0, 1, 3])
def test_tcopy_in_a_barrier_loop(nb: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(COPIES, "b2")

    def ref(d: Arrays) -> Arrays:
        x, y = d["x"], d["y"]
        for ty in range(2):
            for tx in range(8):
                acc = f32(0)
                for b in range(nb):
                    acc = f32(acc + f32(x[b * 4 + ty, tx] + x[b * 4 + ty + 2, tx]))
                for _ in range(nb):
                    acc = f32(acc * f32(0.5))
                y[ty, tx] = acc
        return {"y": y}

    check(COPIES, "copies", lambda: {"x": np.arange(96, dtype=f32).reshape(12, 8) * 0.25, "y": np.zeros((12, 8), f32)},
          lambda k, d: k(d["x"], d["y"], nb, grid=1), ref, monkeypatch)


MAP = """
const C0 = 3

@kernel tile[(5, 3)] vectorize(4)
def map2(X: f32[n], Y: mut f32[n], Z: mut i32[n], a: f32, b: i32):
    h = X * a
    Y[:] = h + Y
    Y[:] *= 2.0
    Z[:] = i32(Y) * b + C0 - n
"""


@pytest.mark.parametrize("n", [1, 59, 60, 61, 200])
@pytest.mark.parametrize("grid", [None, 1, 3])
@pytest.mark.parametrize("offset", [0, 1])
def test_map_kernel_outputs_tails_and_grids(n: int, grid: int | None, offset: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def make() -> Arrays:
        def at(v: np.ndarray) -> np.ndarray:  # offset 1: not 16-byte aligned (the generic variant)
            buf = np.zeros(v.size + offset, v.dtype)
            buf[offset:] = v
            return buf[offset:]
        return {"X": at(np.linspace(-5, 5, n, dtype=f32)), "Y": at(np.arange(n, dtype=f32)),
                "Z": at(np.zeros(n, np.int32))}

    def ref(d: Arrays) -> Arrays:
        y = (d["X"] * f32(1.5) + d["Y"]) * f32(2)
        return {"Y": y, "Z": y.astype(np.int32) * -3 + 3 - n}

    def launch(k: object, d: Arrays) -> None:
        kw = {"grid": grid} if grid else {}
        k(d["X"], d["Y"], d["Z"], 1.5, -3, **kw)  # type: ignore[operator]

    check(MAP, "map2", make, launch, ref, monkeypatch)


HALF = """
@kernel tile[(24,)] vectorize(8)
def half(X: f16[r, c], Y: mut f16[r, c], W: mut f16[r, c], a: f16):
    h = X * a - Y
    Y[:] = h + X * 2.0
    W[:] = -h * Y + a
"""


@pytest.mark.parametrize("shape", [(1, 1), (3, 67), (8, 24), (5, 200)])
def test_f16_map_kernel_pairs_and_tail(shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    def make() -> Arrays:
        rng = np.random.default_rng(3)
        return {"X": rng.standard_normal(shape).astype(np.float16), "Y": rng.standard_normal(shape).astype(np.float16),
                "W": np.zeros(shape, np.float16)}

    def ref(d: Arrays) -> Arrays:
        a = np.float16(0.75)
        h = d["X"] * a - d["Y"]
        y = h + d["X"] * np.float16(2)
        return {"Y": y, "W": -h * y + a}

    check(HALF, "half", make, lambda k, d: k(d["X"], d["Y"], d["W"], 0.75), ref, monkeypatch)


RETURNS = """
@kernel tile[(4, 3)]
def returns(x: i32[n], y: mut i32[n], lim: i32):
    s = tshared.alloc(i32[12])
    t = tile_linear_id()
    g = group_linear_id() * 12 + t
    s[t] = g * 3
    if g >= n:
        return
    y[g] = -1
    acc = 0
    for i in range(4):
        for j in range(i, -1, -1):
            acc += x[g] // (j - 2) + x[g] % (i - 3)
            if acc > lim:
                y[g] = acc + s[t]
                return
        k = 0
        while True:
            k += 1
            if k * x[g] > 50:
                return
            if k > 3:
                break
    y[g] = acc
"""


def _cdiv(a: int, b: int) -> int:  # C's truncating division; the CPU backend gives -1 for x // 0
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _cmod(a: int, b: int) -> int:
    return a if b == 0 else a - _cdiv(a, b) * b


@pytest.mark.parametrize("n", [5, 24, 30])
@pytest.mark.parametrize("lim", [-5, 3, 100])
def test_early_returns_in_nested_loops_after_shared_writes(n: int, lim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def ref(d: Arrays) -> Arrays:
        x, y = d["x"], d["y"]
        for g in range(n):
            y[g], acc = -1, 0
            for i in range(4):
                stop = False
                for j in range(i, -1, -1):
                    acc += _cdiv(int(x[g]), j - 2) + _cmod(int(x[g]), i - 3)
                    if acc > lim:
                        y[g], stop = acc + g * 3, True
                        break
                k = 0
                while not stop:
                    k += 1
                    if k * x[g] > 50:
                        stop = True
                    elif k > 3:
                        break
                if stop:
                    break
            else:
                y[g] = acc
        return {"y": y}

    check(RETURNS, "returns", lambda: {"x": (np.arange(n) * 7919 % 41 - 20).astype(np.int32), "y": np.zeros(n, np.int32)},
          lambda k, d: k(d["x"], d["y"], lim, grid=(n + 11) // 12), ref, monkeypatch)


INTS = """
@kernel tile[(8,)]
def ints(x: i32[n], u: mut u32[n], b: mut i8[n], q: mut i32[n], d: i32):
    t = tile_linear_id()
    w = u32(x[t]) * 2654435761
    h = i8(x[t]) * i8(3)
    qq = x[t] // d
    rr = x[t] % d
    acc: u32 = 0
    for i in range(4):                       # unsigned wrap-around in an interchanged loop
        acc = acc * 31 + w + u32(i)
    hb = h
    for j in range(3):                       # i8 wrap-around
        hb += h
    u[t] = acc
    b[t] = hb
    q[t] = qq * 100 + rr
"""


@pytest.mark.parametrize("dv", [-3, 3, -1, 0, 7])
def test_integer_wraparound_and_division_by_negative_numbers(dv: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(INTS, "i") and interchanged(INTS, "j")

    def ref(d: Arrays) -> Arrays:
        x = d["x"].astype(np.int64)
        w = x.astype(np.uint32).astype(np.uint64) * 2654435761 % 2**32
        acc = np.zeros(8, np.uint64)
        for i in range(4):
            acc = (acc * 31 + w + i) % 2**32
        h = (x.astype(np.int8).astype(np.int64) * 3).astype(np.int8).astype(np.int64)
        q = np.array([_cdiv(int(v), dv) * 100 + _cmod(int(v), dv) for v in x])
        return {"u": acc.astype(np.uint32), "b": (h * 4).astype(np.int8), "q": q.astype(np.int32)}

    check(INTS, "ints", lambda: {"x": np.array([-2**31, -7, -1, 0, 5, 100, 2**31 - 1, 123456789], np.int32),
                                 "u": np.zeros(8, np.uint32), "b": np.zeros(8, np.int8), "q": np.zeros(8, np.int32)},
          lambda k, d: k(d["x"], d["u"], d["b"], d["q"], dv, grid=1), ref, monkeypatch)
