"""A seeded random generator of whole-fragment statements that divide (`/`, `//`, `/=`; f32
fragments, row vectors, broadcasts of row vectors, a scalar parameter, literals, an f16 fragment
that rounds the quotient), inside uniform loops and conditions and behind element-coordinate
conditions, with operands drawn from every class of float (zeros of both signs, subnormals,
infinities, NaN, the largest and smallest normals, significands of all ones) and its NumPy float32
model. Division is IEEE and correctly rounded on both backends (templates/device/fdiv.cuh), so the
model agrees in bits (any NaN equals any NaN)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.language.tensor_cores.frag_program_gen import Env, Expr, FragProgramGen

BM, BN = 64, 32

HEAD = f"""
@kernel tile[(128,)]
def gen(X: f32[M, N], Z: f32[M, N], c: f32[M], Y: mut f32[M, N], R: mut f32[M], s: f32, k: i32):
    A = tfrag(f32[{BM}, {BN}], 0.0)
    B = tfrag(f32[{BM}, {BN}], 0.0)
    H = tfrag(f16[{BM}, {BN}], 0.0)
    v = tfrag(f32[{BM}], 0.0)
    m0 = group_id(0) * {BM}
    tload(A, X[m0:m0 + {BM}, 0:{BN}])
    tload(B, Z[m0:m0 + {BM}, 0:{BN}])
    tload(v, c[m0:m0 + {BM}])
"""
TAIL = f"""    tstore(Y[m0:m0 + {BM}, 0:{BN}], A)
    tstore(R[m0:m0 + {BM}], v)
"""

_CLASSES = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38, np.inf,
                     -np.inf, np.nan, 1.9999999, 1.0, -1.0, 2.0, 0.5, 3.0, 1e-30, 1e30, 7.0e-39], np.float32)


_LITERALS = ("2.5", "-0.0")


def operands(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values of every class: random bit patterns, special values, ordinary numbers."""
    bits = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = rng.choice(_CLASSES, size=shape)
    normal = (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 6, size=shape)).astype(np.float32)
    pick = rng.integers(0, 3, size=shape)
    return np.where(pick == 0, bits, np.where(pick == 1, special, normal)).astype(np.float32)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.divide(np.float32(a), np.float32(b), dtype=np.float32)


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.multiply(a, b, dtype=np.float32)


def _f16(a: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return a.astype(np.float16).astype(np.float32)


class Gen(FragProgramGen):
    HEAD, TAIL, LOOP, CONDITION = HEAD, TAIL, 0.25, 0.45

    def matrix(self, depth: int) -> Expr:
        """A 2-D value (rows x BN)."""
        r = self.rng.random()
        if depth <= 0 or r < 0.3:  # (H converted: f16 arithmetic would round each step)
            return self.rng.choice([
                ("A", lambda e: e["A"]), ("B", lambda e: e["B"]), ("f32(H)", lambda e: e["H"]),
                ("v[:, None]", lambda e: e["v"][:, None]), ("s", lambda e: e["s"]),
                ("2.5", lambda e: np.float32(2.5)), ("-0.0", lambda e: np.float32(-0.0))])
        (ta, fa), (tb, fb) = self.matrix(depth - 1), self.matrix(depth - 1)
        if ta in _LITERALS and tb in _LITERALS:  # a constant expression: folded (and 2.5 / -0.0 refused)
            tb, fb = "A", lambda e: e["A"]
        if r < 0.7:
            return f"({ta} / {tb})", lambda e: _div(fa(e), fb(e))
        if r < 0.8:
            return f"({ta} // {tb})", lambda e: np.floor(_div(fa(e), fb(e)))
        if r < 0.9:
            return f"({ta} * {tb})", lambda e: _mul(fa(e), fb(e))
        return (f"({ta} if col_index() < 9 else {tb})",
                lambda e: np.where(np.arange(BN)[None, :] < 9, fa(e), fb(e)).astype(np.float32))

    def statement(self, indent: str) -> tuple[str, Callable[[Env], None]]:
        r = self.rng.random()
        if r < 0.15:  # a row-vector statement
            t, f = self.rng.choice([("1.0 / v", lambda e: _div(np.float32(1.0), e["v"])),
                                    ("v / s", lambda e: _div(e["v"], e["s"])), ("s / v", lambda e: _div(e["s"], e["v"]))])

            def vec(e: Env) -> None:
                e["v"] = f(e)
            return f"{indent}v[:] = {t}\n", vec
        if r < 0.3:  # an update
            target, (t, f) = self.rng.choice("AB"), self.matrix(1)

            def update(e: Env) -> None:
                e[target] = _div(e[target], np.broadcast_to(f(e), e[target].shape))
            return f"{indent}{target}[:] /= {t}\n", update
        target, (t, f) = self.rng.choice("AAABH"), self.matrix(2)

        def assign(e: Env) -> None:
            value = np.broadcast_to(f(e), e["A"].shape).astype(np.float32)
            e[target] = _f16(value) if target == "H" else value
        return f"{indent}{target}[:] = {t}\n", assign


def model(steps: list[Callable[[Env], None]], x: np.ndarray, z: np.ndarray, c: np.ndarray,
          s: float) -> tuple[np.ndarray, np.ndarray]:
    """Y and R as the program computes them, block by block of BM rows (M a multiple of BM)."""
    y, r = np.empty_like(x), np.empty_like(c)
    for b in range(x.shape[0] // BM):
        rows = slice(b * BM, (b + 1) * BM)
        env: Env = {"A": x[rows].copy(), "B": z[rows].copy(), "H": np.zeros((BM, BN), np.float32),
                    "v": c[rows].copy(), "s": np.float32(s)}
        for step in steps:
            step(env)
        y[rows], r[rows] = env["A"], env["v"]
    return y, r


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where two float32 arrays differ in bits (NaNs of any payload are the same)."""
    both_nan = np.isnan(got) & np.isnan(want)
    return (got.view(np.uint32) != want.view(np.uint32)) & ~both_nan
