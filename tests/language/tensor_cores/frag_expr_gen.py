"""A seeded random generator of whole-fragment programs (spec section 14) and their NumPy model:
2-D statements with row-vector broadcasts (`v[:, None]`), row reductions broadcast back
(`tmax(S, axis=1)[:, None]`), broadcasts of 1-D views of memory (`b[0:32][None, :]`,
`c[m0:m0 + 64][:, None]`), element coordinates, conditional expressions, conversions (the f16
fragment H: assigning to it rounds to nearest even); row-vector statements with reductions; inside
uniform loops and conditions. The model computes in float32 on the zero-padded blocks (what the
fragments hold), so only the order of the sums differs (which can flip a rounding of H: the
tolerance of a long run must allow an f16 ulp where that happens)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.language.tensor_cores.frag_program_gen import Env, Expr, FragProgramGen

BM, BN = 64, 32

HEAD = f"""
@kernel tile[(128,)]
def gen(X: f32[M, N], b: f32[N], c: f32[M], Y: mut f32[M, N], R: mut f32[M], k: i32):
    S = tfrag(f32[{BM}, {BN}], 0.0)
    T = tfrag(f32[{BM}, {BN}], 1.0)
    H = tfrag(f16[{BM}, {BN}], 0.25)
    v = tfrag(f32[{BM}], 0.5)
    w = tfrag(f32[{BM}], -1.0)
    m0 = group_id(0) * {BM}
    tload(S, X[m0:m0 + {BM}, 0:{BN}])
"""
TAIL = f"""    tstore(Y[m0:m0 + {BM}, 0:{BN}], S)
    tstore(R[m0:m0 + {BM}], v)
"""


class Gen(FragProgramGen):
    HEAD, TAIL, LOOP, CONDITION = HEAD, TAIL, 0.2, 0.35

    def pick(self, *options: Callable[[int], Expr], depth: int) -> Expr:
        return self.rng.choice(options)(depth)

    # ---- values of a 2-D statement (arrays of the padded blocks' shape, rows x BN)
    def matrix(self, depth: int) -> Expr:
        leaves = (self.frag2, self.row_bcast, self.col_view, self.row_view, self.coords, self.const)
        if depth <= 0:
            return self.pick(*leaves, depth=0)
        return self.pick(*leaves, self.binary2, self.binary2, self.minmax2, self.ternary2, depth=depth)

    def frag2(self, depth: int) -> Expr:
        name = self.rng.choice("STH")
        return name, lambda e: e[name]

    def const(self, depth: int) -> Expr:
        x = self.rng.choice([0.5, 2.0, -1.5, 3.0])
        return repr(x), lambda e: np.float32(x)

    def coords(self, depth: int) -> Expr:
        if self.rng.random() < 0.5:
            return "row_index()", lambda e: e["rows"][:, None].astype(np.float32)
        return "col_index()", lambda e: np.arange(BN, dtype=np.float32)[None, :]

    def col_view(self, depth: int) -> Expr:
        return f"b[0:{BN}][None, :]", lambda e: e["b"][None, :]

    def row_view(self, depth: int) -> Expr:
        return f"c[m0:m0 + {BM}][:, None]", lambda e: e["c"][:, None]

    def row_bcast(self, depth: int) -> Expr:
        text, f = self.vector(depth - 1)
        return f"({text})[:, None]", lambda e: np.broadcast_to(f(e), (BM,))[:, None]

    def binary2(self, depth: int) -> Expr:
        return self.binary(self.matrix, depth)

    def minmax2(self, depth: int) -> Expr:
        return self.minmax(self.matrix, depth)

    def ternary2(self, depth: int) -> Expr:
        (a, fa), (b, fb) = self.matrix(depth - 1), self.matrix(depth - 1)
        return (f"({a} if col_index() <= row_index() else {b})",
                lambda e: np.where(np.arange(BN)[None, :] <= e["rows"][:, None], fa(e), fb(e)))

    # ---- values of a row-vector statement (arrays of one value per row)
    def vector(self, depth: int) -> Expr:
        leaves = (self.frag1, self.reduction, self.const, self.row_coord)
        if depth <= 0:
            return self.pick(*leaves, depth=0)
        return self.pick(*leaves, self.binary1, self.minmax1, depth=depth)

    def frag1(self, depth: int) -> Expr:
        name = self.rng.choice("vw")
        return name, lambda e: e[name]

    def row_coord(self, depth: int) -> Expr:
        return "row_index()", lambda e: e["rows"].astype(np.float32)

    def reduction(self, depth: int) -> Expr:
        op, name = self.rng.choice(["tmax", "tmin", "tsum"]), self.rng.choice("STH")
        f = {"tmax": np.max, "tmin": np.min, "tsum": np.sum}[op]
        return f"{op}({name}, axis=1)", lambda e: f(e[name], axis=1, dtype=np.float32) if op == "tsum" \
            else f(e[name], axis=1)

    def binary1(self, depth: int) -> Expr:
        return self.binary(self.vector, depth)

    def minmax1(self, depth: int) -> Expr:
        return self.minmax(self.vector, depth)

    # ---- shared
    def binary(self, sub: Callable[[int], Expr], depth: int) -> Expr:
        (a, fa), (b, fb) = sub(depth - 1), sub(depth - 1)
        op = self.rng.choice("+-*")
        fn = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
        return f"({a} {op} {b})", lambda e: fn(fa(e), fb(e), dtype=np.float32)

    def minmax(self, sub: Callable[[int], Expr], depth: int) -> Expr:
        (a, fa), (b, fb) = sub(depth - 1), sub(depth - 1)
        op = self.rng.choice(["max", "min"])
        fn = np.maximum if op == "max" else np.minimum
        return f"{op}({a}, {b})", lambda e: fn(fa(e), fb(e))

    # ---- statements
    def statement(self, indent: str) -> tuple[str, Callable[[Env], None]]:
        target = self.rng.choice("STHvw")
        text, f = (self.matrix if target in "STH" else self.vector)(self.rng.randint(1, 3))
        shape = (BM, BN) if target in "STH" else (BM,)

        def run(e: Env) -> None:
            e[target] = np.clip(np.broadcast_to(f(e), shape).astype(np.float32), -1e3, 1e3)
            if target == "H":  # an f16 fragment: the value rounded to nearest even
                e[target] = e[target].astype(np.float16).astype(np.float32)

        # values are kept small: a clamp in the program too, so that products stay exact enough
        return f"{indent}{target}[:] = max(min({text}, 1000.0), -1000.0)\n", run


def model(steps: list[Callable[[Env], None]], x: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
    """Y and R as the program computes them, block by block of BM rows."""
    m, n = x.shape
    blocks = -(-m // BM)
    y, r = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    bp = np.zeros(BN, np.float32)
    bp[:n] = b
    for g in range(blocks):
        rows = slice(g * BM, min(m, (g + 1) * BM))
        s = np.zeros((BM, BN), np.float32)
        s[:rows.stop - rows.start, :n] = x[rows]
        cp = np.zeros(BM, np.float32)
        cp[:rows.stop - rows.start] = c[rows]
        env: Env = {"S": s, "T": np.ones((BM, BN), np.float32), "H": np.full((BM, BN), 0.25, np.float32),
                    "v": np.full(BM, 0.5, np.float32),
                    "w": np.full(BM, -1.0, np.float32), "b": bp, "c": cp, "rows": np.arange(BM)}
        for step in steps:
            step(env)
        y[rows] = env["S"][:rows.stop - rows.start, :n]
        r[rows] = env["v"][:rows.stop - rows.start]
    return y, r


__all__ = ["Gen", "model"]
