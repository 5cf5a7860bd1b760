"""A seeded generator of random kernels with group reductions for region mode (transpile/cpu/
group_reduce.py): `group_sum` / `group_max` / `group_min` of f32 or i32 in declarations,
assignments, `if` conditions and statements with two of them, at the top level, in loops with a
uniform header (`for` and `while`, nested) and next to per-tile branches and other tiles' reads,
in groups of whole warps or not. Region mode, fiber mode (TESSERA_CPU_REGIONS=0) and a Python model
of fiber mode's order of operations (test_cpu_region_reduce.reduce_model; each tile's statements
in program order, float32 arithmetic) must give the same bytes. A bounded run is part of the suite;
`python -m tests.transpile.cpu.test_cpu_region_reduce_random N [SEED]` runs N modules of 6 programs."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

import numpy as np
import pytest

from tests.transpile.cpu.region_diff import Case, long_run, run_programs, seeded_tests
from tests.transpile.cpu.test_cpu_region_reduce import reduce_model

pytestmark = pytest.mark.usefixtures("shared_cache")
TILES = [1, 5, 32, 40, 64, 96]
OPS = ["sum", "max", "min"]


@dataclasses.dataclass
class State:
    """The model's state of one group: every tile's `v`, the group's outputs, its input row."""

    v: np.ndarray
    out: np.ndarray
    x: np.ndarray
    n: int
    ty: type

    def c(self, value: float) -> np.generic:
        return self.ty(value)


Model = Callable[[State], None]


def _mask(s: State, v: np.ndarray) -> np.ndarray:
    """Integers stay below 1024 (no overflow in any order): `v & 1023`."""
    return v & 1023 if s.ty is np.int32 else v


def steps(rng: random.Random, ty: str, tiles: int, slot: int, nested: bool = False) -> tuple[list[str], Model]:
    """One random step: its lines (at the body's indentation) and its model; output slot `slot`
    (its locals are named after it); `nested`: inside the loop of another step."""
    op, op2 = rng.choice(OPS), rng.choice(OPS)
    red = lambda s, v, o=op: s.ty(reduce_model(v, o))  # noqa: E731
    half = "0.5" if ty == "f32" else "3"
    mul = (lambda s, v: v * s.c(0.5)) if ty == "f32" else (lambda s, v: v * s.c(3))
    masked = "{} & 1023" if ty == "i32" else "{}"
    kind = rng.randrange(7 if nested else 8)
    tag = f"{slot}{'n' if nested else ''}"
    if kind == 0:
        lines = [f"r{tag} = group_{op}(v)", "v = " + masked.format(f"v + r{tag}"),
                 f"if t == {tiles - 1}:", f"    o[g, {slot}] = r{tag}"]

        def model(s: State) -> None:
            r = red(s, s.v)
            s.v = _mask(s, s.v + r)
            s.out[slot] = r
    elif kind == 1:
        lines = [f"if group_{op}(v * {half}) > {'0.0' if ty == 'f32' else '100'}:",
                 "    v = " + masked.format(f"v + {'1.0' if ty == 'f32' else '1'}")]

        def model(s: State) -> None:
            if red(s, mul(s, s.v)) > s.c(0.0 if s.ty is np.float32 else 100):
                s.v = _mask(s, s.v + s.c(1))
    elif kind == 2:
        lines = ["v = " + masked.format(f"v * {half} + group_{op}(v)")]

        def model(s: State) -> None:
            s.v = _mask(s, mul(s, s.v) + red(s, s.v))
    elif kind == 3:
        which = rng.randrange(3)
        lines = [f"if t % 3 == {which}:", "    v = " + masked.format(f"v * {half}")]

        def model(s: State) -> None:
            t = np.arange(len(s.v)) % 3 == which
            s.v = np.where(t, _mask(s, mul(s, s.v)), s.v)
    elif kind == 4:
        lines = ["v = " + masked.format(f"v + (group_{op}(v) - group_{op2}(v))")]

        def model(s: State) -> None:
            s.v = _mask(s, s.v + (red(s, s.v) - s.ty(reduce_model(s.v, op2))))
    elif kind == 5:
        lines = [f"w{tag} = 0", f"while w{tag} < n:", "    v = " + masked.format(f"v + group_{op}(v) * {half}"),
                 f"    w{tag} += 1"]

        def model(s: State) -> None:
            for _ in range(s.n):
                s.v = _mask(s, s.v + mul(s, np.full_like(s.v, red(s, s.v))))
    elif kind == 6:
        lines = ["v = " + masked.format(f"v + group_{op}(x[g, (t + 1) % {tiles}])")]

        def model(s: State) -> None:
            s.v = _mask(s, s.v + red(s, np.roll(s.x, -1)))
    else:
        inner, inner_model = steps(rng, ty, tiles, slot, nested=True)
        lines = [f"for k{tag} in range(n):", *("    " + line for line in inner)]

        def model(s: State) -> None:
            for _ in range(s.n):
                inner_model(s)
    return lines, model


@dataclasses.dataclass
class Program:
    name: str
    tiles: int
    ty: str
    lines: list[str]
    models: list[Model]

    def source(self) -> str:
        t = self.ty
        return (f"@kernel tile[({self.tiles},)]\n"
                f"def {self.name}(x: {t}[G, {self.tiles}], y: mut {t}[G, {self.tiles}], o: mut {t}[G, 8], n: i32):\n"
                "    t = tile_linear_id()\n    g = group_linear_id()\n    v = x[g, t]\n"
                + "".join(f"    {line}\n" for line in self.lines) + "    y[g, t] = v\n")

    def model(self, x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        ty = np.float32 if self.ty == "f32" else np.int32
        y, o = np.zeros_like(x), np.zeros((len(x), 8), ty)
        for g in range(len(x)):
            s = State(x[g].copy(), o[g], x[g], n, ty)
            for m in self.models:
                m(s)
            y[g] = s.v
        return y, o


def random_program(rng: random.Random, name: str) -> Program:
    tiles, ty = rng.choice(TILES), rng.choice(["f32", "i32"])
    lines: list[str] = []
    models: list[Model] = []
    for slot in range(rng.randint(1, 4)):
        more, model = steps(rng, ty, tiles, slot)
        lines += more
        models.append(model)
    return Program(name, tiles, ty, lines, models)


def cases(rng: random.Random, seed: int, p: Program) -> list[Case]:
    """A few argument sets for `p`."""
    out = []
    for _ in range(2):
        groups, n = rng.choice([1, 3]), rng.choice([0, 1, 3])
        data = np.random.default_rng(seed).standard_normal((groups, p.tiles))
        x = data.astype(np.float32) if p.ty == "f32" else (np.abs(data) * 300).astype(np.int32)
        out.append(Case(p, (x, np.zeros_like(x), np.zeros((groups, 8), x.dtype), n), (1, 2), groups, p.model(x, n),
                        f"groups={groups} n={n}"))
    return out


def run_module(seed: int, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`count` random programs in one module; each launched with a few argument sets in both modes."""
    rng = random.Random(seed)
    progs = [random_program(rng, f"rnd{i}") for i in range(count)]
    run_programs(progs, lambda p: cases(rng, seed, p), monkeypatch)


test_random_group_reductions, test_random_group_reductions_long = seeded_tests(run_module, 6, range(100, 130))


if __name__ == "__main__":  # the long run: python -m tests.transpile.cpu.test_cpu_region_reduce_random N [SEED]
    long_run(run_module, 6)
