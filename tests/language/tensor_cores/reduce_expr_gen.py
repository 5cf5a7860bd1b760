"""A seeded random generator of kernels that reduce elementwise expressions (spec section 14, Triton's
`tl.sum(x * x, axis=1)`): `tsum(EXPR, axis=1)` in row-vector statements and broadcast back in 2-D
ones, `tmax(EXPR, axis=0)` in column-vector statements and broadcast along the rows, where EXPR is
a random 2-D expression of col_gen.py (fragments, row and column broadcasts, reductions of
fragments, coordinates, views), sometimes itself holding a reduction of an expression; inside the
loop over row blocks and under uniform conditions, over col_gen's random shapes (rows spread over
warps included). Each program comes in two forms: as written, and with every reduced expression
first assigned to a temporary fragment of its own (`U0[:] = EXPR` on the lines before), the
simpler construct that the compiler must equal bit for bit; the model is col_gen's (exact f32
arithmetic on multiples of 1/4)."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from tests.language.tensor_cores.col_gen import ColGen, Env, Expr, Step

REDUCE = {"tsum": np.sum, "tmax": np.max, "tmin": np.min}
MARK = re.compile(r"@(\d+)@")  # a reduced expression's place in the text until it is written out


class ReduceGen(ColGen):
    """ColGen with reductions of expressions; `program` gives the source with the places marked."""

    def __init__(self, seed: int, rows_only: bool = False) -> None:
        super().__init__(seed, rows_only)
        self.reduced: list[tuple[str, str, int]] = []  # per mark: the operation, the expression, the axis
        self.nesting = 0

    def reduction(self, axis: int) -> Expr:
        """`op(EXPR, axis=axis)`, one value per row (axis 1) or column (axis 0)."""
        op = self.rng.choice(list(REDUCE))
        self.nesting += 1
        try:
            inner, fi = self.mat(self.rng.randint(1, 2))
        finally:
            self.nesting -= 1
        # it reads S (an expression of no 2-D fragment has no column count in a row statement)
        with_s = self.rng.choice(["+", "-", "max", "min"])
        text = f"({inner} {with_s} S)" if with_s in "+-" else f"{with_s}({inner}, S)"
        combine = {"+": np.add, "-": np.subtract, "max": np.maximum, "min": np.minimum}[with_s]

        def f(e: Env) -> np.ndarray:
            return combine(fi(e), e["S"])
        self.reduced.append((op, text, axis))
        sh = self.shape
        return f"@{len(self.reduced) - 1}@", lambda e: REDUCE[op](np.broadcast_to(f(e), (sh.bm, sh.bn)), axis=axis)

    def allowed(self) -> bool:
        return self.nesting == 0 or self.nesting == 1 and self.rng.random() < 0.15

    def mat(self, depth: int) -> Expr:
        if depth > 0 and self.rng.random() < 0.2 and self.allowed():
            text, f = self.reduction(1)
            return f"{text}[:, None]", lambda e: f(e)[:, None]
        return super().mat(depth)

    def col(self, depth: int) -> Expr:
        if not self.rows_only and depth > 0 and self.rng.random() < 0.25 and self.allowed():
            return self.reduction(0)
        return super().col(depth)

    def statement(self) -> Step:
        r = self.rng
        if r.random() < 0.4:
            sh = self.shape
            if self.rows_only or r.random() < 0.5:
                text, f = self.reduction(1)
                return (f"v[:] = max(v * 0.5, {text}) + row_index()",
                        lambda e: e.__setitem__("v", np.maximum(e["v"] * 0.5, f(e)) + np.arange(sh.bm)))
            text, f = self.reduction(0)
            target = r.choice("cd")
            return (f"{target}[:] = {target} * 0.5 + {text}",
                    lambda e: e.__setitem__(target, e[target] * 0.5 + f(e)))
        return super().statement()

    def forms(self, count: int) -> tuple[str, str, Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, ...]]]:
        """The program as written, with temporary fragments, and its model (col_gen.ColGen.program)."""
        src, model = self.program(count)
        written: list[str] = []
        temps: list[str] = []
        uses = 0
        for line in src.split("\n"):
            written.append(MARK.sub(lambda m: self.written(int(m.group(1))), line))
            before: list[str] = []
            line = self.with_temps(line, before)
            indent = line[:len(line) - len(line.lstrip())]
            temps += [indent + b for b in before]
            temps.append(line)
            uses = max(uses, len(before))
        decl = next(k for k, t in enumerate(temps) if "= tfrag(" in t)
        sh = self.shape
        temps[decl:decl] = [f"    U{k} = tfrag(f32[{sh.bm}, {sh.bn}])" for k in range(uses)]
        return "\n".join(written), "\n".join(temps), model

    def written(self, k: int) -> str:
        op, text, axis = self.reduced[k]
        return f"{op}({MARK.sub(lambda m: self.written(int(m.group(1))), text)}, axis={axis})"

    def with_temps(self, text: str, before: list[str]) -> str:
        """`text` reading temporaries `U<k>`, whose assignments (inner ones first) go to `before`."""
        def one(m: re.Match[str]) -> str:
            op, inner, axis = self.reduced[int(m.group(1))]
            value = self.with_temps(inner, before)
            name = f"U{len(before)}"
            before.append(f"{name}[:] = {value}")
            return f"{op}({name}, axis={axis})"
        return MARK.sub(one, text)


def inputs(gen: ColGen, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """col_gen's ragged inputs (multiples of 1/4: exact sums in f32), and k."""
    sh = gen.shape
    rng = np.random.default_rng(seed)
    m = sh.bm * int(rng.integers(1, 4)) - int(rng.integers(0, 9))
    n = sh.bn * 2 - int(rng.integers(0, sh.bn // 2 + 1))
    x = (rng.integers(-8, 9, (m, n)) / 4).astype(np.float32)
    b = (rng.integers(-8, 9, n) / 4).astype(np.float32)
    return x, b, seed % 3


__all__ = ["ReduceGen", "inputs"]
