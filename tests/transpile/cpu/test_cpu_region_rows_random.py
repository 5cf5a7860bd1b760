"""A seeded generator of random row kernels in the style of tessera.ops (rows.tsr) for region mode:
each tile walks a row in chunks of VEC elements moved with per-tile vector access
(`r[:] = X[row, c0:c0 + VEC]`) in a stride loop whose start is `t * VEC` plus or minus a
parameter, or not a tile's chunk at all, with a constant or runtime step (the lockstep passes of
regions.py `lockstep_for`, with a spacing of VEC between the tiles' counters, and the general
interleaved form), then a group reduction of the tiles' sums, and a second pass that writes the
row. Region mode, fiber mode (TESSERA_CPU_REGIONS=0) and a Python model (each tile's own `range`
in program order, float32, elements outside the row read as zero and not written) must give the
same bytes. A bounded run is part of the suite; `python -m
tests.transpile.cpu.test_cpu_region_rows_random N [SEED]` runs N modules of 6 programs."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tests.transpile.cpu.region_diff import BOUNDED_SEEDS, Case, long_run, run_programs, seeded_tests
from tests.transpile.cpu.test_cpu_region_reduce import reduce_model

pytestmark = pytest.mark.usefixtures("shared_cache")
f32 = np.float32
STARTS = ["t * VEC", "t * VEC + a", "a + t * VEC", "t * VEC - a", "t * VEC * 2", "t"]
STOPS = ["C", "C - a", "C + a"]
STEPS = ["NT * VEC", "NT * VEC * 2", "s"]


@dataclasses.dataclass
class Program:
    name: str
    nt: int
    vec: int
    start: str
    stop: str
    step: str
    guarded: bool
    op: str

    def source(self) -> str:
        head = f"for c0 in range({self.start}, {self.stop}, {self.step}):"
        add = ["if c0 + i < C:", "    acc += r[i]"] if self.guarded else ["acc += r[i]"]
        return "\n".join([
            f"@kernel tile[({self.nt},)]",
            f"def {self.name}(X: f32[R, C], Y: mut f32[R, C], S: mut f32[R], a: i32, s: i32,"
            f" NT: const i32 = {self.nt}, VEC: const i32 = {self.vec}):",
            "    r = tregs(f32[VEC])", "    row = group_id(0)", "    t = tile_linear_id()", "    acc: f32 = 0.0",
            f"    {head}", "        r[:] = X[row, c0:c0 + VEC]", "        for i in static_range(VEC):",
            *(f"            {line}" for line in add),
            f"    m = group_{self.op}(acc) / f32(C)",
            f"    {head}", "        r[:] = X[row, c0:c0 + VEC]", "        for i in static_range(VEC):",
            "            r[i] = r[i] * 2.0 + m", "        Y[row, c0:c0 + VEC] = r",
            "    if t == 0:", "        S[row] = m", ""])

    def model(self, x: np.ndarray, y: np.ndarray, a: int, s: int) -> tuple[np.ndarray, np.ndarray]:
        y, out = y.copy(), np.zeros(len(x), f32)
        cols = x.shape[1]
        env = {"VEC": self.vec, "NT": self.nt, "C": cols, "a": a, "s": s}
        for row in range(len(x)):
            def at(c: int, row: int = row) -> f32:
                return x[row, c] if 0 <= c < cols else f32(0)
            ranges = [range(*(eval(e, {**env, "t": t}) for e in (self.start, self.stop, self.step)))
                      for t in range(self.nt)]
            accs = np.zeros(self.nt, f32)
            for t, rng in enumerate(ranges):
                for c0 in rng:
                    for i in range(self.vec):
                        if not self.guarded or c0 + i < cols:
                            accs[t] = f32(accs[t] + at(c0 + i))
            m = f32(f32(reduce_model(accs, self.op)) / f32(cols))
            for rng in ranges:
                for c0 in rng:
                    for i in range(self.vec):
                        if 0 <= c0 + i < cols:
                            y[row, c0 + i] = f32(f32(at(c0 + i) * f32(2)) + m)
            out[row] = m
        return y, out


def random_program(rng: random.Random, name: str) -> Program:
    return Program(name, rng.choice([1, 5, 32, 40, 64]), rng.choice([1, 2, 3, 4, 8]), rng.choice(STARTS),
                   rng.choice(STOPS), rng.choice(STEPS), rng.random() < 0.5, rng.choice(["sum", "max", "min"]))


def cases(rng: random.Random, seed: int, p: Program) -> list[Case]:
    """A few argument sets for `p` (the output rows start as 7.0: a column no tile writes keeps it)."""
    out = []
    for _ in range(2):
        rows, cols = rng.choice([1, 3]), rng.choice([1, 7, 64, 100, 513])
        s = rng.choice([p.nt * p.vec, p.vec, 1, 3, 2 * p.nt * p.vec + 1])
        x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(f32)
        a, y = rng.choice([0, 1, 3, 17]), np.full_like(x, 7.0)
        out.append(Case(p, (x, y, np.zeros(rows, f32), a, s), (1, 2), rows, p.model(x, y, a, s),
                        f"rows, cols={x.shape} a={a} s={s}"))
    return out


def run_module(seed: int, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`count` random programs in one module; each launched with a few argument sets in both modes."""
    rng = random.Random(seed)
    progs = [random_program(rng, f"rows{i}") for i in range(count)]
    run_programs(progs, lambda p: cases(rng, seed, p), monkeypatch)


test_random_row_kernels, test_random_row_kernels_long = seeded_tests(run_module, 6, range(100, 120))


def test_the_generator_reaches_the_chunked_lockstep_form() -> None:
    """The bounded seeds print lockstep passes with a spacing of VEC and the general form."""
    from tessera.base.options import CompileOptions
    from tessera.transpile.driver import SourceFile, compile_source

    c = ""
    for seed in BOUNDED_SEEDS:
        rng = random.Random(seed)
        src = "\n".join(random_program(rng, f"rows{i}").source() for i in range(6))
        c += compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda
    assert "tile t starts at tile 0's start + t * " in c and "tsr_more" in c


if __name__ == "__main__":  # the long run: python -m tests.transpile.cpu.test_cpu_region_rows_random N [SEED]
    long_run(run_module, 6)
