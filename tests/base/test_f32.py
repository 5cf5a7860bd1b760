"""tessera.base.f32 (f32 rounding and literal text without NumPy) against NumPy's."""

from __future__ import annotations

import random
import struct

import numpy as np

from tessera.base.f32 import f32_text, round_f32


def _values() -> list[float]:
    rnd = random.Random(12)
    vals = [0.0, -0.0, 1.0, 0.1, 100.0, 1e15, 1e16, 9.999e15, 1e-4, 9.99e-5, 3.4028234663852886e38, 1e-45,
            1.17549435e-38, 0.5, 123456.7, 1e300, -1e-300]
    vals += [2.0 ** e for e in range(-149, 128)] + [3 * 2.0 ** e for e in range(-149, 126)]
    for _ in range(3000):
        f = struct.unpack("<f", struct.pack("<I", rnd.getrandbits(32)))[0]
        if f == f and abs(f) != float("inf"):
            vals.append(f)
    vals += [rnd.uniform(-1e3, 1e3) for _ in range(500)]  # doubles: rounded to f32 first
    vals += [rnd.randint(-100000, 100000) / rnd.choice([1, 10, 100, 1000, 7]) for _ in range(500)]
    vals += [round_f32(rnd.randint(-2**23, 2**23) + 0.25 * rnd.randint(0, 3)) for _ in range(500)]  # digit ties
    return vals + [-v for v in vals]


def _numpy_text(v: float) -> str:
    x = np.float32(v)
    if v == 0 or 1e-4 <= abs(v) < 1e16:
        return np.format_float_positional(x, unique=True, trim="0")
    return np.format_float_scientific(x, unique=True, trim="-")


def test_f32_text_is_numpys_shortest_text():
    with np.errstate(over="ignore"):
        mismatched = [(v, f32_text(v), _numpy_text(v)) for v in _values()
                      if abs(v) <= 3.4028234663852886e38 and f32_text(v) != _numpy_text(v)]
    assert mismatched == []


def test_round_f32_is_the_c_conversion():
    with np.errstate(over="ignore"):
        for v in _values() + [3.5e38, -1e39, 3.4028235677973366e38]:
            assert round_f32(v) == float(np.float32(v)), v
