"""Region mode of the CPU backend (transpile/cpu/regions.py): kernels whose only synchronization
is tbarrier() run as loops over tiles between barriers; every sample case gives bit-identical
results in region mode and in fiber mode (TESSERA_CPU_REGIONS=0)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from samples.runner import CASES
from tessera.base.options import CompileOptions
from tests.conftest import sample_of

pytestmark = pytest.mark.usefixtures("shared_cache")


def _run(name: str) -> dict[str, np.ndarray]:
    case = CASES[name]()
    args = case.make(np.random.default_rng(3))
    case.launch(tessera.load(sample_of(name), backend="cpu")[name], args)
    return args


@pytest.mark.parametrize("name", sorted(CASES))
def test_modes_identical(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")  # float atomics across groups: one order
    regions = _run(name)
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    fibers = _run(name)
    for k, v in regions.items():
        assert v.tobytes() == fibers[k].tobytes(), k


@pytest.mark.parametrize("name,want", [("sum_reduce", True), ("matmul", True), ("transpose", True), ("saxpy_f32", True),
                                       ("bias_gelu_bf16", True),
                                       ("block_scan", False), ("warp_reduce", False), ("sgemm", False)])
def test_which_mode(name: str, want: bool) -> None:
    assert tessera.load(sample_of(name), backend="cpu")[name].info().regions is want
    assert not tessera.load(sample_of(name), backend="cpu", check_bounds=True)[name].info().regions


def test_fiber_mode_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    assert not tessera.load(sample_of("matmul"), backend="cpu")["matmul"].info().regions


LOOPS = """
@kernel tile[(8, 4)]
def loops(x: mut i32[n], rounds: i32):
    sh = tshared.alloc(i32[32])
    t = tile_linear_id()
    r = rounds
    v = t * 3
    for k in range(0, r):
        sh[t] = v + k
        tbarrier()
        v = sh[(t + 1) % 32] + v
        tbarrier()
    while r > 0:
        sh[t] = v
        tbarrier()
        if t < r:
            v += sh[31 - t]
        r -= 1
        tbarrier()
    x[group_linear_id() * 32 + t] = v
"""


@pytest.mark.parametrize("rounds", [0, 3])
def test_loops_with_barriers(rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.zeros(64, np.int32)
    mod = tessera.compile(LOOPS, backend="cpu")
    assert mod["loops"].info().regions
    mod.loops(x, rounds, grid=2)
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    y = np.zeros(64, np.int32)
    mod = tessera.compile(LOOPS, backend="cpu")
    assert not mod["loops"].info().regions
    mod.loops(y, rounds, grid=2)
    assert np.array_equal(x, y) and (rounds == 0 or x.any())


def test_barrier_in_branch_keeps_fibers() -> None:
    src = LOOPS.replace("    x[group_linear_id()", "    if rounds > 0:\n        tbarrier()\n    x[group_linear_id()")
    assert not tessera.compile(src, backend="cpu")["loops"].info().regions


STRIDE = """
@kernel tile[(64,)]
def stride(x: f32[n], partial: mut f32[grid_groups], hits: mut i32[1]):
    smem = tshared.alloc(f32[64])
    i = tile_linear_id()
    acc = 0.0
    for k in range(global_linear_id(), n, grid_tile_count()):
        acc += x[k] * 0.5
    smem[i] = acc
    tbarrier()
    if i == 0:
        t = 0.0
        for j in range(64):
            t += smem[j]
        partial[group_linear_id()] = t
"""


def _stride_cuda(src: str) -> str:
    from tessera.transpile.driver import SourceFile, compile_source

    return compile_source(SourceFile(path="s.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda


@pytest.mark.parametrize("n", [0, 5, 100_003])
def test_stride_loops_interleave_tiles(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "each tile's counter" in _stride_cuda(STRIDE)
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    got, want = np.zeros(3, np.float32), np.zeros(3, np.float32)
    tessera.compile(STRIDE, backend="cpu").stride(x, got, np.zeros(1, np.int32), grid=3)
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "0")
    tessera.compile(STRIDE, backend="cpu").stride(x, want, np.zeros(1, np.int32), grid=3)
    assert got.tobytes() == want.tobytes()
    assert np.isclose(got.sum(), x.astype(np.float64).sum() * 0.5, rtol=1e-4, atol=1e-3)


def test_stride_loops_with_an_atomic_or_a_small_step_run_tile_by_tile() -> None:
    atomic = STRIDE.replace("acc += x[k] * 0.5", "atomic_add(hits[0], 1)")
    small = STRIDE.replace("n, grid_tile_count()", "n, 8")
    for src in (atomic, small):
        assert "region mode" in _stride_cuda(src) and "each tile's counter" not in _stride_cuda(src)
