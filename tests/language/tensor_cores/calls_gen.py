"""A seeded random generator of whole-fragment programs that apply scalar device functions to
each element (spec section 14; docs/language.md section 8.12): frag_expr_gen.py's statements, with
calls of device functions (a clamp, one with a local, one with a condition and two returns, a
generic square) wrapped around 2-D and row-vector values and around the arguments of row
reductions. The same seed writes the program twice: with the calls, and with each call's body
written out in its place (`inline=True`), the simpler construct the calls must equal.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.language.tensor_cores.frag_expr_gen import HEAD, Gen
from tests.language.tensor_cores.frag_program_gen import Expr

FUNCTIONS = """
@device
def relu6(x: f32) -> f32:
    return min(max(x, 0.0), 6.0)

@device
def axpb(x: f32, a: f32) -> f32:
    y = x * a
    return y + 0.25

@device
def leaky(x: f32, s: f32) -> f32:
    if x > 0.0:
        return x
    return x * s

@device
def sq[T](x: T) -> T:
    return x * x
"""

F32 = np.float32

# name -> (arity, the body written out around the arguments' texts, the NumPy model)
CALLS: dict[str, tuple[int, Callable[..., str], Callable[..., np.ndarray]]] = {
    "relu6": (1, lambda x: f"min(max({x}, 0.0), 6.0)", lambda x: np.minimum(np.maximum(x, F32(0)), F32(6))),
    "axpb": (2, lambda x, a: f"({x} * {a} + 0.25)", lambda x, a: np.multiply(x, a, dtype=F32) + F32(0.25)),
    "leaky": (2, lambda x, s: f"({x} if {x} > 0.0 else {x} * {s})",
              lambda x, s: np.where(x > 0, x, np.multiply(x, s, dtype=F32))),
    "sq": (1, lambda x: f"({x} * {x})", lambda x: np.multiply(x, x, dtype=F32)),
}
SLOPES = (0.5, 0.125, -0.25)


class CallGen(Gen):
    """frag_expr_gen.Gen with device-function calls among its 2-D and row-vector values."""

    HEAD = FUNCTIONS + HEAD

    def __init__(self, seed: int, inline: bool = False) -> None:
        super().__init__(seed)
        self.inline = inline

    def matrix(self, depth: int) -> Expr:
        if depth > 0 and self.rng.random() < 0.3:
            return self.call(self.matrix, depth)
        return super().matrix(depth)

    def vector(self, depth: int) -> Expr:
        if depth > 0 and self.rng.random() < 0.3:
            return self.call(self.vector, depth)
        if self.rng.random() < 0.2:
            return self.reduce_call(depth)
        return super().vector(depth)

    def call(self, sub: Callable[[int], Expr], depth: int) -> Expr:
        name = self.rng.choice(sorted(CALLS))
        arity, body, f = CALLS[name]
        text, fx = sub(depth - 1)
        args = [text] + [repr(self.rng.choice(SLOPES))] * (arity - 1)
        consts = [F32(float(a)) for a in args[1:]]
        written = body(*args) if self.inline else f"{name}({', '.join(args)})"
        return written, lambda e: f(fx(e), *consts)

    def reduce_call(self, depth: int) -> Expr:
        """A row reduction of a call on a 2-D fragment (tsum(relu6(S), axis=1))."""
        op, frag = self.rng.choice(["tmax", "tmin", "tsum"]), self.rng.choice("ST")
        name = self.rng.choice(["relu6", "sq"])
        _, body, f = CALLS[name]
        arg = body(frag) if self.inline else f"{name}({frag})"
        red = {"tmax": np.max, "tmin": np.min, "tsum": np.sum}[op]
        return f"{op}({arg}, axis=1)", lambda e: red(f(e[frag]), axis=1).astype(F32)


__all__ = ["CallGen"]
