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

This module names the whole IR (`from tessera.transpile.lir import nodes as L`): it owns the
functions and modules (with the plans the planning passes attach to a function) and re-exports the
expressions and memory of lir/exprs.py and the statements of lir/stmts.py.
"""

from __future__ import annotations

import math

from tessera.base.dtypes import I32, ScalarType
from tessera.base.errors import Loc
from tessera.base.irnode import ir_node
from tessera.transpile.lir.exprs import (
    Affine,
    ArrayArg,
    Atomic,
    Binary,
    Buffer,
    Call,
    Cast,
    Collective,
    Compare,
    Const,
    Expr,
    Intrinsic,
    Load,
    Logical,
    Select,
    Unary,
    Value,
    Var,
    View,
    converted,
)
from tessera.transpile.lir.stmts import (
    CPU_LOOP_MODES,
    Alloc,
    Assert,
    Assign,
    AsyncCommit,
    AsyncWait,
    Barrier,
    Break,
    Continue,
    Copy,
    CopyPlan,
    Decl,
    ElementLoop,
    Eval,
    Fence,
    Fill,
    For,
    FragAssign,
    FragCombine,
    FragLoad,
    FragReduce,
    FragStore,
    If,
    Invoke,
    MbarInit,
    Mma,
    Print,
    Return,
    Stmt,
    Store,
    TmaCopy,
    VecMove,
    While,
)

# The IR's names, for `nodes as L`: those of exprs.py and stmts.py, and this module's own.
__all__ = [
    "Affine", "Alignment", "Alloc", "ArrayArg", "Assert", "Assign", "AsyncCommit", "AsyncWait", "Atomic",
    "Barrier", "Binary", "Break", "Buffer", "Call", "Cast", "Collective", "Compare", "Const", "Continue",
    "converted", "Copy", "CopyPlan", "CPU_LOOP_MODES", "Decl", "ElementLoop", "Eval", "Expr", "Fence",
    "Fill", "For", "FragAssign", "FragCombine", "FragLoad", "FragReduce", "FragStore", "Function", "If",
    "Intrinsic", "Invoke", "Load", "Logical", "MbarInit", "Mma", "Module", "NamedConst", "Param", "Print",
    "RegionPlan", "Return", "Select", "SharedLayout", "SharedSlot", "Stmt", "Store", "Table", "TmaCopy",
    "Unary", "Value", "Var", "VecMove", "View", "While",
]

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
    # Kernels with fragments: whether they divide them into rows first (frag_buffers.kernel_whole_rows
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
