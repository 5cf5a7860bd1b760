"""A seeded generator of random kernels for region mode's uniform locals and guarded regions
(transpile/cpu/quiet.py, region_plan.py's uniform locals, group_locals.py, tile_bounds.py): locals
assigned from shared memory, from global memory the kernel writes or not, from parameters and
from each other, with shared and global writes before and after them between the same barriers,
by every tile, by one tile or by a tile for its neighbour, inside conditions, inside uniform loops,
inside loops with barriers (whose stretch between barriers wraps around the body) and in the tail
of a reduction tree's loop; regions that are one `if t < V:` with V below zero, inside the group
or past it. Region mode, fiber mode (TESSERA_CPU_REGIONS=0) and a Python model (each tile a
generator that yields at each barrier, the tiles run in order between barriers as fiber mode does,
float32 arithmetic) must give the same bytes. A bounded run is part of the suite;
`python -m tests.transpile.cpu.test_cpu_region_hoist_random N [SEED]` runs N modules of 8 kernels."""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("shared_cache")
f32 = np.float32
SHAPES = [1, 3, 8, 32, 64]


def _defs(k: int, tiles: int) -> list[str]:
    j = (k + 1) % 3
    return [f"u{k} = sh[{tiles}] * f32(0.5) + f32(a)", f"u{k} = sh[0] - f32(1.0)",
            f"u{k} = sh[a % {tiles}] * f32(0.5)", f"u{k} = z[gb] + f32(1.0)", f"u{k} = x[abs(b) % n] * f32(2.0)",
            f"u{k} = u{j} * f32(3.0) - sh[{tiles}]", f"u{k} = f32(a) * f32(0.25) + u{j}",
            f"u{k} = sh[t] + f32(1.0)", f"u{k} = x[g % n] - u{j}"]  # the last two differ between tiles


def _writes(tiles: int) -> list[str]:
    return ["sh[t] = acc + f32(t)", f"if t == 0: sh[{tiles}] = acc + f32(2.0)", "z[g] = acc",
            "if t == 0: z[gb] = acc", f"if t == {tiles - 1}: sh[t] = acc"]


def _uses(k: int) -> list[str]:
    return [f"acc += u{k}", f"acc = acc * f32(0.5) + u{k} * sh[t]", f"if u{k} > f32(0.0): acc += f32(1.0)"]


def _guards(k: int, tiles: int) -> list[str]:
    v = ["a", "b", "a - 3", str(tiles // 2), "b + 2"]
    return ([f"if t <= {w}: acc += f32(5.0)" for w in v] + [f"if t < {w}: sh[t] = sh[t] + u{k}" for w in v] + [f"if t < {w}: acc += sh[t]" for w in v]
            + [f"if {w} > t: acc -= f32(1.0)" for w in v])


class Race(Exception):
    """Two tiles touch one element between the same barriers, one of them writing it: the
    contract leaves the result open (fiber mode resumes the tiles in another order than region
    mode's loops), so such a launch is not compared."""


class Tracked:
    """An array whose reads and writes the model records, per element, between two barriers."""

    def __init__(self, data: np.ndarray, tile: list[int]) -> None:
        self.data, self.tile = data, tile
        self.seen: dict[int, tuple[set[int], set[int]]] = {}  # element -> (readers, writers)

    def _touch(self, i: int, write: bool) -> None:
        readers, writers = self.seen.setdefault(i, (set(), set()))
        (writers if write else readers).add(self.tile[0])
        if writers and len(readers | writers) > 1:
            raise Race

    def __getitem__(self, i: int) -> Any:
        self._touch(i, False)
        return self.data[i]

    def __setitem__(self, i: int, v: Any) -> None:
        self._touch(i, True)
        self.data[i] = v


class Gen:
    """One random kernel: .tsr lines, which the Python model runs too (tbarrier() as `yield`)."""

    def __init__(self, rng: random.Random, name: str) -> None:
        self.rng, self.name = rng, name
        self.tiles = rng.choice(SHAPES)
        self.loops = 0
        self.tree = False

    def stmt(self, nested: bool = False) -> str:
        """A random statement; `nested` (under a condition or in a loop without a barrier): one that
        assigns a local less often (such an assignment makes the local differ between tiles)."""
        r, k, tiles = self.rng, self.rng.randrange(3), self.tiles
        defs = [_defs(k, tiles)] * (1 if nested and r.random() < 0.3 else 0 if nested else 2)
        family = r.choice([*defs, _writes(tiles), _uses(k), _guards(k, tiles)])
        return r.choice(family)

    def items(self, depth: int, count: int) -> list[str]:
        out: list[str] = []
        for _ in range(count):
            kind = self.rng.choice(["stmt", "stmt", "stmt", "barrier", "barrier", "guarded", "alone", "tree",
                                    "rounds", "cond", "loop"])
            if kind == "stmt":
                out.append(self.stmt())
            elif kind == "alone":  # an assignment that ends its region
                out += [self.rng.choice(_defs(self.rng.randrange(3), self.tiles)), "tbarrier()"]
            elif kind == "barrier":
                out.append("tbarrier()")
            elif kind == "guarded":  # a region that is one `if t < V:`
                out += ["tbarrier()", self.rng.choice(_guards(self.rng.randrange(3), self.tiles)), "tbarrier()"]
            elif kind == "tree":
                out += ["tbarrier()"] * self.rng.randrange(2) + [f"h = {self.tiles // 2}", "while h > 0:", "    if t < h: sh[t] += sh[t + h]",
                        "    tbarrier()", "    h //= 2"]
                out += ["    " + self.stmt() for _ in range(self.rng.randrange(2))]  # the body's tail
                self.tree = True
            elif kind == "rounds" and depth == 0:
                self.loops += 1
                body = self.items(1, self.rng.randint(1, 4))
                if "tbarrier()" not in body:
                    body.insert(self.rng.choice([0, len(body)]), "tbarrier()")
                out += [f"for r{self.loops} in range({self.rng.choice(['2', 'a % 3', '1'])}):",
                        *("    " + line for line in body)]
            elif kind == "cond":
                out += [self.rng.choice(["if t % 2 == 0:", "if t >= a:", "if g < b:"]), "    " + self.stmt(True)]
            elif kind == "loop":
                self.loops += 1
                out += [f"for j{self.loops} in range({self.rng.choice(['2', 'a % 3'])}):", "    " + self.stmt(True)]
        return out

    def source(self) -> tuple[str, list[str]]:
        body = self.items(0, self.rng.randint(3, 8))
        head = [f"sh = tshared.alloc(f32[{self.tiles + 1}])", "t = tile_linear_id()", "g = global_linear_id()",
                f"gb = group_linear_id() * {self.tiles}", "acc = f32(0.0)", "sh[t] = x[g % n]",
                f"if t == 0: sh[{self.tiles}] = f32(b)", "z[g] = f32(t)", "h = 0", "u0 = f32(0.0)", "u1 = f32(0.0)",
                "u2 = f32(0.0)", "tbarrier()"]
        lines = head[1:] + body + ["y[g] = acc + u0 + u1 + u2"]
        tsr = (f"@kernel tile[({self.tiles},)]\n"
               f"def {self.name}(x: f32[n], y: mut f32[m], z: mut f32[m], a: i32, b: i32):\n"
               + "\n".join("    " + line for line in [head[0], *lines]) + "\n")
        return tsr, lines


def model(lines: list[str], tiles: int, groups: int, x: np.ndarray, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Each tile a generator, the tiles run in order from one barrier to the next; Race where two
    tiles touch one element between the same barriers, one writing it."""
    py = "\n".join("    " + line.replace("tbarrier()", "yield").replace("tile_linear_id()", "tid")
                   .replace("global_linear_id()", "gid * T + tid").replace("group_linear_id()", "gid")
                   for line in lines)
    scope: dict[str, Any] = {"f32": f32}
    exec(f"def tile(tid, gid, T, sh, x, y, z, a, b, n):\n{py}\n", scope)
    m = groups * tiles
    y, z = np.zeros(m, f32), np.zeros(m, f32)
    current = [0]
    zt = Tracked(z, current)
    for gid in range(groups):
        sh = Tracked(np.zeros(tiles + 1, f32), current)
        gens = [scope["tile"](t, gid, tiles, sh, x, y, zt, a, b, len(x)) for t in range(tiles)]
        live = list(enumerate(gens))
        while live:
            done = []
            sh.seen, zt.seen = {}, {}
            for t, gen in live:
                current[0] = t
                try:
                    next(gen)
                except StopIteration:
                    done.append(t)
            assert not done or len(done) == len(live), "the tiles left at different barriers"
            live = [(t, gen) for t, gen in live if t not in done]
    return y, z


def programs(rng: random.Random, count: int) -> list[tuple[int, str, list[str], str]]:
    """`count` random kernels: (tiles, .tsr, the model's lines, name)."""
    out = []
    for i in range(count):
        g = Gen(rng, f"h{i}")
        out.append((g.tiles, *g.source(), f"h{i}"))
    return out


def run_module(seed: int, count: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """`count` random kernels in one module, each launched with a few argument sets in both modes;
    returns how many launches were free of races (those compared)."""
    import tessera

    rng = random.Random(seed)
    made = programs(rng, count)
    src = "\n".join(tsr for _, tsr, _, _ in made)
    cases = []
    for tiles, tsr, lines, name in made:
        for _ in range(2):
            groups, n = rng.choice([1, 2]), rng.choice([1, 7, 100])
            x = np.random.default_rng(seed).standard_normal(n).astype(f32)
            cases.append((name, tiles, tsr, lines, groups, x, rng.randint(0, 2 * tiles + 3), rng.randint(-5, 2 * tiles + 5)))
    monkeypatch.setenv("TESSERA_CPU_THREADS", "1")
    got: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("TESSERA_CPU_REGIONS", mode)
        mod, got[mode] = tessera.compile(src, backend="cpu"), []
        for name, tiles, tsr, _, groups, x, a, b in cases:
            assert mod[name].info().regions is (mode == "1"), tsr
            y, z = np.zeros(groups * tiles, f32), np.zeros(groups * tiles, f32)
            mod[name](x, y, z, a, b, grid=groups)
            got[mode].append((y, z))
    compared = 0
    for i, (_, tiles, tsr, lines, groups, x, a, b) in enumerate(cases):
        try:
            want = model(lines, tiles, groups, x, a, b)
        except Race:
            continue
        compared += 1
        what = f"{tsr}\ngroups={groups} n={len(x)} a={a} b={b}"
        for j, out in enumerate("yz"):
            region, fiber = got["1"][i][j], got["0"][i][j]
            assert region.tobytes() == fiber.tobytes(), f"{out}: region != fiber\n{what}\n{region}\n{fiber}"
            assert region.tobytes() == want[j].tobytes(), f"{out}: region != model\n{what}\n{region}\n{want[j]}"
    assert compared >= len(cases) // 4, f"only {compared} of {len(cases)} launches are free of races"
    return compared


SEEDS = (1, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_uniform_locals_and_guards(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    run_module(seed, 8, monkeypatch)


def test_the_generator_reaches_the_new_forms() -> None:
    """The bounded seeds print locals read from memory and kept once for the group, such locals
    kept per tile, assignments that lead their region (run before the tile loop), and guarded
    regions over a prefix."""
    from tessera.base.options import CompileOptions
    from tessera.transpile.driver import SourceFile, compile_source

    once = per_tile = prefix = lead = 0
    for seed in SEEDS:
        src = "\n".join(tsr for _, tsr, _, _ in programs(random.Random(seed), 8))
        c = compile_source(SourceFile(path="k.tsr", text=src), options=CompileOptions(cpu_regions=True)).cuda
        once += sum(c.count(f"float u{k}{{}};  // once per group") for k in range(3))
        per_tile += sum(c.count(f"tsr_rgs_u{k}[") for k in range(3))
        prefix += c.count("a prefix of the group")
        lead += c.count("once, before the tiles")
    assert once and per_tile and prefix and lead, (once, per_tile, prefix, lead)


if __name__ == "__main__":  # the long run: python -m tests.transpile.cpu.test_cpu_region_hoist_random N [SEED]
    total, first = int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with pytest.MonkeyPatch.context() as mp:
        for seed in range(first, first + total):
            n = run_module(seed, 8, mp)
            print(f"seed {seed}: 8 kernels, {n} of 16 launches free of races agree", flush=True)
