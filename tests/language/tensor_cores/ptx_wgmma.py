"""An independent model of the PTX ISA's warpgroup MMA layouts, written from the ISA's figures and
tables, not from the compiler's frag_layout.py or swizzle.py:

- "Matrix Fragments for wgmma.mma_async.m64nNk16" (Figure: register fragment layout for the
  accumulator D): the 4 warps of a warpgroup own rows 16 w ... 16 w + 15 of the 64-row D; within a
  warp, lane (groupID = lane >> 2, threadID_in_group = lane % 4) holds, for each 8-column block
  j = 0 ... N/8 - 1, d[4 j + 0], d[4 j + 1] at row groupID, columns 8 j + 2 tid + {0, 1} and
  d[4 j + 2], d[4 j + 3] at row groupID + 8, the same columns;
- the A fragment in registers (Figure: register fragment layout for matrix A, .f16/.bf16): warp w
  holds rows 16 w ... 16 w + 15; a0, a1 at row groupID, columns 2 tid + {0, 1}; a2, a3 at row
  groupID + 8; a4 ... a7 the same 8 columns further on;
- "Shared Memory Matrix Layout" (Table: swizzle atom layouts, in 128-bit elements): 128B mode 8 x 8,
  64B mode 8 x 4, 32B mode 8 x 2 (K-major shapes; MN-major the same atoms read the other way), and
  the figures of the swizzled atoms: in the 128B atom, row i's 16-byte element j is stored at
  element j XOR i; the 64B atom pairs rows into 128-byte lines (line i / 2) and XORs with the line;
  the 32B atom four rows to a line. Wider matrices repeat the atom down the rows; a matrix wider
  than the atom is stored atom column after atom column (the descriptor's leading byte offset
  steps between them).
"""

from __future__ import annotations


def accumulator(warp_in_group: int, lane: int, i: int) -> tuple[int, int]:
    """(row, column) of register d_i of a lane in warp `warp_in_group` (0 ... 3) of m64nNk16's D."""
    group, tid = lane >> 2, lane % 4
    block, within = divmod(i, 4)
    row = 16 * warp_in_group + group + (8 if within >= 2 else 0)
    return row, 8 * block + 2 * tid + (within & 1)


def a_registers(warp_in_group: int, lane: int, i: int) -> tuple[int, int]:
    """(row, column) of half i (0 ... 7) of the four A registers (k16, 16-bit elements)."""
    group, tid = lane >> 2, lane % 4
    row = 16 * warp_in_group + group + (8 if i in (2, 3, 6, 7) else 0)
    return row, 2 * tid + (i & 1) + (8 if i >= 4 else 0)


ATOM_CHUNKS = {128: 8, 64: 4, 32: 2}  # 16-byte elements per atom row (the K-major atom is 8 x this)


def atom_chunk(mode: int, row: int, chunk: int) -> int:
    """Where 16-byte element `chunk` of atom row `row` (0 ... 7) is stored, from the figures:
    128 / mode rows share a 128-byte line, and the chunk index is XORed with the line's number
    within the atom."""
    rows_per_line = 128 // mode
    line = (row % 8) // rows_per_line
    return chunk ^ (line % ATOM_CHUNKS[mode])


def swizzled_byte(rows: int, mode: int, size: int, r: int, c: int) -> int:
    """The byte of element (r, c) of a matrix with `rows` rows in `mode`: atom columns one after
    another, each all rows of its `mode` bytes; inside, rows of `mode` bytes, chunks permuted."""
    byte = c * size
    atom_col, within = divmod(byte, mode)
    chunk, rest = divmod(within, 16)
    return atom_col * rows * mode + r * mode + 16 * atom_chunk(mode, r, chunk) + rest


__all__ = ["ATOM_CHUNKS", "a_registers", "accumulator", "atom_chunk", "swizzled_byte"]
