"""The IR: frozen dataclasses (`@ir_node`, tessera/base/irnode.py) with tuple children and a source
location on every node.

The front end builds these nodes from the parse tree; the passes up to `typecheck` map a
`Module` to a new `Module` (``dataclasses.replace``), filling in the fields that start empty:
folded constants (resolve-constants), const parameter values (specialize), kernel headers
(kernel-headers), and from the type checker only types: expression types (`ty`), parameter
types (`Param.ty`), what a name refers to (`Name.ref`), which assignments declare a local
(`Assign.declares`). Everything derived from a typed tree (hoisting, shared-memory layout, C
names) is computed by analyses of the lowered IR (transpile/lir/hoist.py, shared_layout.py,
cnames.py), never stored here. `lower` then turns the typed tree into the lowered IR of `tessera.transpile.lir.nodes`.

This module names the whole syntax tree (`from tessera.frontend import nodes as N`): it owns the
statements and the module's items (constants, tables, functions and their parameters and headers)
and re-exports the expressions and their types of frontend/exprs.py.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TypeVar

from tessera.base.dtypes import ScalarType
from tessera.base.errors import Loc
from tessera.base.irnode import ir_node
from tessera.frontend.exprs import (
    STR,
    VOID,
    ArrayType,
    Attr,
    BinOp,
    BoolLit,
    BoolOp,
    Call,
    Compare,
    Expr,
    FloatLit,
    Index,
    IntLit,
    Keyword,
    ListLit,
    Name,
    Slice,
    StrLit,
    StrType,
    TensorType,
    Ternary,
    TupleLit,
    TupleType,
    Type,
    Unary,
    ViewType,
    VoidType,
)

# ---- statements ----------------------------------------------------------------------


@ir_node
class Assign:
    loc: Loc
    target: Expr
    value: Expr
    annotation: str | None = None
    annotation_loc: Loc | None = None
    declares: bool = False
    # A tuple assignment (`a, b = b, a`; the target is a TupleLit): which targets it declares.
    declares_each: tuple[bool, ...] = ()


@ir_node
class AugAssign:
    loc: Loc
    target: Expr
    op: str  # without '='
    value: Expr


@ir_node
class ExprStmt:
    loc: Loc
    expr: Expr


@ir_node
class If:
    loc: Loc
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]


@ir_node
class While:
    loc: Loc
    cond: Expr
    body: tuple[Stmt, ...]


@ir_node
class For:
    loc: Loc
    var: str
    iter: Expr  # the call: range / static_range / tpipeline
    body: tuple[Stmt, ...]
    var_ty: ScalarType | None = None
    step_value: int | None = None  # the step when it is a compile-time constant
    stages: int | None = None  # tpipeline: the number of buffers of each pipelined copy
    var_loc: Loc | None = None  # where the loop variable is written (its name's errors point there)


@ir_node
class Break:
    loc: Loc


@ir_node
class Continue:
    loc: Loc


@ir_node
class Return:
    loc: Loc
    value: Expr | None


@ir_node
class Pass:
    loc: Loc


Stmt = Assign | AugAssign | ExprStmt | If | While | For | Break | Continue | Return | Pass

# ---- module items --------------------------------------------------------------------


@ir_node
class ConstDef:
    loc: Loc
    name: str
    value: Expr
    folded: int | float | bool | None = None


@ir_node
class TableDef:
    loc: Loc
    name: str
    elem: str
    elem_loc: Loc
    dims: tuple[Expr, ...]
    values: tuple[Expr, ...]
    shape: tuple[int, ...] = ()
    folded: tuple[int | float | bool, ...] = ()


@ir_node
class Param:
    loc: Loc
    name: str
    qual: str  # "" | "mut" | "const"
    type_name: str
    type_loc: Loc
    dims: tuple[Expr, ...] | None
    default: Expr | None
    ty: Type | None = None     # set by typecheck
    frag: bool = False         # `S: mut frag f32[BM, BN]`: a fragment (the function is inlined)


@ir_node
class TypeParam:
    """An element-type parameter `T` (or `T: (f16, f32)`, `allowed` naming the types it may take)."""

    loc: Loc
    name: str
    allowed: tuple[str, ...] | None = None
    allowed_locs: tuple[Loc, ...] = ()


@ir_node
class Decorator:
    loc: Loc
    name: str
    args: tuple[Expr, ...] | None          # @name(args) form
    kwargs: tuple[Keyword, ...]
    clauses: tuple[Call, ...]              # tile[...] is a Call whose func is Name("tile")


@ir_node
class KernelConfig:
    """The kernel header, evaluated."""

    tile: tuple[int, ...]
    shared_budget: int | None
    vectorize: int | None
    launch_bounds: int | None

    @property
    def tile_count(self) -> int:
        return math.prod(self.tile)


@ir_node
class FuncDef:
    loc: Loc
    name: str
    params: tuple[Param, ...]
    ret: str | None
    ret_loc: Loc | None
    body: tuple[Stmt, ...]
    decorators: tuple[Decorator, ...]
    kind: str = ""                   # kernel | device (set by the kernel-headers pass)
    config: KernelConfig | None = None  # the evaluated kernel header (kernel-headers pass)
    const_values: tuple[tuple[str, int | float | bool], ...] = ()  # this variant's const parameters (specialize)
    type_params: tuple[TypeParam, ...] = ()  # `def f[T, U: (f16, f32)]`
    # An instance of a generic function (specialize for kernels, typecheck for device functions): the
    # types bound to its type parameters, which it no longer has, and the generic function's name when
    # the instance was renamed (`f[T=f32]`: a device function instance, or one of several kernel instances).
    type_values: tuple[tuple[str, str], ...] = ()
    base_name: str = ""
    rets: tuple[str, ...] = ()          # a device function returning several values: their types
    rets_locs: tuple[Loc, ...] = ()

    @property
    def is_map(self) -> bool:
        """A map kernel (section 8): a kernel with a whole-tensor statement (`Z[:] = ...`; typed, the
        target is the element `Index(Z, ())`). A fragment's elementwise statement (`acc[:] = ...`, where
        `acc = tfrag(...)` at the top level) does not make one, nor does a per-tile vector access
        (`r[:] = X[i, j:j + 8]`, `Y[i, j:j + 8] = r`, where `r = tregs(...)` at the top level)."""
        arrays = {s.target.id: s.value.func.id for s in self.body if isinstance(s, Assign)
                  and isinstance(s.target, Name) and isinstance(s.value, Call) and isinstance(s.value.func, Name)
                  and s.value.func.id in ("tfrag", "tregs")}
        params = {p.name for p in self.params}  # beside fragments, a typo (G[:] = ...) makes none either
        return any(isinstance(s, (Assign, AugAssign)) and is_whole_tensor(s.target)
                   and not (isinstance(s.target, Index) and isinstance(s.target.base, Name) and (
                       s.target.base.id in arrays or bool(arrays) and s.target.base.id not in params))
                   and not (isinstance(s, Assign) and arrays.get(_array_named(s.value)) == "tregs")
                   for s in self.body)

    @property
    def is_kernel(self) -> bool:
        """Decorated `@kernel` (known from parsing on; `kind` is set by the kernel-headers pass)."""
        return any(d.name == "kernel" for d in self.decorators)


Item = ConstDef | TableDef | FuncDef


def _array_named(e: Expr) -> str:
    """The name of a whole array: `r`, or typed as a view, `Index(r, ())`; "" for anything else."""
    if isinstance(e, Index) and not e.indices:
        e = e.base
    return e.id if isinstance(e, Name) else ""


def is_whole_tensor(target: Expr) -> bool:
    """`Z[:]` (any slices, before typing) or the element of a map tensor (typed)."""
    return isinstance(target, Index) and (not target.indices or any(isinstance(i, Slice) for i in target.indices))


@ir_node
class Module:
    path: str
    items: tuple[Item, ...]

    @property
    def kernels(self) -> tuple[FuncDef, ...]:
        return tuple(i for i in self.items if isinstance(i, FuncDef) and i.kind == "kernel")


_N = TypeVar("_N")
_FIELD_NAMES: dict[type, frozenset[str]] = {}


def replace(node: _N, **changes: object) -> _N:
    """`dataclasses.replace` for the IR's frozen nodes, about three times faster (the type checker
    and the passes copy thousands of nodes per compile): the nodes have no `__post_init__` and
    no fields outside `__init__`, so copying the instance dictionary is the same as rebuilding."""
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    if not names.issuperset(changes):
        raise TypeError(f"{cls.__name__} has no field {sorted(set(changes) - names)[0]!r}")
    new = object.__new__(cls)
    new.__dict__.update(node.__dict__)
    new.__dict__.update(changes)
    return new


__all__ = [
    "ArrayType", "Assign", "Attr", "AugAssign", "BinOp", "BoolLit", "BoolOp", "Break", "Call", "Compare",
    "ConstDef", "Continue", "Decorator", "Expr", "ExprStmt", "FloatLit", "For", "FuncDef", "If", "Index",
    "IntLit", "Item", "KernelConfig", "Keyword", "ListLit", "Module", "Name", "Param", "Pass", "Return",
    "STR", "Slice", "Stmt", "StrLit", "StrType", "TableDef", "TensorType", "Ternary", "TupleLit", "TupleType",
    "Type", "TypeParam", "Unary", "VOID", "ViewType", "VoidType", "While", "is_whole_tensor", "replace",
]
