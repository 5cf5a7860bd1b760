"""A seeded random generator of kernels with column vectors and column reductions (spec section 14)
and their NumPy model (float64): random tile counts (1 to 8 warps, so with and without the shared
scratch), fragment shapes (rows a multiple of 16 per warp, columns of 8 to 64) and ragged tensor
sizes; random column-vector statements (`c[:] = max(c, tmax(S, axis=0)) * 0.5 + col_index()`),
2-D statements with column and row broadcasts and reductions of both axes, 1-D views broadcast
along rows (`b[n0:n0 + BN][None, :]`) and element coordinates; inside a loop over the row blocks
and under uniform conditions. The inputs are multiples of 1/4 of small size, and the statements
only add, subtract, halve, compare and take extremes, so every f32 result is exact: the model must
agree bit for bit whatever order the kernel sums in."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Env = dict[str, np.ndarray]
Expr = tuple[str, Callable[[Env], np.ndarray]]
Step = tuple[str, Callable[[Env], None]]


@dataclass(frozen=True)
class Shape:
    tiles: int
    bm: int
    bn: int


def random_shape(rng: random.Random, spread: bool) -> Shape:
    """Whole rows per warp, or (`spread`) fewer rows than warps x 16: a row is spread over the
    warps along N (frag_layout.row_division) and a row reduction goes through shared scratch."""
    warps = rng.choice([2, 4, 8] if spread else [1, 2, 4, 8])
    wm = rng.choice([d for d in (1, 2, 4) if d < warps]) if spread else warps
    bm = 16 * wm * (1 if spread else rng.choice([1, 1, 2]))
    step = 8 * (warps // wm)
    bn = rng.choice([n for n in range(step, 65, step) if bm * n // (32 * warps) <= 64])
    return Shape(32 * warps, bm, bn)


class ColGen:
    """`rows_only`: no column vectors or column reductions (which need whole rows per warp), and
    shapes whose rows are spread over several warps."""

    def __init__(self, seed: int, rows_only: bool = False) -> None:
        self.rng = random.Random(seed)
        self.rows_only = rows_only
        self.shape = random_shape(self.rng, rows_only)

    # ---- column expressions (one value per column: arrays of shape (BN,))
    def col(self, depth: int) -> Expr:
        r = self.rng
        bn = self.shape.bn
        leaves: list[Callable[[], Expr]] = [] if self.rows_only else [
            lambda: (v := r.choice("cd"), lambda e: e[v]),
            lambda: (f"{(op := r.choice(['tsum', 'tmax', 'tmin']))}(S, axis=0)",
                     lambda e: {"tsum": np.sum, "tmax": np.max, "tmin": np.min}[op](e["S"], axis=0)),
        ]
        leaves += [
            lambda: ("col_index()", lambda e: np.arange(bn, dtype=np.float64)),
            lambda: (f"b[n0:n0 + {bn}]", lambda e: e["b"]),
            lambda: (repr(x := r.choice([0.5, -1.0, 2.0])), lambda e: np.full(bn, x)),
        ]
        if depth <= 0 or r.random() < 0.3:
            return r.choice(leaves)()
        return self.combine(self.col, depth)

    # ---- 2-D expressions (arrays of shape (BM, BN))
    def mat(self, depth: int) -> Expr:
        r = self.rng
        bm = self.shape.bm
        leaves: list[Callable[[], Expr]] = [
            lambda: ("S", lambda e: e["S"]),
            lambda: (f"({(t := self.col(depth - 1))[0]})[None, :]", lambda e: t[1](e)[None, :]),
            lambda: ("v[:, None]", lambda e: e["v"][:, None]),
            lambda: (f"{(op := r.choice(['tsum', 'tmax', 'tmin']))}(S, axis=1)[:, None]",
                     lambda e: {"tsum": np.sum, "tmax": np.max, "tmin": np.min}[op](e["S"], axis=1)[:, None]),
            lambda: ("row_index()", lambda e: np.arange(bm, dtype=np.float64)[:, None]),
        ]
        if depth <= 0 or r.random() < 0.3:
            return r.choice(leaves)()
        return self.combine(self.mat, depth)

    def combine(self, sub: Callable[[int], Expr], depth: int) -> Expr:
        (ta, fa), (tb, fb) = sub(depth - 1), sub(depth - 1)
        kind = self.rng.choice(["+", "-", "half", "max", "min", "if"])
        if kind == "+":
            return f"({ta} + {tb})", lambda e: fa(e) + fb(e)
        if kind == "-":
            return f"({ta} - {tb})", lambda e: fa(e) - fb(e)
        if kind == "half":
            return f"({ta} * 0.5)", lambda e: fa(e) * 0.5
        if kind in ("max", "min"):
            f = np.maximum if kind == "max" else np.minimum
            return f"{kind}({ta}, {tb})", lambda e: f(fa(e), fb(e))
        return f"({ta} if {ta} < {tb} else {tb} * 0.5)", lambda e: np.where(fa(e) < fb(e), fa(e), fb(e) * 0.5)

    # ---- statements
    def statement(self) -> Step:
        r = self.rng
        sh = self.shape
        kind = r.choice(["mat", "mat", "row", "row"] if self.rows_only else ["col", "col", "mat", "mat", "row"])
        if kind == "col":
            target = r.choice("cd")
            text, f = self.col(2)

            def run_col(e: Env) -> None:
                e[target] = np.broadcast_to(f(e), e[target].shape).copy()
            return f"{target}[:] = {text}", run_col
        if kind == "row":
            op = r.choice(["tsum", "tmax", "tmin"])
            f_op = {"tsum": np.sum, "tmax": np.max, "tmin": np.min}[op]
            return (f"v[:] = max(v, {op}(S, axis=1)) * 0.5 + row_index()",
                    lambda e: e.__setitem__("v", np.maximum(e["v"], f_op(e["S"], axis=1)) * 0.5 + np.arange(sh.bm)))
        text, f = self.mat(2)

        def run_mat(e: Env) -> None:
            e["S"] = np.broadcast_to(f(e), e["S"].shape).copy()
        return f"S[:] = {text}", run_mat

    def program(self, count: int) -> tuple[str, Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, ...]]]:
        """The kernel's source and its model (X, b, k) -> (Y, C, R) on the zero-padded blocks."""
        sh = self.shape
        lines = [f"@kernel tile[({sh.tiles},)]",
                 "def gen(X: f32[M, N], b: f32[N], Y: mut f32[M, N], C: mut f32[N], R: mut f32[G, M], k: i32):",
                 f"    S = tfrag(f32[{sh.bm}, {sh.bn}], 0.0)",
                 *([] if self.rows_only else [f"    c = tfrag(f32[1, {sh.bn}], 0.0)", f"    d = tfrag(f32[1, {sh.bn}], 1.0)"]),
                 f"    v = tfrag(f32[{sh.bm}], 0.0)",
                 f"    n0 = group_id(0) * {sh.bn}",
                 f"    for i in range(0, M, {sh.bm}):",
                 f"        tload(S, X[i:i + {sh.bm}, n0:n0 + {sh.bn}])"]
        steps: list[tuple[str, Callable[[Env], None]]] = []
        for _ in range(count):
            text, run = self.statement()
            cond = self.rng.choice(["", "", "k > 1", f"i % {2 * sh.bm} == 0"])
            if cond:
                lines += [f"        if {cond}:", f"            {text}"]
            else:
                lines.append(f"        {text}")
            steps.append((cond, run))
        lines += [f"        tstore(Y[i:i + {sh.bm}, n0:n0 + {sh.bn}], S)",
                  f"        tstore(R[group_id(0), i:i + {sh.bm}], v)",
                  "" if self.rows_only else f"    tstore(C[n0:n0 + {sh.bn}], c)", ""]

        def model(x: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
            m, n = x.shape
            rows, cols = -(-m // sh.bm) * sh.bm, -(-n // sh.bn) * sh.bn
            xp, bp = np.zeros((rows, cols)), np.zeros(cols)
            xp[:m, :n], bp[:n] = x, b
            y, c_out, r_out = np.zeros((rows, cols)), np.zeros(cols), np.zeros((cols // sh.bn, rows))
            for g in range(cols // sh.bn):
                cs = slice(g * sh.bn, (g + 1) * sh.bn)
                env: Env = {"c": np.zeros(sh.bn), "d": np.ones(sh.bn), "v": np.zeros(sh.bm), "b": bp[cs]}
                for i in range(0, m, sh.bm):
                    env["S"] = xp[i:i + sh.bm, cs].copy()
                    for cond, run in steps:
                        if cond == "" or (cond == "k > 1" and k > 1) or (cond.startswith("i %") and i % (2 * sh.bm) == 0):
                            run(env)
                    y[i:i + sh.bm, cs] = env["S"]
                    r_out[g, i:i + sh.bm] = env["v"]
                c_out[cs] = env["c"]
            return y[:m, :n], c_out[:n], r_out[:, :m]
        return "\n".join(lines), model


__all__ = ["ColGen", "Shape", "random_shape"]
