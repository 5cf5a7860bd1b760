"""The lowered IR's statements (lir/nodes.py names the whole IR, and says what it is): scalar
assignments and stores, control flow, synchronization, copies, the tensor-core fragment statements
and calls; every statement carries its `.tsr` location. `Stmt` is their union.
"""

from __future__ import annotations

from tessera.base.dtypes import ScalarType
from tessera.base.errors import Loc
from tessera.base.irnode import ir_node
from tessera.transpile.lir.exprs import Expr, Var, View

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
