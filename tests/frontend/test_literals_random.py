"""Integer literals against Python's own reading of them (`int(text, 0)`): random values in every
base (`0b`, `0o`, decimal, `0x`, either case), with `_` between digits and with leading zeros, in
the source and as `-D` values. Python refuses a decimal literal with leading zeros (`010`), and so
must the compiler; every other form has Python's value. (Python also takes a `_` right after the
base prefix, `0x_ff`; the language does not, so the generator puts one only between digits.)"""

from __future__ import annotations

import random

import pytest

from tessera.base.errors import CompileError, SourceFile
from tessera.frontend import nodes as N
from tessera.frontend.parser import parse
from tessera.transpile.consts import parse_define_value

DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}
PREFIX = {2: ("0b", "0B"), 8: ("0o", "0O"), 10: ("",), 16: ("0x", "0X")}


def literal(rng: random.Random) -> str:
    base = rng.choice((2, 8, 10, 16))
    value = rng.choice((0, rng.randrange(8), rng.randrange(1000), rng.randrange(2**64)))
    digits = ""
    v = value
    while v:
        digits = DIGITS[base][v % base] + digits
        v //= base
    digits = "0" * rng.choice((0, 0, 1, 2)) + (digits or "0")
    if base == 16:
        digits = "".join(rng.choice((c.lower(), c.upper())) for c in digits)
    spaced = digits[0] + "".join(("_" if rng.random() < 0.2 else "") + c for c in digits[1:])
    return rng.choice(PREFIX[base]) + spaced


def source_value(text: str) -> int:
    module = parse(SourceFile("lit.tsr", f"const A = {text}\n"))
    item = module.items[0]
    assert isinstance(item, N.ConstDef) and isinstance(item.value, N.IntLit)
    return item.value.value


@pytest.mark.parametrize("seed", range(4))
def test_integer_literals_read_as_python_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        text = literal(rng)
        try:
            want: int | None = int(text, 0)
        except ValueError:
            want = None
        if want is None:
            with pytest.raises(CompileError, match="leading zeros in a decimal integer literal"):
                source_value(text)
            with pytest.raises(ValueError, match="has leading zeros"):
                parse_define_value(text)
        else:
            assert source_value(text) == want, text
            if want < 2**63:
                sign = rng.choice(("", "-", "+"))
                assert parse_define_value(sign + text) == int(sign + text, 0), text
