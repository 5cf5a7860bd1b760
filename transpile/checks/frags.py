"""Type checking of the tensor-core tile operations (spec section 12): `acc = tfrag(f32[M, N], 0.0)`,
`tmma(acc, As, Bs, trans_b=False)`, `tload(acc, view)`, `tstore(view, acc)` and whole-fragment
elementwise statements `acc[:] = max(acc * alpha + beta, 0.0)`.

Before:  acc = tfrag(f32[64, 64], 0.0)
         acc[:] = acc * alpha
After:   Assign(Name(acc): fragment f32[64, 64], Call(tfrag, (FloatLit(0.0): f32,)), declares=True)
         Assign(Index(acc, ()): f32, BinOp(*, Index(acc, ()): f32, Name(alpha): f32))

In an elementwise statement a fragment's name is its element at the position being computed (as a
map kernel's tensors are), typed as an `Index` with no indices. `Fragments` is a part of the type
checker (typecheck.FunctionChecker): it provides the rules of tmma, tload and tstore, declares
fragments for arrays.ArrayDecls, checks elementwise statements for assignments.Assignments, and
hooks into the checking of names and indexing (FunctionChecker.x_Name, x_Index). tmma's operands
that are views of shared arrays are typed by memory.MmaViews. Operand fragments (f16, bf16, i8,
u8, or an f32 fragment that is tmma's first operand: TF32) make every warp own whole rows
(frag_vectors.operand_rows); assigning a fragment to a fragment converts without a cast (C's conversions).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.base.dtypes import SCALARS
from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import base_name, type_name
from tessera.transpile.checks.frag_vectors import (
    FragVectors,
    check_not_aliased,
    fragment_type_error,
    inline_functions,
    is_fragment_conversion,
    operand_rows,
    operand_types_match,
    register_operand_error,
    strict_rows,
    uses_rows,
)
from tessera.transpile.checks.memory import MmaViews
from tessera.transpile.checks.rules import Rule, check_arity, typed_call
from tessera.transpile.checks.scope import Part, Sym
from tessera.transpile.lir.frag_layout import (
    MAX_PER_LANE,
    MMA_KINDS,
    OPERAND_TYPES,
    choose,
    working_extents,
)

if TYPE_CHECKING:
    from tessera.transpile.checks.typecheck import FunctionChecker


def is_tfrag(v: N.Expr) -> bool:
    return isinstance(v, N.Call) and isinstance(v.func, N.Name) and v.func.id == "tfrag"


class Fragments(Part):
    """The type checker's part for tensor-core fragments: their declaration, tmma, tload and tstore,
    and whole-fragment elementwise statements."""

    def __init__(self, fc: FunctionChecker) -> None:
        super().__init__(fc)
        # Inside an elementwise statement (frag_value): the shape of the values computed here, and
        # the context (frag_vectors.py): full (2-D), rows or cols; the rank of the statement's target.
        self.frag_shape: tuple[int | str, ...] | None = None
        self.frag_kind: str | None = None
        self.stmt_rank = 0
        self.vectors = FragVectors(self)
        inline = inline_functions(fc.scope.module_syms)
        self.whole_rows = fc.in_kernel and (uses_rows(fc.fn, inline) or operand_rows(fc.fn))
        # whole rows per warp whatever the row counts (else rows may spread over warps: frag_vectors.py)
        self.strict_rows = self.whole_rows and (operand_rows(fc.fn) or strict_rows(fc.fn, inline))
        self.views = MmaViews(fc)  # tmma's operands that are views of shared arrays

    def rules(self) -> dict[str, Rule]:
        return {"tmma": self.rule_tmma, "tload": self.rule_tload, "tstore": self.rule_tstore,
                "frag_coord": self.rule_frag_coord, "frag_reduce": self.vectors.rule_reduce}

    # ---- row_index(), col_index()
    def rule_frag_coord(self, e: N.Call, name: str) -> N.Expr:
        check_arity(self.sink, e, name, 0)
        if self.frag_shape is None:
            self.sink.error(e.loc, f"{name}() is the coordinate of the element being computed in a whole-fragment "
                            f"statement (acc[:] = ...); it has no value elsewhere")
            return e
        if name == "col_index" and self.stmt_rank == 1:
            self.sink.error(e.loc, "col_index() has no value in a statement that assigns a row vector (one value "
                            "per row)")
            return e
        if name == "row_index" and self.stmt_rank == -1:
            self.sink.error(e.loc, "row_index() has no value in a statement that assigns a column vector (one value "
                            "per column)")
            return e
        return typed_call(e, name, (), SCALARS["i32"])

    # ---- acc = tfrag(f32[M, N], init)
    def frag_decl(self, s: N.Assign, name: str) -> N.Stmt:
        v = s.value
        assert isinstance(v, N.Call)
        if self.fc.inline.active:
            self.sink.error(v.loc, "a device function cannot declare fragments: declare it in the kernel and pass it "
                            "(a parameter 'name: mut frag T[dims]')")
            return s
        if not self.fc.in_kernel or self.fc.block != (0, 1):
            self.sink.error(v.loc, "tfrag() is only allowed at the top level of a kernel body (a fragment belongs "
                            "to the whole group)")
            return s
        if len(v.args) not in (1, 2) or v.kwargs:
            self.sink.error(v.loc, "tfrag() takes a type like f32[64, 64] and an initial value (which may be left "
                            "out for a fragment that is written before it is read)")
            return s
        spec = v.args[0]
        if not (isinstance(spec, N.Index) and isinstance(spec.base, N.Name) and spec.base.id in SCALARS
                and len(spec.indices) in (1, 2)):
            self.sink.error(spec.loc, "the first argument of tfrag() is an element type with two constant "
                            "dimensions, such as f32[64, 64] (or one, f32[64], for a row vector)")
            return s
        elem = SCALARS[spec.base.id]
        why = fragment_type_error(elem)
        if why is not None:
            self.sink.error(spec.base.loc, why)
            return s
        if elem.name in OPERAND_TYPES and len(spec.indices) != 2:
            self.sink.error(spec.loc, f"an operand fragment of {elem} has two dimensions (rows and K)")
            return s
        dims = [self.scope.const_int(d, "a dimension of tfrag()", 1) for d in spec.indices]
        if None in dims:
            return s
        m, n = dims[0], dims[-1]
        assert m is not None and n is not None
        tiles = math.prod(self.fc.tile) if self.fc.tile else 0
        if tiles % 32:
            self.sink.error(v.loc, f"a fragment is spread over the group's warps: the group has {tiles} tiles, "
                            "which is not a multiple of 32")
            return s
        if len(dims) == 1:
            layout = self.vectors.vector_rows(spec, m, tiles // 32)
            if layout is None:
                return s
        elif m == 1:  # a column vector of the N-column fragments (frag_vectors.py)
            layout = self.vectors.vector_columns(spec, elem, n, tiles // 32)
            if layout is None:
                return s
        elif self.whole_rows:  # rows first (frag_vectors.py)
            layout = self.vectors.row_layout(spec, m, n, tiles // 32)
            if layout is None:
                return s
        else:
            layout = choose(m, n, tiles // 32)
        if layout is None:
            self.sink.error(spec.loc, f"no division of a {m} x {n} fragment over {tiles // 32} warps gives whole "
                            f"16 x 8 mma tiles; extents that work are multiples of {working_extents(tiles // 32)}")
            return s
        if layout.per_lane > MAX_PER_LANE:
            self.sink.error(spec.loc, f"a {m} x {n} fragment over {tiles // 32} warps needs {layout.per_lane} "
                            f"registers per tile (at most {MAX_PER_LANE}); use more warps or a smaller fragment")
            return s
        inits: tuple[N.Expr, ...] = ()
        if len(v.args) == 2:
            init = self.exprs.scalar_expr(v.args[1], "initial value of tfrag()")
            if init.ty is None:
                return s
            inits = (self.exprs.assignable(init, elem, v.args[1].loc, "a fragment element"),)
        ty = N.ArrayType(elem, tuple(d for d in dims if d is not None), "frag")
        self.fc.locals[name] = Sym(name, "frag", ty, s.loc, block=self.fc.block, extra={"layout": layout})
        call = N.Call(v.loc, N.Name(v.loc, "tfrag", ref="builtin"), inits, (), ty)
        return N.replace(s, target=N.replace(s.target, ty=ty, ref="frag"), value=call, declares=True)

    def fragment(self, e: N.Expr, name: str, what: str) -> N.Expr | None:
        """An argument that must be a fragment's name."""
        sym = self.scope.lookup(e.id) if isinstance(e, N.Name) else None
        if sym is not None and sym.ref == "frag":
            assert isinstance(e, N.Name)
            return N.replace(e, ty=sym.ty, ref="frag")
        if sym is None and isinstance(e, N.Name) and e.id in self.scope.quiet:
            return None  # a rejected declaration, reported already
        self.sink.error(e.loc, f"the {what} of {name}() must be a fragment (acc = tfrag(f32[M, N], 0.0))")
        return None

    def register_operand(self, e: N.Expr, name: str) -> N.ArrayType | None:
        """tmma's first operand when it is an operand fragment (in registers), else None."""
        sym = self.scope.lookup(e.id) if isinstance(e, N.Name) else None
        if sym is None or sym.ref != "frag" or not isinstance(sym.ty, N.ArrayType):
            return None
        why = register_operand_error(sym.ty.elem, name, sym.name) if len(sym.ty.shape) == 2 and sym.ty.shape[0] != 1 \
            else f"the first operand of {name}() is a 2-D fragment; '{sym.name}' is a vector"
        if why is not None:
            self.sink.error(e.loc, why)
            return None
        return sym.ty

    def register_b(self, e: N.Expr, sym: Sym, name: str) -> N.ArrayType | None:
        """tmma's second operand from registers: a 2-D fragment (passes/frag_b_operand.py stages it
        through shared memory, as every warp needs all of it)."""
        assert isinstance(sym.ty, N.ArrayType)
        if len(sym.ty.shape) != 2 or sym.ty.shape[0] == 1:
            self.sink.error(e.loc, f"the second operand of {name}() is a 2-D fragment; '{sym.name}' is a vector")
            return None
        why = register_operand_error(sym.ty.elem, name, sym.name)
        if why is not None:
            self.sink.error(e.loc, why.replace("first operand", "second operand"))
            return None
        return sym.ty

    def operand(self, e: N.Expr, name: str, what: str) -> N.ArrayType | None:
        if isinstance(e, N.Index):  # a view with constant extents (mma_views.py)
            return self.views.operand(e, name, what)
        sym = self.scope.lookup(e.id) if isinstance(e, N.Name) else None
        if sym is not None and sym.ref == "frag":
            if what == "first operand":
                return None  # reported by register_operand
            return self.register_b(e, sym, name)
        t = self.fc.expr(e) if isinstance(e, N.Name) else None
        if t is None or t.ty is None:
            if t is None:
                self.sink.error(e.loc, f"the {what} of {name}() must be a shared array (tshared.alloc(f16[BM, BK]))")
            return None
        ty = t.ty
        if not (isinstance(ty, N.ArrayType) and ty.space == "shared" and len(ty.shape) == 2
                and all(isinstance(d, int) for d in ty.shape)):
            self.sink.error(e.loc, f"the {what} of {name}() must be a 2-D shared array of constant shape, not "
                            f"{type_name(ty)}")
            return None
        return ty

    # ---- tmma(acc, a, b, trans_b=False)
    def rule_tmma(self, e: N.Call, name: str) -> N.Expr:
        if not check_arity(self.sink, e, name, 3, 4, ("trans_b",)):
            return e
        trans_node = e.args[3] if len(e.args) == 4 else next((k.value for k in e.kwargs if k.name == "trans_b"), None)
        trans = False
        if trans_node is not None:
            value = self.scope.const_value(trans_node, "trans_b")
            if not isinstance(value, bool):
                self.sink.error(trans_node.loc, "trans_b of tmma() must be True or False")
                return e
            trans = value
        acc = self.fragment(e.args[0], name, "accumulator")
        if acc is not None and not check_not_aliased(self.sink, e, name):
            return e
        a = self.register_operand(e.args[1], name) or self.operand(e.args[1], name, "first operand")
        b = self.operand(e.args[2], name, "second operand")
        if acc is None or a is None or b is None:
            return e
        assert isinstance(acc.ty, N.ArrayType)
        if len(acc.ty.shape) != 2 or acc.ty.shape[0] == 1 or acc.ty.elem.name not in ("f32", "i32"):
            self.sink.error(e.args[0].loc, "the accumulator of tmma() is a 2-D fragment of f32 or i32")
            return e
        if not operand_types_match(a.elem, b.elem):
            self.sink.error(e.loc, f"tmma() operands have different element types: {a.elem} and {b.elem}")
            return e
        kind = MMA_KINDS.get(a.elem.name)
        if kind is None:
            self.sink.error(e.args[1].loc, f"tmma() multiplies f16, bf16, f32 (as TF32), i8 or u8 arrays, not "
                            f"{a.elem}")
            return e
        if acc.ty.elem.name != kind.acc:
            self.sink.error(e.args[0].loc, f"{a.elem} inputs accumulate in {kind.acc}, but "
                            f"'{base_name(acc)}' is a fragment of {acc.ty.elem}")
            return e
        m, n = acc.ty.shape
        am, ak = a.shape
        bk, bn = (b.shape[1], b.shape[0]) if trans else b.shape
        b_text = f"[{bn}, {bk}]" if trans else f"[{bk}, {bn}]"
        want_b = f"[{n}, K] (trans_b=True)" if trans else f"[K, {n}]"
        if am != m or bn != n or ak != bk:
            self.sink.error(e.loc, f"tmma() shapes do not match: the accumulator is [{m}, {n}], so the first operand "
                            f"must be [{m}, K] and the second {want_b}; got [{am}, {ak}] and {b_text}")
            return e
        if int(ak) % kind.k:
            self.sink.error(e.loc, f"tmma() on {a.elem} needs K a multiple of {kind.k}, got {ak}")
            return e
        first = self.fragment(e.args[1], name, "first operand") if a.space == "frag" else self.views.typed(e.args[1])
        assert first is not None
        second = self.fragment(e.args[2], name, "second operand") if b.space == "frag" else self.views.typed(e.args[2])
        assert second is not None
        args = (acc, first, second, N.BoolLit(e.loc, trans, SCALARS["bool"]))
        return typed_call(e, name, args, N.VOID)

    # ---- tload(acc, view) and tstore(view, acc)
    def frag_view(self, e: N.Call, name: str, frag_pos: int) -> N.Expr:
        if not check_arity(self.sink, e, name, 2):
            return e
        acc = self.fragment(e.args[frag_pos], name, "fragment")
        view = self.fc.memory.view(e.args[1 - frag_pos], name, "source" if frag_pos == 0 else "destination")
        if acc is None or view is None:
            return e
        assert isinstance(acc.ty, N.ArrayType) and isinstance(view.ty, N.ViewType)
        vt = view.ty
        shape = tuple(acc.ty.shape)
        if len(shape) == 2 and shape[0] == 1:  # a column vector moves a 1-D view of its N columns
            shape = shape[1:]
        if vt.extents != shape:
            self.sink.error(e.args[1 - frag_pos].loc, f"{name}() needs a view of the fragment's extents "
                            f"{list(shape)}, got {list(vt.extents)}")
            return e
        if frag_pos == 1 and isinstance(vt.base, N.TensorType) and not vt.base.mut:
            self.sink.error(e.args[0].loc, f"'{base_name(view.base)}' is not mut; declare it 'mut' to store to it")
            return e
        if vt.base.elem.kind == "bool":
            self.sink.error(e.args[1 - frag_pos].loc, f"{name}() moves numbers, not bool elements")
            return e
        args = (acc, view) if frag_pos == 0 else (view, acc)
        return typed_call(e, name, args, N.VOID)

    def rule_tload(self, e: N.Call, name: str) -> N.Expr:
        return self.frag_view(e, name, 0)

    def rule_tstore(self, e: N.Call, name: str) -> N.Expr:
        return self.frag_view(e, name, 1)

    # ---- acc[:] = expr
    def frag_sym(self, t: N.Expr) -> Sym | None:
        """The fragment a whole-tensor target `acc[:]` names, if it names one."""
        if not (isinstance(t, N.Index) and isinstance(t.base, N.Name) and N.is_whole_tensor(t)):
            return None
        sym = self.scope.lookup(t.base.id)
        return sym if sym is not None and sym.ref == "frag" else None

    def converts(self, target: N.Expr, value: N.Expr) -> bool:
        """Whether the store `target = value` assigns a fragment to a fragment (spec section 14)."""
        def is_frag(name: str) -> bool:
            sym = self.scope.lookup(name)
            return sym is not None and sym.ref == "frag"
        names = {x.id for x in (getattr(target, "base", None), value) if isinstance(x, N.Name) and is_frag(x.id)}
        return is_fragment_conversion(target, value, names)

    def frag_target(self, t: N.Expr, sym: Sym) -> N.Expr:
        assert isinstance(t, N.Index) and isinstance(sym.ty, N.ArrayType)
        full = all(isinstance(i, N.Slice) and i.lo is None and i.hi is None for i in t.indices)
        if not full or len(t.indices) not in (1, 2):
            self.sink.error(t.loc, f"an elementwise statement assigns the whole fragment: write {sym.name}[:] = ...")
            return N.replace(t, ty=None)
        return N.Index(t.loc, N.replace(t.base, ty=sym.ty, ref="frag"), (), sym.ty.elem)

    def frag_value(self, e: N.Expr, shape: tuple[int | str, ...]) -> N.Expr:
        """The right side of an elementwise statement, its fragments read as their elements."""
        self.stmt_rank = len(shape)
        kind = "full" if len(shape) == 2 else "rows"
        if len(shape) == 2 and shape[0] == 1:  # a column vector: one value per column
            shape, kind, self.stmt_rank = (shape[1],), "cols", -1
        try:
            return self.in_context(shape, kind, lambda: self.exprs.scalar_expr(e, "value"))
        finally:
            self.stmt_rank = 0

    def in_context(self, shape: tuple[int | str, ...], kind: str, check: Callable[[], N.Expr]) -> N.Expr:
        """`check()` with the values computed being of `shape`, in the context `kind` (frag_vectors.py)."""
        saved = self.frag_shape, self.frag_kind
        self.frag_shape, self.frag_kind = shape, kind
        try:
            return check()
        finally:
            self.frag_shape, self.frag_kind = saved

    def name(self, e: N.Name, t: N.Expr) -> N.Expr:
        """Name `e`, typed `t` by the plain rule: a fragment's name is its element inside an
        elementwise statement, and an error elsewhere."""
        ty = t.ty
        if not (isinstance(ty, N.ArrayType) and ty.space == "frag"):
            return t
        if self.frag_shape is None:
            self.sink.error(e.loc, f"'{e.id}' is a fragment spread over the group's warps: use it whole, in tmma(), "
                            f"tload(), tstore() or an elementwise statement ({e.id}[:] = {e.id} * 2.0)")
            return N.replace(t, ty=None)
        column = len(ty.shape) == 2 and ty.shape[0] == 1
        if self.frag_kind == "cols" or column:
            return self.vectors.column_name(e, t, ty, column)
        if len(ty.shape) == 1 and self.frag_kind == "full":
            self.sink.error(e.loc, f"'{e.id}' is a row vector: broadcast it along the columns with {e.id}[:, None]")
            return N.replace(t, ty=None)
        if len(ty.shape) == 2 and self.frag_kind == "rows":
            self.sink.error(e.loc, f"'{e.id}' is a {list(ty.shape)} fragment, but here one value per row is computed: "
                            f"reduce it (tsum({e.id}, axis=1)), or assign a 2-D fragment")
            return N.replace(t, ty=None)
        if tuple(ty.shape) != self.frag_shape:
            self.sink.error(e.loc, f"'{e.id}' is a {list(ty.shape)} fragment but the statement assigns a "
                            f"{list(self.frag_shape)} one: an elementwise statement uses fragments of one shape")
            return N.replace(t, ty=None)
        return N.Index(e.loc, t, (), ty.elem)

    def refuse_index(self, e: N.Index) -> N.Expr | None:
        """`e` after its error if it indexes a fragment, else None (the plain rule checks it); a
        broadcast in a whole-fragment statement is checked here (frag_vectors.py)."""
        broadcast = self.vectors.broadcast(e)
        if broadcast is not None:
            return broadcast
        sym = self.scope.lookup(e.base.id) if isinstance(e.base, N.Name) else None
        if sym is not None and sym.ref == "frag":
            self.sink.error(e.loc, f"the elements of the fragment '{sym.name}' are spread over the group's warps and "
                            f"cannot be indexed; use an elementwise statement, or tstore() it to shared memory")
            return e
        return None
