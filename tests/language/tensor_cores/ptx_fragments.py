"""An independent model of the PTX ISA's mma.sync fragment layouts, written from the ISA's tables
("Matrix fragments for mma.m16n8k16", "Matrix fragments for mma.m16n8k8", "Matrix fragments for
mma.m16n8k32" and ldmatrix), not from
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


def a_operand_8bit(lane: int, i: int) -> tuple[int, int]:
    """A of m16n8k32 (.s8/.u8): (row, column) of byte i (0 ... 15) of registers a0 ... a3 (four
    bytes each, low to high).

    row = groupID for ai where 0 <= i < 4 || 8 <= i < 12, groupID + 8 otherwise;
    col = threadID_in_group * 4 + (i & 0x3) for i < 8, + 16 for i >= 8."""
    group, thread = lane >> 2, lane % 4
    row = group + (8 if 4 <= i < 8 or i >= 12 else 0)
    return row, thread * 4 + (i & 3) + (16 if i >= 8 else 0)


def b_operand_8bit(lane: int, i: int) -> tuple[int, int]:
    """B of m16n8k32 (.s8/.u8): (row k, column n) of byte i (0 ... 7) of registers b0, b1.

    row = threadID_in_group * 4 + (i & 0x3) for i < 4, + 16 for i >= 4; col = groupID."""
    group, thread = lane >> 2, lane % 4
    return thread * 4 + (i & 3) + (16 if i >= 4 else 0), group


def a_operand_tf32(lane: int, i: int) -> tuple[int, int]:
    """A of m16n8k8 (.tf32): (row, column) of register a_i (one element each).

    row = groupID for a0 and a2, groupID + 8 for a1 and a3;
    col = threadID_in_group for a0 and a1, threadID_in_group + 4 for a2 and a3."""
    group, thread = lane >> 2, lane % 4
    return group + (8 if i in (1, 3) else 0), thread + (4 if i >= 2 else 0)


def b_operand_tf32(lane: int, i: int) -> tuple[int, int]:
    """B of m16n8k8 (.tf32): (row k, column n) of register b_i.

    row = threadID_in_group for b0, threadID_in_group + 4 for b1; col = groupID."""
    group, thread = lane >> 2, lane % 4
    return thread + (4 if i == 1 else 0), group


def whole_row_tile_owner(rows: int, warps: int, row: int) -> int:
    """The warp that owns `row` when each of `warps` warps owns rows / warps consecutive whole rows."""
    return row // (rows // warps)


__all__ = ["a_operand_16bit", "a_operand_8bit", "a_operand_tf32", "accumulator", "b_operand_8bit", "b_operand_tf32",
           "whole_row_tile_owner"]
