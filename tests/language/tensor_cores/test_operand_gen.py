"""The random differential test of operand fragments from registers (tests/language/tensor_cores/
operand_gen.py): each generated program multiplies its 8-bit or TF32 operand fragment from
registers and through shared memory, inside uniform loops and conditions, on the CPU backend at a
ragged size; both products must equal the NumPy model (8-bit: exactly; TF32: to the rounding of f32
sums in another order, and of a TF32 rounding that such a sum can flip). A bounded, seeded run;
`python -m tests.language.tensor_cores.test_operand_gen N` runs N more programs."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import tessera
from tests.language.tensor_cores.operand_gen import Program

pytestmark = pytest.mark.usefixtures("shared_cache")


def check(seed: int) -> str | None:
    """None if the program of `seed` matches its model, else what differs."""
    prog = Program(seed)
    src = prog.source(prog.rng.randint(2, 5))
    m, k = 100, 1 + seed % 3
    inputs = prog.inputs(m, seed)
    acc = np.float32 if prog.elem == "f32" else np.int32
    c, d = np.zeros((m, 64), acc), np.zeros((m, 64), acc)
    tessera.compile(src, backend="cpu", path=f"gen{seed}.tsr").gen(inputs["A"], inputs["B"], inputs["G"], c, d, k,
                                                                  grid=(2,))
    want, mag = prog.model(inputs, k, m)
    if prog.elem == "f32":
        slack = 4e-3 * mag + 1e-3
        bad = [(name, float(np.max(np.abs(x - want) - slack))) for name, x in (("registers", c), ("shared", d))
               if np.any(np.abs(x - want) > slack)]
    else:
        bad = [(name, int(np.sum(x != want.astype(np.int32)))) for name, x in (("registers", c), ("shared", d))
               if not np.array_equal(x, want.astype(np.int32))]
    return None if not bad else f"seed {seed}: {bad}\n{src}"


@pytest.mark.parametrize("seed", [4, 6, 21, 48, 60, 83, 162, 175])  # each kind, with loops and conditions
def test_operand_fragments_match_the_model(seed: int) -> None:
    assert check(seed) is None


if __name__ == "__main__":  # a longer run: python -m tests.language.tensor_cores.test_operand_gen 200
    failures = [f for f in (check(s) for s in range(1000, 1000 + int(sys.argv[1]))) if f]
    print("\n".join(failures) or "all match")
