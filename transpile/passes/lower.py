"""The `lower` pass: the typed syntax tree to the lowered IR (transpile/lir/nodes.py).

Before:  acc = tregs(f32[4], 0.0)               (typed tree; x: f32[n], i: i32)
         acc[0] += x[i + 1] * 2
After:   Alloc(acc)                             (Buffer acc: regs f32[4])
         Fill(acc, Const(0.0: f32))
         Store(acc, (Affine(0),), Binary(*, Load(x, (Affine(i + 1),)): f32, Const(2.0: f32)), op="+")

Conversions become `Cast` nodes, names become `Var`/`Const`, builtins become the node the builtin
table names, indices become `Affine` where they are one, and `range` bounds that could change
while the loop runs are copied to constants first (Python evaluates them once). Last, locals that
Python scoping makes visible after the C block that assigns them are declared at the top of the
function (lir/hoist.py); before that, a reduction of an elementwise expression gets a temporary
fragment and the fragments' warp division is decided (passes/frag_temps.py).

This module lowers the statements, the functions and the module; the expressions are lowered by
passes/lower_exprs.py, a function's signature by passes/lower_signature.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.base.dtypes import I32, SCALARS, ScalarType, promote
from tessera.base.errors import Loc
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS
from tessera.transpile.consts import Value, convert, module_env, type_of_value
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.hoist import hoist_function
from tessera.transpile.lir.visit import walk
from tessera.transpile.names import c_ident
from tessera.transpile.passes.frag_temps import lower_fragments
from tessera.transpile.passes.lower_exprs import ExprLowering
from tessera.transpile.passes.lower_signature import element_loop, signature
from tessera.transpile.passes.param_locals import with_param_locals


@dataclass
class _Function(ExprLowering):
    """The statements of function `fn` (its expressions: ExprLowering), the buffers it allocates, the
    temporaries it names and the locals it has declared so far."""

    buffers: list[L.Buffer] = field(default_factory=list)
    temps: set[str] = field(default_factory=set)
    declared: set[str] = field(default_factory=set)  # locals declared so far (a later `for` reuses one)

    # ---- statements
    def block(self, stmts: tuple[N.Stmt, ...]) -> tuple[L.Stmt, ...]:
        out: list[L.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: N.Stmt) -> list[L.Stmt]:
        if isinstance(s, N.Assign):
            return self.assign(s)
        if isinstance(s, N.AugAssign):
            return self.aug_assign(s)
        if isinstance(s, N.ExprStmt):
            return self.effect(s)
        if isinstance(s, N.If):
            return [L.If(s.loc, self.expr(s.cond), self.block(s.then), self.block(s.orelse))]
        if isinstance(s, N.While):
            return [L.While(s.loc, self.expr(s.cond), self.block(s.body))]
        if isinstance(s, N.For):
            return self.for_(s)
        if isinstance(s, N.Break):
            return [L.Break(s.loc)]
        if isinstance(s, N.Continue):
            return [L.Continue(s.loc)]
        if isinstance(s, N.Return):
            if s.value is None:
                return [L.Return(s.loc, None)]
            if isinstance(s.value, N.TupleLit):  # `return a, b`: already converted to the declared types
                return [L.Return(s.loc, None, tuple(self.expr(v) for v in s.value.items))]
            ret = SCALARS[self.fn.ret] if self.fn.ret else None
            value = self.expr(s.value)
            return [L.Return(s.loc, L.converted(value, ret) if ret else value)]
        assert isinstance(s, N.Pass)
        return []

    def assign(self, s: N.Assign) -> list[L.Stmt]:
        t = s.target
        if isinstance(t, N.TupleLit):
            return self.tuple_assign(s)
        if isinstance(t, N.Name):
            ty = t.ty
            if isinstance(ty, N.ArrayType):
                return self.array(s, t.id, ty)
            assert isinstance(ty, ScalarType)
            var = L.Var(t.id, ty)
            value = L.converted(self.expr(s.value), ty)
            if s.declares:
                self.declared.add(t.id)
                return [L.Decl(s.loc, var, value)]
            return [L.Assign(s.loc, var, value)]
        if isinstance(t.ty, N.ViewType):  # a vector access (checks/vectors.py): one side a register array
            store = isinstance(s.value, N.Index) and isinstance(s.value.ty, N.ViewType) \
                and isinstance(s.value.ty.base, N.ArrayType) and s.value.ty.base.space == "regs"
            regs, view = (s.value, t) if store else (t, s.value)
            assert isinstance(regs, N.Index) and isinstance(regs.base, N.Name)
            return [L.VecMove(s.loc, regs.base.id, self.view(view), store)]
        assert isinstance(t, N.Index) and isinstance(t.base, N.Name) and isinstance(t.ty, ScalarType)
        value = self.expr(s.value)
        if _is_frag(t.base):
            return [L.FragAssign(s.loc, t.base.id, L.converted(value, t.ty))]
        if t.ty.is_half and isinstance(value, L.Cast) and value.dtype == t.ty:
            value = value.x  # the conversion to f16/bf16 is the store itself (it rounds once)
        elif not t.ty.is_half:
            value = L.converted(value, t.ty)
        return [L.Store(s.loc, t.base.id, self.index(t.indices), value)]

    def tuple_assign(self, s: N.Assign) -> list[L.Stmt]:
        """`a, b = b, a` / `s, c = f(x)`: every value into a temporary first, then each target
        assigned from its temporary, left to right, as a single assignment would be."""
        assert isinstance(s.target, N.TupleLit)
        out: list[L.Stmt] = []
        temps: list[L.Var] = []
        if isinstance(s.value, N.TupleLit):
            for k, v in enumerate(s.value.items):
                x = self.expr(v)
                tmp = L.Var(self.temp(f"%tuple{k}"), x.dtype)
                out.append(L.Decl(s.loc, tmp, x, const=True))
                temps.append(tmp)
        else:
            out.extend(self.results(s.loc, s.value, temps))
        for k, (target, tmp) in enumerate(zip(s.target.items, temps)):
            value = N.Name(target.loc, tmp.name, tmp.dtype, "local")
            out.extend(self.assign(N.Assign(s.loc, target, value, declares=s.declares_each[k])))
        return out

    def results(self, loc: Loc, e: N.Expr, temps: list[L.Var]) -> list[L.Stmt]:
        """The call of a device function returning several values: new temporaries (added to
        `temps`) declared, then the call, which stores its results to them."""
        assert isinstance(e, N.Call) and isinstance(e.func, N.Name) and isinstance(e.ty, N.TupleType)
        args = tuple(self.expr(a) for a in e.args)
        new = [L.Var(self.temp(f"%result{k}"), t) for k, t in enumerate(e.ty.items)]
        temps.extend(new)
        decls: list[L.Stmt] = [L.Decl(loc, v, L.Const(convert(0, v.dtype), v.dtype)) for v in new]
        return [*decls, L.Invoke(loc, e.func.id, args, tuple(new))]

    def array(self, s: N.Assign, name: str, ty: N.ArrayType) -> list[L.Stmt]:
        shape = tuple(L.Const(d, I32) if isinstance(d, int) else self.size_param(d) for d in ty.shape)
        auto_pad = ty.space == "shared" and isinstance(s.value, N.Call) and not s.value.kwargs
        self.buffers.append(L.Buffer(name, ty.space, ty.elem, shape, s.value.loc, mut=True, pad=ty.pad,
                                     auto_pad=auto_pad))
        assert isinstance(s.value, N.Call)
        if ty.space == "shared" or not s.value.args:  # no initial value: written before it is read
            return [L.Alloc(s.loc, name)]
        init = L.converted(self.expr(s.value.args[0]), ty.elem)
        return [L.Alloc(s.loc, name), L.Fill(s.loc, name, init)]

    def size_param(self, name: str) -> L.Expr:
        """A launch-sized dimension: the integer parameter, as i32."""
        p = next(p for p in self.fn.params if p.name == name)
        assert isinstance(p.ty, ScalarType)
        return L.converted(L.Var(name, p.ty), I32)

    def aug_assign(self, s: N.AugAssign) -> list[L.Stmt]:
        t = s.target
        tt = t.ty
        assert isinstance(tt, ScalarType)
        value = self.expr(s.value)
        op_type = tt if s.op in ("<<", ">>") else promote(tt, value.dtype)
        if s.op not in ("<<", ">>"):
            value = L.converted(value, op_type)
        if isinstance(t, N.Name):
            return [L.Assign(s.loc, L.Var(t.id, tt), value, s.op, op_type)]
        assert isinstance(t, N.Index) and isinstance(t.base, N.Name)
        if _is_frag(t.base):
            return [L.FragAssign(s.loc, t.base.id, value, s.op, op_type)]
        out: list[L.Stmt] = []
        index = self.once(self.index(t.indices), s.loc, out, _has_effects(value))
        return [*out, L.Store(s.loc, t.base.id, index, value, s.op, op_type)]

    def once(self, index: tuple[L.Expr, ...], loc: Loc, out: list[L.Stmt], value_effects: bool) -> tuple[L.Expr, ...]:
        """The index of `x[i] op= v`, evaluated once and before `v`, as in Python: parts with side
        effects (an atomic, a device function call) are computed into temporaries first (C would
        evaluate them twice where the update is written out as `x[i] = x[i] op v`), and so are
        parts that read memory when `v` has side effects (C evaluates `v` first)."""
        kept: list[L.Expr] = []
        for k, i in enumerate(index):
            if _has_effects(i) or (value_effects and any(isinstance(x, L.Load) for x in walk(i))):
                tmp = L.Var(self.temp(f"%index{k}"), i.dtype)
                out.append(L.Decl(loc, tmp, i, const=True))
                i = tmp
            kept.append(i)
        return tuple(kept)

    def effect(self, s: N.ExprStmt) -> list[L.Stmt]:
        """An expression statement (a call) as statements."""
        out = self.effect1(s)
        return out if isinstance(out, list) else [out]

    def effect1(self, s: N.ExprStmt) -> L.Stmt | list[L.Stmt]:
        e = s.expr
        assert isinstance(e, N.Call) and isinstance(e.func, N.Name)
        node = BUILTINS[e.func.id].node if e.func.ref == "builtin" else "call"
        if node == "call" and isinstance(e.ty, N.TupleType):
            return self.results(s.loc, e, [])
        if node == "call" and not isinstance(e.ty, ScalarType):
            return [L.Invoke(s.loc, e.func.id, tuple(self.expr(a) for a in e.args))]
        if node == "barrier":
            return L.Barrier(s.loc)
        if node == "fence":
            scope = e.args[0]
            assert isinstance(scope, N.StrLit)
            return L.Fence(s.loc, scope.value)
        if node == "print":
            fmt = e.args[0]
            assert isinstance(fmt, N.StrLit)
            return L.Print(s.loc, fmt.value, tuple(self.expr(a) for a in e.args[1:]))
        if node == "assert":
            msg = e.args[1]
            assert isinstance(msg, N.StrLit)
            return L.Assert(s.loc, self.expr(e.args[0]), msg.value)
        if node == "copy":
            return L.Copy(s.loc, self.view(e.args[0]), self.view(e.args[1]), async_=e.func.id == "tcopy_async")
        if node == "mma":
            acc, a, b, trans = e.args
            assert isinstance(acc, N.Name) and isinstance(trans, N.BoolLit)
            a_view, b_view = (self.whole(x) if isinstance(x, N.Name) else self.view(x) for x in (a, b))
            return L.Mma(s.loc, acc.id, a_view, b_view, trans.value)
        if node == "frag_load":
            assert isinstance(e.args[0], N.Name)
            return L.FragLoad(s.loc, e.args[0].id, self.view(e.args[1]))
        if node == "frag_store":
            assert isinstance(e.args[1], N.Name)
            return L.FragStore(s.loc, self.view(e.args[0]), e.args[1].id)
        if node == "commit":
            return L.AsyncCommit(s.loc)
        if node == "wait":
            n = e.args[0]
            assert isinstance(n, N.IntLit)
            return L.AsyncWait(s.loc, n.value)
        return L.Eval(s.loc, self.expr(e))

    def for_(self, s: N.For) -> list[L.Stmt]:
        assert isinstance(s.iter, N.Call) and isinstance(s.iter.func, N.Name) and s.var_ty is not None
        ty = s.var_ty
        reuse = s.var in self.declared  # decided before the body adds its own declarations
        args = [self.expr(a) for a in s.iter.args]
        start, stop, step = ((L.Const(0, ty), args[0], L.Const(1, ty)) if len(args) == 1 else
                             (args[0], args[1], args[2] if len(args) == 3 else L.Const(1, ty)))
        out: list[L.Stmt] = []
        var = c_ident(s.var)
        # Python evaluates range()'s arguments once: bounds that could change while the loop runs
        # are copied to constants first.
        stop_ast = s.iter.args[0] if len(s.iter.args) == 1 else s.iter.args[1]
        if not _invariant(stop_ast):
            tmp = L.Var(self.temp(f"%stop_{var}"), ty)
            out.append(L.Decl(s.loc, tmp, stop, const=True))
            stop = tmp
        if len(s.iter.args) == 3 and not _invariant(s.iter.args[2]):
            tmp = L.Var(self.temp(f"%step_{var}"), ty)
            out.append(L.Decl(s.loc, tmp, step, const=True))
            step = tmp
        body = self.block(s.body)
        unroll = s.iter.func.id == "static_range"
        if reuse:
            # A loop over an existing local counts in a hidden variable and assigns the local at the
            # top of each iteration, so that after the loop it holds the last value, as in Python.
            counter = L.Var(self.temp(f"%i_{var}"), ty)
            body = (L.Assign(s.loc, L.Var(s.var, ty), counter), *body)
            out.append(L.For(s.loc, counter, start, stop, step, body, unroll, s.stages))
        else:
            out.append(L.For(s.loc, L.Var(s.var, ty), start, stop, step, body, unroll, s.stages))
        return out

    def temp(self, base: str) -> str:
        """A fresh name for a compiler temporary (unique within the function)."""
        name, n = base, 1
        while name in self.temps:
            n += 1
            name = f"{base}{n}"
        self.temps.add(name)
        return name


def _is_frag(e: N.Expr) -> bool:
    return isinstance(e.ty, N.ArrayType) and e.ty.space == "frag"


def _has_effects(e: L.Expr) -> bool:
    """An atomic or a device function call (which may write memory) in `e`."""
    return any(isinstance(x, (L.Atomic, L.Call)) for x in walk(e))


def _invariant(e: N.Expr) -> bool:
    """Bounds that cannot change while a loop runs: no locals, memory or calls with effects, only
    literals, parameters, constants, and the tile and group indices (fixed for a tile's life)."""
    if isinstance(e, (N.IntLit, N.BoolLit, N.FloatLit)):
        return True
    if isinstance(e, N.Name):
        return e.ref in ("param", "shape", "const", "builtin")
    if isinstance(e, N.Call) and isinstance(e.func, N.Name):
        pure = e.func.ref == "cast" or (e.func.ref == "builtin" and BUILTINS[e.func.id].node == "intrinsic")
        return pure and all(_invariant(a) for a in e.args)
    if isinstance(e, N.BinOp):
        return _invariant(e.left) and _invariant(e.right)
    if isinstance(e, N.Unary):
        return _invariant(e.operand)
    return False


def lower_function(fn: N.FuncDef, env: dict[str, Value], hoist: bool = True) -> L.Function:
    params, buffers, consts = signature(fn)
    lw = _Function(fn, {**env, **dict(fn.const_values)}, buffers)
    body = with_param_locals(fn, params, lw.block(fn.body))
    if fn.kind == "kernel" and fn.is_map:
        body = (element_loop(fn, body, {b.name: b for b in buffers}),)
    ret = SCALARS[fn.ret] if fn.ret else None
    cfg = fn.config
    out = L.Function(fn.loc, fn.name, fn.kind, tuple(params), ret, tuple(lw.buffers), body, tuple(consts),
                     cfg.tile if cfg else (), cfg.shared_budget if cfg else None, cfg.launch_bounds if cfg else None,
                     type_values=fn.type_values, base_name=fn.base_name,
                     rets=tuple(SCALARS[t] for t in fn.rets))
    out = lower_fragments(out)  # tsum(S * S, axis=1) through a temporary fragment; the warp division
    return hoist_function(out) if hoist else out


def lower(module: N.Module) -> L.Module:
    env = module_env(module)
    consts: list[L.NamedConst] = []
    tables: list[L.Table] = []
    functions: list[L.Function] = []
    for item in module.items:
        if isinstance(item, N.ConstDef) and item.folded is not None:
            consts.append(L.NamedConst(item.name, item.folded, type_of_value(item.folded), item.loc))
        elif isinstance(item, N.TableDef) and item.folded:
            tables.append(L.Table(item.name, SCALARS[item.elem], item.shape, item.folded, item.loc))
        elif isinstance(item, N.FuncDef):
            functions.append(lower_function(item, env))
    return L.Module(module.path, tuple(consts), tuple(tables), tuple(functions))

