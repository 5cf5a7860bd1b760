"""Type checking of row and column vectors, reductions and broadcasts in whole-fragment statements
(spec section 14): `m = tfrag(f32[BM], -inf)`, `m[:] = max(m, tmax(S, axis=1))`, `S[:] = S - m[:, None]`,
`acc[:] = acc + bias[n0:n0 + BN][None, :]`; column vectors `c = tfrag(f32[1, BN], 0.0)`,
`c[:] = c + tsum(S, axis=0)`, `S[:] = S / c[None, :]`.

Before:  S[:] = S - tmax(S, axis=1)[:, None] + b[n0:n0 + 64][None, :]
After:   Assign(Index(S, ()), S - Call(tmax, (Index(S, ()), 1)) + (b[n0 + col_index()] if 0 <= n0 + col_index()
         and n0 + col_index() < N else 0.0))

A whole-fragment statement is checked in a *context*: `full` (a 2-D statement, every element of the
fragment), `rows` (a row-vector statement, or the inside of `[:, None]`: one value per row) or
`cols` (a column-vector statement, or the inside of `[None, :]`: one value per column). The broadcasts are only checks: the printer
computes every element where it is held, so a row vector read in a 2-D statement is the slot of the
element's row, and a 1-D view of memory is read at the element's row or column (the guarded load
above: parts outside the tensor read as zero). A reduction's argument may be an elementwise
expression of 2-D fragments (`tsum(S * S, axis=1)`, Triton's `tl.sum(x * x, axis=1)`): it is checked
as the value of a 2-D statement of the shape of the fragments it reads and converted to f32 (i32),
as if assigned to a temporary fragment, which lowering makes (passes/frag_temps.py).
`FragVectors` is a helper of frags.Fragments.

Also the rest of section 14 that frags.Fragments asks about: operand fragments (f16, bf16, i8, u8
elements, or f32 as tmma's first operand: `operand_rows`), the element types a fragment may have,
what tmma takes from registers, and a fragment assigned to a fragment of another type.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from tessera.base.dtypes import F32, I32, SCALARS, ScalarType
from tessera.base.errors import Loc
from tessera.frontend import nodes as N
from tessera.transpile.checks.callgraph import tree_children, walk
from tessera.transpile.checks.expr import type_name
from tessera.transpile.checks.rules import check_arity, typed_call
from tessera.transpile.checks.scope import Sym
from tessera.transpile.lir.frag_layout import (
    MMA_M,
    MMA_N,
    OPERAND_TYPES,
    REDUCTIONS,
    FragLayout,
    row_division,
    whole_row_division,
)

if TYPE_CHECKING:
    from tessera.base.errors import DiagnosticSink
    from tessera.transpile.checks.frags import Fragments


def takes_fragments(sym: Sym) -> bool:
    """Whether a function's symbol is one of a device function that takes fragments (generic or not)."""
    return sym.ref == "func" and (bool(sym.extra.get("inline")) or bool(sym.extra.get("generic"))
                                  and any(p.frag for p in sym.extra["def"].params))


def inline_functions(module_syms: Mapping[str, Sym]) -> dict[str, N.FuncDef]:
    """The device functions (by name) that take fragments and are inlined."""
    return {k: s.extra["def"] for k, s in module_syms.items() if takes_fragments(s)}


def _calls(fn: N.FuncDef, inline: Mapping[str, N.FuncDef]) -> Iterator[tuple[N.Call, str, N.FuncDef]]:
    """Every call of a name in a kernel's body and in the bodies of the functions `inline` it calls
    (once each), with the name and the function whose body holds it."""
    stack: list[tuple[object, N.FuncDef]] = [(x, fn) for x in fn.body]
    seen: set[str] = set()
    while stack:
        n, owner = stack.pop()
        if isinstance(n, N.Call) and isinstance(n.func, N.Name):
            yield n, n.func.id, owner
            if n.func.id in inline and n.func.id not in seen:
                seen.add(n.func.id)
                stack.extend((x, inline[n.func.id]) for x in inline[n.func.id].body)
        stack.extend((x, owner) for x in tree_children(n))


def _inline_register_operand(n: N.Call, name: str, owner: N.FuncDef, fn: N.FuncDef) -> bool:
    """Whether `n` is a tmma in an inlined function `owner` whose first operand is one of its
    fragment parameters (an operand fragment of the kernel `fn` once inlined: frags.operand_rows)."""
    return name == "tmma" and owner is not fn and len(n.args) > 1 and isinstance(n.args[1], N.Name) \
        and any(p.name == n.args[1].id and p.frag for p in owner.params)


def uses_rows(fn: N.FuncDef, inline: Mapping[str, N.FuncDef]) -> bool:
    """Whether a kernel divides its fragments into rows first (frag_layout.row_division): it declares
    a row or column vector or an operand fragment, or reduces, itself or in the bodies of the
    functions `inline` it calls, or one of those takes tmma's first operand from a fragment parameter
    (the same decision as frag_buffers.kernel_whole_rows on the lowered kernel, where they are
    inlined; the kernel's own tmma: operand_rows)."""
    for n, name, owner in _calls(fn, inline):
        if name in REDUCTIONS or _inline_register_operand(n, name, owner, fn):
            return True
        spec = n.args[0] if name == "tfrag" and n.args else None
        if isinstance(spec, N.Index) and (len(spec.indices) == 1 or isinstance(spec.base, N.Name)
                                          and spec.base.id in ("f16", "bf16") or is_column_spec(spec)):
            return True  # a row or column vector, or an operand fragment (each warp's A rows, all of K)
    return False


def strict_rows(fn: N.FuncDef, inline: Mapping[str, N.FuncDef]) -> bool:
    """Whether a kernel must give every warp whole rows of every fragment whatever the row counts:
    it declares an operand fragment (f16, bf16, i8, u8) or a column vector, reduces columns, or
    takes tmma's first operand from a fragment parameter of an inlined function (the kernel's own
    tmma: operand_rows). Other kernels with row vectors or row reductions may spread rows
    over several warps where the row count needs it (frag_layout.row_division)."""
    for n, name, owner in _calls(fn, inline):
        axis = n.args[1] if len(n.args) > 1 else next((k.value for k in n.kwargs if k.name == "axis"), None)
        if name in REDUCTIONS and isinstance(axis, N.IntLit) and axis.value == 0:
            return True
        spec = n.args[0] if name == "tfrag" and n.args else None
        if isinstance(spec, N.Index) and (is_column_spec(spec) or isinstance(spec.base, N.Name)
                                          and spec.base.id in OPERAND_TYPES):
            return True
        if _inline_register_operand(n, name, owner, fn):
            return True
    return False


def is_column_spec(spec: N.Index) -> bool:
    """`T[1, N]` in `tfrag(T[1, N])`: a column vector (the way this implementation declares one)."""
    return len(spec.indices) == 2 and isinstance(spec.indices[0], N.IntLit) and spec.indices[0].value == 1


def _is_none(e: N.Expr) -> bool:
    return isinstance(e, N.Name) and e.id == "None"


def _is_all(e: N.Expr) -> bool:
    return isinstance(e, N.Slice) and e.lo is None and e.hi is None


# ---- operand fragments (spec section 14)

ACCUMULATORS = ("f32", "i32")
REGISTER_A = (*OPERAND_TYPES, "f32")  # what tmma takes as A from registers (f32: as TF32)
MIXED_8BIT = {"i8", "u8"}  # 8-bit operands may differ in signedness (.s8.u8, .u8.s8)


def operand_rows(fn: N.FuncDef) -> bool:
    """Whether a kernel has an operand fragment: one of an operand-only type (f16, bf16, i8, u8) or
    a fragment that some tmma takes as its first operand (each warp then owns whole rows)."""
    frags: set[str] = set()
    firsts: set[str] = set()
    stack: list[object] = list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, N.Assign) and isinstance(n.target, N.Name) and isinstance(n.value, N.Call) \
                and isinstance(n.value.func, N.Name) and n.value.func.id == "tfrag":
            frags.add(n.target.id)
            spec = n.value.args[0] if n.value.args else None
            if isinstance(spec, N.Index) and isinstance(spec.base, N.Name) and spec.base.id in OPERAND_TYPES:
                return True
        if isinstance(n, N.Call) and isinstance(n.func, N.Name) and n.func.id == "tmma" and len(n.args) > 1 \
                and isinstance(n.args[1], N.Name):
            firsts.add(n.args[1].id)
        stack.extend(tree_children(n))
    return bool(frags & firsts)


def fragment_type_error(elem: ScalarType) -> str | None:
    """Why `elem` cannot be a fragment's element type, or None."""
    if elem.name in ACCUMULATORS or elem.name in OPERAND_TYPES:
        return None
    return (f"a fragment accumulates in f32 (for f16, bf16 or f32 inputs) or i32 (for i8 or u8 inputs), or is "
            f"an f16, bf16, i8 or u8 operand, not {elem}")


def register_operand_error(elem: ScalarType, name: str, frag: str) -> str | None:
    """Why the fragment `frag` of `elem` cannot be tmma's first operand, or None."""
    if elem.name in REGISTER_A:
        return None
    return (f"the first operand of {name}() from registers is an operand fragment (f16, bf16, i8, u8, or f32 "
            f"for TF32); '{frag}' is a fragment of {elem} (convert it first: X = tfrag(i8[M, K]); X[:] = {frag})")


def operand_types_match(a: ScalarType, b: ScalarType) -> bool:
    return a == b or {a.name, b.name} == MIXED_8BIT


def is_fragment_conversion(target: N.Expr, value: N.Expr, frag_names: set[str]) -> bool:
    """Whether `F[:] = G` assigns a fragment to a fragment (of another element type, converting as C
    converts, without a cast: spec section 14); `frag_names` are the fragments in scope."""
    return isinstance(target, N.Index) and target.base.ty is not None and isinstance(target.base, N.Name) \
        and target.base.id in frag_names and isinstance(value, N.Name) and value.id in frag_names


def check_not_aliased(sink: DiagnosticSink, e: N.Call, name: str) -> bool:
    """tmma's first operand from registers is not its accumulator (it is read while acc is written)."""
    acc, a = e.args[0], e.args[1]
    if isinstance(acc, N.Name) and isinstance(a, N.Name) and acc.id == a.id:
        sink.error(a.loc, f"the first operand of {name}() is its accumulator '{a.id}'; copy it to another fragment "
                   f"first (A = tfrag(f32[M, K]); A[:] = {a.id})")
        return False
    return True


class FragVectors:
    """Row vectors, reductions and broadcasts for frags.Fragments (which holds the context)."""

    def __init__(self, frags: Fragments) -> None:
        self.frags = frags
        self.sink = frags.sink
        self.spread_at: Loc | None = None  # the first fragment whose rows are spread over several warps
        self.columns = False  # a column vector was declared (then every warp owns whole rows)

    def broadcast(self, e: N.Index) -> N.Expr | None:
        """`v[:, None]` or `v[None, :]` in a 2-D statement, and a 1-D view of memory in a row or
        column context, as the value of the element being computed; None for other indexing."""
        fr = self.frags
        shape, kind = fr.frag_shape, fr.frag_kind
        if shape is None:
            return None
        if len(e.indices) == 2 and (_is_none(e.indices[1]) and _is_all(e.indices[0])
                                    or _is_none(e.indices[0]) and _is_all(e.indices[1])):
            along = "rows" if _is_none(e.indices[1]) else "cols"
            if kind != "full" or len(shape) != 2:
                self.sink.error(e.loc, "a broadcast (v[:, None] or v[None, :]) belongs in a statement that assigns a "
                                "2-D fragment")
                return N.replace(e, ty=None)
            return fr.in_context((shape[0],) if along == "rows" else (shape[1],), along,
                                 lambda: fr.exprs.scalar_expr(e.base, "value"))
        if kind in ("rows", "cols") and sum(isinstance(i, N.Slice) for i in e.indices) == 1:
            return self.view_element(e, kind, shape[0])
        return None

    def view_element(self, e: N.Index, kind: str, extent: int | str) -> N.Expr:
        """A 1-D view of global or shared memory, read at the element's row or column."""
        fr = self.frags
        view = fr.fc.memory.view(e, "a broadcast", "value")
        if view is None:
            return N.replace(e, ty=None)
        assert isinstance(view.ty, N.ViewType)
        if view.ty.extents != (extent,):
            self.sink.error(e.loc, f"this view has the extent {view.ty.extents[0]}, but the fragment has {extent} "
                            f"{'rows' if kind == 'rows' else 'columns'}")
            return N.replace(e, ty=None)
        elem = view.ty.base.elem
        if elem.kind == "bool":
            self.sink.error(e.loc, "a broadcast view holds numbers, not bool elements")
            return N.replace(e, ty=None)
        base = view.base
        dims = base.ty.dims if isinstance(base.ty, N.TensorType) else \
            tuple(N.IntLit(e.loc, int(d)) for d in base.ty.shape) if isinstance(base.ty, N.ArrayType) else ()
        loc = e.loc
        coord = N.Call(loc, N.Name(loc, "row_index" if kind == "rows" else "col_index"), ())
        index: list[N.Expr] = []
        inside: list[N.Expr] = []
        for i, d in zip(e.indices, dims):
            pos = (coord if i.lo is None else N.BinOp(loc, "+", i.lo, coord)) if isinstance(i, N.Slice) else i
            index.append(pos)
            if not (isinstance(i, N.Slice) and i.lo is None):
                inside.append(N.Compare(loc, ("<=",), (N.IntLit(loc, 0), pos)))
            inside.append(N.Compare(loc, ("<",), (pos, d)))
        guard = inside[0]
        for c in inside[1:]:
            guard = N.BoolOp(loc, "and", guard, c)
        zero: N.Expr = N.FloatLit(loc, 0.0) if elem.is_float else N.IntLit(loc, 0)
        return fr.exprs.scalar_expr(N.Ternary(loc, guard, N.Index(loc, e.base, tuple(index)), zero), "value")

    # ---- tmax(F, axis=1), tmin, tsum
    def rule_reduce(self, e: N.Call, name: str) -> N.Expr:
        fr = self.frags
        if not check_arity(self.sink, e, name, 1, 2, ("axis",)):
            return e
        axis_node = e.args[1] if len(e.args) == 2 else next((k.value for k in e.kwargs if k.name == "axis"), None)
        if axis_node is None:
            self.sink.error(e.loc, f"{name}() needs the axis it reduces: {name}(F, axis=1) for a row vector")
            return e
        axis = fr.scope.const_int(axis_node, f"the axis of {name}()", 0, 1)
        if axis is None:
            return e
        kind, what, other = ("rows", "row", "m[:]") if axis == 1 else ("cols", "column", "c[:]")
        if fr.frag_shape is None or fr.frag_kind != kind:
            bcast = "[:, None]" if axis == 1 else "[None, :]"
            self.sink.error(e.loc, f"{name}(F, axis={axis}) is a {what} vector: use it in a {what}-vector statement "
                            f"({other} = {name}(F, axis={axis})) or broadcast it ({name}(F, axis={axis}){bcast})")
            return e
        if not isinstance(e.args[0], N.Name):  # an elementwise expression: tsum(S * S, axis=1)
            arg = reduced_expression(fr, e.args[0], name, axis)
            if arg is None or arg.ty is None:
                return e
            assert isinstance(arg.ty, ScalarType)
            return typed_call(e, name, (arg, N.IntLit(axis_node.loc, axis, SCALARS["i32"])), arg.ty)
        f = fr.fragment(e.args[0], name, "first argument")
        if f is None:
            return e
        assert isinstance(f.ty, N.ArrayType)
        extent = f.ty.shape[1 - axis] if len(f.ty.shape) == 2 else None
        if len(f.ty.shape) != 2 or f.ty.shape[0] == 1 or extent != fr.frag_shape[0]:
            self.sink.error(e.args[0].loc, f"{name}() reduces a 2-D fragment of {fr.frag_shape[0]} {what}s here, not "
                            f"a {list(f.ty.shape)} one")
            return e
        element = N.Index(f.loc, f, (), f.ty.elem)
        return typed_call(e, name, (element, N.IntLit(axis_node.loc, axis, SCALARS["i32"])), f.ty.elem)

    # ---- column vectors in whole-fragment statements
    def column_name(self, e: N.Name, t: N.Expr, ty: N.ArrayType, column: bool) -> N.Expr:
        """A fragment's name where one value per column is computed (`c[:] = ...`, the inside of
        `v[None, :]`), or a column vector's name anywhere: its element, or an error."""
        fr = self.frags
        assert fr.frag_shape is not None
        if column and fr.frag_kind == "cols":
            if ty.shape[1] != fr.frag_shape[0]:
                self.sink.error(e.loc, f"'{e.id}' is a column vector of {ty.shape[1]} columns, but here the "
                                f"fragments have {fr.frag_shape[0]}")
                return N.replace(t, ty=None)
            return N.Index(e.loc, t, (), ty.elem)
        if column and fr.frag_kind == "full":
            self.sink.error(e.loc, f"'{e.id}' is a column vector: broadcast it along the rows with {e.id}[None, :]")
        elif column:
            self.sink.error(e.loc, f"'{e.id}' is a column vector, but here one value per row is computed")
        elif len(ty.shape) == 2:
            self.sink.error(e.loc, f"'{e.id}' is a {list(ty.shape)} fragment, but here one value per column is "
                            f"computed: reduce it (tsum({e.id}, axis=0)), or assign a 2-D fragment")
        else:
            self.sink.error(e.loc, f"'{e.id}' is a row vector, but here one value per column is computed")
        return N.replace(t, ty=None)

    # ---- c = tfrag(f32[1, N], init)
    def vector_columns(self, spec: N.Index, elem: ScalarType, n: int, warps: int) -> FragLayout | None:
        """The layout of a column vector of `n` columns over `warps` warps (whole rows per warp:
        every warp holds every column), or None after an error."""
        if elem.name not in ("f32", "i32"):
            self.sink.error(spec.loc, f"a column vector holds f32 or i32 values, not {elem}")
            return None
        if self.spread_at is not None:
            self.sink.error(spec.loc, f"a column vector needs every warp to own whole rows of every fragment, but the "
                            f"fragment at line {self.spread_at.line} spreads its rows over several warps (its row "
                            f"count is not a multiple of {MMA_M * warps})")
            return None
        self.columns = True
        layout = whole_row_division(MMA_M * warps, n, warps)
        if layout is None:
            self.sink.error(spec.loc, f"a column vector follows the columns of the {n}-column fragments, in 8-column "
                            f"mma tiles: the column count must be a multiple of {MMA_N}, not {n}")
            return None
        return layout

    # ---- m = tfrag(f32[M], init), and the division of rows (frag_layout.row_division)
    def vector_rows(self, spec: N.Index, m: int, warps: int) -> FragLayout | None:
        """The layout of a row vector of `m` rows over `warps` warps, or None after an error."""
        layout = whole_row_division(m, MMA_N, warps)
        if layout is None and not self.strict and m % MMA_M == 0:
            layout = row_division(m, MMA_N * warps, warps)  # rows spread over several warps
            self.spread(spec, layout)
        if layout is None:
            self.sink.error(spec.loc, f"a row vector follows the rows of the {m}-row fragments, in 16-row mma tiles: "
                            f"{self.rows_needed(m, warps)}")
        return layout

    def row_layout(self, spec: N.Index, m: int, n: int, warps: int) -> FragLayout | None:
        """The division of a 2-D fragment in a kernel with row vectors or reductions (whole rows per
        warp where M allows, else rows spread over several warps, where the kernel allows), or None
        after an error that says which extents and tile counts work."""
        layout = whole_row_division(m, n, warps)
        if layout is None and not self.strict:
            layout = row_division(m, n, warps)
            if layout is not None:
                self.spread(spec, layout)
                return layout
            if m % MMA_M == 0:
                wm = max(d for d in range(1, warps + 1) if warps % d == 0 and m % (MMA_M * d) == 0)
                self.sink.error(spec.loc, f"over {warps} warps the {m} rows of a {m} x {n} fragment take {wm} "
                                f"warp{'s' if wm > 1 else ''}, and its columns the other {warps // wm}: N must be a "
                                f"multiple of {MMA_N * (warps // wm)}, not {n}{self.tile_counts(m, n)}")
                return None
        if layout is None and self.strict:
            self.sink.error(spec.loc, f"in a kernel with column vectors, operand fragments or column reductions each "
                            f"warp owns whole rows of every fragment: over {warps} warps a {m} x {n} fragment needs M "
                            f"a multiple of {MMA_M * warps} and N a multiple of {MMA_N}{self.tile_counts(m, n)}")
        elif layout is None:
            self.sink.error(spec.loc, f"in a kernel with row vectors or reductions a {m} x {n} fragment is divided "
                            f"into 16 x 8 mma tiles: M must be a multiple of {MMA_M} and N of {MMA_N}")
        return layout

    @property
    def strict(self) -> bool:
        """Whether every warp must own whole rows of every fragment (checks/frags.py strict_rows)."""
        return self.frags.strict_rows or self.columns

    def rows_needed(self, m: int, warps: int) -> str:
        if self.strict:
            return f"with {warps} warps the row count must be a multiple of {MMA_M * warps}, not {m}"
        return f"the row count must be a multiple of {MMA_M}, not {m}"

    @staticmethod
    def tile_counts(m: int, n: int) -> str:
        """Which group sizes give every warp whole rows of an m x n fragment."""
        counts = [32 * d for d in (1, 2, 4, 8, 16, 32) if whole_row_division(m, n, d) is not None]
        return f" (groups of {', '.join(map(str, counts))} tiles give each warp whole rows)" if counts else ""

    def spread(self, spec: N.Index, layout: FragLayout | None) -> None:
        """Note a fragment whose rows are spread over several warps (no column vector may join it)."""
        if layout is not None and layout.warps_n > 1 and self.spread_at is None:
            self.spread_at = spec.loc


# ---- tsum(S * S, axis=1): a reduction of an elementwise expression (lowering makes the temporary:
# passes/frag_temps.py)

def _matrix_shape(fr: Fragments, e: N.Expr) -> tuple[int | str, ...] | None:
    """The shape of the first 2-D fragment (not a column vector) that `e` reads outside a nested
    reduction, else inside one; None when it reads none."""
    outer: list[tuple[int | str, ...]] = []
    inner: list[tuple[int | str, ...]] = []
    stack: list[tuple[object, bool]] = [(e, False)]
    while stack:
        n, nested = stack.pop()
        if isinstance(n, N.Name):
            sym = fr.scope.lookup(n.id)
            ty = sym.ty if sym is not None and sym.ref == "frag" else None
            if isinstance(ty, N.ArrayType) and len(ty.shape) == 2 and ty.shape[0] != 1:
                (inner if nested else outer).append(tuple(ty.shape))
        below = nested or isinstance(n, N.Call) and isinstance(n.func, N.Name) and n.func.id in REDUCTIONS
        stack.extend((x, below) for x in reversed(list(tree_children(n))))
    found = outer or inner
    return found[0] if found else None


def reduced_expression(fr: Fragments, arg: N.Expr, name: str, axis: int) -> N.Expr | None:
    """The typed argument of `name(arg, axis=axis)` when `arg` is an elementwise expression of 2-D
    fragments (its value converted to f32 or i32), or None after an error."""
    what = "row" if axis == 1 else "column"
    shape = _matrix_shape(fr, arg)
    if shape is None:
        if any(isinstance(n, N.Name) and n.id in fr.scope.quiet for n in walk(arg)):
            return None  # it reads a fragment whose declaration was refused (reported there)
        fr.sink.error(arg.loc, f"{name}() reduces a 2-D fragment, or an elementwise expression of 2-D fragments "
                      f"({name}(S * S, axis={axis})); this expression reads none")
        return None
    assert fr.frag_shape is not None
    if shape[1 - axis] != fr.frag_shape[0]:
        fr.sink.error(arg.loc, f"{name}() reduces a 2-D fragment of {fr.frag_shape[0]} {what}s here, not an "
                      f"expression of {list(shape)} fragments")
        return None
    saved = fr.stmt_rank
    fr.stmt_rank = 2  # row_index() and col_index() are both the element's coordinates in here
    try:
        value = fr.in_context(shape, "full", lambda: fr.exprs.scalar_expr(arg, f"the first argument of {name}()"))
    finally:
        fr.stmt_rank = saved
    ty = value.ty
    if ty is None:
        return None
    if not (isinstance(ty, ScalarType) and ty.is_numeric):
        fr.sink.error(arg.loc, f"{name}() reduces numbers, not {type_name(ty)} values")
        return None
    elem = F32 if ty.is_float else I32
    return fr.exprs.assignable(value, elem, arg.loc, f"the elements {name}() reduces")


__all__ = ["FragVectors", "check_not_aliased", "fragment_type_error", "inline_functions", "is_column_spec",
           "is_fragment_conversion", "operand_rows", "operand_types_match", "register_operand_error",
           "takes_fragments", "uses_rows"]
