"""Shared-memory reuse (spec section 15) against no reuse: a seeded generator of race-free kernels
with several shared arrays, barriers, loops and conditions (uniform ones around barriers,
tile-dependent ones around plain accesses), run on the CPU backend with check_bounds (so the race
detector watches every access) once with reuse and once without. The results must be equal, and
the placement must not overlap two arrays that the generator's own model finds live in one barrier
interval of the program's run: the model executes the program's structure for the launch's flag
value and takes each array to be live from the interval of its first access to that of its last
(an array the program never names conflicts with every other one).
(`python -m tests.language.test_shared_reuse_random N` runs N cases.)"""

from __future__ import annotations

import dataclasses
import random
import sys

import numpy as np
import pytest

from tessera.api import Module
from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.transpile.driver import compile_source
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.verify import verify

pytestmark = pytest.mark.usefixtures("shared_cache")

TILES = 32


@dataclasses.dataclass
class _Node:
    """A piece of the generated program: an access ("op", the arrays it touches), a barrier, a
    uniform `if flag > k`, a tile-dependent `if`, or a uniform `for` loop of `trips` iterations."""

    kind: str
    lines: list[str] = dataclasses.field(default_factory=list)
    arrays: frozenset[int] = frozenset()
    k: int = 0
    body: list[_Node] = dataclasses.field(default_factory=list)


class _Gen:
    """Builds a program that is free of races by construction: in each barrier interval an array is
    either written by each tile at its own elements only (mode "w"), only read (mode "r"), or filled
    by an asynchronous copy that the interval's closing `twait()` lands (mode "c"), and only arrays
    that a barrier-separated full write initialized are read."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.lengths = [rng.choice([16, 32, 40, 64, 96]) for _ in range(rng.randint(2, 5))]
        self.steps = rng.randint(3, 7)  # top-level steps; each array is used in a window of them
        self.windows = [(lo, lo + rng.randint(0, 2)) for lo in (rng.randrange(self.steps) for _ in self.lengths)]
        self.active = list(range(len(self.lengths)))
        self.mode: dict[int, str] = {}
        self.ready: set[int] = set()      # initialized
        self.pending: set[int] = set()    # fully written in this interval: initialized after the barrier
        self.loops = 0
        self.copying = False  # an asynchronous copy is in flight until the next barrier (a twait)

    def barrier(self) -> _Node:
        """A barrier: `twait()` while asynchronous copies are in flight (it lands them)."""
        self.mode.clear()
        self.ready |= self.pending
        self.pending.clear()
        wait, self.copying = self.copying, False
        return _Node("bar", ["twait()" if wait else "tbarrier()"])

    def clean(self, out: list[_Node]) -> None:
        if self.mode or self.pending:
            out.append(self.barrier())

    def op(self, out: list[_Node], uniform: bool) -> None:
        rng = self.rng
        i = rng.choice(self.active)
        n = self.lengths[i]
        want = "r" if i in self.ready and rng.random() < 0.55 else "c" if uniform and rng.random() < 0.2 else "w"
        if i in self.mode and (want == "c" or self.mode[i] != want):
            if not uniform:
                return
            out.append(self.barrier())
        src = [j for j in self.ready if self.mode.get(j, "r") == "r" and j != i and j in self.active]
        if want == "c":  # the whole group fills the array; no tile touches it until the twait
            self.mode[i], self.copying = "c", True
            self.pending.add(i)
            c = rng.randrange(40)
            out.append(_Node("op", [f"tcopy_async(s{i}, x[{c}:{c + n}])", "tcommit()"], frozenset({i})))
            return
        if want == "r":
            self.mode[i] = "r"
            a, c = rng.choice([1, 3, 5, 7]), rng.randrange(n)
            out.append(_Node("op", [f"acc += s{i}[(t * {a} + {c}) % {n}] * {rng.choice([0.5, 1.0, 2.0])}"],
                             frozenset({i})))
            return
        self.mode[i] = "w"
        c = rng.randrange(64)
        extra, used = "", {i}
        if src and rng.random() < 0.5:
            j = rng.choice(src)
            self.mode[j] = "r"
            extra, used = f" + s{j}[(e + {rng.randrange(64)}) % {self.lengths[j]}]", {i, j}
        lines = [f"for e in range(t, {n}, {TILES}):", f"    s{i}[e] = x[(e + {c}) % n] * 0.25{extra} + acc * 0.125"]
        if rng.random() < 0.4:
            lines.append(f"    acc += s{i}[e]")
        out.append(_Node("op", lines, frozenset(used)))
        if uniform:
            self.pending.add(i)

    def block(self, depth: int, uniform: bool) -> list[_Node]:
        out: list[_Node] = []
        for step in range(self.steps if depth == 0 else self.rng.randint(1, 4)):
            if depth == 0:
                self.active = [i for i, (lo, hi) in enumerate(self.windows) if lo <= step <= hi] or [step % len(
                    self.lengths)]
            r = self.rng.random()
            if not uniform or depth >= 2 or r < 0.5:
                self.op(out, uniform)
            elif r < 0.62:
                out.append(self.barrier())
            elif r < 0.75:
                out.append(_Node("ift", [f"if t % {self.rng.choice([2, 3, 5])} == {self.rng.randrange(2)}:"],
                                 body=self.block(depth + 1, False)))
            elif r < 0.87:
                self.clean(out)
                saved = set(self.ready)
                node = _Node("ifu", k=self.rng.randrange(4), body=self.block(depth + 1, True))
                self.clean(node.body)
                self.ready = saved  # the condition may be false: its writes initialize nothing
                out.append(node)
            else:
                self.clean(out)
                self.loops += 1
                node = _Node("for", k=self.rng.randint(1, 3), lines=[f"it{self.loops}"],
                             body=self.block(depth + 1, True))
                self.clean(node.body)
                out.append(node)
        return out


def _emit(nodes: list[_Node], indent: str) -> list[str]:
    out: list[str] = [] if nodes else [indent + "acc += 1.0"]
    for node in nodes:
        if node.kind in ("op", "bar"):
            out += [indent + line for line in node.lines]
        elif node.kind == "ift":
            out += [indent + node.lines[0], *_emit(node.body, indent + "    ")]
        elif node.kind == "ifu":
            out += [f"{indent}if flag > {node.k}:", *_emit(node.body, indent + "    ")]
        else:
            out += [f"{indent}for {node.lines[0]} in range({node.k}):", *_emit(node.body, indent + "    ")]
    return out


def _live_together(nodes: list[_Node], flag: int, count: int) -> set[frozenset[int]]:
    """The model: pairs of arrays live in one barrier interval of the run with `flag`."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    epoch = 0

    def run(body: list[_Node]) -> None:
        nonlocal epoch
        for node in body:
            if node.kind == "bar":
                epoch += 1
            elif node.kind == "op":
                for a in node.arrays:
                    first.setdefault(a, epoch)
                    last[a] = epoch
            elif node.kind == "ift" or (node.kind == "ifu" and flag > node.k):
                run(node.body)
            elif node.kind == "for":
                for _ in range(node.k):
                    run(node.body)

    def named(body: list[_Node]) -> set[int]:
        return {a for node in body for a in (node.arrays | named(node.body))}

    run(nodes)
    out = {frozenset((a, b)) for a in first for b in first
           if a < b and first[a] <= last[b] and first[b] <= last[a]}
    never = set(range(count)) - named(nodes)  # arrays the program never names keep their own memory
    return out | {frozenset((a, b)) for a in never for b in range(count) if a != b}


def _program(seed: int) -> tuple[str, list[_Node], int]:
    gen = _Gen(random.Random(seed))
    body = gen.block(0, True)
    allocs = [f"    s{i} = tshared.alloc(f32[{n}])" for i, n in enumerate(gen.lengths)]
    src = "\n".join([f"@kernel tile[({TILES},)]", "def k(x: f32[n], y: mut f32[m], flag: i32):", *allocs,
                     "    t = tile_id(0)", "    acc = 0.0", *_emit(body, "    "), "    y[t] = acc"]) + "\n"
    return src, body, len(gen.lengths)


def _layout(src: str) -> L.SharedLayout:
    """The placement the compiler chooses (the verifier checking every pass's result)."""
    layout = compile_source(SourceFile("reuse.tsr", src), CompileOptions(check_bounds=True),
                            verify=verify).module.kernels[0].shared
    assert layout is not None
    return layout


def _check(seed: int) -> bool:
    """Run case `seed`; return whether the reuse plan shares memory between some arrays."""
    src, body, count = _program(seed)
    layout = _layout(src)
    slots = {int(s.name[1:]): s for s in layout.slots}
    for pair in _live_together(body, flag := seed % 5, count):
        a, b = sorted(pair)
        sa, sb = slots[a], slots[b]
        assert sa.offset + sa.nbytes <= sb.offset or sb.offset + sb.nbytes <= sa.offset, \
            f"s{a} and s{b} are live together but share memory\n{layout}\n{src}"
    data = np.random.default_rng(seed)
    x = data.integers(-8, 9, 50).astype(np.float32)
    results = []
    for reuse in (True, False):
        options = CompileOptions.checked(check_bounds=True, shared_reuse=reuse)
        mod = Module(src.encode(), f"reuse{seed}.tsr", "cpu", None, options)
        y = np.zeros(TILES, np.float32)
        mod.k(x, y, np.int32(flag), grid=1)
        results.append(y)
    np.testing.assert_array_equal(results[0], results[1], err_msg=src)
    return layout.shares


def test_reuse_gives_the_results_of_no_reuse_and_overlaps_no_live_arrays() -> None:
    shared = sum(_check(seed) for seed in range(8))
    assert shared >= 3  # the generator makes programs that do reuse memory


def test_the_model_sees_a_value_kept_across_a_loop() -> None:
    # s0 is written before the loop and read in every iteration; s1 is used in between, after
    # barriers: the two are live together, and the compiler keeps them apart.
    src = """\
@kernel tile[(32,)]
def k(x: f32[n], y: mut f32[m], flag: i32):
    s0 = tshared.alloc(f32[32])
    s1 = tshared.alloc(f32[32])
    t = tile_id(0)
    acc = 0.0
    s0[t] = x[t]
    tbarrier()
    for it in range(3):
        acc += s0[(t + 1) % 32]
        tbarrier()
        s1[t] = acc
        tbarrier()
        acc += s1[(t + 5) % 32]
        tbarrier()
    y[t] = acc
"""
    assert not _layout(src).shares
    # The same, but s0's last use is before the loop: now they may share.
    alone = src.replace("        acc += s0[(t + 1) % 32]\n", "").replace("    for it", "    acc += s0[(t + 1) % 32]\n"
                                                                         "    tbarrier()\n    for it")
    assert _layout(alone).sharing("s0") == ("s1",)

if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    print(f"{sum(_check(seed) for seed in range(n))} of {n} programs shared memory")
