"""`tpipeline` wherever it runs (spec section 7, docs/language.md section 8.7): inside another loop
(the persistent-kernel pattern, a loop over output tiles around the pipelined k-loop), under `if`s,
twice in a row, with `continue` around it and in its body. Results on the CPU backend in region
and fiber mode against NumPy for 1, 2 and 3 stages; the C compiles with NVRTC without warnings;
the race detector finds nothing in these programs and the planted race of the old expansion (a
second run's prologue copying into a stage that other tiles still read). A seeded generator of
random pipeline programs, compared with a model of the contract (`_Program.model`), runs bounded
here, also with several loops over the same arrays and barriers in the bodies (v3), each program
also against itself without tpipeline; `python -m tests.language.test_pipelines_in_loops N [seed]
[--v3] [--check]` runs it longer."""

from __future__ import annotations

import dataclasses
import random
import sys

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source

pytestmark = pytest.mark.usefixtures("shared_cache")

MODES = ["region", "fiber"]


@pytest.fixture(params=MODES)
def mode(request, monkeypatch) -> str:
    monkeypatch.setenv("TESSERA_CPU_REGIONS", "1" if request.param == "region" else "0")
    return request.param


# ---- the persistent-kernel pattern: a loop over the output tiles around the pipelined k-loop -------

PERSISTENT = """\
const BM = 16
const BN = 16
const BK = 4

@kernel tile[(16, 16)]
def sgemm(A: f32[M, K], B: f32[K, N], C: mut f32[M, N], S: const i32 = 2):
    As = tshared.alloc(f32[BM, BK])
    Bs = tshared.alloc(f32[BK, BN])
    tx = tile_id(0)
    ty = tile_id(1)
    nt = (N + BN - 1) // BN
    for tile in range(group_id(0), ((M + BM - 1) // BM) * nt, group_count(0)):
        r0 = (tile // nt) * BM
        c0 = (tile % nt) * BN
        acc = 0.0
        for k0 in tpipeline(0, K, BK, stages=S):
            tcopy_async(As, A[r0:r0 + BM, k0:k0 + BK])
            tcopy_async(Bs, B[k0:k0 + BK, c0:c0 + BN])
            for kk in static_range(BK):
                acc += As[ty, kk] * Bs[kk, tx]
        if r0 + ty < M and c0 + tx < N:
            C[r0 + ty, c0 + tx] = acc
"""


@pytest.mark.parametrize("shape", [(64, 24, 64), (50, 13, 37), (16, 3, 16)])
def test_a_pipeline_in_a_persistent_loop_over_tiles(mode: str, shape) -> None:
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    mod = tessera.compile(PERSISTENT, backend="cpu", path="persistent.tsr")
    for stages in (1, 2, 3):
        c = np.full((m, n), np.nan, np.float32)
        mod.sgemm(a, b, c, S=stages, grid=2)  # each group computes several tiles of C in turn
        np.testing.assert_array_equal(c, a @ b, err_msg=f"stages={stages}")


# ---- pipelines under ifs, twice in a row, with continue, inside a while loop ------------------------

SHAPES = """\
@kernel tile[(16,)]
def k(x: f32[T, L], y: mut f32[T, 16], S: const i32 = 2):
    a = tshared.alloc(f32[16])
    b = tshared.alloc(f32[8])
    t = 0
    while t < T:
        t += 1
        if (t - 1) % 4 == 3:
            continue
        acc = 0.0
        if (t - 1) % 3 != 1:
            for k0 in tpipeline(0, L, 16, stages=S):
                tcopy_async(a, x[t - 1, k0:k0 + 16])
                if k0 % 48 == 16:
                    continue
                acc += a[(tile_id(0) * 7 + 5) % 16]
        for k1 in tpipeline(3, L, 8, stages=S):
            tcopy_async(b, x[t - 1, k1:k1 + 8])
            acc += 100.0 * b[(tile_id(0) + 3) % 8]
        y[t - 1, tile_id(0)] = acc
"""


def _shapes_model(x: np.ndarray) -> np.ndarray:
    rows, length = x.shape
    pad = np.concatenate([x, np.zeros((rows, 16), x.dtype)], axis=1)
    y = np.full((rows, 16), -1.0, np.float32)
    for t in range(rows):
        if t % 4 == 3:
            continue
        for tile in range(16):
            acc = 0.0
            if t % 3 != 1:
                acc += sum(pad[t, k0 + (tile * 7 + 5) % 16] for k0 in range(0, length, 16) if k0 % 48 != 16)
            acc += sum(100.0 * pad[t, k1 + (tile + 3) % 8] for k1 in range(3, length, 8))
            y[t, tile] = acc
    return y


@pytest.mark.parametrize("length", [0, 5, 16, 70, 200])
def test_pipelines_under_ifs_twice_in_a_row_and_with_continue(mode: str, length: int) -> None:
    rng = np.random.default_rng(length)
    x = rng.integers(-9, 10, (13, length)).astype(np.float32)
    mod = tessera.compile(SHAPES, backend="cpu", path="shapes.tsr")
    for stages in (1, 2, 3):
        y = np.full((13, 16), -1.0, np.float32)
        mod.k(x, y, S=stages, grid=1)
        np.testing.assert_array_equal(y, _shapes_model(x), err_msg=f"stages={stages}")


def test_the_race_detector_finds_nothing_in_these_programs() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-9, 10, (7, 70)).astype(np.float32)
    checked = tessera.compile(SHAPES, backend="cpu", check_bounds=True, path="shapes.tsr")
    for stages in (2, 3):
        y = np.full((7, 16), -1.0, np.float32)
        checked.k(x, y, S=stages, grid=1)
        np.testing.assert_array_equal(y, _shapes_model(x))
    a = rng.integers(-4, 5, (40, 9)).astype(np.float32)
    b = rng.integers(-4, 5, (9, 40)).astype(np.float32)
    c = np.zeros((40, 40), np.float32)
    tessera.compile(PERSISTENT, backend="cpu", check_bounds=True, path="persistent.tsr").sgemm(a, b, c, S=3, grid=2)
    np.testing.assert_array_equal(c, a @ b)


def test_without_the_barrier_before_the_prologue_the_race_detector_reports_it(monkeypatch) -> None:
    """The old expansion (no barrier before a repeated pipeline's prologue) is a data race that the
    race detector names with both lines: the copy into a stage and the read of the previous run."""
    from tessera.transpile.passes import pipeline_copies as pc

    real = pc._Function.__init__

    def unfixed(self, *args) -> None:
        real(self, *args)
        self.repeated = set()

    monkeypatch.setattr(pc._Function, "__init__", unfixed)
    src = "# unfixed\n" + PERSISTENT  # other C than the fixed build's
    lines = src.splitlines()
    copies = {i + 1 for i, line in enumerate(lines) if "tcopy_async" in line}
    read = next(i + 1 for i, line in enumerate(lines) if "acc += As" in line)
    a = np.ones((64, 12), np.float32)
    b = np.ones((12, 64), np.float32)
    with pytest.raises(LaunchError) as e:
        tessera.compile(src, backend="cpu", check_bounds=True, path="persistent.tsr").sgemm(
            a, b, np.zeros((64, 64), np.float32), S=2, grid=2)
    text = str(e.value)
    assert "data race" in text and f"line {read}" in text and any(f"line {c}" in text for c in copies), text


# ---- the expansion ---------------------------------------------------------------------------------

def _kernel_text(src: str, stages: int, name: str = "k") -> str:
    cuda = compile_source(SourceFile("t.tsr", src), variants={name: {"S": stages}}).cuda
    return cuda[cuda.index("__global__"):]


def test_a_repeated_pipeline_has_a_barrier_before_its_prologue_and_a_lone_one_has_none() -> None:
    body = _kernel_text(PERSISTENT, 3, "sgemm")
    loop = body[body.index("for (int tile"):]
    prologue = loop[:loop.index("tsr_copy_async")]
    assert prologue.count("__syncthreads();") == 1
    lone = PERSISTENT.replace("    for tile in range(group_id(0), ((M + BM - 1) // BM) * nt, group_count(0)):\n",
                              "    if group_id(0) < ((M + BM - 1) // BM) * nt:\n        tile = group_id(0)\n")
    body = _kernel_text(lone, 3, "sgemm")
    assert "__syncthreads();" not in body[:body.index("tsr_copy_async")]


@pytest.mark.parametrize("src,name", [(PERSISTENT, "sgemm"), (SHAPES, "k")], ids=["persistent", "shapes"])
def test_the_c_compiles_with_nvrtc_without_warnings(src: str, name: str) -> None:
    for stages in (1, 2, 3):
        result = compile_source(SourceFile("t.tsr", src), options=CompileOptions(arch="sm_80"),
                                variants={name: {"S": stages}})
        assert compile_cuda(result.cuda, name="t.cu", arch="sm_80").warnings == ()


# ---- a random differential generator -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Pipe:
    buf: str
    width: int   # elements copied per iteration (the array's length)
    start: int
    step: int
    mul: int     # each tile reads element (tile * mul + add) % width: another tile's copy
    add: int
    scale: int
    skip: tuple[int, int] | None  # `continue` in the body when k % m == r
    guard: tuple[int, int] | None  # the pipeline runs when t % m == r
    handoff: bool = False       # the value goes through a shared array `w<i>` to another tile, with a
                                # tbarrier() in the middle of the body (spec section 7, v3)
    lead_barrier: bool = False  # a tbarrier() right after the leading copies
    tail_barrier: bool = False  # a tbarrier() that ends the body


@dataclasses.dataclass(frozen=True)
class _Program:
    """A kernel of one or two pipelines inside an outer loop (or none), with `continue`s and `if`s
    placed at random, and the model of what it computes."""

    tiles: int
    outer: str   # "for", "stride" (grid-stride), "while", "nested" or "once" (top level, t = group)
    skip: tuple[int, int] | None  # `continue` of the outer loop when t % m == r
    pipes: tuple[_Pipe, ...]

    def source(self, pipelined: bool = True) -> str:
        """The kernel; without `pipelined`, the same program with `range` loops, `tcopy` and the
        barriers a plain loop needs around its copies (the simpler construct the pipeline must equal)."""
        lines = ["@kernel tile[(NT,)]".replace("NT", str(self.tiles)),
                 "def k(x: f32[R, L], y: mut f32[R, NT2], S: const i32 = 2):".replace("NT2", str(self.tiles))]
        lines += [f"    {b} = tshared.alloc(f32[{w}])" for b, w in dict((p.buf, p.width) for p in self.pipes).items()]
        lines += [f"    w{i} = tshared.alloc(f32[{self.tiles}])" for i, p in enumerate(self.pipes) if p.handoff]
        inner = ["acc = 0.0"]
        for i, p in enumerate(self.pipes):
            copy = f"tcopy_async({p.buf}, x[t, k{i}:k{i} + {p.width}])"
            if pipelined:
                body = [f"for k{i} in tpipeline({p.start}, L, {p.step}, stages=S):", f"    {copy}"]
            else:
                body = [f"for k{i} in range({p.start}, L, {p.step}):", "    tbarrier()",
                        f"    {copy.replace('tcopy_async', 'tcopy')}", "    tbarrier()"]
            if p.lead_barrier:
                body.append("    tbarrier()")
            if p.skip:
                body += [f"    if k{i} % {p.skip[0]} == {p.skip[1]}:", "        continue"]
            value = f"{p.scale}.0 * {p.buf}[(tile_id(0) * {p.mul} + {p.add}) % {p.width}]"
            if p.handoff:
                body += [f"    w{i}[tile_id(0)] = {value}", "    tbarrier()",
                         f"    acc += w{i}[(tile_id(0) * 5 + 1) % {self.tiles}]"]
            else:
                body.append(f"    acc += {value}")
            if p.tail_barrier:
                body.append("    tbarrier()")
            if p.guard:
                body = [f"if t % {p.guard[0]} == {p.guard[1]}:"] + ["    " + b for b in body]
            inner += body
        inner.append("y[t, tile_id(0)] = acc")
        if self.skip:
            inner = [f"if t % {self.skip[0]} == {self.skip[1]}:", "    continue"] + inner
        if self.outer == "once":
            lines += ["    t = group_id(0)", "    if t < R:"] + ["        " + s for s in inner]
        elif self.outer == "while":
            lines += ["    t = -1", "    while t + 1 < R:", "        t += 1"] + ["        " + s for s in inner]
        else:
            head = {"for": "for t in range(R):", "stride": "for t in range(group_id(0), R, group_count(0)):",
                    "nested": "for t in range(R):"}[self.outer]
            lines.append("    " + head)
            if self.outer == "nested":  # the same rows twice: the pipelines run twice as often
                lines.append("        for again in range(2):")
                lines += ["            " + s for s in inner]
            else:
                lines += ["        " + s for s in inner]
        return "\n".join(lines) + "\n"

    def grid(self, rows: int) -> int:
        return rows if self.outer == "once" else 2 if self.outer == "stride" else 1

    def model(self, x: np.ndarray) -> np.ndarray:
        rows, length = x.shape
        pad = np.concatenate([x, np.zeros((rows, max(p.width for p in self.pipes)), x.dtype)], axis=1)
        y = np.full((rows, self.tiles), -1.0, np.float32)
        for t in range(rows):
            if self.skip and t % self.skip[0] == self.skip[1]:
                continue
            for tile in range(self.tiles):
                acc = 0.0
                for p in self.pipes:
                    if p.guard and t % p.guard[0] != p.guard[1]:
                        continue
                    src = (tile * 5 + 1) % self.tiles if p.handoff else tile  # whose value it adds
                    for k in range(p.start, length, p.step):
                        if not (p.skip and k % p.skip[0] == p.skip[1]):
                            acc += p.scale * pad[t, k + (src * p.mul + p.add) % p.width]
                y[t, tile] = acc
        return y


def _random_program(rng: random.Random, v3: bool = False) -> _Program:
    """A random program; with `v3` also up to three pipelines, arrays that several of them pipeline,
    and barriers of the body's own (mid-body hand-offs, after the copies, at the end)."""
    tiles = rng.choice([8, 16, 32])
    pipes: list[_Pipe] = []
    for i in range(rng.choice([1, 1, 2, 3] if v3 else [1, 1, 2])):
        width = rng.choice([3, 4, 8, 12, 16, 20, 32, 64])
        buf = f"s{i}"
        if v3 and pipes and rng.random() < 0.5:  # an array that an earlier loop pipelines too
            buf, width = pipes[-1].buf, pipes[-1].width
        pipe = _Pipe(buf, width, start=rng.choice([0, 0, 1, 3]), step=rng.choice([1, 4, width, width, 2 * width]),
                     mul=rng.choice([1, 3, 5, 7]), add=rng.randrange(width), scale=rng.choice([1, 10, 100]),
                     skip=rng.choice([None, None, (2, 0), (3, 1)]), guard=rng.choice([None, None, (2, 1), (3, 0)]))
        if v3:
            pipe = dataclasses.replace(pipe, handoff=rng.random() < 0.5, lead_barrier=rng.random() < 0.3,
                                       tail_barrier=rng.random() < 0.4)
        pipes.append(pipe)
    outer = rng.choice(["for", "stride", "while", "nested", "once", "once"] if v3 else
                       ["for", "for", "stride", "stride", "while", "nested", "once"])
    skip = None if outer == "once" else rng.choice([None, None, (2, 1), (3, 0)])  # no loop to continue
    return _Program(tiles, outer, skip, tuple(pipes))


def _run_random(seed: int, count: int, check: bool = False, v3: bool = False) -> int:
    """`count` random programs from `seed`, each for 1, 2 and 3 stages (and more), compared with the
    model and the same program without tpipeline; every third one (every one with `v3`) under the
    race detector.
    Returns the number of pipelined runs."""
    rng = random.Random(seed)
    runs = 0
    for case in range(count):
        prog = _random_program(rng, v3)
        rows, length = rng.choice([1, 2, 3, 5]), rng.choice([0, 3, 17, 40, 97, 130])
        x = np.array([[rng.randint(-9, 9) for _ in range(length)] for _ in range(rows)], np.float32).reshape(rows, length)
        want = prog.model(x)
        checked = check or v3 or case % 3 == 2  # v3: barriers are what it tests, so always
        plain = tessera.compile(prog.source(pipelined=False), backend="cpu", check_bounds=checked, path=f"plain{case}.tsr")
        y = np.full((rows, prog.tiles), -1.0, np.float32)
        plain.k(x, y, grid=prog.grid(rows))
        np.testing.assert_array_equal(y, want, err_msg=f"seed {seed} case {case} without tpipeline:\n"
                                      f"{prog.source(pipelined=False)}")
        mod = tessera.compile(prog.source(), backend="cpu", check_bounds=checked, path=f"random{case}.tsr")
        for stages in ((1, 2, 3, 4) if check else (1, 2, 3)):
            y = np.full((rows, prog.tiles), -1.0, np.float32)
            mod.k(x, y, S=stages, grid=prog.grid(rows))
            np.testing.assert_array_equal(y, want, err_msg=f"seed {seed} case {case} stages {stages}:\n"
                                          f"{prog.source()}")
            runs += 1
    return runs


def test_random_pipeline_programs_in_loops_and_conditions_match_the_model(mode: str) -> None:
    assert _run_random(seed=5 if mode == "region" else 7, count=4) == 12  # seeds that catch the old expansion


def test_random_pipelines_with_barriers_and_shared_stages_match_the_model_and_plain_loops(mode: str) -> None:
    # Several loops over the same arrays, mid-body hand-offs through shared memory, barriers the
    # pipeline merges with its own, inside outer loops and conditions (spec section 7, v3).
    # Seeds that catch planted bugs: 15 no barrier before a loop whose arrays an earlier loop
    # pipelined, 13 no barrier at the end of a body whose own final barrier the pipeline took over.
    assert _run_random(seed=15 if mode == "region" else 13, count=5, v3=True) == 15


if __name__ == "__main__":  # a longer run: python -m tests.language.test_pipelines_in_loops 200 [seed] [--v3] [--check]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 100
    print(_run_random(int(args[1]) if len(args) > 1 else 1, n, check="--check" in sys.argv, v3="--v3" in sys.argv),
          "runs agree")
