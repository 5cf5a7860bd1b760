"""A seeded generator of random stride-loop kernels for region mode (transpile/cpu/regions.py
`stride_for`: the interleaved form and its lockstep passes). Each program runs a grid- or group-stride
loop, or one of a runtime or constant step, whose start, stop and step are drawn from forms that
are consecutive across the tiles or not, the same for every tile or not, positive or negative, at
the kernel's top level, inside a loop with barriers, inside a uniform loop or under a branch; its
body updates a float and an integer accumulator per tile, and may read and write a tensor at the
counter itself (the streaming form whose lockstep passes prefetch: transpile/cpu/prefetch.py). Region mode, fiber mode
(TESSERA_CPU_REGIONS=0) and a Python model of the contract (each tile runs its own `range`, float32
arithmetic in program order) must give the same bytes. A bounded run is part of the suite;
`python -m tests.transpile.cpu.test_cpu_region_random N [SEED]` runs N modules of 8 programs."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import numpy as np
import pytest

from tests.transpile.cpu.region_diff import BOUNDED_SEEDS, Case, long_run, run_programs, seeded_tests

pytestmark = pytest.mark.usefixtures("shared_cache")
f32 = np.float32

# (tsr, consecutive across a 1-D group's tiles): evaluated by the model with the builtins as functions
STARTS = ["global_linear_id()", "tile_linear_id()", "global_linear_id() + a", "tile_linear_id() * 2", "a - tile_linear_id()",
          "a", "tile_id(0)", "group_linear_id()", "global_linear_id() * 3 - 1", "tile_linear_id() + a",
          "a + tile_id(0)"]
STOPS = ["n", "b", "b - tile_linear_id()", "grid_tile_count() * 2", "n + a"]
STEPS = ["grid_tile_count()", "group_tile_count()", "s", "TILES", "TILES + 1", "2 * TILES", "-TILES", "s * 2"]
# (tsr statement, the model's update of (acc, cnt) for counter k)
STORE = "if k >= 0 and k < n:\n        z[k] = x[k] * 2.0"  # every tile that reaches k writes the same value
Op = tuple[str, Callable[[f32, int, int, np.ndarray], tuple[f32, int]]]
OPS: list[Op] = [
    ("acc += x[abs(k) % n]", lambda acc, cnt, k, x: (f32(acc + x[abs(k) % len(x)]), cnt)),
    ("acc = acc * 0.5 + x[abs(k) % n]", lambda acc, cnt, k, x: (f32(f32(acc * f32(0.5)) + x[abs(k) % len(x)]), cnt)),
    ("cnt += 1", lambda acc, cnt, k, x: (acc, cnt + 1)),
    ("cnt += k & 7", lambda acc, cnt, k, x: (acc, cnt + (k & 7))),
    ("if k % 3 == 0:\n        acc -= 1.0", lambda acc, cnt, k, x: (f32(acc - f32(1)) if k % 3 == 0 else acc, cnt)),
    # at the counter itself: the streaming form whose passes prefetch (transpile/cpu/prefetch.py)
    ("if k >= 0 and k < n:\n        acc += x[k]", lambda acc, cnt, k, x: (f32(acc + x[k]) if 0 <= k < len(x) else acc, cnt)),
    (STORE, lambda acc, cnt, k, x: (acc, cnt)),  # the model writes z itself
]
SHAPES = [(1,), (3,), (8,), (32,), (64,), (4, 3), (8, 2)]
CONTEXTS = ["top", "barrier", "uniform", "branch", "tree", "tree2", "tree3"]
# A shared-memory tree after the loop (a local kept once for the group: transpile/cpu/group_locals.py),
# its halving in a region of its own ("tree"), at the end of the region that reads it ("tree2"), or
# at its start ("tree3": `h` stays per tile).
TREE = {"tree": ["h = TILES // 2", "while h > 0:", "    if t < h:", "        sh[t] += sh[t + h]", "    tbarrier()",
                 "    h //= 2"],
        "tree2": ["h = TILES // 2", "while h > 0:", "    if t < h:", "        sh[t] += sh[t + h]", "    h //= 2",
                  "    tbarrier()"],
        "tree3": ["h = TILES", "while h > 1:", "    h //= 2", "    if t < h:", "        sh[t] += sh[t + h]", "    tbarrier()"]}


@dataclasses.dataclass
class Program:
    name: str
    shape: tuple[int, ...]
    start: str
    stop: str
    step: str
    ops: list[Op]
    context: str

    @property
    def tiles(self) -> int:
        return int(np.prod(self.shape))

    def source(self) -> str:
        tiles = str(self.tiles)
        step = self.step.replace("TILES", tiles)
        pad = "    " if self.context == "top" or self.context in TREE else "        "
        loop = [f"for k in range({self.start}, {self.stop}, {step}):"]
        loop += ["    " + line for op in self.ops for line in op[0].replace("\n        ", "\n    ").split("\n")]
        if self.context == "barrier":
            loop = ["sh[t] = acc", "tbarrier()", *loop, f"acc += sh[(t + 1) % {tiles}]", "tbarrier()"]
        elif self.context in TREE:
            loop += ["sh[t] = acc + f32(t)", "tbarrier()", *(x.replace("TILES", tiles) for x in TREE[self.context]),
                     "acc += sh[0]"]
        head = {"top": [], "tree": [], "tree2": [], "tree3": [], "branch": ["    if t % 2 == 0:"]}.get(
            self.context, ["    for r in range(2):"])
        return (f"@kernel tile[{self.shape}]\n"
                f"def {self.name}(x: f32[n], y: mut f32[m], c: mut i32[m], z: mut f32[n], a: i32, b: i32, s: i32):\n"
                f"    sh = tshared.alloc(f32[{tiles}])\n"
                "    t = tile_linear_id()\n    g = global_linear_id()\n    acc = 0.0\n    cnt = 0\n"
                + "\n".join(head + [pad + line for line in loop]) + "\n    y[g] = acc\n    c[g] = cnt\n")

    def model(self, x: np.ndarray, groups: int, a: int, b: int, s: int) -> tuple[np.ndarray, ...]:
        """Every tile's own `range`, in float32 (the contract: a tile's statements in program order)."""
        tiles, m = self.tiles, groups * self.tiles
        y, c, z = np.zeros(m, f32), np.zeros(m, np.int32), np.zeros(len(x), f32)
        stores = any(op[0] == STORE for op in self.ops)
        for gid in range(groups):
            accs, cnts = [f32(0)] * tiles, [0] * tiles
            rounds = 2 if self.context in ("barrier", "uniform") else 1
            for _ in range(rounds):
                shared = list(accs)
                for t in range(tiles):
                    if self.context == "branch" and t % 2:
                        continue
                    env = {"global_linear_id": lambda g=gid * tiles + t: g, "tile_linear_id": lambda t=t: t,
                           "tile_id": lambda d, t=t: t % self.shape[0], "group_linear_id": lambda gid=gid: gid,
                           "grid_tile_count": lambda: m, "group_tile_count": lambda: tiles,
                           "a": a, "b": b, "s": s, "n": len(x), "TILES": tiles}
                    k_range = range(eval(self.start, env), eval(self.stop, env), eval(self.step, env))
                    for k in k_range:
                        if stores and 0 <= k < len(x):
                            z[k] = f32(x[k] * f32(2))
                        for _, update in self.ops:
                            accs[t], cnts[t] = update(accs[t], cnts[t], k, x)
                if self.context == "barrier":
                    accs = [f32(accs[t] + shared[(t + 1) % tiles]) for t in range(tiles)]
                elif self.context in TREE:
                    sh, h = [f32(acc + f32(t)) for t, acc in enumerate(accs)], tiles // 2
                    while h > 0:
                        for t in range(h):
                            sh[t] = f32(sh[t] + sh[t + h])
                        h //= 2
                    accs = [f32(acc + sh[0]) for acc in accs]
            y[gid * tiles:(gid + 1) * tiles] = accs
            c[gid * tiles:(gid + 1) * tiles] = cnts
        return y, c, z


def random_program(rng: random.Random, name: str) -> Program:
    return Program(name, rng.choice(SHAPES), rng.choice(STARTS), rng.choice(STOPS), rng.choice(STEPS),
                   rng.sample(OPS, rng.randint(1, 3)), rng.choice(CONTEXTS))


def cases(rng: random.Random, seed: int, p: Program) -> list[Case]:
    """A few argument sets for `p`."""
    out = []
    for _ in range(3):
        groups, n = rng.choice([1, 2, 3]), rng.choice([1, 5, 100, 700])
        s = rng.choice([1, -1, 3, -7, p.tiles, groups * p.tiles, 2 * groups * p.tiles + 1])
        x = np.random.default_rng(seed).standard_normal(n).astype(f32)
        a, b, m = rng.randint(-40, 40), rng.randint(-40, 900), groups * p.tiles
        out.append(Case(p, (x, np.zeros(m, f32), np.zeros(m, np.int32), np.zeros_like(x), a, b, s), (1, 2, 3), groups,
                        p.model(x, groups, a, b, s), f"groups={groups} n={n} a={a} b={b} s={s}"))
    return out


def run_module(seed: int, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`count` random programs in one module; each launched with a few argument sets in both modes."""
    rng = random.Random(seed)
    progs = [random_program(rng, f"rnd{i}") for i in range(count)]
    run_programs(progs, lambda p: cases(rng, seed, p), monkeypatch)


test_random_stride_loops, test_random_stride_loops_long = seeded_tests(run_module, 8, range(100, 120))


def test_the_generator_reaches_the_lockstep_form() -> None:
    """The bounded seeds print lockstep loops, interleaved ones and locals kept once for the group, so
    the runs above test all three."""
    from tessera.base.options import CompileOptions
    from tessera.transpile.driver import SourceFile, compile_source

    modes = set()
    for seed in BOUNDED_SEEDS:
        rng = random.Random(seed)
        src = "\n".join(random_program(rng, f"rnd{i}").source() for i in range(8))
        c = compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda
        modes |= {"lockstep" for _ in range(c.count("each pass runs a prefix of the tiles"))}
        modes |= {"interleaved" for _ in range(c.count("tsr_more"))}
        modes |= {"group" for _ in range(c.count("// once per group"))}
        modes |= {"prefetch read" for _ in range(c.count("tsr::prefetch_span(x, "))}
        modes |= {"prefetch write" for _ in range(c.count("tsr::prefetch_span(z, "))}
    assert modes == {"lockstep", "interleaved", "group", "prefetch read", "prefetch write"}


if __name__ == "__main__":  # the long run: python -m tests.transpile.cpu.test_cpu_region_random N [SEED]
    long_run(run_module, 8)
