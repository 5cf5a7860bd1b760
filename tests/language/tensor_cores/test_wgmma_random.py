"""A random differential generator against warpgroup MMA (spec section 16): random tilings (one or
two warpgroups, one or two m64 blocks each, N from 8 to 128, K steps whose rows take each swizzle
mode and panels), operand types (f16, bf16, and i8 with trans_b), both B layouts, A from shared
memory or from an operand fragment, the tmma on whole arrays or on K slices of them in a
`static_range` loop (`As[:, kk:kk + S]`, at starts that are multiples of the instruction's k or not,
covering the K block or part of it), in a pipelined or a plain loop and under a run-time
condition, the pipeline run once or again inside a loop, and a section-14 epilogue (element
coordinates, a row reduction into a row vector). Sizes whose strides are 16-byte multiples run the
aligned variant, where a pipeline's copies are bulk tensor copies: into the arrays wgmma reads as
swizzled boxes, one per panel (and a dense box into an array that only ldmatrix reads).
Each case runs on the CPU backend for sm_90a and sm_80 and must give NumPy's result, bit for bit
the same on both; whether it used wgmma must be what the contract's conditions say (a Python
model of them), and so must the tensor maps of its bulk copies (their boxes and swizzle modes).
`TESSERA_WGMMA_CASES=N` runs N cases of each kind instead of the suite's few."""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass

import numpy as np
import pytest

import tessera
from samples.case import bf16_bits, bf16_values
from tessera.base.errors import SourceFile
from tessera.base.kernel_info import KernelInfo
from tessera.base.options import CompileOptions
from tessera.runtime.host.library import CpuLibrary
from tessera.transpile.driver import compile_source

CASES = int(os.environ.get("TESSERA_WGMMA_CASES", "3"))


@dataclass(frozen=True)
class Case:
    t: str
    groups: int
    bm: int
    bn: int
    bk: int
    trans_b: bool
    a_regs: bool
    pipelined: bool
    rows: bool
    aligned: bool = False  # sizes for the aligned variant (N a multiple of 16)
    repeat: bool = False   # the pipeline inside `for rep in range(reps)` (reps = 2 at launch)
    slices: tuple[int, int, int] | None = None  # tmma on K slices: for kk in static_range(start, stop, step)

    @property
    def k_step(self) -> int:
        return 32 if self.t == "i8" else 16

    def covered(self, k: int) -> np.ndarray:
        """Which of the k columns of A the tmma statements read (all, without slices)."""
        if self.slices is None:
            return np.ones(k, bool)
        start, stop, step = self.slices
        within = np.arange(k) % self.bk
        return (within >= start) & (within < start + len(range(start, stop, step)) * step)

    @property
    def nt(self) -> int:
        return 128 * self.groups

    def source(self) -> str:
        acc_t = "i32" if self.t == "i8" else "f32"
        zero = "0" if self.t == "i8" else "0.0"
        b_shape = f"{self.t}[N, K]" if self.trans_b else f"{self.t}[K, N]"
        bs = f"[{self.bn}, {self.bk}]" if self.trans_b else f"[{self.bk}, {self.bn}]"
        b_view = "B[n0:n0 + BN, k0:k0 + BK]" if self.trans_b else "B[k0:k0 + BK, n0:n0 + BN]"
        a_arg = "Af" if self.a_regs else "As"
        lines = [
            f"@kernel tile[({self.nt},)]",
            f"def mm(A: {self.t}[M, K], B: {b_shape}, C: mut {acc_t}[M, N], R: mut {acc_t}[M], skip: i32, reps: i32, "
            f"BM: const i32 = {self.bm}, BN: const i32 = {self.bn}, BK: const i32 = {self.bk}):",
            f"    As = tshared.alloc({self.t}[BM, BK])",
            f"    Bs = tshared.alloc({self.t}{bs})",
            f"    acc = tfrag({acc_t}[BM, BN], {zero})",
        ]
        if self.a_regs:
            lines.append(f"    Af = tfrag({self.t}[BM, BK])")
        if self.rows:
            lines.append(f"    mx = tfrag({acc_t}[BM])")
        lines += ["    m0 = group_id(1) * BM", "    n0 = group_id(0) * BN"]
        copy = "tcopy_async" if self.pipelined else "tcopy"
        loop = "tpipeline(0, K, BK, stages=2)" if self.pipelined else "range(0, K, BK)"
        body = [f"for k0 in {loop}:", f"    {copy}(As, A[m0:m0 + BM, k0:k0 + BK])", f"    {copy}(Bs, {b_view})"]
        if not self.pipelined:
            body.append("    tbarrier()")
        if self.a_regs:
            body.append("    tload(Af, As)")
        tb = ", trans_b=True" if self.trans_b else ""
        if self.slices is None:
            body += ["    if k0 >= skip:", f"        tmma(acc, {a_arg}, Bs{tb})"]
        else:
            start, stop, step = self.slices
            b_slice = f"Bs[:, kk:kk + {step}]" if self.trans_b else f"Bs[kk:kk + {step}, :]"
            body += ["    if k0 >= skip:", f"        for kk in static_range({start}, {stop}, {step}):",
                     f"            tmma(acc, As[:, kk:kk + {step}], {b_slice}{tb})"]
        if not self.pipelined:
            body.append("    tbarrier()")
        if self.repeat:  # each run starts again from zero: the result is one run's
            body = ["for rep in range(reps):", f"    acc[:] = {zero}", *("    " + x for x in body)]
        lines += ["    " + x for x in body]
        if self.rows:
            lines += ["    acc[:] = acc * 2 + row_index() - col_index()", "    mx[:] = tmax(acc, axis=1)",
                      "    tstore(R[m0:m0 + BM], mx)"]
        lines.append("    tstore(C[m0:m0 + BM, n0:n0 + BN], acc)")
        return "\n".join(lines) + "\n"

    def expect_wgmma(self) -> bool:
        """The contract's conditions (passes/plan_wgmma.py), restated: rows of each operand array of
        32, 64 or a multiple of 128 bytes; 8-bit B K-major; A in registers only without ldmatrix's
        own array being read elsewhere (the tload reads As: then As is not swizzled, A comes from Af)."""
        size = 1 if self.t == "i8" else 2

        def fits(row_bytes: int) -> bool:
            return row_bytes in (32, 64) or row_bytes % 128 == 0

        b_row = (self.bk if self.trans_b else self.bn) * size
        a_ok = self.a_regs or fits(self.bk * size)
        sliced_ok = self.slices is None or self.slices[0] % self.k_step == 0  # descriptors start at a k step
        return a_ok and fits(b_row) and (self.t != "i8" or self.trans_b) and sliced_ok

    def expect_maps(self) -> tuple[tuple[str, tuple[int, int], int], ...]:
        """The tensor maps of the aligned variant of a pipelined wgmma case (lir/tma.py, restated):
        an array wgmma reads is swizzled in the mode its rows call for, one box per panel of that
        many bytes; A's array, where only ldmatrix reads it (A from registers), a dense box."""
        size = 1 if self.t == "i8" else 2

        def box(rows: int, cols: int, swizzled: bool) -> tuple[tuple[int, int], int]:
            mode = (cols * size if cols * size in (32, 64) else 128) if swizzled else 0
            return (rows, mode // size if mode else cols), mode

        b_rows, b_cols = (self.bn, self.bk) if self.trans_b else (self.bk, self.bn)
        return (("A", *box(self.bm, self.bk, not self.a_regs)), ("B", *box(b_rows, b_cols, True)))


def random_case(rng: random.Random) -> Case:
    t = rng.choice(["f16", "bf16", "i8"])
    groups = rng.choice([1, 2])
    bm = 64 * groups * rng.choice([1, 2])
    per_lane_max = 64
    bns = [n for n in (8, 16, 24, 32, 48, 64, 128) if bm * n // (128 * groups) <= per_lane_max]
    bn = rng.choice(bns)
    trans_b = True if t == "i8" else rng.random() < 0.5
    bk = rng.choice([32, 64, 128] if t == "i8" else [16, 32, 64, 128])
    a_regs = t != "i8" and rng.random() < 0.3
    case = Case(t, groups, bm, bn, bk, trans_b, a_regs, rng.random() < 0.5, t != "i8" and rng.random() < 0.5)
    k_step = case.k_step
    if not a_regs and rng.random() < 0.4:
        step = rng.choice([x for x in (k_step, 2 * k_step) if bk % x == 0])
        if rng.random() < 0.25 and bk >= 2 * k_step:  # one slice off the instruction's k grid: mma.sync
            start = k_step // 2
            case = dataclasses.replace(case, slices=(start, start + 1, k_step))
        else:
            stop = bk - step if bk > step and rng.random() < 0.3 else bk  # part of the K block
            case = dataclasses.replace(case, slices=(0, stop, step))
    aligned = rng.random() < 0.6 and (bn % 16 == 0 or not case.rows)
    return dataclasses.replace(case, aligned=aligned, repeat=case.pipelined and rng.random() < 0.4)


def random_tma_case(rng: random.Random) -> Case:
    """A wgmma case whose pipeline's copies are bulk tensor copies in the aligned variant."""
    while True:
        case = dataclasses.replace(random_case(rng), pipelined=True)
        if case.expect_wgmma() and (case.bn % 16 == 0 or not case.rows):
            return dataclasses.replace(case, aligned=True, repeat=rng.random() < 0.5)


def _inputs(case: Case, rng: np.random.Generator, m: int, k: int, n: int):  # type: ignore[no-untyped-def]
    if case.t == "i8":
        a, b = rng.integers(-128, 128, (m, k), dtype=np.int8), rng.integers(-128, 128, (k, n), dtype=np.int8)
        return a, b, a.astype(np.int64), b.astype(np.int64)
    a, b = rng.integers(-4, 5, (m, k)) / 4, rng.integers(-4, 5, (k, n)) / 4  # exact products and sums
    if case.t == "f16":
        return a.astype(np.float16), b.astype(np.float16), a, b
    return bf16_bits(a), bf16_bits(b), bf16_values(bf16_bits(a)).astype(np.float64), \
        bf16_values(bf16_bits(b)).astype(np.float64)


def check(case: Case, seed: int) -> None:
    src = case.source()
    cuda = compile_source(SourceFile("r.tsr", src), CompileOptions(arch="sm_90a")).cuda
    assert ("wgmma.mma_async" in cuda) == case.expect_wgmma(), (case, src)
    rng = np.random.default_rng(seed)
    m, k = case.bm + 37, case.bk * 3
    n = (case.bn - 3 if case.bn > 8 else case.bn) if case.rows else case.bn * 2 + 3  # a row vector: one tile along N
    if case.aligned:  # strides of 16-byte multiples: the aligned variant
        n = case.bn if case.rows else case.bn * 2 + 16
    skip = case.bk * int(rng.integers(0, 3))
    a, b, a64, b64 = _inputs(case, rng, m, k, n)
    keep = (np.repeat(np.arange(0, k, case.bk) >= skip, case.bk) & case.covered(k))[:, None]
    want = a64 @ (b64 * keep)
    bt = np.ascontiguousarray(b.T) if case.trans_b else b
    grid = (-(-n // case.bn), -(-m // case.bm))
    out = {}
    dt = np.int32 if case.t == "i8" else np.float32
    launched: list[KernelInfo] = []
    real = CpuLibrary.launch

    def spy(self, info, bound, **kw):  # type: ignore[no-untyped-def]
        launched.append(info)
        return real(self, info, bound, **kw)

    for arch in ("sm_80", "sm_90a"):
        mod = tessera.compile(src, backend="cpu", path="r.tsr", arch=arch)
        c, r = np.zeros((m, n), dt), np.zeros(m, dt)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(CpuLibrary, "launch", spy)
            mod.mm(a, bt, c, r, skip, 2, grid=grid)
        out[arch] = (c, r)
    info = launched[-1]
    assert info.aligned or not case.aligned, (case, info.c_name)
    if case.aligned and case.pipelined and case.expect_wgmma():
        assert info.tensor_maps == case.expect_maps(), (case, info.tensor_maps)
    c, r = out["sm_90a"]
    if case.rows:
        rows, cols = np.arange(m)[:, None] % case.bm, np.arange(case.bn)[None, :]
        full = (rows - cols).astype(np.float64)  # columns past N: zero products, coordinates only
        full[:, :n] += 2 * want
        want = full[:, :n]
        np.testing.assert_array_equal(r.astype(np.float64), full.max(axis=1))
    np.testing.assert_array_equal(c.astype(np.float64), want)
    assert np.array_equal(c, out["sm_80"][0]) and np.array_equal(r, out["sm_80"][1]), case


@pytest.mark.parametrize("seed", range(CASES))
def test_random_wgmma_cases(seed: int) -> None:
    check(random_case(random.Random(1000 + seed)), seed)


@pytest.mark.parametrize("seed", range(CASES))
def test_random_swizzled_bulk_copy_cases(seed: int) -> None:
    check(random_tma_case(random.Random(3000 + seed)), seed)
