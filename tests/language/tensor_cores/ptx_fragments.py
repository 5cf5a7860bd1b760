"""An independent model of the PTX ISA's mma.sync fragment layouts, written from the ISA's tables
("Matrix fragments for mma.m16n8k16", "Matrix fragments for mma.m16n8k8" and ldmatrix), not from
the compiler's frag_layout.py: which element of a matrix each lane's registers hold. Tests dump the
per-lane registers the CPU backend computes and compare them with this model lane by lane."""

from __future__ import annotations


def accumulator(lane: int, i: int) -> tuple[int, int]:
    """C/D of m16n8 (f32 or s32): (row, column) of register c_i, i = 0 ... 3.

    groupID = %laneid >> 2, threadID_in_group = %laneid % 4;
    row = groupID for c0, c1 and groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 0x1)."""
    group, thread = lane >> 2, lane % 4
    return group + (8 if i >= 2 else 0), thread * 2 + (i & 1)


def a_operand_16bit(lane: int, i: int) -> tuple[int, int]:
    """A of m16n8k16 (.f16/.bf16): (row, column) of half i (0 ... 7) of registers a0 ... a3.

    row = groupID for a0, a1 (i < 2, 4 <= i < 6) and groupID + 8 for a2, a3 (in pairs: i = 2, 3, 6, 7);
    col = threadID_in_group * 2 + (i & 0x1) for i < 4, + 8 for i >= 4."""
    group, thread = lane >> 2, lane % 4
    row = group + (8 if i in (2, 3, 6, 7) else 0)
    return row, thread * 2 + (i & 1) + (8 if i >= 4 else 0)


def whole_row_tile_owner(rows: int, warps: int, row: int) -> int:
    """The warp that owns `row` when each of `warps` warps owns rows / warps consecutive whole rows."""
    return row // (rows // warps)


__all__ = ["a_operand_16bit", "accumulator", "whole_row_tile_owner"]
