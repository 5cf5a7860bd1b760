"""The lowered IR: what the GPU does, explicitly, below the checked syntax tree.

Produced by the `lower` pass from the typed tree and printed to CUDA C by the printers of transpile/emit. Every node is
a frozen dataclass (`@ir_node`, tessera/base/irnode.py) with tuple children; every statement carries its
`.tsr` location. Compared with the syntax tree:
- every value has a scalar `dtype`, and every conversion is an explicit `Cast`: the operands of a
  `Binary` have its dtype (the right operand of a shift excepted), those of a `Compare` one type;
- names are resolved: `Var` is a scalar variable (a local, a parameter, a loop counter), `Const` a
  value (a literal, a module constant or const parameter keeps its `name` for the printer);
- memory is explicit: `Buffer`s (global tensors, shared arrays, register arrays, constant tables)
  are referred to by name from `Load`, `Store`, `Atomic`, `View` (for `Copy`) and `Alloc`, and an
  index is a tuple of per-dimension expressions, each with its `Affine` form where it has one (a
  sum of terms with constant coefficients, so that a pass can reason about contiguity and
  alignment; the C prints the index as written);
- synchronization and communication are nodes: `Barrier`, `Fence`, `Collective` (warp and group
  operations), `Atomic`, `Copy` (synchronous or asynchronous), `AsyncCommit`, `AsyncWait`;
  a tile's own vector access of a view is `VecMove`;
- tensor-core fragments (`frag` buffers, spread over the group's warps) have their own statements:
  `Mma`, `FragLoad`, `FragStore`, `FragAssign` (elementwise), `FragReduce` and `FragCombine` (a
  column reduction's parts across warps, through shared scratch);
- declarations are explicit (`Decl`; `Decl(init=None)` at the top of a body for a local that
  Python scoping makes visible after the block that assigns it), and `For` has its bounds.

f16/bf16 values are computed in f32: an operation whose dtype is f16 means "computed in f32 and
rounded to f16" (the printer emits the rounding), a `Load` of an f16 element gives its f32 value
and a `Store` to f16 memory rounds once.
"""

from __future__ import annotations

import math

from tessera.base.dtypes import BOOL, I32, ScalarType, round_to
from tessera.base.errors import Loc
from tessera.base.irnode import ir_node
from tessera.base.scalar_ops import convert

Value = int | float | bool

# ---- expressions ----------------------------------------------------------------------------


@ir_node
class Const:
    value: Value
    dtype: ScalarType
    name: str | None = None  # a module constant or const parameter of this value


@ir_node
class Var:
    name: str
    dtype: ScalarType


@ir_node
class Unary:
    op: str  # "-" | "~" | "not"
    x: Expr
    dtype: ScalarType


@ir_node
class Binary:
    op: str  # + - * / // % & | ^ << >>
    a: Expr
    b: Expr
    dtype: ScalarType


@ir_node
class Compare:
    op: str  # < <= > >= == !=
    a: Expr
    b: Expr
    dtype: ScalarType = BOOL


@ir_node
class Logical:
    op: str  # "and" | "or" (short-circuit)
    a: Expr
    b: Expr
    dtype: ScalarType = BOOL


@ir_node
class Select:
    cond: Expr
    a: Expr
    b: Expr
    dtype: ScalarType


@ir_node
class Cast:
    x: Expr
    dtype: ScalarType


@ir_node
class Affine:
    """An integer index with its affine form: `source` is the expression as written (what the C
    computes: rewriting signed arithmetic could overflow where the program does not), and its
    value is `sum(atom * coeff for atom, coeff in terms) + offset`, in `dtype` (for the passes that
    reason about how an address moves). affine.affine(source) derives the form."""

    terms: tuple[tuple[Expr, Const], ...]
    offset: Const
    dtype: ScalarType
    source: Expr


@ir_node
class Load:
    buf: str
    index: tuple[Expr, ...]
    dtype: ScalarType


@ir_node
class Intrinsic:
    """A builtin without side effects (indices, math): `op` names its entry in the builtin table."""

    op: str
    args: tuple[Expr, ...]
    dtype: ScalarType


@ir_node
class Collective:
    """A warp operation (the warp's 32 lanes) or a group reduction (the whole group)."""

    op: str
    args: tuple[Expr, ...]
    dtype: ScalarType


@ir_node
class Atomic:
    op: str  # atomic_add ... atomic_cas
    buf: str
    index: tuple[Expr, ...]
    args: tuple[Expr, ...]
    scope: str  # group | device | mesh
    dtype: ScalarType


@ir_node
class Call:
    """A call of a device function that returns a value (see `Invoke` for the others)."""

    func: str
    args: tuple[Expr, ...]
    dtype: ScalarType


@ir_node
class ArrayArg:
    """A whole buffer (a global tensor, a shared array, or an array parameter) passed for an array
    parameter of a device function; `dtype` is its element type. Only an argument of `Call`/`Invoke`."""

    buf: str
    dtype: ScalarType
    # A shared array that a tpipeline keeps several times: the stage passed (the pipeline-copies
    # pass sets it; one index, of the leading dimension it added).
    index: tuple[Expr, ...] = ()


Expr = Const | Var | Unary | Binary | Compare | Logical | Select | Cast | Affine | Load | Intrinsic | Collective \
    | Atomic | Call | ArrayArg


def converted(x: Expr, ty: ScalarType) -> Expr:
    """`x` converted to `ty`: `x` itself when it has that type, an unnamed literal's converted value
    (as the C converts the literal of its type), else an explicit `Cast`."""
    if x.dtype == ty:
        return x
    if isinstance(x, Const) and x.name is None:
        v = round_to(float(x.value), x.dtype) if x.dtype.is_float else x.value
        return Const(convert(v, x.dtype, ty), ty)
    return Cast(x, ty)

# ---- memory -----------------------------------------------------------------------------------


@ir_node
class Buffer:
    """A global tensor (a parameter), shared array, register array or constant table."""

    name: str
    space: str  # global | shared | regs | frag | const | ref (an array parameter of a device function)
    elem: ScalarType
    shape: tuple[Expr, ...]  # Const, or Var for shape symbols and size parameters
    loc: Loc
    mut: bool = False  # global tensors: may be stored to
    pad: int = 0       # shared arrays: elements of padding after each innermost row
    stages: int = 1    # shared arrays multi-buffered by a tpipeline: the leading dimension
    pipeline: Loc | None = None  # ... and the loop that does it
    auto_pad: bool = False  # shared arrays without pad=: the compiler may pad them (plan-fragments)
    swizzle: int = 0   # shared arrays read by wgmma: the swizzle mode (bytes) of their matrices (lir/swizzle.py)


@ir_node
class View:
    """A box of a buffer: per dimension its start, and its constant extent (None: an indexed
    dimension, dropped from the view). `checked`: whether an indexed dimension's start may be out
    of range (then the view is empty); False where the compiler made the index itself."""

    buf: str
    starts: tuple[Expr, ...]
    extents: tuple[int | None, ...]
    checked: bool = True
    # Per dimension, whether the start is proven non-negative, so that the printed access needs no
    # test against the buffer's lower edge (the plan-copies pass; empty before it).
    nonneg: tuple[bool, ...] = ()


# ---- statements ---------------------------------------------------------------------------------


@ir_node
class Decl:
    loc: Loc
    var: Var
    init: Expr | None
    const: bool = False  # a compiler temporary that never changes


@ir_node
class Assign:
    """`var = value`, or with `op`: `var = var op value` computed in `op_type`."""

    loc: Loc
    var: Var
    value: Expr
    op: str | None = None
    op_type: ScalarType | None = None


@ir_node
class Store:
    """`buf[index] = value`, or with `op`: `buf[index] = buf[index] op value` computed in `op_type`
    (the index evaluated once)."""

    loc: Loc
    buf: str
    index: tuple[Expr, ...]
    value: Expr
    op: str | None = None
    op_type: ScalarType | None = None


@ir_node
class Alloc:
    """Where a shared or register array is declared."""

    loc: Loc
    buf: str


@ir_node
class Fill:
    """Every element of a register array set to `value` (tregs' initial value)."""

    loc: Loc
    buf: str
    value: Expr


@ir_node
class If:
    loc: Loc
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]


# How region mode runs a loop of a kernel in the CPU backend's C (the plan-cpu-regions pass): once for
# the group with its body split into regions ("split": a loop with a barrier, or a uniform loop),
# or as each tile's own loop, the tiles' iterations interleaved ("interleaved": a stride loop;
# "lockstep": one whose stop and step are the same for every tile, so that where the tiles' counters
# are consecutive at run time each pass is a loop over a prefix of the tiles, the counter computed
# from the pass's base); "" where the loop is inside a region, or the kernel is not in region mode.
CPU_LOOP_MODES = ("", "split", "interleaved", "lockstep")


@ir_node
class While:
    loc: Loc
    cond: Expr
    body: tuple[Stmt, ...]
    cpu: str = ""  # one of CPU_LOOP_MODES


@ir_node
class For:
    """`for var in range(start, stop, step)` with the bounds evaluated once, before the loop;
    `unroll` for static_range."""

    loc: Loc
    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    unroll: bool = False
    stages: int | None = None  # a tpipeline loop, until the pipeline-copies pass expands it
    cpu: str = ""  # one of CPU_LOOP_MODES


@ir_node
class ElementLoop:
    """A map kernel's elements (spec section 8): the grid's tiles run `body` once for each of the
    `count` elements, `width` consecutive ones per tile and step (vectorize), the grid striding
    over the rest. In `body`, a `Load`/`Store` with the index `()` of a tensor is its element at
    the position being computed (of a tensor whose shape broadcasts to the map's, the element that
    position maps to); the aligned variant of the kernel
    (`Function.aligned`) moves whole steps of `width` elements with vector accesses."""

    loc: Loc
    count: Expr  # i64: the product of the map's dimensions
    width: int
    body: tuple[Stmt, ...]
    # The map's shape (the iteration space: the shape of the tensors it assigns). A tensor the body
    # reads may have another shape that broadcasts to it (spec section 15; lir/maps.py broadcast_dims).
    shape: tuple[Expr, ...] = ()
    # The plan-maps pass: the tensors whose elements the body reads before writing them (loaded
    # first) and those it writes, each in order of first use; and "f16"/"bf16" where the whole body
    # computes in that type with + - * and negation only, so that the aligned variant may compute
    # two elements at a time with pair instructions (None otherwise).
    read: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    pair: str | None = None


@ir_node
class Break:
    loc: Loc


@ir_node
class Continue:
    loc: Loc


@ir_node
class Return:
    """`return`, `return value`, or in a function with several results `return a, b` (`values`)."""

    loc: Loc
    value: Expr | None
    values: tuple[Expr, ...] = ()


@ir_node
class Barrier:
    loc: Loc


@ir_node
class Fence:
    loc: Loc
    scope: str


@ir_node
class CopyPlan:
    """How a copy moves its data (lir/copy_plan.py): in chunks of `vb` bytes (16, 8, 4 or the
    element size), testing each chunk's alignment at run time where it is not proven (`check`)."""

    vb: int
    check: bool


@ir_node
class TmaCopy:
    """A pipelined `tcopy_async` that the tensor memory accelerator can move on sm_90a (spec section
    16; lir/tma.py): one `cp.async.bulk.tensor` of the box `box` (one extent per dimension of the
    global tensor, outermost first; 1 where the view indexes the dimension) into the whole
    destination array (its stage, `staged`: the destination view's first start), completing on
    stage's mbarrier of the array `bar`. `active` (the plan-copies pass): this kernel variant moves
    it so (the aligned variant, whose tensors' strides are 16-byte multiples); else cp.async.
    `swizzle`: the destination is swizzled for a warpgroup MMA (lir/swizzle.py) in this mode (bytes):
    the tensor map swizzles, and one box moves each panel (its innermost extent `swizzle` bytes)."""

    bar: str
    box: tuple[int, ...]
    staged: bool
    active: bool = False
    swizzle: int = 0


@ir_node
class Copy:
    """The whole group copies `src` to `dst` (views of the same extents); `async_`: with cp.async
    (global to shared), landing when an `AsyncWait` covers the group of copies it belongs to."""

    loc: Loc
    dst: View
    src: View
    async_: bool = False
    plan: CopyPlan | None = None  # how the copy moves its data (the plan-copies pass)
    tma: TmaCopy | None = None    # sm_90a: a bulk tensor copy where the variant allows (pipeline-copies)


@ir_node
class VecMove:
    """Each tile moves its own register array `regs` (1-D) from (`store` False) or to (`store` True)
    a 1-D view of its extent (spec section 15), with accesses of `plan.vb` bytes; parts of the view
    outside the buffer read as zero and are not written."""

    loc: Loc
    regs: str
    view: View
    store: bool
    plan: CopyPlan | None = None  # the access width and alignment test (the plan-copies pass)


@ir_node
class Mma:
    """`acc += a @ b` (`b` a [K, N] view) or `acc += a @ transpose(b)` (`trans_b`, `b` [N, K]) on the
    tensor cores: the whole group, each warp computing its block of the fragment (lir/frag_layout.py),
    its operands read from shared memory (ldmatrix where the layout allows)."""

    loc: Loc
    acc: str
    a: View
    b: View
    trans_b: bool = False


@ir_node
class FragLoad:
    """Every element of the fragment `acc` from the element at its position in a view of the
    fragment's extents, converted (parts of the view outside the buffer read as zero)."""

    loc: Loc
    acc: str
    src: View


@ir_node
class FragStore:
    """The fragment `acc` to a view of its extents, converted to the view's element type (parts of
    the view outside the buffer are not written)."""

    loc: Loc
    dst: View
    acc: str


@ir_node
class FragAssign:
    """Every element of the fragment `acc` set to `value` (or with `op`: `acc op value` computed in
    `op_type`), where a `Load` of a fragment with the index `()` is its element at the same position."""

    loc: Loc
    acc: str
    value: Expr
    op: str | None = None
    op_type: ScalarType | None = None


@ir_node
class FragReduce:
    """A column reduction (`tsum(F, axis=0)`, spec section 14) into the column vector `dst`, each
    warp's part: every lane reduces its own elements of each column it holds, then the lanes of the
    warp that hold the same columns (xor shuffles, lir/frag_layout.py COL_LANE_MASKS). With `buf`
    (a `[parts, N]` shared scratch, passes/frag_scratch.py) one lane per warp and column writes the
    warp's part to its row of `buf` instead, for a `FragCombine` after a `Barrier`."""

    loc: Loc
    dst: str
    src: str
    op: str  # tmax | tmin | tsum
    buf: str = ""


@ir_node
class FragCombine:
    """Every lane combines the parts of a column reduction in the rows of the shared scratch `buf`
    (in row order) into its slots of the column vector `dst`."""

    loc: Loc
    dst: str
    buf: str
    op: str


@ir_node
class AsyncCommit:
    """Closes the tile's current group of asynchronous copies. `bar`: the pipeline's mbarriers
    (sm_90a): in a variant whose copies of that pipeline are bulk tensor copies there are no groups."""

    loc: Loc
    bar: str = ""


@ir_node
class AsyncWait:
    """Waits until at most `pending` committed groups of asynchronous copies are in flight, then,
    with `barrier`, acts as a `Barrier` (the copies become visible to the whole group). `bar`
    (sm_90a): in a variant whose pipeline copies are bulk tensor copies, the wait is instead for
    the current phase of mbarrier `bar[stage]` (none where `stage` is None: the drain)."""

    loc: Loc
    pending: int
    barrier: bool = True
    bar: str = ""
    stage: Expr | None = None


@ir_node
class MbarInit:
    """sm_90a, at the top of a kernel with a pipeline of bulk tensor copies: one thread initializes
    the `stages` mbarriers `bar` for `count` arrivals a phase (one per box a stage's copies move),
    then the group synchronizes. Prints nothing in a variant that moves the pipeline's copies with
    cp.async."""

    loc: Loc
    bar: str
    stages: int
    count: int


@ir_node
class Eval:
    """An expression evaluated for its effect (an atomic, a device function call)."""

    loc: Loc
    expr: Expr


@ir_node
class Invoke:
    """A call of a device function that returns nothing, or several values (into `outs`, locals
    declared before the call)."""

    loc: Loc
    func: str
    args: tuple[Expr, ...]
    outs: tuple[Var, ...] = ()


@ir_node
class Print:
    loc: Loc
    fmt: str
    args: tuple[Expr, ...]


@ir_node
class Assert:
    loc: Loc
    cond: Expr
    message: str


Stmt = Decl | Assign | Store | Alloc | Fill | If | While | For | ElementLoop | Break | Continue | Return | Barrier | Fence | Copy \
    | VecMove | Mma | FragLoad | FragStore | FragAssign | FragReduce | FragCombine | AsyncCommit | AsyncWait | MbarInit | Eval | Invoke | Print \
    | Assert

# ---- functions and modules -------------------------------------------------------------------------


@ir_node
class Param:
    """A parameter of the emitted function: a tensor (its buffer has the same name), a scalar, or
    a shape symbol (appended by the compiler, bound at launch from the arrays' shapes)."""

    name: str
    kind: str  # tensor | scalar | shape | array (a device function's array parameter, its buffer a `ref`)
    dtype: ScalarType
    loc: Loc


@ir_node
class NamedConst:
    name: str
    value: Value
    dtype: ScalarType
    loc: Loc


@ir_node
class Function:
    loc: Loc
    name: str
    kind: str  # kernel | device
    params: tuple[Param, ...]
    ret: ScalarType | None
    buffers: tuple[Buffer, ...]
    body: tuple[Stmt, ...]
    consts: tuple[NamedConst, ...] = ()   # const parameters of this variant
    tile: tuple[int, ...] = ()            # kernels: the group shape
    shared_budget: int | None = None
    launch_bounds: int | None = None
    # Kernels: the variant that assumes 16-byte-aligned copied tensors whose shape symbols are
    # multiples of 16 (transpile/lir/copy_plan.py), picked at launch where the arrays allow it.
    aligned: bool = False
    # An instance of a generic function (transpile/checks/generics.py): its type parameters' binding, which
    # its C name carries (`scale_T_f16`); `base_name`: the generic function's name where the
    # instance was renamed (`scale[T=f16]`; its C name starts from `base_name`).
    type_values: tuple[tuple[str, str], ...] = ()
    base_name: str = ""
    rets: tuple[ScalarType, ...] = ()     # device functions returning several values (`ret` is None)
    # Kernels with a generic and an aligned variant (the plan-alignment pass): what the aligned one
    # assumes, which a launch checks to pick it (both variants carry it); None: one variant only.
    alignment: Alignment | None = None
    # Kernels the CPU backend runs in region mode (the plan-cpu-regions pass); None: fiber mode.
    regions: RegionPlan | None = None
    # Kernels: where each shared array lives (the plan-shared pass; None before it).
    shared: SharedLayout | None = None
    # Kernels whose tmma statements are warpgroup MMAs (sm_90a; passes/plan_wgmma.py): every
    # fragment then has the wgmma layout (lir/frag_layout.py).
    wgmma: bool = False
    # Kernels with fragments: whether they divide them into rows first (frag_layout.kernel_whole_rows
    # of the program as lowered, which the type checker decided from the same program), decided
    # once by `lower` so that folding a reduction away cannot change a division; None: not decided.
    rows_first: bool | None = None

    @property
    def tile_count(self) -> int:
        return math.prod(self.tile)

    def buffer(self, name: str) -> Buffer | None:
        return next((b for b in self.buffers if b.name == name), None)


@ir_node
class Alignment:
    """What a kernel's aligned variant assumes: `tensors` start on a 16-byte boundary and the shape
    symbols `symbols` are multiples of 16."""

    tensors: tuple[str, ...]
    symbols: tuple[str, ...]


@ir_node
class SharedSlot:
    name: str
    offset: int
    nbytes: int


@ir_node
class SharedLayout:
    """Where a kernel's shared arrays of constant size live (transpile/lir/shared_layout.py): slots
    in declaration order, 16-byte aligned; arrays whose lifetimes a barrier separates may overlap
    (`shares`), and `total_bytes` is then the peak, not the sum."""

    slots: tuple[SharedSlot, ...]
    scratch_bytes: int      # for group reductions (static, outside the user's budget)
    total_bytes: int        # user allocations of constant size, padded and aligned
    dynamic: bool
    sized: tuple[str, ...] = ()  # launch-sized arrays, placed after `total_bytes` in this order

    def slot(self, name: str) -> SharedSlot:
        return next(s for s in self.slots if s.name == name)

    def sharing(self, name: str) -> tuple[str, ...]:
        """The arrays whose memory overlaps `name`'s."""
        a = self.slot(name)
        return tuple(s.name for s in self.slots
                     if s.name != name and s.offset < a.offset + a.nbytes and a.offset < s.offset + s.nbytes)

    @property
    def shares(self) -> bool:
        """Whether some arrays overlap (then they are all placed in one block of shared memory)."""
        return any(self.sharing(s.name) for s in self.slots)


@ir_node
class RegionPlan:
    """How region mode prints a kernel for the CPU backend (transpile/cpu/region_plan.py): the
    locals and register arrays kept in an array with an element per tile (name, C type of the
    element), the top-level locals computed again in each region that uses them (in program
    order), and whether the kernel returns early (then its body is one region); the locals with one
    value for the whole group kept once (name, C type), whose every assignment ends or leads its
    region and runs once after or before the region's loop over the tiles. Which loops run once for the group is marked
    on the loops (`For.cpu`, `While.cpu`)."""

    per_tile: tuple[tuple[str, str], ...]
    recomputed: tuple[str, ...]
    returns: bool = False
    group: tuple[tuple[str, str], ...] = ()


@ir_node
class Table:
    name: str
    elem: ScalarType
    shape: tuple[int, ...]
    values: tuple[Value, ...]
    loc: Loc

    def as_buffer(self) -> Buffer:
        """The table as the constant buffer that loads and copies read."""
        return Buffer(self.name, "const", self.elem, tuple(Const(d, I32) for d in self.shape), self.loc)


@ir_node
class Module:
    path: str
    consts: tuple[NamedConst, ...]
    tables: tuple[Table, ...]
    functions: tuple[Function, ...]

    @property
    def kernels(self) -> tuple[Function, ...]:
        return tuple(f for f in self.functions if f.kind == "kernel")

    def function(self, name: str) -> Function | None:
        return next((f for f in self.functions if f.name == name), None)
