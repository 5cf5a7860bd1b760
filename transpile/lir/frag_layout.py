"""Tensor-core fragments (spec section 12): how a group's warps divide a `tfrag(T[M, N])`
accumulator, what each lane holds, and the shared-memory row padding that keeps the operand loads
free of bank conflicts. An analysis: the checker, lowering, the printer and `--info` all ask it.

A group of `T` tiles has `W = T / 32` warps, arranged `WM x WN` over the fragment: warp `w` owns the
block of rows `(w / WN) * M/WM ...` and columns `(w % WN) * N/WN ...`, made of m16 x n8 mma tiles.
A lane holds 4 elements of each mma tile, in the PTX ISA's m16n8 accumulator layout: with
`g = lane / 4` and `t = lane % 4`, elements 0 and 1 are at row `g`, columns `2t` and `2t + 1`;
elements 2 and 3 at row `g + 8`. The per-lane array is indexed `(i * tiles_n + j) * 4 + r` for
mma tile (i, j).

Row vectors (`tfrag(f32[M])`, spec section 14) follow the rows of the M-row fragments: a lane holds
one *slot* per row it holds (rows `g` and `g + 8` of each m16 tile, slot `2 i + h`), and the 4 lanes
of a quad hold the same rows. A kernel with row vectors or row reductions divides every fragment
into whole rows per warp (`warps_n` = 1), so a row reduction is the lane's own elements and then
shuffles inside the quad (`ROW_LANE_MASKS`), with no shared memory and no barrier; where the row
count is too small for that, the rows are spread over `warps_n` warps (`row_division`) and a row
reduction also combines their parts through shared scratch (passes/frag_scratch.py). Column vectors
(`tfrag(f32[1, N])`) hold one *column slot* per column the lane holds, the same in the 8 lanes
with the same `lane % 4` (`COL_LANE_MASKS`) and in every warp; a column reduction combines the
warps' parts through shared scratch. This module is the
one place that knows the mma.sync layout: the printers ask it for the C of rows, columns, slots and
the lanes that share a row.

Kernels whose tmma statements are warpgroup MMAs (sm_90a, `Function.wgmma`) give every fragment the
PTX ISA's wgmma accumulator layout instead (`wgmma_division`): per warpgroup of 4 warps, blocks of
64 rows, warp `w % 4` owning rows 16 (w % 4) ... + 15 of each block, its lanes holding them in the
m16n8 layout repeated over all N columns. It is the layout above with each warp's m16 tiles 64 rows
apart instead of 16 (`m_step`) and the warp's first row `c_warp_row0`; columns, slots, quads and the
A registers of an operand fragment are unchanged, so section 14's operations print the same C.
"""

from __future__ import annotations

from tessera.base.dtypes import ScalarType
from tessera.base.irnode import ir_node

MMA_M, MMA_N = 16, 8
WGMMA_M, WGMMA_MAX_N = 64, 256  # wgmma.mma_async.m64nNk*: N a multiple of 8 up to 256
MAX_PER_LANE = 256  # accumulator registers per tile (a thread has at most 255 registers: beyond, it spills)


@ir_node
class MmaKind:
    """One `mma.sync` shape: its inputs, accumulator, k step and PTX spelling."""

    inputs: str   # the operand element type (f16 | bf16 | f32 | i8 | u8)
    acc: str      # f32 | i32
    k: int        # the k extent of one instruction
    ptx: str      # the PTX type suffix of the operands


MMA_KINDS: dict[str, MmaKind] = {
    "f16": MmaKind("f16", "f32", 16, "f16"),
    "bf16": MmaKind("bf16", "f32", 16, "bf16"),
    "f32": MmaKind("f32", "f32", 8, "tf32"),
    "i8": MmaKind("i8", "i32", 32, "s8"),
    "u8": MmaKind("u8", "i32", 32, "u8"),
}


@ir_node
class FragLayout:
    m: int
    n: int
    warps_m: int
    warps_n: int
    wgmma: bool = False  # the warpgroup MMA layout (warps_n 1; see WGMMA below)

    @property
    def warp_m(self) -> int:
        """Rows of the fragment one warp owns."""
        return self.m // self.warps_m

    @property
    def warp_n(self) -> int:
        return self.n // self.warps_n

    @property
    def tiles_m(self) -> int:
        """m16 mma tiles per warp along M."""
        return self.warp_m // MMA_M

    @property
    def tiles_n(self) -> int:
        return self.warp_n // MMA_N

    @property
    def per_lane(self) -> int:
        """Accumulator elements each lane holds."""
        return self.tiles_m * self.tiles_n * 4

    @property
    def m_step(self) -> int:
        """Rows between a warp's m16 tiles: 16, or 64 in the warpgroup layout (one per m64 block)."""
        return WGMMA_M if self.wgmma else MMA_M

    def describe(self, name: str) -> str:
        if self.wgmma:
            groups = self.warps_m // 4
            return (f"{name}: {groups} warpgroup{'s' if groups > 1 else ''} (wgmma), {4 * self.warp_m}x{self.n} "
                    f"per warpgroup, {self.tiles_m} m64n{self.n} blocks, {self.per_lane} registers per tile")
        return (f"{name}: {self.warps_m}x{self.warps_n} warps, {self.warp_m}x{self.warp_n} per warp, "
                f"{self.tiles_m}x{self.tiles_n} mma tiles, {self.per_lane} registers per tile")

    def _warp_row0(self, warp: int) -> int:
        if self.wgmma:
            return (warp >> 2) * 4 * self.warp_m + (warp & 3) * MMA_M
        return (warp // self.warps_n) * self.warp_m

    def position(self, warp: int, lane: int, k: int) -> tuple[int, int]:
        """The (row, column) of element `k` of the per-lane array of `lane` in `warp`."""
        tile, r = divmod(k, 4)
        i, j = divmod(tile, self.tiles_n)
        g, t = divmod(lane, 4)
        row = self._warp_row0(warp) + i * self.m_step + g + (8 if r >= 2 else 0)
        col = (warp % self.warps_n) * self.warp_n + j * MMA_N + 2 * t + (r & 1)
        return row, col


    # ---- rows, columns and row slots (the C the printers use; `e` the lane's element, `q` its slot)
    @property
    def slots(self) -> int:
        """Row-vector elements each lane holds: one per row it holds."""
        return self.tiles_m * 2

    def c_warp_row0(self) -> str:
        """The first row of the warp's block (needs tsr_warp)."""
        if self.wgmma:
            return f"(tsr_warp >> 2) * {4 * self.warp_m} + (tsr_warp & 3) * {MMA_M}"
        return f"(tsr_warp / {self.warps_n}) * {self.warp_m}"

    def c_row0(self) -> str:
        """The row of the lane's first element (`tsr_r0`; needs tsr_warp and tsr_lane)."""
        return f"{self.c_warp_row0()} + (tsr_lane >> 2)"

    def c_col0(self) -> str:
        return f"(tsr_warp % {self.warps_n}) * {self.warp_n} + (tsr_lane & 3) * 2"

    def c_origin(self) -> str:
        """Declares `tsr_r0`, `tsr_c0`: the row and column of the lane's first element."""
        return f"const int tsr_r0 = {self.c_row0()}, tsr_c0 = {self.c_col0()};"

    def c_row(self, e: str) -> str:
        return f"tsr_r0 + ({e} / {4 * self.tiles_n}) * {self.m_step} + (({e} >> 1) & 1) * 8"

    def c_col(self, e: str) -> str:
        return f"tsr_c0 + (({e} >> 2) % {self.tiles_n}) * 8 + ({e} & 1)"

    def c_slot(self, e: str) -> str:
        """The slot (row-vector element) of the row of element `e`."""
        return f"({e} / {4 * self.tiles_n}) * 2 + (({e} >> 1) & 1)"

    def c_slot_row(self, q: str) -> str:
        return f"tsr_r0 + ({q} >> 1) * {self.m_step} + ({q} & 1) * 8"

    def c_slot_element(self, q: str, k: str) -> str:
        """Element `k` (0 ... 2 tiles_n - 1) of the lane's elements in the row of slot `q`."""
        return f"(({q} >> 1) * {self.tiles_n} + (({k}) >> 1)) * 4 + ({q} & 1) * 2 + (({k}) & 1)"

    def c_a_register(self, i: str, k: str, x: str) -> str:
        """The element holding the low half of A register `x` (0 ... 3) of m16 tile `i` at the k
        offset `k` (a multiple of 16), in an operand fragment of 16-bit elements: registers 0 and 1
        are the row-g and row-(g + 8) pairs of the n8 tile k / 8, registers 2 and 3 those of the
        next one (the PTX ISA's A layout of m16n8k16 is its C layout, two n8 tiles side by side)."""
        return f"(({i}) * {self.tiles_n} + (({k}) >> 3) + (({x}) >> 1)) * 4 + (({x}) & 1) * 2"

    def a_register_element(self, i: int, k: int, x: int) -> int:
        """The model of c_a_register."""
        return (i * self.tiles_n + (k >> 3) + (x >> 1)) * 4 + (x & 1) * 2

    def c_a_register_elements(self, size: int, i: str, k: str, x: str) -> list[str]:
        """The elements packed (low to high) into A register `x` of m16 tile `i` at the k offset `k`,
        for an operand fragment of 4-byte (TF32) or 1-byte elements (see `pair_k`; 16-bit ones:
        c_a_register): TF32 (k8), one element: registers 0 and 2 the row-g pair of the n8 tile k / 8,
        1 and 3 its row-(g + 8) pair; 8-bit (k32), two pairs: registers 0 and 1 the row-g and
        row-(g + 8) pairs of the n8 tiles k / 8 and k / 8 + 1, registers 2 and 3 those of the next two."""
        assert size in (1, 4)
        if size == 4:
            return [f"(({i}) * {self.tiles_n} + (({k}) >> 3)) * 4 + (({x}) & 1) * 2 + (({x}) >> 1)"]
        tile = f"({i}) * {self.tiles_n} + (({k}) >> 3) + (({x}) >> 1) * 2"
        return [f"({tile} + {p}) * 4 + (({x}) & 1) * 2 + {h}" for p in (0, 1) for h in (0, 1)]

    def a_register_elements(self, size: int, i: int, k: int, x: int) -> list[int]:
        """The model of c_a_register_elements."""
        if size == 2:
            at = self.a_register_element(i, k, x)
            return [at, at + 1]
        if size == 4:
            return [(i * self.tiles_n + (k >> 3)) * 4 + (x & 1) * 2 + (x >> 1)]
        tile = i * self.tiles_n + (k >> 3) + (x >> 1) * 2
        return [(tile + p) * 4 + (x & 1) * 2 + h for p in (0, 1) for h in (0, 1)]

    def c_row_leader(self) -> str:
        """The one lane of the group that writes a row's value (the first lane of its quad, in the
        first of the warps that own the row's columns)."""
        if self.warps_n > 1:
            return f"tsr_warp % {self.warps_n} == 0 && (tsr_lane & 3) == 0"
        return "(tsr_lane & 3) == 0"

    def c_row_part(self) -> str:
        """The scratch row a warp writes its part of a row reduction to, where several warps own
        columns of the same rows (`warps_n` > 1; needs tsr_warp)."""
        return f"tsr_warp % {self.warps_n}"

    def slot_position(self, warp: int, lane: int, q: int) -> int:
        """The row of slot `q` of `lane` in `warp` (the model of c_slot_row)."""
        return self._warp_row0(warp) + (q >> 1) * self.m_step + (lane >> 2) + (q & 1) * 8

    # ---- column vectors (`tfrag(f32[1, N])`): a lane holds one *column slot* `p` per column it
    # holds (columns 2t and 2t + 1 of each n8 tile, slot 2 j + h); the 8 lanes with the same t hold
    # the same columns (COL_LANE_MASKS), and so does every warp that owns other rows of them
    @property
    def col_slots(self) -> int:
        """Column-vector elements each lane holds: one per column it holds."""
        return self.tiles_n * 2

    @property
    def col_parts(self) -> int:
        """Warps that own different rows of the same columns (the rows of a column's scratch)."""
        return self.warps_m

    def c_col_slot(self, e: str) -> str:
        """The column slot of the column of element `e`."""
        return f"(({e} >> 2) % {self.tiles_n}) * 2 + ({e} & 1)"

    def c_col_slot_col(self, p: str) -> str:
        """The column of column slot `p` (needs tsr_c0)."""
        return f"tsr_c0 + ({p} >> 1) * 8 + ({p} & 1)"

    def c_col_slot_element(self, p: str, k: str) -> str:
        """Element `k` (0 ... 2 tiles_m - 1) of the lane's elements in the column of slot `p`."""
        return f"((({k}) >> 1) * {self.tiles_n} + ({p} >> 1)) * 4 + (({k}) & 1) * 2 + ({p} & 1)"

    def c_col_part(self) -> str:
        """The scratch row a warp writes its part of a column reduction to (needs tsr_warp)."""
        return f"tsr_warp / {self.warps_n}"

    def c_col_leader(self) -> str:
        """The one lane of a warp that writes a column's value (group 0 of the 8 that hold it)."""
        return "(tsr_lane >> 2) == 0"

    def c_col_writer(self) -> str:
        """The one lane of the group that stores a column vector's value (every warp holds it)."""
        return f"tsr_warp < {self.warps_n} && {self.c_col_leader()}"

    def col_slot_position(self, warp: int, lane: int, p: int) -> int:
        """The column of slot `p` of `lane` in `warp` (the model of c_col_slot_col)."""
        return (warp % self.warps_n) * self.warp_n + (p >> 1) * MMA_N + 2 * (lane & 3) + (p & 1)


def pair_k(size: int, k: int) -> int:
    """The column (within one k step) that the A operand's k position `k` reads when A comes from an
    operand fragment of `size`-byte elements. Such a fragment keeps the accumulator layout (a lane
    holds the column pairs 2t, 2t + 1 of each n8 tile), which is the A layout of k16 for 16-bit
    elements (the identity), but not for TF32 (k8: a lane's k positions t, t + 4 are columns 2t,
    2t + 1) or 8-bit elements (k32: its positions 4t ... 4t + 3 are columns 2t, 2t + 1, 2t + 8,
    2t + 9, and 16 more for the second half). A sum over k is the same in any order of k, so tmma
    reads B's rows in this order instead of moving A's elements between lanes (device/mma.cuh, the
    `_pairs` loads); integer sums are exact, and f32 ones are those of another order of the same
    products, as the hardware's own order is unspecified."""
    if size == 2:
        return k
    if size == 4:
        return 2 * (k % 4) + k // 4
    half, pos = divmod(k, 16)
    t, q = divmod(pos, 4)
    return 16 * half + 2 * t + (q & 1) + 8 * (q >> 1)


OPERAND_TYPES = ("f16", "bf16", "i8", "u8")  # fragments that are only ever operands (f32 may be either)


def is_operand_fragment(elem: ScalarType) -> bool:
    return elem.name in OPERAND_TYPES


ROW_LANE_MASKS = (1, 2)  # lanes `lane ^ mask` hold the other columns of the lane's rows (a quad)
COL_LANE_MASKS = (4, 8, 16)  # lanes `lane ^ mask` hold the other rows of the lane's columns (in the warp)
REDUCTIONS = {"tmax": "max", "tmin": "min", "tsum": "+"}


def wgmma_division(m: int, n: int, warps: int) -> FragLayout | None:
    """The warpgroup MMA layout: warpgroup `g` owns rows g * R ... g * R + R - 1 (R = M / groups,
    a multiple of 64), as R / 64 blocks of m64; in each block, warp `w` of the group owns rows
    16 w ... 16 w + 15, its lanes holding them in the m16n8 layout over all N columns."""
    if warps % 4 or m % (WGMMA_M * (warps // 4)) or n % MMA_N:
        return None
    return FragLayout(m, n, warps, 1, True)


def whole_row_division(m: int, n: int, warps: int) -> FragLayout | None:
    """Each warp owns M / warps whole rows (the division of kernels with row vectors)."""
    if m % (MMA_M * warps) or n % MMA_N:
        return None
    return FragLayout(m, n, warps, 1)


def row_division(m: int, n: int, warps: int) -> FragLayout | None:
    """The division of kernels with row vectors or reductions: whole rows per warp where M allows,
    else the most warps along M that M allows (`WM` the largest divisor of the warp count with M a
    multiple of 16 WM: it depends on M alone, so fragments with the same row count share the
    row mapping), the other `WN` warps along N: a row is then spread over WN warps and a row
    reduction combines their parts through shared scratch (passes/frag_scratch.py)."""
    whole = whole_row_division(m, n, warps)
    if whole is not None:
        return whole
    wm = max(d for d in range(1, warps + 1) if warps % d == 0 and m % (MMA_M * d) == 0) if m % MMA_M == 0 else 0
    if not wm or n % (MMA_N * (warps // wm)):
        return None
    return FragLayout(m, n, wm, warps // wm)


def kernel_whole_rows(fn: object) -> bool:
    """Whether a lowered kernel divides its fragments into whole rows per warp: it has a row vector
    (a 1-D fragment) or a column vector, an operand fragment (f16/bf16/i8/u8, or an f32 fragment that is tmma's A: a
    warp's A rows with all of K) or a row reduction. The type checker decides the same from the syntax tree
    (checks/frag_vectors.py `uses_rows`)."""
    from tessera.transpile.lir import nodes as L  # noqa: PLC0415 (lir imports nothing from here; kept light)
    from tessera.transpile.lir.visit import all_exprs  # noqa: PLC0415

    assert isinstance(fn, L.Function)
    from tessera.transpile.lir.visit import statements  # noqa: PLC0415

    if any(b.space == "frag" and (len(b.shape) == 1 or is_column_vector_shape(b.shape) or is_operand_fragment(b.elem))
           for b in fn.buffers):
        return True
    frags = {b.name for b in fn.buffers if b.space == "frag"}
    if any(isinstance(s, L.Mma) and s.a.buf in frags for s in statements(fn.body)):
        return True  # an f32 fragment as tmma's A (TF32): a warp's rows with all of K
    return any(isinstance(e, L.Intrinsic) and e.op in REDUCTIONS for e in all_exprs(fn.body))


def is_column_vector_shape(shape: tuple[object, ...]) -> bool:
    """Whether a fragment buffer's shape is that of a column vector, `[1, N]` (spec section 14: the
    way this implementation declares one, `tfrag(f32[1, N])`)."""
    from tessera.transpile.lir import nodes as L  # noqa: PLC0415

    return len(shape) == 2 and isinstance(shape[0], L.Const) and shape[0].value == 1


def layout_of_buffer(fn: object, name: str) -> FragLayout:
    """The division of the fragment `name` of a lowered kernel (a row vector: that of its rows)."""
    from tessera.transpile.lir import nodes as L  # noqa: PLC0415

    assert isinstance(fn, L.Function)
    b = fn.buffer(name)
    assert b is not None and b.space == "frag"
    dims = [int(d.value) for d in b.shape if isinstance(d, L.Const)]
    warps = fn.tile_count // 32
    n = dims[1] if len(dims) == 2 else MMA_N
    if is_column_vector_shape(b.shape):  # the columns of the N-column fragments (any rows: whole rows per warp)
        dims[0] = WGMMA_M * (warps // 4) if fn.wgmma else MMA_M * warps
    if fn.wgmma:
        layout = wgmma_division(dims[0], n, warps)
    else:
        rows_first = kernel_whole_rows(fn) if fn.rows_first is None else fn.rows_first
        layout = row_division(dims[0], n, warps) if rows_first else choose(dims[0], dims[1], warps)
        if layout is None and len(dims) == 1:  # a row vector spread over several warps' columns
            layout = row_division(dims[0], n * warps, warps)
    assert layout is not None, "the type checker (checks/frags.py) reports fragments that no division fits"
    return layout


def divisions(m: int, n: int, warps: int) -> list[FragLayout]:
    """Every arrangement of `warps` warps whose blocks are whole m16 x n8 mma tiles."""
    out = []
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if m % (MMA_M * wm) == 0 and n % (MMA_N * wn) == 0:
            out.append(FragLayout(m, n, wm, warps // wm))
    return out


def choose(m: int, n: int, warps: int) -> FragLayout | None:
    """The division with the fewest operand elements loaded per k step (rows of A plus columns of
    B per warp), the squarest block among equals; None when none fits."""
    options = divisions(m, n, warps)
    if not options:
        return None
    return min(options, key=lambda d: (d.warp_m + d.warp_n, abs(d.warp_m - d.warp_n), d.warps_m))


def working_extents(warps: int) -> str:
    """What M and N must be multiples of, for each arrangement of `warps` warps."""
    parts = []
    for wm in range(1, warps + 1):
        if warps % wm == 0:
            parts.append(f"M of {MMA_M * wm} and N of {MMA_N * (warps // wm)} ({wm}x{warps // wm} warps)")
    return "; ".join(parts)


# ---- shared-memory operand layouts -------------------------------------------------------------

def operand_pad(elem: ScalarType, row: int, per_lane_cols: bool) -> int:
    """Padding (elements) for a shared operand array whose innermost dimension is `row` elements.

    `ldmatrix` reads 8 rows of 16 bytes per phase; they fall in distinct banks when the row stride
    is an odd number of 16-byte units. Operands read by per-lane loads along columns (TF32 and
    8-bit B[K, N]: lane (g, t) reads row t, column g) need a stride of 8 words modulo 32 instead,
    so that the 4 rows x 8 columns of one 32-bit load hit 32 distinct banks; 8-bit B[K, N] (lane
    (g, t) reads rows 4t..4t+3 of column g, a byte each) needs 2 words modulo 8, so that the
    rows 4t + q of one byte load fall 8 banks apart."""
    size = elem.size
    row_bytes = row * size
    if per_lane_cols:
        stride = row_bytes + (-row_bytes) % 4
        while not ((stride // 4) % 32 == 8 if size == 4 else (stride // 4) % 8 == 2):
            stride += 4
        return (stride - row_bytes) // size
    stride = row_bytes + (-row_bytes) % 16
    if (stride // 16) % 2 == 0:
        stride += 16
    return (stride - row_bytes) // size


def uses_ldmatrix(elem: ScalarType, role: str, trans_b: bool) -> bool:
    """Whether an operand is loaded with ldmatrix (`role` "a" or "b"): 16-bit operands always
    (B[K, N] with .trans), 8-bit A and transposed B; 32-bit (TF32) ones and 8-bit B[K, N] per lane."""
    if elem.size == 2:
        return True
    if elem.size == 1:
        return role == "a" or trans_b
    return False


def needs_column_pad(elem: ScalarType, role: str, trans_b: bool) -> bool:
    """Operands read per lane down columns (B[K, N] without ldmatrix)."""
    return role == "b" and not trans_b and not uses_ldmatrix(elem, role, trans_b)


def fragment_info(fn: object) -> list[str]:
    """`--info` lines for a lowered kernel: each fragment's warp division and the padding of the
    shared arrays its tmma reads."""
    from tessera.transpile.lir import nodes as L  # noqa: PLC0415 (lir imports nothing from here; kept light)

    assert isinstance(fn, L.Function)
    out = []
    for b in fn.buffers:
        if b.space == "frag" and len(b.shape) == 1:
            lay = layout_of_buffer(fn, b.name)
            out.append(f"{b.name}: a row vector of {lay.m} rows, {lay.slots} registers per tile")
        elif b.space == "frag" and is_column_vector_shape(b.shape):
            lay = layout_of_buffer(fn, b.name)
            out.append(f"{b.name}: a column vector of {lay.n} columns, {lay.col_slots} registers per tile")
        elif b.space == "frag":
            out.append(layout_of_buffer(fn, b.name).describe(b.name))
    if out and fn.wgmma:
        swizzled = ", ".join(f"{b.name} {b.swizzle}-byte" for b in fn.buffers if b.swizzle)
        out.append(f"tmma: warpgroup MMA (wgmma.mma_async); swizzled shared arrays: {swizzled}")
    if out:
        for b in fn.buffers:
            if b.space == "shared" and b.pad:
                how = "chosen by the compiler" if b.auto_pad else "pad= as written"
                out.append(f"{b.name}: rows padded by {b.pad} elements ({how})")
    return out


__all__ = ["COL_LANE_MASKS", "FragLayout", "MAX_PER_LANE", "MMA_KINDS", "MmaKind", "OPERAND_TYPES", "REDUCTIONS", "ROW_LANE_MASKS",
           "choose", "divisions", "fragment_info", "is_column_vector_shape", "is_operand_fragment", "kernel_whole_rows", "layout_of_buffer",
           "needs_column_pad", "operand_pad", "pair_k", "row_division", "uses_ldmatrix", "wgmma_division",
           "whole_row_division",
           "working_extents"]
