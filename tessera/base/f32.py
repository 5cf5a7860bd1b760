"""f32 arithmetic and literal text without NumPy (the compiler path does not import it).

`round_f32` is the C conversion of a double to float (round to nearest even, overflow to inf);
`f32_text` is the shortest decimal
that a C compiler reads back as the same f32, written as NumPy's `format_float_positional` /
`format_float_scientific` (unique, trimmed) would, so the emitted C does not depend on which
library printed it.
"""

from __future__ import annotations

import math
import struct

_F32_MAX_BITS = 0x7F7FFFFF


def round_f32(v: float) -> float:
    """`v` as the nearest f32 (ties to even), +-inf when it overflows, as C's `(float)v`."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", v))[0])
    except OverflowError:
        return math.copysign(math.inf, v)


def _from_bits(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def _shortest_digits(v: float) -> tuple[str, int]:
    """For a finite f32 `v` > 0: the fewest decimal digits `d` and the exponent `e` such that
    d[0].d[1:] x 10**e reads back (exactly rounded) as `v`; of two such at the same length the
    nearer to `v`, and of two equally near the one whose last digit is even."""
    from fractions import Fraction  # 4 ms to import: only when a kernel has an f32 literal

    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    fv = Fraction(v)
    up = Fraction(_from_bits(bits + 1)) if bits < _F32_MAX_BITS else 2 * fv - Fraction(_from_bits(bits - 1))
    down = Fraction(_from_bits(bits - 1)) if bits > 1 else Fraction(0)
    lo, hi = (down + fv) / 2, (fv + up) / 2
    even = bits % 2 == 0
    for digits in range(1, 10):
        mant, exp = f"{v:.{digits - 1}e}".split("e")
        m, e = int(mant.replace(".", "")), int(exp) - (digits - 1)
        best: tuple[Fraction, int, int] | None = None
        for c in (m - 1, m, m + 1):
            d = c * Fraction(10) ** e
            if lo < d < hi or (even and d in (lo, hi)):
                key = (abs(d - fv), c % 2, c)
                best = key if best is None or key[:2] < best[:2] else best
        if best is not None:
            text = str(best[2])
            return text, e + len(text) - 1
    raise AssertionError(f"no 9-digit decimal reads back as {v!r}")  # 9 digits always suffice for f32


def f32_text(value: float) -> str:
    """The shortest decimal text of the f32 nearest `value` that reads back as it; positional for
    1e-4 <= |value| < 1e16 (`0.1`, `100.0`), scientific otherwise (`1e+20`, `1.5e-05`)."""
    v = round_f32(value)
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    positional = value == 0 or 1e-4 <= abs(value) < 1e16
    if v == 0:
        return sign + ("0.0" if positional else "0e+00")
    digits, exp = _shortest_digits(abs(v))
    digits = digits.rstrip("0") or "0"
    if positional:
        if exp >= 0:
            whole, frac = digits[:exp + 1].ljust(exp + 1, "0"), digits[exp + 1:] or "0"
        else:
            whole, frac = "0", "0" * (-exp - 1) + digits
        return f"{sign}{whole}.{frac}"
    frac = "." + digits[1:] if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{frac}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
