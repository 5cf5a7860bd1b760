"""The syntax tree's expressions and the types the type checker gives them (re-exported by
frontend/nodes.py, which names the whole tree): literals, names, operators, calls, indexing and
slices, each with its source location and its type (`ty`, empty until `typecheck` fills it in), and
the types of values that are not scalars (tensors, arrays, views of them, a device function's
several results, strings, nothing)."""

from __future__ import annotations

from tessera.base.dtypes import ScalarType
from tessera.base.errors import Loc
from tessera.base.irnode import ir_node

# ---- types of expressions that are not scalars ----------------------------------------


@ir_node
class TensorType:
    elem: ScalarType
    dims: tuple[Expr, ...]
    mut: bool


@ir_node
class ArrayType:
    """A shared-memory or register array with constant dimensions; a shared array's dimension may
    also be the name of an integer scalar parameter (its size is set at launch)."""

    elem: ScalarType
    shape: tuple[int | str, ...]
    space: str  # "shared" | "regs" | "const"
    pad: int = 0


@ir_node
class ViewType:
    """A rectangular slice of a tensor or shared array (argument of tcopy)."""

    base: TensorType | ArrayType
    extents: tuple[int, ...]   # one per sliced dimension (indexed dims dropped)


@ir_node
class TupleType:
    """The values of a call of a device function that returns several (`-> (f32, i32)`)."""

    items: tuple[ScalarType, ...]


@ir_node
class StrType:
    pass


@ir_node
class VoidType:
    pass


Type = ScalarType | TensorType | ArrayType | ViewType | TupleType | StrType | VoidType
STR = StrType()
VOID = VoidType()

# ---- expressions ---------------------------------------------------------------------


@ir_node
class Name:
    loc: Loc
    id: str
    ty: Type | None = None
    ref: str | None = None  # local | param | shape | const | table | shared | regs | builtin | loopvar


@ir_node
class IntLit:
    loc: Loc
    value: int
    ty: Type | None = None


@ir_node
class FloatLit:
    loc: Loc
    value: float
    ty: Type | None = None


@ir_node
class BoolLit:
    loc: Loc
    value: bool
    ty: Type | None = None


@ir_node
class StrLit:
    loc: Loc
    value: str
    ty: Type | None = None


@ir_node
class BinOp:
    loc: Loc
    op: str  # + - * / // % & | ^ << >>
    left: Expr
    right: Expr
    ty: Type | None = None


@ir_node
class Compare:
    loc: Loc
    ops: tuple[str, ...]
    operands: tuple[Expr, ...]
    ty: Type | None = None


@ir_node
class BoolOp:
    loc: Loc
    op: str  # and | or
    left: Expr
    right: Expr
    ty: Type | None = None


@ir_node
class Unary:
    loc: Loc
    op: str  # - + ~ not
    operand: Expr
    ty: Type | None = None


@ir_node
class Ternary:
    loc: Loc
    cond: Expr
    then: Expr
    orelse: Expr
    ty: Type | None = None


@ir_node
class Keyword:
    loc: Loc
    name: str
    value: Expr


@ir_node
class Call:
    loc: Loc
    func: Expr
    args: tuple[Expr, ...]
    kwargs: tuple[Keyword, ...] = ()
    ty: Type | None = None


@ir_node
class Slice:
    loc: Loc
    lo: Expr | None
    hi: Expr | None
    ty: Type | None = None


@ir_node
class Index:
    loc: Loc
    base: Expr
    indices: tuple[Expr, ...]  # Slice allowed only in views and whole-tensor targets (`Z[:]`);
    # typed, `()` on a tensor of a map kernel: its element at the position being computed
    ty: Type | None = None


@ir_node
class Attr:
    loc: Loc
    base: Expr
    name: str
    ty: Type | None = None


@ir_node
class TupleLit:
    loc: Loc
    items: tuple[Expr, ...]
    ty: Type | None = None


@ir_node
class ListLit:
    loc: Loc
    items: tuple[Expr, ...]
    ty: Type | None = None


Expr = Name | IntLit | FloatLit | BoolLit | StrLit | BinOp | Compare | BoolOp | Unary | Ternary | Call | Slice | Index | Attr | TupleLit | ListLit

__all__ = ["ArrayType", "Attr", "BinOp", "BoolLit", "BoolOp", "Call", "Compare", "Expr", "FloatLit", "Index", "IntLit", "Keyword", "ListLit", "Name", "STR", "Slice", "StrLit", "StrType", "TensorType", "Ternary", "TupleLit", "TupleType", "Type", "Unary", "VOID", "ViewType", "VoidType"]
