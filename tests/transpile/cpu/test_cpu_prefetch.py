"""Region mode's software prefetch (transpile/cpu/prefetch.py): a lockstep pass over every tile of
a stride loop asks for the span of each 1-D tensor that the loop reads or writes at its counter,
`PASSES_AHEAD` passes ahead; nothing else prefetches, and results do not change (the random
stride-loop generator, test_cpu_region_random.py, reads and writes at the counter too)."""

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
