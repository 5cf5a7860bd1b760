"""Region mode's software prefetch (transpile/cpu/prefetch.py): a lockstep pass over every tile of
a stride loop asks for the span of each 1-D tensor that the loop reads or writes at its counter,
`PASSES_AHEAD` passes ahead (a pass over chunks of W elements per tile: tiles * W elements);
nothing else prefetches, and results do not change (the random
stride-loop generator, test_cpu_region_random.py, reads and writes at the counter too). And the
other half of region mode's streaming speed: a kernel's AVX2 clone (TSR_VECTOR_CLONES) computes
the same bits as the baseline code that fiber mode runs."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.base.options import CompileOptions
from tessera.transpile.cpu.prefetch import PASSES_AHEAD
from tessera.transpile.driver import SourceFile, compile_source
from tests.transpile.cpu.test_cpu_vectorize import LAYERNORM, MAP, REDUCE

pytestmark = pytest.mark.usefixtures("shared_cache")


def cpu_c(src: str) -> str:
    return compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda


def prefetches(c: str) -> list[str]:
    return [line.strip().split(";")[0] for line in c.split("\n") if "tsr::prefetch_span(" in line]


def test_a_grid_stride_sum_prefetches_its_input_in_whole_passes() -> None:
    c = cpu_c(REDUCE)
    ahead = f"(unsigned long long)tsr_b1 + {PASSES_AHEAD}ull * (unsigned long long)tsr_st1"
    assert prefetches(c) == [f"tsr::prefetch_span(x, {ahead}, 128u, 0)"]
    # in the pass over every tile, before its tile loop; not in the last pass nor the general form
    at = c.index("tsr::prefetch_span(")
    assert c.rindex("// every tile", 0, at) > c.rindex("for (", 0, at)


def test_a_stride_loop_that_writes_at_its_counter_prefetches_for_a_write() -> None:
    got = prefetches(cpu_c(MAP))
    assert [p.split(",")[0] for p in got] == ["tsr::prefetch_span(x", "tsr::prefetch_span(y"]
    assert got[0].endswith(", 128u, 0)") and got[1].endswith(", 128u, 1)")


def test_other_accesses_do_not_prefetch() -> None:
    """A 2-D row (layer norm's x[row, c]: a row is contiguous, the hardware streams it), an index
    other than the counter, and a loop that is not in lockstep print no prefetch."""
    assert prefetches(cpu_c(LAYERNORM)) == []
    assert prefetches(cpu_c(REDUCE.replace("acc += x[k]", "acc += x[(k * 7) % n]"))) == []
    assert prefetches(cpu_c(REDUCE.replace("range(global_linear_id(), n,", "range(global_linear_id(), n - i,"))) == []


def test_a_sum_whose_prefetch_runs_past_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last passes ask for elements past the tensor's end (a page that may not be mapped): the
    sum is NumPy's, region and fiber mode agree bytewise."""
    import tessera

    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    x = np.random.default_rng(5).standard_normal((1 << 16) + 40).astype(np.float32)
    out = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("TESSERA_CPU_REGIONS", mode)
        part = np.zeros(8, np.float32)
        tessera.compile(REDUCE, backend="cpu").block_reduce(x, part, grid=8)
        out[mode] = part
    assert out["1"].tobytes() == out["0"].tobytes()
    assert abs(float(out["1"].sum(dtype=np.float64)) - float(x.sum(dtype=np.float64))) < 1e-2



MATH = """
@kernel tile[(128,)] vectorize(4)
def gelu(X: f32[n], B: f32[n], Y: mut f32[n]):
    h = X + B
    Y[:] = 0.5 * h * (1.0 + tanh(0.7978845608 * (h + 0.044715 * h * h * h)))

@kernel tile[(128,)] vectorize(4)
def arith(X: f32[n], B: f32[n], Y: mut f32[n]):
    h = X + B
    Y[:] = sqrt(abs(h)) / (h * h + 1.0) + min(h, 2.0) * max(X, B)

@kernel tile[(128,)] vectorize(4)
def ints(X: f32[n], B: f32[n], W: mut i32[n]):
    W[:] = i32(X * 1000.0) // 7 + (i32(B * 100.0) >> 2)
"""


@pytest.mark.parametrize("name", ["gelu", "arith", "ints"])
def test_the_avx2_clone_computes_the_baselines_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Region mode runs a map kernel's AVX2 clone where the CPU has AVX2 (TSR_VECTOR_CLONES), fiber
    mode the baseline's code: the same bytes over float bit patterns spread over the whole range,
    specials (NaN, infinities, signed zeros, subnormals) included -- tanh's bit tricks in 32-byte
    vectors (test_cpu_vectorize.py), divisions, square roots, min and max, conversions, integer
    shifts and divisions."""
    from tests.transpile.cpu.test_cpu_region_loops import both_modes

    monkeypatch.setenv("TESSERA_CPU_CLONES", "all")  # the clones and their dispatch (tests/conftest.py)
    bits = np.linspace(0, 2**32 - 1, 1 << 16, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x807FFFFF,
                         0x41200000, 0xC1200000, 0x3F800000], np.uint32)
    x = np.concatenate([bits, specials]).view(np.float32)
    b = np.random.default_rng(3).standard_normal(x.size).astype(np.float32)
    b[::3] = 0.0

    def make() -> dict[str, np.ndarray]:
        return {"out": np.zeros(x.size, np.int32 if name == "ints" else np.float32)}

    got = both_modes(MATH, name, lambda k, d: k(x, b, d["out"]), make, monkeypatch)
    if name != "ints":
        assert np.isnan(got["out"]).any() and np.isfinite(got["out"]).sum() > x.size // 2


# Each tile's chunk of W elements (a spacing of W between the tiles' counters: regions.py
# `lockstep_for`'s per-tile vector form), read and written at the counter.
CHUNKS = """
@kernel tile[(32,)]
def chunks(x: f32[n], y: mut f32[n], z: mut f32[m], W: const i32 = 4):
    t = tile_linear_id()
    acc = 0.0
    for k in range(group_linear_id() * 32 * W + t * W, n, grid_tile_count() * W):
        acc += x[k]
        y[k] = x[k] * 2.0 + acc
    z[global_linear_id()] = acc
"""


@pytest.mark.parametrize("w", [1, 4])
def test_a_pass_over_chunks_prefetches_every_tiles_chunk(w: int) -> None:
    """With tile t's counter at tile 0's + t * W, a whole pass spans 32 * W elements: the prefetch
    asks for all of them (W = 1: one element per tile, as before)."""
    c = cpu_c(CHUNKS.replace("W: const i32 = 4", f"W: const i32 = {w}"))
    assert ("tile t starts at tile 0's start + t * 4u" in c) is (w == 4)
    ahead = f"(unsigned long long)tsr_b1 + {PASSES_AHEAD}ull * (unsigned long long)tsr_st1"
    assert prefetches(c) == [f"tsr::prefetch_span(x, {ahead}, {32 * w}u, 0)",
                             f"tsr::prefetch_span(y, {ahead}, {32 * w}u, 1)"]


@pytest.mark.parametrize("n", [1, 127, 128, 129, 4 * 32 * 3 * 9 + 5, 1 << 14])
def test_a_pass_over_chunks_gives_fiber_modes_bits_and_the_models(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked pass's prefetch (past the tensor's end in the last passes) changes no value:
    region mode gives fiber mode's bytes and a model of each tile's own loop in float32."""
    from tests.transpile.cpu.test_cpu_region_loops import both_modes

    groups, w, f32 = 3, 4, np.float32
    x = np.random.default_rng(n).standard_normal(n).astype(f32)

    def make() -> dict[str, np.ndarray]:
        return {"y": np.full(n, 7.0, f32), "z": np.zeros(groups * 32, f32)}

    got = both_modes(CHUNKS, "chunks", lambda k, d: k(x, d["y"], d["z"], grid=groups), make, monkeypatch)
    want = make()
    for g in range(groups * 32):
        acc = f32(0)
        for k in range((g // 32) * 32 * w + (g % 32) * w, n, groups * 32 * w):
            acc = f32(acc + x[k])
            want["y"][k] = f32(f32(x[k] * f32(2)) + acc)
        want["z"][g] = acc
    assert got["y"].tobytes() == want["y"].tobytes() and got["z"].tobytes() == want["z"].tobytes()
