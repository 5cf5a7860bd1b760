"""Swizzled shared-memory layouts for Hopper's warpgroup MMA and tensor copies (spec section 16):
the address functions of the 128-, 64- and 32-byte swizzle modes, the layout of a 2-D shared matrix
in them, the descriptor fields `wgmma` reads it through, and the choice of mode for an array.

The PTX ISA ("Shared Memory Matrix Layout" of wgmma, and the TMA's swizzle modes) builds a swizzled
matrix from *swizzle atoms*: 8 rows of S bytes (S = 128, 64 or 32) stored contiguously, 8 * S
bytes, in which the 16-byte chunk `c` of row `r` is stored at chunk `c ^ (r mod 8) / (128 / S)`.
As a function of the byte offset `o` inside a region aligned to the pattern's repeat (1024, 512 or
256 bytes): bits 4 ... 4 + b - 1 are XORed with bits 7 ... 7 + b - 1, b = log2(S / 16)
(`swizzle`). An array whose rows are S bytes is the atoms stacked down the rows; one whose rows are
a multiple of 128 bytes is cut into *panels* of 128-byte columns, each panel all the rows of its
columns (panel p holds columns p * W ... p * W + W - 1, W = 128 / element size), and the panels
follow each other. Every access to such an array (the copies into it, the MMA's descriptors)
addresses element (r, c) at `SwizzledMatrix.offset(r, c)`.

    f16 As[64][32]  (rows of 64 bytes)   -> 64-byte mode, one panel: (r, c) at r * 32 + (c ^ ((r >> 1) & 3) * 8)
    f16 Bs[32][128] (rows of 256 bytes)  -> 128-byte mode, 2 panels of 32 x 64 (4096 bytes each)

An array is swizzled as a whole (every leading index, a pipeline's stage for example, selects one
matrix) and aligned to 1024 bytes, so that the hardware's swizzle of absolute addresses is the one
of offsets from the matrix's start (the descriptors' base offset stays 0).
"""

from __future__ import annotations

from tessera.base.irnode import ir_node

MODES = (128, 64, 32)           # the swizzle modes, widest first (bytes per atom row)
ALIGN = 1024                    # where a swizzled array starts (the 128-byte mode's repeat)
CHUNK = 16                      # bytes the swizzle moves as a unit
WGMMA_LAYOUT = {128: 1, 64: 2, 32: 3}  # the wgmma descriptor's layout type (bits 62-63)


def swizzle(offset: int, mode: int) -> int:
    """The byte offset that byte `offset` of a region (aligned to 8 * mode) is stored at."""
    bits = (mode // CHUNK).bit_length() - 1
    return offset ^ (((offset >> 7) & ((1 << bits) - 1)) << 4)


def c_swizzle(offset: str, mode: int) -> str:
    """The C of `swizzle` (an unsigned byte offset)."""
    mask = mode // CHUNK - 1
    return f"(({offset}) ^ ((({offset}) >> 7) & {mask}u) << 4)"


def choose_mode(row_bytes: int) -> int | None:
    """The widest mode whose atom row divides the matrix's rows: 128 bytes for rows of a multiple
    of 128 (cut into panels), 64 or 32 for rows of exactly that; None for other rows."""
    if row_bytes % 128 == 0:
        return 128
    if row_bytes in (64, 32):
        return row_bytes
    return None


@ir_node
class SwizzledMatrix:
    """A `rows x cols` matrix of `size`-byte elements in swizzle mode `mode`."""

    rows: int
    cols: int
    size: int
    mode: int

    @property
    def panel_cols(self) -> int:
        """Columns (elements) of one panel."""
        return self.mode // self.size

    @property
    def panels(self) -> int:
        return self.cols // self.panel_cols

    @property
    def panel_bytes(self) -> int:
        return self.rows * self.mode

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.size

    def byte_offset(self, r: int, c: int) -> int:
        """Where element (r, c) is stored, in bytes from the matrix's start."""
        p, within = divmod(c * self.size, self.mode)
        return p * self.panel_bytes + swizzle(r * self.mode + within, self.mode)

    def offset(self, r: int, c: int) -> int:
        """The same in elements."""
        return self.byte_offset(r, c) // self.size

    def c_offset(self, r: str, c: str) -> str:
        """The C of `offset` (unsigned element offset) for unsigned row `r` and column `c`."""
        w = self.panel_cols
        panel = "" if self.panels == 1 else f"(({c}) / {w}u) * {self.panel_bytes}u + "
        linear = f"({r}) * {self.mode}u + (({c}) % {w}u) * {self.size}u"
        return f"({panel}{c_swizzle(linear, self.mode)}) / {self.size}u"

    # ---- the wgmma matrix descriptor ----------------------------------------------------------
    def descriptor_strides(self, k_major: bool) -> tuple[int, int]:
        """(leading, stride) byte offsets of the descriptor. K-major (the rows are M or N, the
        contiguous columns K): the leading offset is unused (1 by convention), the stride offset
        steps 8 rows (one atom). MN-major (rows are K, the contiguous columns M or N): the
        leading offset steps from one panel to the next along M/N, the stride offset 8 rows of K."""
        if k_major:
            return 16, 8 * self.mode
        return self.panel_bytes, 8 * self.mode


def matrix_of(rows: int, cols: int, size: int) -> SwizzledMatrix | None:
    """The swizzled layout of a rows x cols matrix (rows a multiple of 8), or None where no mode fits."""
    mode = choose_mode(cols * size)
    if mode is None or rows % 8:
        return None
    return SwizzledMatrix(rows, cols, size, mode)


__all__ = ["ALIGN", "CHUNK", "MODES", "WGMMA_LAYOUT", "SwizzledMatrix", "c_swizzle", "choose_mode", "matrix_of",
           "swizzle"]
