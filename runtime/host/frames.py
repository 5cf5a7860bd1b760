"""Fiber stack sizing for CPU-backend kernel libraries: the kernel translation unit's frame
sizes (from the compiler's ``-fstack-usage`` report) summed into one bound, and the tiny
assembler file that hands that bound to the engine (``tsr_frames__bytes`` in engine.cpp).

The sum of every function's frame bounds the stack of any call chain without recursion
(each function appears at most once in it), so no call graph is needed; recursion is caught
by the guard page below each stack instead.
"""

from __future__ import annotations

import re

# "kernel.cu:308:1:void matmul(const float*, ...)\t288\tstatic" (also "dynamic,bounded").
_LINE = re.compile(r"\t(\d+)\t[a-z,]+\s*$")


def frame_bytes(stack_usage: str) -> int:
    """The sum of the frame sizes in a ``.su`` report (0 for an empty one)."""
    total = 0
    for line in stack_usage.splitlines():
        m = _LINE.search(line)
        if m:
            total += int(m.group(1))
    return total


def frames_asm(total: int) -> str:
    """Assembler text defining the hidden 8-byte constant ``tsr_frames__bytes = total``
    (GNU as syntax, which GCC's and Clang's assemblers accept on x86-64 and aarch64)."""
    if not 0 <= total < 2**63:
        raise ValueError(f"frame size out of range: {total}")
    return (
        "  .section .rodata\n"
        "  .p2align 3\n"
        "  .globl tsr_frames__bytes\n"
        "  .hidden tsr_frames__bytes\n"
        "  .type tsr_frames__bytes, STT_OBJECT\n"
        "  .size tsr_frames__bytes, 8\n"
        "tsr_frames__bytes:\n"
        f"  .8byte {total}\n"
        '  .section .note.GNU-stack,"",%progbits\n'
    )
