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
hooks into the checking of names and indexing (FunctionChecker.x_Name, x_Index). `MmaViews` types
tmma's operands that are views of shared arrays (`tmma(acc, As[:, kk:kk + 16], Bs[kk:kk + 16, :])`):
their constant starts are checked here, the others by the plan-fragments pass
(transpile/passes/mma_views.py) and at run time in check_bounds builds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tessera.base.dtypes import SCALARS
from tessera.frontend import nodes as N
from tessera.transpile.checks.expr import base_name, type_name
from tessera.transpile.checks.frag_vectors import FragVectors, inline_functions, uses_rows
from tessera.transpile.checks.rules import Rule, check_arity, typed_call
from tessera.transpile.checks.scope import Part, Sym
from tessera.transpile.lir.frag_layout import (
    MAX_PER_LANE,
    MMA_KINDS,
    MMA_M,
    MMA_N,
    choose,
    whole_row_division,
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
        self.whole_rows = fc.in_kernel and uses_rows(fc.fn, inline_functions(fc.scope.module_syms))
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
        if elem.name in ("i8", "u8"):
            self.sink.error(spec.base.loc, f"operand fragments of {elem} are not supported yet (f16 and bf16 are); "
                            f"give tmma() the shared array")
            return s
        if elem.name not in ("f32", "i32", "f16", "bf16"):
            self.sink.error(spec.base.loc, f"a fragment accumulates in f32 (for f16, bf16 or f32 inputs) or i32 "
                            f"(for i8 or u8 inputs), or is an f16 or bf16 operand, not {elem}")
            return s
        if elem.is_half and len(spec.indices) != 2:
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
            if not self.vectors.vector_rows(spec, m, tiles // 32):
                return s
            layout = whole_row_division(m, MMA_N, tiles // 32)
        elif self.whole_rows:
            layout = whole_row_division(m, n, tiles // 32)
            if layout is None:
                self.sink.error(spec.loc, f"in a kernel with row vectors, operand fragments or row reductions each warp "
                                f"owns whole rows "
                                f"of every fragment: over {tiles // 32} warps a {m} x {n} fragment needs M a multiple "
                                f"of {MMA_M * (tiles // 32)} and N a multiple of {MMA_N}")
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
        """tmma's first operand when it is an operand fragment (f16/bf16 in registers), else None."""
        sym = self.scope.lookup(e.id) if isinstance(e, N.Name) else None
        if sym is None or sym.ref != "frag" or not isinstance(sym.ty, N.ArrayType):
            return None
        if not sym.ty.elem.is_half:
            self.sink.error(e.loc, f"the first operand of {name}() from registers is an f16 or bf16 operand fragment; "
                            f"'{sym.name}' is a fragment of {sym.ty.elem} (give tmma() a shared array)")
            return None
        return sym.ty

    def operand(self, e: N.Expr, name: str, what: str) -> N.ArrayType | None:
        if isinstance(e, N.Index):  # a view with constant extents (mma_views.py)
            return self.views.operand(e, name, what)
        sym = self.scope.lookup(e.id) if isinstance(e, N.Name) else None
        if sym is not None and sym.ref == "frag":
            if what == "first operand":
                return None  # reported by register_operand
            self.sink.error(e.loc, f"the {what} of {name}() must be a shared array; operands from registers are "
                            f"supported as the first operand (A) only")
            return None
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
        a = self.register_operand(e.args[1], name) or self.operand(e.args[1], name, "first operand")
        b = self.operand(e.args[2], name, "second operand")
        if acc is None or a is None or b is None:
            return e
        assert isinstance(acc.ty, N.ArrayType)
        if len(acc.ty.shape) != 2 or acc.ty.elem.is_half:
            self.sink.error(e.args[0].loc, "the accumulator of tmma() is a 2-D fragment of f32 or i32")
            return e
        if a.elem != b.elem:
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
        args = (acc, first, self.views.typed(e.args[2]), N.BoolLit(e.loc, trans, SCALARS["bool"]))
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
        if vt.extents != tuple(acc.ty.shape):
            self.sink.error(e.args[1 - frag_pos].loc, f"{name}() needs a view of the fragment's extents "
                            f"{list(acc.ty.shape)}, got {list(vt.extents)}")
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
        try:
            return self.in_context(shape, "full" if len(shape) == 2 else "rows",
                                   lambda: self.exprs.scalar_expr(e, "value"))
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
        if self.frag_kind == "cols":
            self.sink.error(e.loc, f"'{e.id}' is a fragment; inside v[None, :] only scalars, col_index() and 1-D "
                            f"views of memory are supported (column-vector fragments are not)")
            return N.replace(t, ty=None)
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


class MmaViews(Part):
    """tmma's operands that are views: their types, and the typed views for the call."""

    def __init__(self, fc) -> None:  # noqa: ANN001 - typecheck.FunctionChecker (an import cycle)
        super().__init__(fc)
        self._typed: dict[int, N.Index] = {}  # id of the operand as written -> the typed view

    def operand(self, e: N.Index, name: str, what: str) -> N.ArrayType | None:
        """The operand's type as a shared array of the view's extents, or None after its error."""
        view = self.fc.memory.view(e, name, what)
        if view is None:
            return None
        assert isinstance(view.ty, N.ViewType)
        base = view.ty.base
        array = base_name(view.base)
        if not (isinstance(base, N.ArrayType) and base.space == "shared"):
            self.sink.error(e.loc, f"the {what} of {name}() must be a shared array or a view of one; '{array}' is "
                            f"a {type_name(base)} (copy the block to shared memory first)")
            return None
        extents = view.ty.extents
        if len(extents) != 2:
            self.sink.error(e.loc, f"the {what} of {name}() is a 2-D view (two sliced dimensions); "
                            f"this one has {len(extents)}")
            return None
        kept = iter(extents)
        for k, (i, dim) in enumerate(zip(view.indices, base.shape)):
            extent = next(kept) if isinstance(i, N.Slice) else 1
            start = self.scope.try_const(i.lo if isinstance(i, N.Slice) and i.lo is not None else i)
            if isinstance(start, int) and not isinstance(start, bool) and (start < 0 or start + extent > int(dim)):
                shape = ", ".join(str(d) for d in base.shape)
                self.sink.error(e.loc, f"the {what} of {name}() reaches outside '{array}' [{shape}]: dimension {k} "
                                f"covers {start} to {start + extent - 1}; tmma() reads views that lie inside "
                                f"their shared array")
                return None
        self._typed[id(e)] = view
        return N.ArrayType(base.elem, extents, "shared")

    def typed(self, e: N.Expr) -> N.Expr:
        """The typed argument: the view checked by `operand`, or the array or fragment as a name."""
        view = self._typed.pop(id(e), None)
        return view if view is not None else self.fc.expr(e)
