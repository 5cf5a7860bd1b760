"""Limits on the size of the input, so that time and memory stay bounded by the input's size,
and the bounded read of a source file (here, not in the parser: a warm start must not import Lark).

Each limit is far above what a real kernel file needs (docs/language.md, section 2, lists them);
an input over one gets an error that names the limit instead of a long run or a crash.
"""

from __future__ import annotations

import os

from tessera.base.errors import CompileError, Diagnostic, Loc, SourceFile

MAX_SOURCE_BYTES = 4 * 1024 * 1024
MAX_LINE_CHARS = 1024 * 1024
# Lark keeps every token with its position until the tree is built (about 1 KB each): this bounds
# the memory of a dense file well below MAX_SOURCE_BYTES' worth of one-character tokens. The 64 KiB
# of constant memory hold at most 65536 table values, about 131072 tokens with their commas.
MAX_TOKENS = 250_000
MAX_NAME_CHARS = 255
MAX_STRING_CHARS = 64 * 1024
# 2**128 has 39 decimal digits: longer literals can never be a value (the 4300-digit limit of
# Python's int() is far beyond this).
MAX_INT_DIGITS = 40
# The same for binary and octal literals: 2**128 has 129 binary and 43 octal digits.
_BASE_DIGITS = {2: 130, 8: 44}


def max_int_digits(base: int) -> int:
    """How many significant digits an integer literal in `base` may have (MAX_INT_DIGITS, more for
    binary and octal, so that every value below 2**128 can be written in every base)."""
    return _BASE_DIGITS.get(base, MAX_INT_DIGITS)
# Constant expressions are computed exactly; a result of 2**128 or more (beyond any product or
# shift of two 64-bit values) is an overflow, which keeps repeated squaring cheap.
MAX_CONST_BITS = 128
# tpipeline(stages=S): each stage is another copy of every pipelined buffer; beyond 8 the shared
# memory is better spent on larger tiles.
MAX_STAGES = 8
# vectorize(w) in map kernels: elements per tile and step; 16 covers 16 bytes of u8 or 64 of f32.
MAX_VECTORIZE = 16



_BASES = {"0x": 16, "0b": 2, "0o": 8}


def leading_zeros(text: str) -> str | None:
    """What to write instead of an unsigned decimal literal with leading zeros (`010`, `0_9`), which
    is refused as Python refuses it (C would read 010 as octal 8); None for any other literal (`0`,
    `00`, `0x0F`, `10`)."""
    if len(text) < 2 or text[0] != "0" or text[1] in "xXbBoO" or not text.strip("0_"):
        return None
    rest = text.lstrip("0_")
    octal = f", or 0o{rest} for C's octal {text}" if set(rest) <= set("01234567_") else ""
    return f"write {rest}{octal}"


def int_literal_digits(text: str) -> tuple[str, int]:
    """The significant digits and base of an unsigned integer literal (`1_000`, `0x00FF`, `0b1010`,
    `0o17`): callers check the digits against max_int_digits(base) before int(), which refuses 4300
    digits with a ValueError."""
    t = text.replace("_", "")
    base = _BASES.get(t[:2].lower(), 10)
    return (t if base == 10 else t[2:]).lstrip("0") or "0", base


def read_source(path: str | os.PathLike) -> bytes:
    """The bytes of a source file, reading no more than the size limit allows (a file that never
    ends, such as /dev/zero, must not take all the memory). Raises OSError or CompileError."""
    with open(path, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise source_too_large(os.fspath(path))
    return data


def source_too_large(path: str) -> CompileError:
    """The error for a source over MAX_SOURCE_BYTES: about the whole file (line 0)."""
    return CompileError([Diagnostic(f"source file is too large: the limit is {MAX_SOURCE_BYTES} bytes "
                                    f"({MAX_SOURCE_BYTES // (1024 * 1024)} MiB)", Loc(0, 0))], SourceFile(path, ""))
