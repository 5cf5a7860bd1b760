"""What the seeded generators of region-mode kernels share (test_cpu_region_random.py,
test_cpu_region_reduce_random.py, test_cpu_region_rows_random.py): one module of a generator's
random programs compiled in region mode and in fiber mode (TESSERA_CPU_REGIONS=1 and 0, on one
thread: one order of the groups), every case launched in both modes, and each output compared
bytewise between the modes and with the generator's Python model of the contract; the pair of
tests (the bounded seeds that always run, the long form marked `slow`) and the long run from the
command line (`python -m tests.transpile.cpu.<generator> N [SEED]`: N modules from seed SEED)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import pytest

BOUNDED_SEEDS = (1, 2)


class Program(Protocol):
    """A generated kernel: its name and its `.tsr` text."""

    name: str

    def source(self) -> str: ...


@dataclasses.dataclass
class Case:
    """One launch of `program`: its arguments (the output arrays among them hold their initial
    values; each launch gets copies of them), the positions of the outputs among the arguments, the
    grid, the model's outputs (in the order of `outputs`), and the arguments in words for a
    failure's message."""

    program: Program
    args: tuple[Any, ...]
    outputs: tuple[int, ...]
    grid: int
    want: tuple[np.ndarray, ...]
    what: str


def run_programs(programs: Sequence[Program], cases: Callable[[Program], list[Case]],
                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`programs` in one module; `cases(p)`, called for each program in order, gives its launches.
    Each launch runs in region mode and in fiber mode; both give the model's bytes."""
    import tessera

    src = "\n".join(p.source() for p in programs)
    launches = [c for p in programs for c in cases(p)]
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    got: dict[str, list[list[np.ndarray]]] = {}
    for mode in ("1", "0"):  # the mode is read as each kernel compiles: every launch of a mode together
        monkeypatch.setenv("TESSERA_CPU_REGIONS", mode)
        mod, got[mode] = tessera.compile(src, backend="cpu"), []
        for c in launches:
            kernel = mod[c.program.name]
            assert kernel.info().regions is (mode == "1"), c.program.source()
            args = [a.copy() if i in c.outputs else a for i, a in enumerate(c.args)]
            kernel(*args, grid=c.grid)
            got[mode].append([args[i] for i in c.outputs])
    for c, region_out, fiber_out in zip(launches, got["1"], got["0"]):
        what = f"{c.program.source()}\n{c.what}"
        for region, fiber, want in zip(region_out, fiber_out, c.want, strict=True):
            assert region.tobytes() == fiber.tobytes(), f"region != fiber\n{what}"
            assert region.tobytes() == want.tobytes(), f"region != model\n{what}\n{region}\n{want}"


Run = Callable[[int, int, pytest.MonkeyPatch], None]  # a generator's run_module(seed, count, monkeypatch)


def seeded_tests(run: Run, count: int, long_seeds: range) -> tuple[Callable[..., None], Callable[..., None]]:
    """A generator's two tests, to be bound to test names in its module: modules of `count`
    programs from BOUNDED_SEEDS (always run) and from `long_seeds` (marked `slow`)."""

    @pytest.mark.parametrize("seed", BOUNDED_SEEDS)
    def bounded(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
        run(seed, count, monkeypatch)

    @pytest.mark.slow
    def long(monkeypatch: pytest.MonkeyPatch) -> None:
        for seed in long_seeds:
            run(seed, count, monkeypatch)

    return bounded, long


def long_run(run: Run, count: int) -> None:
    """The command line's long run: `N [SEED]` (20 and 100 by default) modules of `count` programs."""
    total, first = int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with pytest.MonkeyPatch.context() as mp:
        for seed in range(first, first + total):
            run(seed, count, mp)
            print(f"seed {seed}: {count} programs agree", flush=True)
