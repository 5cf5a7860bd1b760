"""Region mode's plan (transpile/cpu/region_plan.py): uniform loops run once for the group with the
tile loops inside (interchange), pure top-level locals are computed again in each region instead of
kept per tile, and the tile loops nest x innermost. Every kernel here gives bit-identical results
in region mode and in fiber mode (TESSERA_CPU_REGIONS=0), and the tests check which loops were
interchanged by reading the CPU build's C."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import tessera
from tessera.base.options import CompileOptions
from tessera.transpile.driver import SourceFile, compile_source
from tests.conftest import load_script

pytestmark = pytest.mark.usefixtures("shared_cache")

def _bench_kernels() -> ModuleType:
    """bench/cpu_vs_numba_sim.py (bench/ is not a package): its kernels are the ones
    bench/cpu_modes.py times against Warp."""
    return load_script("bench/cpu_vs_numba_sim.py", "cpu_vs_numba_sim")


MATMUL16: str = _bench_kernels().TSR_MATMUL


def cpu_c(src: str) -> str:
    return compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda


def interchanged(src: str, var: str) -> bool:
    """Whether the CPU C runs the loop over `var` outside the tile loops (a uniform loop)."""
    c = cpu_c(src)
    assert re.search(rf"for \(\w+ {var} = ", c), f"no loop over {var}"
    return bool(re.search(rf"for \(\w+ {var} = tsr_lo\d+;", c))


def both_modes(src: str, name: str, launch: Callable[[object, dict[str, np.ndarray]], None],
               make: Callable[[], dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    got = make()
    k = tessera.compile(src, backend="cpu")[name]
    assert k.info().regions
    launch(k, got)
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    want = make()
    launch(tessera.compile(src, backend="cpu")[name], want)
    for key in got:
        assert got[key].tobytes() == want[key].tobytes(), key
    return got


def test_matmul16_interchanges_the_dot_product_and_recomputes_indices(monkeypatch: pytest.MonkeyPatch) -> None:
    c = cpu_c(MATMUL16)
    assert interchanged(MATMUL16, "kk")
    # the indices are computed again in each region, only the accumulator is kept per tile
    assert "tsr_rgs_acc" in c and not re.search(r"tsr_rgs_(tx|ty|row|col)\b", c)
    assert "const int row = (int)blockIdx.y * TS + ty;" in c
    # tiles nest x innermost
    assert re.search(r"for \(unsigned tsr_y = 0; tsr_y < 16u; \+\+tsr_y\) \{\n *for \(unsigned tsr_x = 0;", c)

    def make() -> dict[str, np.ndarray]:
        rng = np.random.default_rng(1)
        return {"A": rng.standard_normal((48, 32), np.float32), "B": rng.standard_normal((32, 64), np.float32),
                "C": np.zeros((48, 64), np.float32)}

    out = both_modes(MATMUL16, "matmul16", lambda k, a: k(a["A"], a["B"], a["C"], grid=(4, 3)), make, monkeypatch)
    assert np.allclose(out["C"], out["A"] @ out["B"], rtol=1e-4, atol=1e-4)


LOOPS = """
@kernel tile[(8, 4)]
def loops(x: f32[n], y: mut f32[n], flags: mut i32[n], hits: mut i32[1], reps: i32):
    sh = tshared.alloc(f32[32])
    t = tile_linear_id()
    g = group_linear_id() * 32 + t
    half = reps // 2
    acc = 0.0
    sh[t] = x[g]
    tbarrier()
    for r in range(reps):                    # uniform: interchanged
        v = sh[(t + r) % 32]
        if t % 3 == 0:
            v = v * 2.0
        for q in range(half):                # nested uniform loop: interchanged too
            acc += v * 0.5
        acc += v
    for j in range(t):                       # bound depends on the tile: stays in the tile loop
        acc += 1.0
    for b in range(reps):                    # break: stays in the tile loop
        if acc > 100.0:
            break
        acc += 0.25
    for a in range(reps):                    # atomic: stays in the tile loop (order across tiles)
        atomic_add(hits[0], 1)
    m = reps
    if t == 0:
        m = 3
    for z in range(m):                       # bound assigned under a tile-dependent branch: stays
        acc -= 0.125
    y[g] = acc
    flags[g] = t
"""


@pytest.mark.parametrize("reps", [0, 1, 5])
def test_which_loops_are_interchanged_and_results_agree(reps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(LOOPS, "r") and interchanged(LOOPS, "q")
    for var in ("j", "b", "a", "z"):
        assert not interchanged(LOOPS, var), var
    n = 64

    def make() -> dict[str, np.ndarray]:
        return {"x": np.arange(n, dtype=np.float32) / 7, "y": np.zeros(n, np.float32),
                "flags": np.zeros(n, np.int32), "hits": np.zeros(1, np.int32)}

    out = both_modes(LOOPS, "loops", lambda k, a: k(a["x"], a["y"], a["flags"], a["hits"], reps, grid=2),
                     make, monkeypatch)
    assert out["hits"][0] == 64 * reps and out["y"].any()


TILES3 = """
@kernel tile[(4, 2, 3)]
def ids(out: mut i32[n, 4], k: i32):
    s = tshared.alloc(i32[24])
    t = tile_linear_id()
    base = group_linear_id() * 24
    s[t] = tile_id(0) + 10 * tile_id(1) + 100 * tile_id(2)
    tbarrier()
    for i in range(k):
        s[t] += 1000
    tbarrier()
    out[base + t, 0] = s[(t + 5) % 24]
    out[base + t, 1] = tile_id(2)
    out[base + t, 2] = t
    out[base + t, 3] = global_linear_id()
"""


def test_three_dimensional_groups_map_tiles_like_fibers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(TILES3, "i")
    out = both_modes(TILES3, "ids", lambda k, a: k(a["out"], 2, grid=2),
                     lambda: {"out": np.zeros((48, 4), np.int32)}, monkeypatch)
    assert list(out["out"][:, 2]) == list(range(24)) * 2 and list(out["out"][:, 3]) == list(range(48))


NESTED = """
@kernel tile[(32,)]
def nested(x: f32[n], y: mut f32[n], rounds: i32):
    sh = tshared.alloc(f32[32])
    t = tile_id(0)
    width = rounds + 1
    v = x[group_id(0) * 32 + t]
    r = rounds
    while r > 0:                              # a loop with barriers: its body splits too
        sh[t] = v
        tbarrier()
        for k in range(width):                # uniform (width is), inside the barrier loop
            w = sh[(t + k) % 32]
            for s in range(global_linear_id() % 3, 7, 64):   # a stride loop inside it
                w += 0.5
            v += w * 0.25
        r -= 1
        tbarrier()
    y[group_id(0) * 32 + t] = v
"""


@pytest.mark.parametrize("rounds", [0, 2])
def test_uniform_loops_inside_barrier_loops(rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(NESTED, "k")
    out = both_modes(NESTED, "nested", lambda k, a: k(a["x"], a["y"], rounds, grid=3),
                     lambda: {"x": np.linspace(-1, 1, 96, dtype=np.float32), "y": np.zeros(96, np.float32)},
                     monkeypatch)
    assert rounds == 0 or not np.array_equal(out["x"], out["y"])


EARLY = """
@kernel tile[(64,)]
def early(x: f32[n], y: mut f32[n], a: f32):
    s = tshared.alloc(f32[64])
    i = global_linear_id()
    if i >= n:
        return
    for k in range(4):
        if x[i] > 100.0 + k:
            return
    s[tile_linear_id()] = a * x[i]
    y[i] = s[tile_linear_id()] + y[i]
"""


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_early_return_without_barriers_runs_in_region_mode(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "goto tsr_tile_done;" in cpu_c(EARLY)

    def make() -> dict[str, np.ndarray]:
        x = np.linspace(-5, 110, n, dtype=np.float32)
        return {"x": x, "y": np.ones(n, np.float32)}

    out = both_modes(EARLY, "early", lambda k, a: k(a["x"], a["y"], 2.0, grid=(n + 63) // 64), make, monkeypatch)
    want = np.where(out["x"] > 100.0, 1.0, 2.0 * out["x"] + 1.0).astype(np.float32)
    assert np.array_equal(out["y"], want)


def test_early_return_with_a_barrier_keeps_fibers() -> None:
    from tessera.base.options import CompileOptions
    from tessera.transpile.cpu.region_plan import fiber_reason

    src = EARLY.replace("    y[i] = s", "    tbarrier()\n    y[i] = s")
    assert not tessera.compile(src, backend="cpu")["early"].info().regions
    fn = next(f for f in compile_source(SourceFile(path="k.tsr", text=src)).module.functions if f.name == "early")
    assert fiber_reason(fn, CompileOptions()) == "a return in a kernel with a barrier"


ROWS = """
@kernel tile[(32,)]
def rows(x: f32[R, N], out: mut f32[R], flat: f32[m]):
    r = group_id(0) * 32 + tile_linear_id()
    acc = 0.0
    for j in range(N):                 # each tile walks its own row: stays inside the tile loop
        acc += x[r, j]
    for j2 in range(4):                # neighbouring tiles, neighbouring elements: interchanged
        acc += flat[r + j2 * R]
    for j3 in range(4):                # a stride of 4 elements from one tile to the next: stays
        acc += flat[r * 4 + j3]
    out[r] = acc
"""


def test_only_loops_whose_tiles_touch_neighbouring_elements_are_interchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not interchanged(ROWS, "j") and interchanged(ROWS, "j2") and not interchanged(ROWS, "j3")
    def make() -> dict[str, np.ndarray]:
        rng = np.random.default_rng(5)
        return {"x": rng.standard_normal((64, 24), np.float32), "out": np.zeros(64, np.float32),
                "flat": rng.standard_normal(256, np.float32)}

    out = both_modes(ROWS, "rows", lambda k, a: k(a["x"], a["out"], a["flat"], grid=2), make, monkeypatch)
    assert out["out"].any()


STENCIL = """
const RAD = 3

@kernel tile[(64,)]
def stencil(x: f32[n], y: mut f32[n], w: f32[7], tri: mut f32[n]):
    sh = tshared.alloc(f32[64 + 2 * RAD])
    t = tile_linear_id()
    g = group_id(0) * 64 + t
    sh[t + RAD] = x[g] if g < n else 0.0
    if t < RAD:
        sh[t] = x[g - RAD] if g >= RAD else 0.0
        sh[t + 64 + RAD] = x[g + 64] if g + 64 < n else 0.0
    tbarrier()
    acc = 0.0
    for r in range(-RAD, RAD + 1):            # uniform, neighbouring tiles read neighbouring elements
        acc += w[r + RAD] * sh[t + RAD + r]
    tot = 0.0
    for i in range(4):                        # a triangle: the inner bound is the outer counter
        for j in range(i):
            tot += sh[t + j] * 0.25
    if g < n:
        y[g] = acc
        tri[g] = tot
"""


@pytest.mark.parametrize("n", [64, 200])
def test_stencil_and_triangular_loops(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert interchanged(STENCIL, "r") and interchanged(STENCIL, "i") and interchanged(STENCIL, "j")

    def make() -> dict[str, np.ndarray]:
        rng = np.random.default_rng(n)
        return {"x": rng.standard_normal(n, np.float32), "y": np.zeros(n, np.float32),
                "w": rng.standard_normal(7, np.float32), "tri": np.zeros(n, np.float32)}

    out = both_modes(STENCIL, "stencil", lambda k, a: k(a["x"], a["y"], a["w"], a["tri"], grid=(n + 63) // 64),
                     make, monkeypatch)
    pad = np.concatenate([np.zeros(3, np.float32), out["x"], np.zeros(3, np.float32)])
    want = sum(out["w"][k] * pad[k:k + n] for k in range(7))
    assert np.allclose(out["y"], want, rtol=1e-5, atol=1e-5)


def test_region_code_that_does_not_compile_falls_back_to_fibers(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A region-mode bug that makes g++ reject the C of a valid program (as the adversarial review
    found one) costs speed, not the program: the kernels run in fiber mode, with a warning."""
    from tessera.transpile.cpu import regions as cpu_regions

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    region = cpu_regions.RegionPrinter.region

    def broken(self: cpu_regions.RegionPrinter, stmts: list) -> None:
        self.emit("not C at all;")
        region(self, stmts)

    monkeypatch.setattr(cpu_regions.RegionPrinter, "region", broken)
    k = tessera.compile(EARLY, backend="cpu")["early"]
    x, y = np.linspace(-5, 110, 100, dtype=np.float32), np.ones(100, np.float32)
    with pytest.warns(UserWarning, match="internal compiler error: the CPU backend's region mode .* early"):
        k(x, y, 2.0, grid=2)
    assert np.array_equal(y, np.where(x > 100.0, 1.0, 2.0 * x + 1.0).astype(np.float32))
    assert not k.info().regions
