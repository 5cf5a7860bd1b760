"""A seeded random generator of kernels whose `tmma` takes its second operand from registers
(spec section 14; passes/frag_b_operand.py), with their NumPy model: an element type (f16, bf16,
f32 as TF32, i8), `trans_b`, a first operand from shared memory or from registers, the operand
fragment rewritten by an elementwise statement before each product, the products inside a
uniform loop, a uniform condition or a tpipeline. The same seed also writes the form a CUDA
programmer would (`staged=True`): the fragment stored to a shared array by hand, a barrier, the
product reading that array, a barrier — which the compiler's staging must equal bit for bit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from samples.case import bf16_bits, bf16_values

M, N = 32, 16  # the accumulator; one warp (32 tiles) or two
TYPES = {"f16": ("f32", 16), "bf16": ("f32", 16), "f32": ("f32", 8), "i8": ("i32", 32)}


@dataclass
class Case:
    src: str
    elem: str
    k: int
    trans: bool
    loops: int        # how many products (each with its own scale of B)
    tiles: int


def _tf32(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


def generate(seed: int, staged: bool = False) -> Case:
    rng = random.Random(seed)
    elem = rng.choice(sorted(TYPES))
    acc_t, unit = TYPES[elem]
    k = unit * rng.choice([1, 2])
    trans = rng.random() < 0.5
    if not trans:
        k = max(k, 16)  # B [K, N] is a fragment: at least one 16-row mma tile
    tiles = 64 if not trans and k >= 32 and rng.random() < 0.5 else 32  # B's rows: whole rows per warp
    a_regs = rng.random() < 0.5
    form = rng.choice(["loop", "if", "pipeline", "plain"])
    loops = 1 if form in ("if", "plain") else 2
    bshape = f"[{N}, {k}]" if trans else f"[{k}, {N}]"
    view = f"[0:{N}, 0:{k}]" if trans else f"[0:{k}, 0:{N}]"
    tr = ", trans_b=True" if trans else ""
    zero = "0" if acc_t == "i32" else "0.0"
    scale = "i8(Bw * (it + 1))" if elem == "i8" else "Bw * (it + 1)"
    src = (f"@kernel tile[({tiles},)]\n"
           f"def gen(A: {elem}[{M}, {k}], B: {acc_t}[{N if trans else k}, {k if trans else N}], "
           f"C: mut {acc_t}[{M}, {N}], n: i32):\n"
           f"    As = tshared.alloc({elem}[{M}, {k}])\n"
           f"    Af = tfrag({elem}[{M}, {k}])\n"
           f"    Bw = tfrag({acc_t}{bshape})\n"
           f"    Bf = tfrag({elem}{bshape})\n"
           f"    acc = tfrag({acc_t}[{M}, {N}], {zero})\n")
    if staged:
        src += f"    Bs = tshared.alloc({elem}{bshape})\n"
    if form == "pipeline":  # A again, through the pipeline's buffers
        src += f"    Ps = tshared.alloc({elem}[{M}, {k}])\n"
    src += (f"    tcopy(As, A[0:{M}, 0:{k}])\n"
            f"    tload(Bw, B{view})\n"
            "    tbarrier()\n"
            "    tload(Af, As)\n")
    a = "Af" if a_regs else "Ps" if form == "pipeline" else "As"
    step = [f"Bf[:] = {scale}"]
    if staged:
        step += ["tstore(Bs, Bf)", "tbarrier()", f"tmma(acc, {a}, Bs{tr})", "tbarrier()"]
    else:
        step += [f"tmma(acc, {a}, Bf{tr})"]
    if form == "loop":
        src += "    for it in range(n):\n" + "".join(f"        {s}\n" for s in step)
    elif form == "pipeline":
        src += (f"    for it in tpipeline(0, n, 1, stages=2):\n        tcopy_async(Ps, A[0:{M}, 0:{k}])\n"
                + "".join(f"        {s}\n" for s in step))
    elif form == "if":
        src += "    it = 0\n    if n > 0:\n" + "".join(f"        {s}\n" for s in step)
    else:
        src += "    it = 0\n" + "".join(f"    {s}\n" for s in step)
    src += f"    tstore(C[0:{M}, 0:{N}], acc)\n"
    return Case(src, elem, k, trans, loops, tiles)


def inputs(case: Case, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A and B: B in the accumulator's type (so that the program's conversions are in the model)."""
    rng = np.random.default_rng(seed)
    bshape = (N, case.k) if case.trans else (case.k, N)
    if case.elem == "i8":
        return rng.integers(-128, 128, (M, case.k)).astype(np.int8), rng.integers(-60, 60, bshape).astype(np.int32)
    a = rng.uniform(-2, 2, (M, case.k)).astype(np.float32)
    b = rng.uniform(-2, 2, bshape).astype(np.float32)
    if case.elem == "f16":
        return a.astype(np.float16), b
    if case.elem == "bf16":
        return bf16_bits(a), b
    return a, b


def model(case: Case, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C as the program computes it: each product of A by B scaled and converted to B's fragment."""
    if case.elem == "i8":
        av = a.astype(np.int64)
        total = np.zeros((M, N), np.int64)
        for it in range(case.loops):
            bq = np.clip(b.astype(np.int64) * (it + 1), -128, 127)
            total += av @ (bq.T if case.trans else bq)
        return total
    av = {"f16": lambda x: x.astype(np.float64), "bf16": lambda x: bf16_values(x).astype(np.float64),
          "f32": lambda x: _tf32(x).astype(np.float64)}[case.elem](a)
    total = np.zeros((M, N))
    for it in range(case.loops):
        scaled = (b * np.float32(it + 1)).astype(np.float32)
        bq = {"f16": lambda x: x.astype(np.float16).astype(np.float64),
              "bf16": lambda x: bf16_values(bf16_bits(x)).astype(np.float64),
              "f32": lambda x: _tf32(x).astype(np.float64)}[case.elem](scaled)
        total += av @ (bq.T if case.trans else bq)
    return total


__all__ = ["Case", "generate", "inputs", "model"]
