"""What a sample's case is (samples/runner.py runs them): how to make a kernel's inputs, launch it,
and the NumPy reference, with the tolerance of the comparison; and the bfloat16 helpers the cases
and the tests share (bf16 tensors hold uint16 bits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tessera.api import Kernel

Arrays = dict[str, np.ndarray]  # by parameter name


@dataclass(frozen=True)
class Case:
    make: Callable[[np.random.Generator], Arrays]        # the inputs
    launch: Callable[[Kernel, Arrays], None]             # runs the kernel on the inputs
    expect: Callable[[Arrays], Arrays]                   # the expected arrays
    rtol: float = 1e-5
    atol: float = 1e-5


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as the uint16 bits a bf16 tensor takes."""
    f = np.asarray(x, np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bits."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def r16(v: np.ndarray | float) -> np.ndarray:
    """One bf16 operation: computed in f32 and rounded to bf16 (as f32 values)."""
    return bf16_values(bf16_bits(np.asarray(v, np.float32)))
