"""A seeded random generator of programs with operand fragments from registers (spec section 14) and
their NumPy model: an 8-bit (`i8`/`u8`, against `i8`/`u8` B: mixed signedness) or an `f32` (TF32)
operand fragment X is loaded (from shared or global memory), changed by whole-fragment statements
(arithmetic with a cast, conversions from an `i32` or `f32` fragment: wrapping and saturating), and
multiplied, inside uniform loops and conditions, both from registers (`tmma(acc, X, Bs)`) and
through shared memory (`tstore(Xs, X)`, `tmma(ref, Xs, Bs)`: the simpler construct). The model
computes on the zero-padded 64-row blocks in int64 (exact: the 8-bit programs must match bit for
bit) or float64 on TF32-rounded operands."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

BM, K, BN = 64, 64, 64
Env = dict[str, np.ndarray]
Step = Callable[[Env], None]
NP = {"i8": np.int8, "u8": np.uint8}


def tf32(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 of finite values (the generator makes no others)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


class Program:
    """One generated kernel: its source, and `run(env)` the model on one 64-row block."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.elem = self.rng.choice(["i8", "u8", "f32"])
        self.belem = self.elem if self.elem == "f32" else self.rng.choice(["i8", "u8"])
        self.trans = self.rng.random() < 0.5
        self.steps: list[Step] = []
        self.lines: list[str] = []
        self.loops: list[str] = []

    # ---- the model's conversions
    def to_x(self, v: np.ndarray, from_float: bool) -> np.ndarray:
        if self.elem == "f32":
            return v.astype(np.float32)
        if from_float:  # truncates toward zero and saturates
            info = np.iinfo(NP[self.elem])
            return np.clip(np.trunc(v), info.min, info.max).astype(np.int64)
        return v.astype(np.int64).astype(NP[self.elem]).astype(np.int64)  # wraps

    def emit(self, depth: int, text: str, step: Step) -> None:
        self.lines.append("    " * depth + text)
        self.steps.append(step)

    # ---- statements
    def statement(self, depth: int) -> None:
        kind = self.rng.choice(["arith", "arith", "from_acc", "from_float", "mma", "mma", "block"])
        if kind == "block" and depth < 3:
            self.block(depth)
            return
        if kind == "arith":
            c1, c2 = self.rng.choice([1, 3, -2, 5]), self.rng.choice([0, 1, -7, 100])
            it = self.loops[-1] if self.loops and self.rng.random() < 0.5 else None
            plus = f" + {it}" if it else ""
            if self.elem == "f32":
                text = f"X[:] = X * {float(c1)} + {float(c2)}{' + f32(' + it + ')' if it else ''}"

                def step(e: Env, c1: int = c1, c2: int = c2, it: str | None = it) -> None:
                    e["X"] = (e["X"] * np.float32(c1) + np.float32(c2) + np.float32(e[it] if it else 0)) \
                        .astype(np.float32)
            else:
                text = f"X[:] = {self.elem}(i32(X) * {c1} + {c2}{plus})"

                def step(e: Env, c1: int = c1, c2: int = c2, it: str | None = it) -> None:
                    e["X"] = self.to_x(e["X"] * c1 + c2 + (int(e[it]) if it else 0), False)
            self.emit(depth, text, step)
        elif kind == "from_acc":  # the registers-A accumulator, converted (wraps / rounds)
            scale = 0.001 if self.elem == "f32" else 1

            def step(e: Env, scale: float = scale) -> None:
                e["X"] = self.to_x(e["acc"] * scale, False) if self.elem != "f32" else \
                    (e["acc"].astype(np.float32) * np.float32(scale)).astype(np.float32)
            if self.elem == "f32":
                self.emit(depth, "X[:] = acc * 0.001", step)
            else:
                self.emit(depth, "X[:] = acc", step)
        elif kind == "from_float":
            self.emit(depth, "X[:] = F", lambda e: e.__setitem__("X", self.to_x(e["F"], True)))
        else:
            self.mma(depth)

    def mma(self, depth: int) -> None:
        trans = ", trans_b=True" if self.trans else ""
        self.emit(depth, "tstore(Xs, X)", lambda e: None)
        self.emit(depth, "tbarrier()", lambda e: None)

        def step(e: Env) -> None:
            b = e["Bm"]
            x = tf32(e["X"]).astype(np.float64) if self.elem == "f32" else e["X"]
            e["acc"] = e["acc"] + x @ b
            if self.elem != "f32":
                e["acc"] = e["acc"].astype(np.int64).astype(np.int32).astype(np.int64)  # wraps modulo 2**32
            else:  # the size of the products summed, for the tolerance of f32 sums in other orders
                e["mag"] = e["mag"] + np.abs(x) @ np.abs(b)
        self.emit(depth, f"tmma(acc, X, Bs{trans})", step)
        self.emit(depth, f"tmma(ref, Xs, Bs{trans})", lambda e: None)
        self.emit(depth, "tbarrier()", lambda e: None)

    def block(self, depth: int) -> None:
        if self.rng.random() < 0.5:
            it = f"i{len(self.loops)}"
            n = self.rng.randint(0, 2)
            self.lines.append("    " * depth + f"for {it} in range({['k - 1', 'k', 'k + 1'][n]}):")
            self.loops.append(it)
            body_start = len(self.steps)
            self.statement(depth + 1)
            if self.rng.random() < 0.5:
                self.statement(depth + 1)
            self.loops.pop()
            body = self.steps[body_start:]
            del self.steps[body_start:]

            def loop(e: Env, body: list[Step] = body, n: int = n, it: str = it) -> None:
                for i in range(int(e["k"]) + n - 1):
                    e[it] = np.int64(i)
                    for s in body:
                        s(e)
            self.steps.append(loop)
        else:
            c = self.rng.randint(0, 3)
            self.lines.append("    " * depth + f"if k > {c}:")
            body_start = len(self.steps)
            self.statement(depth + 1)
            body = self.steps[body_start:]
            del self.steps[body_start:]

            def cond(e: Env, body: list[Step] = body, c: int = c) -> None:
                if int(e["k"]) > c:
                    for s in body:
                        s(e)
            self.steps.append(cond)

    def source(self, n_statements: int) -> str:
        load = self.rng.choice(["tload(X, As)", f"tload(X, A[m0:m0 + {BM}, 0:{K}])"])
        for _ in range(n_statements):
            self.statement(1)
        if not any("tmma" in line for line in self.lines):
            self.mma(1)
        acc = "f32" if self.elem == "f32" else "i32"
        zero = "0.0" if acc == "f32" else "0"
        bshape = f"[{BN}, {K}]" if self.trans else f"[{K}, {BN}]"
        head = f"""
@kernel tile[(128,)]
def gen(A: {self.elem}[M, {K}], B: {self.belem}{bshape}, G: f32[M, {K}], C: mut {acc}[M, {BN}], D: mut {acc}[M, {BN}], k: i32):
    As = tshared.alloc({self.elem}[{BM}, {K}])
    Xs = tshared.alloc({self.elem}[{BM}, {K}])
    Bs = tshared.alloc({self.belem}{bshape})
    X = tfrag({self.elem}[{BM}, {K}])
    F = tfrag(f32[{BM}, {K}])
    acc = tfrag({acc}[{BM}, {BN}], {zero})
    ref = tfrag({acc}[{BM}, {BN}], {zero})
    m0 = group_id(0) * {BM}
    tcopy(As, A[m0:m0 + {BM}, 0:{K}])
    tcopy(Bs, B[0:{bshape[1:-1].split(', ')[0]}, 0:{bshape[1:-1].split(', ')[1]}])
    tbarrier()
    {load}
    tload(F, G[m0:m0 + {BM}, 0:{K}])
"""
        tail = f"""    tstore(C[m0:m0 + {BM}, 0:{BN}], acc)
    tstore(D[m0:m0 + {BM}, 0:{BN}], ref)
"""
        return head + "\n".join(self.lines) + "\n" + tail

    def inputs(self, m: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        bshape = (BN, K) if self.trans else (K, BN)
        if self.elem == "f32":
            a = rng.standard_normal((m, K)).astype(np.float32)
            b = rng.standard_normal(bshape).astype(np.float32)
        else:
            ia, ib = np.iinfo(NP[self.elem]), np.iinfo(NP[self.belem])
            a = rng.integers(ia.min, int(ia.max) + 1, (m, K)).astype(NP[self.elem])
            b = rng.integers(ib.min, int(ib.max) + 1, bshape).astype(NP[self.belem])
        g = (rng.standard_normal((m, K)) * 150).astype(np.float32)
        return {"A": a, "B": b, "G": g}

    def model(self, inputs: dict[str, np.ndarray], k: int, m: int) -> np.ndarray:
        """The expected acc (= ref) of all rows, and for f32 the sums of the products' magnitudes
        (2 x m x BN): each 64-row block, zero-padded, run through the steps."""
        b = inputs["B"].T if self.trans else inputs["B"]
        bm = tf32(b).astype(np.float64) if self.elem == "f32" else b.astype(np.int64)
        out = []
        for m0 in range(0, m, BM):
            def block(x: np.ndarray, m0: int = m0) -> np.ndarray:
                pad = np.zeros((BM, K), x.dtype)
                pad[:min(BM, m - m0)] = x[m0:m0 + BM]
                return pad
            env: Env = {"Bm": bm, "k": np.int64(k), "F": block(inputs["G"]).astype(np.float64)}
            env["X"] = block(inputs["A"]).astype(np.float32 if self.elem == "f32" else np.int64)
            env["acc"] = np.zeros((BM, BN), np.float64 if self.elem == "f32" else np.int64)
            env["mag"] = np.zeros((BM, BN))
            for s in self.steps:
                s(env)
            out.append(np.stack([env["acc"], env["mag"]])[:, :min(BM, m - m0)])
        return np.concatenate(out, axis=1)


__all__ = ["Program"]
