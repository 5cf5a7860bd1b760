"""The warp division of a kernel's fragments (spec section 14: rows first where the kernel has row
vectors, reductions or operand fragments) is decided once, from the program as written, by the type
checker and by lowering alike (passes/frag_temps.py `lower_fragments`, `Function.rows_first`):
folding a constant condition away (`x if 1 > 2 else tsum(S, axis=1)[:, None]`) must not change it,
and a device function that takes tmma's first operand from a fragment parameter makes the kernel's
fragments operand fragments as the kernel's own tmma does (checks/frag_vectors.py `uses_rows`).
Two random generators: programs whose reductions sit in arms of constant conditions against their
twins with run-time conditions (the same divisions, the same results bit for bit), and TF32 tmma
from registers in a device function against the kernel's own (the same verdict, the same results)."""

from __future__ import annotations

import os
import random
import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import CompileError, SourceFile
from tessera.base.options import CompileOptions
from tessera.transpile.driver import compile_source
from tessera.transpile.lir.frag_buffers import fragment_info
from tests.language.tensor_cores.col_gen import random_shape


def _divisions(src: str) -> list[str]:
    """`--info`'s divisions of the program's own fragments (not the compiler's reduction vectors)."""
    res = compile_source(SourceFile("div.tsr", src), CompileOptions())
    return [line for fn in res.module.functions for line in fragment_info(fn) if not line.startswith("%")]


FOLDED = """
@kernel tile[(128,)]
def k(X: f32[M, N], Y: mut f32[M, N], k: i32):
    S = tfrag(f32[64, 32], 0.0)
    tload(S, X[0:64, 0:32])
    S[:] = S * 2.0 + (tsum(S, axis=1)[:, None] if COND else 0.5)
    tstore(Y[0:64, 0:32], S)
"""


@pytest.mark.parametrize(("literal", "runtime"), [("1 > 2", "k > 2"), ("0.5 > 1.0", "k > 2")])
def test_folding_the_only_reduction_away_keeps_the_division(literal: str, runtime: str) -> None:
    folded, kept = FOLDED.replace("COND", literal), FOLDED.replace("COND", runtime)
    assert _divisions(folded) == _divisions(kept)
    assert "S: 4x1 warps, 16x32 per warp" in _divisions(folded)[0]  # rows first, as the checker decided
    x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    ys = []
    for src in (folded, kept):
        y = np.zeros_like(x)
        tessera.compile(src, backend="cpu", path="fold.tsr").k(x, y, 1, grid=1)
        ys.append(y)
    np.testing.assert_array_equal(ys[0], x * 2.0 + 0.5)
    np.testing.assert_array_equal(ys[1], ys[0])


# ---- a random generator: reductions in arms of constant conditions vs run-time ones --------------------

FOLD_CASES = int(os.environ.get("TESSERA_FOLD_DIVISION_CASES", "12"))
DEAD = {True: ("1 > 2", "k > 2"), False: ("2 > 1", "2 > k")}  # by the arm the reduction is in (then: True)
LIVE = {True: ("3 == 3", "k == 1"), False: ("0.5 > 1.0", "k < 0")}  # (the same values for k = 1)


def fold_program(seed: int) -> tuple[str, str]:
    """A kernel (constant conditions) and its twin (run-time conditions with the same values for k = 1)."""
    rng = random.Random(seed)
    spread = rng.random() < 0.4
    sh = random_shape(rng, spread)
    reds = [f"{op}(S, axis=1)[:, None]" for op in ("tsum", "tmax", "tmin")]
    if not spread:  # a column reduction needs whole rows per warp
        reds += [f"{op}(S, axis=0)[None, :]" for op in ("tsum", "tmax", "tmin")]
    head = [f"@kernel tile[({sh.tiles},)]", "def k(X: f32[M, N], Y: mut f32[M, N], k: i32):",
            f"    S = tfrag(f32[{sh.bm}, {sh.bn}], 0.0)", f"    tload(S, X[0:{sh.bm}, 0:{sh.bn}])"]
    lit, run = list(head), list(head)
    all_dead = rng.random() < 0.5  # then no reduction is left after folding: the division must stay
    for _ in range(rng.randint(1, 4)):
        red = rng.choice(reds)
        in_then = rng.random() < 0.5
        arms = (f"{red} * 0.25", "0.5") if in_then else ("0.5", f"{red} * 0.25")
        conds = (DEAD if all_dead or rng.random() < 0.75 else LIVE)[in_then]  # most are folded away
        where = rng.choice(["", "for", "if"])
        for lines, cond in zip((lit, run), conds):
            stmt = f"S[:] = S * 0.5 + ({arms[0]} if {cond} else {arms[1]})"
            if where == "for":
                lines += ["    for it in range(2):", f"        {stmt}"]
            elif where == "if":
                lines += ["    if k > 0:", f"        {stmt}"]
            else:
                lines.append(f"    {stmt}")
    tail = f"    tstore(Y[0:{sh.bm}, 0:{sh.bn}], S)"
    return "\n".join([*lit, tail, ""]), "\n".join([*run, tail, ""])


@pytest.mark.parametrize("seed", range(FOLD_CASES))
def test_generated_constant_conditions_keep_divisions_and_results(seed: int) -> None:
    lit, run = fold_program(seed)
    assert _divisions(lit) == _divisions(run), lit
    rng = np.random.default_rng(seed)
    m, n = (int(v) for v in re.findall(r"tfrag\(f32\[(\d+), (\d+)\]", lit)[0])
    x = (rng.integers(-8, 9, (m, n)) / 4).astype(np.float32)
    ys = []
    for src in (lit, run):
        y = np.zeros_like(x)
        tessera.compile(src, backend="cpu", check_bounds=seed % 2 == 1, path=f"fold{seed}.tsr").k(x, y, 1, grid=1)
        ys.append(y)
    np.testing.assert_array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32), err_msg=lit)


# ---- TF32 tmma with its first operand from registers, in a device function ------------------------------

TF32 = """
@device
def mm(acc: mut frag f32[BM, BN], A: frag f32[BM, BK], Bs: f32[BK, BN]):
    tmma(acc, A, Bs)

@kernel tile[(T,)]
def k(X: f32[M, K], W: f32[K, N], Y: mut f32[M, N]):
    A = tfrag(f32[RM, RK], 0.0)
    acc = tfrag(f32[RM, RN], 0.0)
    Bs = tshared.alloc(f32[RK, RN])
    tcopy(Bs, W[0:RK, 0:RN])
    tbarrier()
    tload(A, X[0:RM, 0:RK])
    CALL
    tstore(Y[0:RM, 0:RN], acc)
"""


def _tf32(tiles: int, m: int, k: int, n: int, in_function: bool) -> str:
    src = TF32.replace("CALL", "mm(acc, A, Bs)" if in_function else "tmma(acc, A, Bs)")
    for name, v in (("T", tiles), ("RM", m), ("RK", k), ("RN", n)):
        src = re.sub(rf"\b{name}\b", str(v), src)
    return src


def _outcome(src: str, x: np.ndarray, w: np.ndarray) -> str | np.ndarray:
    """The result of the kernel on the CPU backend, or its first error without the file name."""
    try:
        mod = tessera.compile(src, backend="cpu", path="tf32.tsr")
    except CompileError as e:
        return re.sub(r"^tf32\.tsr:\d+:\d+: ", "", str(e).split("\n")[0])
    y = np.zeros((x.shape[0], w.shape[1]), np.float32)
    mod.k(x, w, y, grid=1)
    return y


def test_a_device_functions_register_operand_makes_whole_rows_as_the_kernels_does() -> None:
    """4 warps, A of 32 x 16: the kernel's own tmma is refused (an operand fragment needs whole rows
    per warp); the same tmma in a device function was accepted and spread A's K over two warps,
    which gave wrong results."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    own, called = _outcome(_tf32(128, 32, 16, 32, False), x, w), _outcome(_tf32(128, 32, 16, 32, True), x, w)
    assert isinstance(own, str) and "each warp owns whole rows of every fragment" in own, own
    assert isinstance(called, str) and called == own, called


TF32_CASES = int(os.environ.get("TESSERA_TF32_DIVISION_CASES", "8"))


@pytest.mark.parametrize("seed", range(TF32_CASES))
def test_generated_register_operands_in_device_functions_match_the_kernels_own(seed: int) -> None:
    rng = random.Random(seed)
    tiles = rng.choice([32, 64, 128, 256])
    m, k, n = rng.choice([16, 32, 64, 128]), rng.choice([8, 16, 32]), rng.choice([8, 16, 32, 64])
    data = np.random.default_rng(seed)
    x = (data.integers(-8, 9, (m, k)) / 4).astype(np.float32)  # exact in TF32, exact products and sums
    w = (data.integers(-8, 9, (k, n)) / 4).astype(np.float32)
    own, called = _outcome(_tf32(tiles, m, k, n, False), x, w), _outcome(_tf32(tiles, m, k, n, True), x, w)
    if isinstance(own, str) or isinstance(called, str):
        assert own == called, (tiles, m, k, n, own, called)
    else:
        np.testing.assert_array_equal(called, own)
        np.testing.assert_array_equal(own, (x.astype(np.float64) @ w).astype(np.float32))
