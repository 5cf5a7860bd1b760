"""The lowered IR's expressions and memory (lir/nodes.py names the whole IR, and says what it is).

Every expression node has a scalar `dtype`; `Expr` is their union, and `converted` makes the explicit
`Cast` a conversion needs. A `Buffer` is a named piece of memory (a global tensor, shared array,
register array, fragment or constant table) that loads, stores and views refer to by name; a `View`
is a box of one, what a copy or a fragment statement moves.
"""

from __future__ import annotations

from tessera.base.dtypes import BOOL, ScalarType, round_to
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
