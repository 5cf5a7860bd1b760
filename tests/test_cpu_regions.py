"""Region mode of the CPU backend (transpile/cpu_regions.py): kernels whose only synchronization
is tbarrier() run as loops over tiles between barriers; every sample case gives bit-identical
results in region mode and in fiber mode (TESSERA_CPU_REGIONS=0)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.runner import CASES
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


@pytest.mark.parametrize("name,want", [("sum_reduce", True), ("matmul", True), ("transpose", True),
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
