"""The IR verifier, run after every pass in the tests (`compile_source(..., verify=verify)`); the
plans of the planning passes are checked by lir/verify_plans.py.

Syntax tree: frozen nodes with a location everywhere; from `typecheck` on, every expression typed
and every name resolved. Lowered IR: frozen nodes, every statement located, operand types as the
node requires (see lir/nodes.py), every buffer and function that is referred to exists with the right rank
or arity, every variable is declared in an enclosing scope before it is used, stores only to
writable memory. A violation raises `VerifyError` naming the pass and the node.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tessera.base.dtypes import BOOL
from tessera.base.irnode import is_ir_node
from tessera.frontend import nodes as N
from tessera.transpile.builtins import BUILTINS
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.affine import affine
from tessera.transpile.lir.frag_buffers import is_column_vector_shape
from tessera.transpile.lir.maps import broadcast_dims
from tessera.transpile.lir.verify_plans import PLANNING_PASSES, PlanError, verify_plans
from tessera.transpile.lir.visit import bodies, children, is_expr, stmt_exprs

_TYPED_FROM = "typecheck"
# The passes of each level in pipeline order (transpile/pipeline.py; a test keeps them in step).
AST_PASSES = ("parse", "resolve-constants", "specialize", "kernel-headers", "typecheck", "check-cooperation")
LIR_PASSES = ("lower", "fold-constants", "pipeline-copies", "plan-fragments", *PLANNING_PASSES)


class VerifyError(AssertionError):
    pass


def _frozen(node: object) -> None:
    stack = [node]
    while stack:
        n = stack.pop()
        if not dataclasses.is_dataclass(n) or isinstance(n, type):
            continue
        if not (is_ir_node(type(n)) or n.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise VerifyError(f"{type(n).__name__} is not frozen")
        for f in dataclasses.fields(n):
            v = getattr(n, f.name)
            if isinstance(v, list | dict | set):
                raise VerifyError(f"{type(n).__name__}.{f.name} is a mutable {type(v).__name__}")
            stack.extend(v if isinstance(v, tuple) else (v,))


# ---- syntax tree ------------------------------------------------------------------------------------

def _ast_nodes(node: object):
    yield node
    if dataclasses.is_dataclass(node) and not isinstance(node, (N.TensorType, N.ArrayType, N.ViewType,
                                                                 N.KernelConfig, type)):
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            for x in (v if isinstance(v, tuple) else (v,)):
                if dataclasses.is_dataclass(x):
                    yield from _ast_nodes(x)


def verify_ast(module: N.Module, typed: bool) -> None:
    _frozen(module)
    for item in module.items:
        for node in _ast_nodes(item):
            loc = getattr(node, "loc", None)
            if loc is not None and loc.line < 1:
                raise VerifyError(f"{type(node).__name__} has no location")
        if typed and isinstance(item, N.FuncDef):
            for p in item.params:
                if p.ty is None:
                    raise VerifyError(f"parameter {p.name} of {item.name} has no type")
            for node in (x for st in item.body for x in _ast_nodes(st)):
                if isinstance(node, (N.BinOp, N.Compare, N.Unary, N.Index, N.Ternary)) and node.ty is None:
                    raise VerifyError(f"untyped {type(node).__name__} at {node.loc}")
                if isinstance(node, N.Call) and not isinstance(node.func, N.Attr) and node.ty is None:
                    raise VerifyError(f"untyped call at {node.loc}")
                if isinstance(node, N.Name) and node.ty is not None and node.ref is None:
                    raise VerifyError(f"name {node.id} at {node.loc} is typed but not resolved")


# ---- lowered IR ------------------------------------------------------------------------------------

class _LirVerifier:
    def __init__(self, module: L.Module, fn: L.Function) -> None:
        self.module = module
        self.fn = fn
        self.buffers = {b.name: b for b in fn.buffers} | {
            t.name: L.Buffer(t.name, "const", t.elem, tuple(L.Const(d, BOOL) for d in t.shape), t.loc)
            for t in module.tables}
        self.map_shape: tuple[L.Expr, ...] | None = None  # inside a map kernel's ElementLoop
        self.in_frag_assign = False  # checking the expressions of a FragAssign

    def fail(self, what: str, node: object) -> None:
        raise VerifyError(f"{self.fn.name}: {what}: {node}")

    def expr(self, e: L.Expr, scope: set[str]) -> None:
        if isinstance(e, L.Var) and e.name not in scope:
            self.fail(f"variable '{e.name}' used outside its scope", e)
        if isinstance(e, L.Binary):
            if e.a.dtype != e.dtype or (e.op not in ("<<", ">>") and e.b.dtype != e.dtype):
                self.fail("operand types differ from the result type", e)
        elif isinstance(e, L.Compare) and (e.a.dtype != e.b.dtype or e.dtype != BOOL):
            self.fail("compared operands of different types", e)
        elif isinstance(e, L.Select) and (e.a.dtype != e.dtype or e.b.dtype != e.dtype):
            self.fail("select arms differ from the result type", e)
        elif isinstance(e, L.Affine):
            if not (e.dtype.is_int and e.dtype.bits >= 32):
                self.fail("affine form of a non-integer or narrow type", e)
            if any(a.dtype != e.dtype or c.dtype != e.dtype for a, c in e.terms) or e.offset.dtype != e.dtype:
                self.fail("affine term of another type", e)
            if affine(e.source) != e:
                self.fail("affine form that is not the form of its expression", e)
        elif isinstance(e, (L.Load, L.Atomic)):
            self.access(e.buf, e.index, e)
            b = self.buffers[e.buf]
            if e.dtype != b.elem:
                self.fail("loaded type differs from the element type", e)
            if isinstance(e, L.Atomic) and not (b.space == "shared" or (b.space in ("global", "ref") and b.mut)):
                self.fail("atomic on memory that is not writable", e)
        elif isinstance(e, (L.Intrinsic, L.Collective)) and e.op not in BUILTINS and e.op != "grid_groups":
            self.fail("unknown builtin", e)
        elif isinstance(e, L.ArrayArg):
            if e.buf not in self.buffers or self.buffers[e.buf].elem != e.dtype:
                self.fail("array argument of an unknown buffer or of another element type", e)
        elif isinstance(e, L.Call):
            f = self.module.function(e.func)
            if f is None or len(f.params) != len(e.args):
                self.fail("call of an unknown function or with the wrong number of arguments", e)
        for c in children(e):
            self.expr(c, scope)

    def access(self, buf: str, index: tuple[L.Expr, ...], node: object) -> None:
        b = self.buffers.get(buf)
        if b is None:
            self.fail(f"unknown buffer '{buf}'", node)
            return
        if not index and b.space == "frag":  # a fragment's element in an elementwise statement
            if not self.in_frag_assign:
                self.fail("element of a fragment outside an elementwise fragment statement", node)
        elif not index:  # the element of a map kernel's tensor
            if b.space != "global" or self.map_shape is None:
                self.fail("element of a map outside an element loop or of something that is not a tensor", node)
            elif b.shape != self.map_shape and (isinstance(node, L.Store)
                                                or broadcast_dims(b.shape, self.map_shape) is None):
                self.fail("map tensor of another shape than the map's (or, read, one that does not broadcast to it)",
                          node)
        elif len(index) != len(b.shape):
            self.fail(f"'{buf}' has {len(b.shape)} dimensions, indexed with {len(index)}", node)
        if any(not i.dtype.is_int for i in index):
            self.fail("non-integer index", node)

    def block(self, stmts: tuple[L.Stmt, ...], scope: set[str], top: bool) -> None:
        scope = set(scope)
        for s in stmts:
            if s.loc.line < 1:
                self.fail("statement without a location", s)
            if isinstance(s, L.For):
                for x in (s.start, s.stop, s.step):
                    self.expr(x, scope)
                    if x.dtype != s.var.dtype:
                        self.fail("loop bound of another type than the loop variable", s)
                self.block(s.body, scope | {s.var.name}, False)
                continue
            if isinstance(s, L.ElementLoop):
                self.element_loop(s, scope, top)
                continue
            if isinstance(s, L.Decl):
                if s.init is not None:
                    self.expr(s.init, scope)
                    if s.init.dtype != s.var.dtype:
                        self.fail("declared with a value of another type", s)
                scope.add(s.var.name)
                continue
            if isinstance(s, L.Alloc):
                if s.buf not in self.buffers or self.buffers[s.buf].space not in ("shared", "regs", "frag"):
                    self.fail("allocation of something that is not a shared or register array or a fragment", s)
                if self.buffers[s.buf].space == "frag" and not top:
                    self.fail("fragment allocated inside a block", s)
                if self.buffers[s.buf].space == "shared" and not top:
                    self.fail("shared memory allocated inside a block", s)
                scope.add("@" + s.buf)
                continue
            self.statement(s, scope)
            for b in bodies(s):
                self.block(b, scope, False)

    def element_loop(self, s: L.ElementLoop, scope: set[str], top: bool) -> None:
        self.expr(s.count, scope)
        if not top or self.fn.kind != "kernel" or s.count.dtype.name != "i64" or s.width < 1:
            self.fail("element loop outside a kernel's top level, or with a count that is not i64", s)
        stores = [x for x in s.body if isinstance(x, L.Store) and not x.index]
        if not stores:
            self.fail("element loop that stores no element", s)
        self.map_shape = self.buffers[stores[0].buf].shape
        if s.shape != self.map_shape:
            self.fail("element loop whose shape is not that of the tensors it stores", s)
        self.block(s.body, scope, False)
        self.map_shape = None

    def statement(self, s: L.Stmt, scope: set[str]) -> None:
        exprs = stmt_exprs(s)
        if isinstance(s, (L.Store, L.Fill)):
            b = self.buffers.get(s.buf)
            if b is None or b.space == "const" or (b.space in ("global", "ref") and not b.mut):
                self.fail("store to memory that is not writable", s)
            if b is not None and b.space in ("shared", "regs", "frag") and "@" + s.buf not in scope:
                self.fail(f"'{s.buf}' used before its allocation", s)
        if isinstance(s, L.Store):
            self.access(s.buf, s.index, s)
            elem = self.buffers[s.buf].elem
            if s.op is None and s.value.dtype != elem and not elem.is_half:
                self.fail("stored value of another type than the element", s)
        if isinstance(s, L.Assign) and s.op is None and s.value.dtype != s.var.dtype:
            self.fail("assigned value of another type", s)
        if isinstance(s, L.Return) and s.value is not None and s.value.dtype != self.fn.ret:
            self.fail("returned value of another type", s)
        if isinstance(s, L.Return) and s.values and tuple(v.dtype for v in s.values) != self.fn.rets:
            self.fail("returned values of other types", s)
        if isinstance(s, L.Invoke):
            f = self.module.function(s.func)
            if f is None or len(f.params) != len(s.args) or len(s.outs) != len(f.rets):
                self.fail("call of an unknown function or with the wrong number of arguments", s)
        if isinstance(s, L.Copy):
            ext = [tuple(x for x in v.extents if x is not None) for v in (s.dst, s.src)]
            if ext[0] != ext[1]:
                self.fail("copy between views of different extents", s)
            for v in (s.dst, s.src):
                self.access(v.buf, v.starts, s)
        if isinstance(s, L.VecMove):
            regs, mem = self.buffers.get(s.regs), self.buffers.get(s.view.buf)
            kept = tuple(x for x in s.view.extents if x is not None)
            if regs is None or regs.space != "regs" or "@" + s.regs not in scope or len(regs.shape) != 1:
                self.fail("vector access of something that is not an allocated 1-D register array", s)
            elif mem is None or mem.space not in ("global", "shared", "ref") or mem.elem != regs.elem \
                    or kept != tuple(int(d.value) for d in regs.shape if isinstance(d, L.Const)):
                self.fail("vector access of a view that is not of the register array's extent and type", s)
            elif s.store and mem.space in ("global", "ref") and not mem.mut:
                self.fail("store to memory that is not writable", s)
            else:
                self.access(s.view.buf, s.view.starts, s)
        if isinstance(s, (L.Mma, L.FragLoad, L.FragStore, L.FragAssign)):
            self.fragment_statement(s, scope)
        if isinstance(s, (L.FragReduce, L.FragCombine)):
            self.reduction_statement(s, scope)
        self.in_frag_assign = isinstance(s, L.FragAssign)
        for e in exprs:
            self.expr(e, scope)
        self.in_frag_assign = False

    def reduction_statement(self, s: L.FragReduce | L.FragCombine, scope: set[str]) -> None:
        """A reduction across warps (passes/frag_scratch.py): into an allocated vector, from an
        allocated 2-D fragment, through an allocated shared scratch of one row per part."""
        dst, buf = self.buffers.get(s.dst), self.buffers.get(s.buf) if s.buf else None
        src = self.buffers.get(s.src) if isinstance(s, L.FragReduce) else dst
        names = [s.dst, s.buf] if s.buf else [s.dst]
        if isinstance(s, L.FragReduce):
            names.append(s.src)
        if dst is None or src is None or dst.space != "frag" or src.space != "frag" \
                or any("@" + n not in scope for n in names) or (s.buf and (buf is None or buf.space != "shared")) \
                or (isinstance(s, L.FragCombine) and not s.buf) or s.op not in ("tmax", "tmin", "tsum"):
            self.fail("reduction across warps of something that is not an allocated fragment, vector and scratch", s)

    def fragment_statement(self, s: L.Mma | L.FragLoad | L.FragStore | L.FragAssign, scope: set[str]) -> None:
        acc = self.buffers.get(s.acc)
        if acc is None or acc.space != "frag" or "@" + s.acc not in scope:
            self.fail("fragment statement on something that is not an allocated fragment", s)
            return
        if isinstance(s, L.FragAssign) and s.op is None and s.value.dtype != acc.elem:
            self.fail("fragment assigned a value of another type", s)
        views = (s.a, s.b) if isinstance(s, L.Mma) else (s.src,) if isinstance(s, L.FragLoad) else \
            (s.dst,) if isinstance(s, L.FragStore) else ()
        for v in views:
            self.access(v.buf, v.starts, s)
            kept = tuple(x for x in v.extents if x is not None)
            # mma: shared operands, or an operand fragment (f16/bf16/i8/u8/f32, in scope, not the
            # accumulator) as a; a row vector moves 1-D views
            operand = self.buffers[v.buf]
            in_registers = v is getattr(s, "a", None) and operand.space == "frag" and v.buf != s.acc \
                and operand.elem.name in ("f16", "bf16", "i8", "u8", "f32") and "@" + v.buf in scope
            rank = 2 if isinstance(s, L.Mma) else 1 if is_column_vector_shape(acc.shape) else len(acc.shape)
            if len(kept) != rank or (isinstance(s, L.Mma) and operand.space != "shared" and not in_registers):
                self.fail("fragment operand that is not a view of the fragment's rank (of shared memory or an "
                          "operand fragment, for mma)", s)
        if isinstance(s, (L.FragLoad, L.FragStore)):
            kept = tuple(x for x in (s.src if isinstance(s, L.FragLoad) else s.dst).extents if x is not None)
            dims = acc.shape[1:] if is_column_vector_shape(acc.shape) else acc.shape  # a column vector: 1-D views
            if kept != tuple(int(d.value) for d in dims if isinstance(d, L.Const)):
                self.fail("fragment moved to or from a view of other extents", s)

    def run(self) -> None:
        scope = {p.name for p in self.fn.params if p.kind not in ("tensor", "array")}
        self.block(self.fn.body, scope, True)


def verify_lir(module: L.Module) -> None:
    _frozen(module)
    for fn in module.functions:
        _LirVerifier(module, fn).run()


def verify(pass_name: str, module: Any) -> None:
    """The verifier for the IR after `pass_name` (the hook of `compile_source(..., verify=...)`)."""
    try:
        if pass_name in AST_PASSES:
            verify_ast(module, typed=AST_PASSES.index(pass_name) >= AST_PASSES.index(_TYPED_FROM))
        else:
            verify_lir(module)
            ran = LIR_PASSES[:LIR_PASSES.index(pass_name) + 1]
            verify_plans(module, tuple(p for p in PLANNING_PASSES if p in ran))
    except (VerifyError, PlanError) as e:
        raise VerifyError(f"after {pass_name}: {e}") from None


__all__ = ["VerifyError", "is_expr", "verify", "verify_ast", "verify_lir"]
