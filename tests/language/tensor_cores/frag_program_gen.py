"""What the seeded random generators of whole-fragment programs share (fdiv_gen.py, frag_expr_gen.py):
the model's environment (a fragment's or row vector's name to its float32 values), an expression
as its `.tsr` text with its NumPy model, and `FragProgramGen`, which strings a generator's
statements into a kernel between its HEAD and TAIL, some inside a uniform loop or a uniform
condition, with the list of model steps in the order they run.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

Env = dict[str, np.ndarray]
Expr = tuple[str, Callable[[Env], np.ndarray]]
Step = Callable[[Env], None]


class FragProgramGen:
    """A subclass gives HEAD and TAIL (the kernel around the statements), `statement`, and how
    often a statement is the body of a loop (`LOOP`) or of a condition (`CONDITION - LOOP`)."""

    HEAD = ""
    TAIL = ""
    LOOP = 0.2
    CONDITION = 0.35

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def statement(self, indent: str) -> tuple[str, Step]:
        raise NotImplementedError

    def program(self, count: int) -> tuple[str, list[Step]]:
        src, steps = self.HEAD, []
        for _ in range(count):
            shape = self.rng.random()
            if shape < self.LOOP:  # a uniform loop
                body = [self.statement("        ") for _ in range(2)]
                src += "    for it in range(2):\n" + "".join(t for t, _ in body)
                steps.extend([fn for _, fn in body] * 2)
            elif shape < self.CONDITION:  # a uniform condition (k > 0 in every launch)
                text, fn = self.statement("        ")
                src += "    if k > 0:\n" + text
                steps.append(fn)
            else:
                text, fn = self.statement("    ")
                src += text
                steps.append(fn)
        return src + self.TAIL, steps
