"""Type checking at module level: the symbol table (constants, tables, functions, in order),
function signatures (parameter types, tensor dimensions, shape symbols), then each body.

Runs after resolve-constants, specialize and kernel-headers, whose results it reads; it adds types
only (`Param.ty`, expression types, name references). A device function that takes fragments
(`S: mut frag f32[BM, BN]`, spec section 14) is checked here in its signature and its rules
(`frag_param`, `check_inline_def`) and not compiled on its own: device_calls.InlineCalls inlines
each call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tessera.base.dtypes import I32, SCALARS
from tessera.base.errors import DiagnosticSink, Loc, Note
from tessera.frontend import nodes as N
from tessera.transpile.builtins import Coop
from tessera.transpile.checks.assignments import assigned_names
from tessera.transpile.checks.callgraph import coop_class, uses_indices, uses_warp_ops, walk
from tessera.transpile.checks.generics import binding_text, instance_name, substitute
from tessera.transpile.checks.scope import BUILTIN_NAMES, Scope, Sym
from tessera.transpile.checks.typecheck import check_function
from tessera.transpile.consts import type_of_value


class ModuleChecker:
    def __init__(self, module: N.Module, sink: DiagnosticSink) -> None:
        self.module = module
        self.sink = sink
        self.syms: dict[str, Sym] = {}
        self.instances: list[N.FuncDef] = []  # device function instances checked, not yet placed

    def declare(self, name: str, loc: Loc, sym: Sym) -> bool:
        if name in BUILTIN_NAMES:
            self.sink.error(loc, f"'{name}' is a builtin name and cannot be redefined")
            return False
        if name in self.syms:
            self.sink.error(loc, f"'{name}' is already defined", Note("first defined here", self.syms[name].loc))
            return False
        self.syms[name] = sym
        return True

    def run(self) -> N.Module:
        items: list[N.Item] = []
        for item in self.module.items:
            if isinstance(item, N.ConstDef):
                ty = type_of_value(item.folded) if item.folded is not None else I32
                self.declare(item.name, item.loc, Sym(item.name, "const", ty, item.loc, value=item.folded, weak=True))
                items.append(item)
            elif isinstance(item, N.TableDef):
                if item.shape:
                    table_ty = N.ArrayType(SCALARS[item.elem], item.shape, "const")
                    self.declare(item.name, item.loc, Sym(item.name, "table", table_ty, item.loc))
                items.append(item)
        for item in self.module.items:
            if isinstance(item, N.FuncDef):
                if item.type_params:  # a generic device function: instantiated by its calls
                    self.declare(item.name, item.loc, Sym(item.name, "func", None, item.loc, extra={
                        "def": item, "generic": True, "instantiate": self.instance, "warp": False, "coop": Coop.NONE,
                        "indices": False}))
                    continue
                fn = self.func(item)
                items.extend(self.instances)  # the instances it calls, before it
                self.instances.clear()
                if fn is not None:
                    items.append(fn)
        return dataclasses.replace(self.module, items=tuple(items))

    def instance(self, generic: N.FuncDef, values: tuple[tuple[str, str], ...]) -> Sym | None:
        """The symbol of a device function's instance for a binding, checked on first use (None
        when it has errors)."""
        name = instance_name(generic, values)
        sym = self.syms.get(name)
        if sym is not None:
            return sym if sym.ref == "func" and sym.extra["def"].base_name == generic.name else None
        checked = self.func(substitute(generic, values, rename=True))
        if checked is None:  # with errors, or a function that takes fragments (inlined at each call)
            sym = self.syms.get(name)
            return sym if sym is not None and sym.extra.get("inline") else None
        self.instances.append(checked)
        return self.syms.get(name)

    def func(self, fn: N.FuncDef) -> N.FuncDef | None:
        if not fn.type_values:
            return self._func(fn)
        first = len(self.sink.items)
        checked = self._func(fn)
        note = Note(f"in '{fn.base_name or fn.name}' with {binding_text(fn.type_values)}")
        for k in range(first, len(self.sink.items)):
            d = self.sink.items[k]
            self.sink.items[k] = dataclasses.replace(d, notes=(*d.notes, note))
        return checked

    def _func(self, fn: N.FuncDef) -> N.FuncDef | None:
        sym = Sym(fn.name, "func", None, fn.loc, extra={"def": fn, "warp": False, "coop": Coop.NONE,
                                                                  "indices": False})
        if not self.declare(fn.name, fn.loc, sym):
            return None
        signature = Scope(self.sink, self.syms, {})  # the parameters, as they are declared
        params = self.params(fn, signature)
        if params is None or (fn.kind == "kernel" and fn.config is None):
            return None
        if fn.kind == "device" and fn.ret is not None and fn.ret not in SCALARS:
            self.sink.error(fn.ret_loc or fn.loc, f"unknown return type '{fn.ret}'")
            return None
        if fn.rets and fn.kind != "device":
            self.sink.error(fn.ret_loc or fn.loc, "only device functions return values")
            return None
        for t, loc in zip(fn.rets, fn.rets_locs):
            if t not in SCALARS:
                self.sink.error(loc, f"unknown return type '{t}'")
                return None
        fn = dataclasses.replace(fn, params=params)
        sym.extra["def"] = fn  # typed parameters, for the calls in its own body
        if any(p.frag for p in params):  # inlined at each call (device_calls.InlineCalls), not compiled alone
            sym.extra["inline"] = True
            sym.extra["inline_ok"] = check_inline_def(fn, self.syms, self.sink)
            return None
        later = {i.name: i.loc for i in self.module.items if isinstance(i, N.FuncDef) and i.name not in self.syms}
        checked = check_function(self.sink, self.syms, fn, signature.params, later)
        sym.extra["def"] = checked
        if checked.kind == "device":  # what callers need to know (kernels are not called)
            funcs = [(k, s) for k, s in self.syms.items() if s.ref == "func"]
            sym.extra["warp"] = uses_warp_ops(checked, {k: s.extra["warp"] for k, s in funcs})
            sym.extra["coop"] = coop_class(checked, {k: s.extra["coop"] for k, s in funcs})
            sym.extra["indices"] = uses_indices(checked, {k: s.extra["indices"] for k, s in funcs})
        return checked

    def params(self, fn: N.FuncDef, scope: Scope) -> tuple[N.Param, ...] | None:
        """The typed parameters (tensor dimensions resolved, shape symbols declared), or None."""
        ok = True
        out: dict[int, N.Param] = {}  # position in the signature -> typed
        consts = dict(fn.const_values)
        assigned = assigned_names(fn.body)
        # Integer scalar parameters may size tensors (`def k(n: i32, x: f32[n])`); the launch checks
        # that the array's extent equals the value passed.
        size_params = {p.name: SCALARS[p.type_name] for p in fn.params if p.dims is None and not p.qual
                       and p.type_name in SCALARS and SCALARS[p.type_name].is_int and fn.kind == "kernel"}
        # `const` parameters first: a tensor's dimension may name one declared after it (as it may a
        # scalar parameter); the typed parameters keep their written order.
        order = sorted(range(len(fn.params)), key=lambda i: fn.params[i].qual != "const")
        for i in order:
            p = fn.params[i]
            if p.frag and p.name not in scope.params:
                typed = frag_param(p, fn, scope, self.sink)
                ok = ok and typed is not None
                if typed is not None:
                    out[i] = typed
                continue
            earlier = next((q for q in fn.params[:i] if q.name == p.name), None)
            if earlier is not None:
                self.sink.error(p.loc, f"duplicate parameter '{p.name}'", Note("first defined here", earlier.loc))
                ok = False
                continue
            if p.name in scope.params:
                first = scope.params[p.name]
                if first.ref == "shape":
                    self.sink.error(p.loc, f"parameter '{p.name}' has the name of the shape symbol '{p.name}'; "
                                    "rename one of them", Note("shape symbol here", first.loc))
                else:
                    self.sink.error(p.loc, f"duplicate parameter '{p.name}'", Note("first defined here", first.loc))
                ok = False
                continue
            if p.name in BUILTIN_NAMES or (p.name in self.syms and self.syms[p.name].ref != "func"):
                self.sink.error(p.loc, f"parameter '{p.name}' hides the "
                                f"{'builtin' if p.name in BUILTIN_NAMES else 'module-level'} name '{p.name}'")
                ok = False
                continue
            ty = SCALARS.get(p.type_name)
            if ty is None:
                self.sink.error(p.type_loc, f"unknown type '{p.type_name}'")
                ok = False
                continue
            if fn.kind == "device" and (p.qual == "const" or (p.qual == "mut" and p.dims is None)):
                self.sink.error(p.loc, "device function parameters are scalars passed by value or arrays "
                                "(`v: f32[n]`, `s: mut f32[256]`); a const or mut scalar parameter is an error")
                ok = False
                continue
            if fn.kind == "device" and p.default is not None:
                self.sink.error(p.default.loc, "device function parameters cannot have a default value")
                ok = False
                continue
            if p.qual == "const":
                if p.name not in consts:
                    ok = False  # specialize reported why it has no value
                    continue
                scope.params[p.name] = Sym(p.name, "const", ty, p.loc, value=consts[p.name], weak=False)
                out[i] = dataclasses.replace(p, ty=ty)
                continue
            if p.default is not None:
                self.sink.error(p.default.loc, "only const parameters can have a default value")
                ok = False
            if p.dims is None:
                if p.qual == "mut":
                    self.sink.error(p.loc, f"scalar parameter '{p.name}' cannot be mut; only tensors can be stored to")
                    ok = False
                # assigned in the body: a local initialized from the argument (assigned_names)
                ref = "local" if p.name in assigned else "param"
                scope.params[p.name] = Sym(p.name, ref, ty, p.loc)
                out[i] = dataclasses.replace(p, ty=ty)
                continue
            dims = self.dims(p, scope, size_params)
            if dims is None:
                ok = False
                continue
            tty = N.TensorType(ty, dims, p.qual == "mut")
            scope.params[p.name] = Sym(p.name, "param", tty, p.loc)
            out[i] = dataclasses.replace(p, ty=tty)
        return tuple(out[i] for i in sorted(out)) if ok else None

    def dims(self, p: N.Param, scope: Scope, size_params: dict) -> tuple[N.Expr, ...] | None:
        out: list[N.Expr] = []
        assert p.dims is not None
        for d in p.dims:
            if isinstance(d, N.Name) and d.id in size_params:
                out.append(N.Name(d.loc, d.id, size_params[d.id], "param"))
                continue
            if isinstance(d, N.Name) and d.id not in self.syms and d.id not in scope.params:
                if d.id in BUILTIN_NAMES and d.id != "grid_groups":
                    self.sink.error(d.loc, f"'{d.id}' cannot be a shape symbol; it is a builtin name")
                    return None
                if d.id == p.name:  # `x: f32[x]`: in the body, `x` could not mean both
                    self.sink.error(d.loc, f"the shape symbol '{d.id}' has the name of its own tensor '{p.name}'; "
                                    "name the dimension differently (for example 'n')", Note("the tensor", p.loc))
                    return None
                if d.id != "grid_groups":
                    scope.params[d.id] = Sym(d.id, "shape", I32, d.loc)
                out.append(N.Name(d.loc, d.id, I32, "builtin" if d.id == "grid_groups" else "shape"))
                continue
            if isinstance(d, N.Name) and d.id in scope.params and scope.params[d.id].ref == "shape":
                out.append(N.Name(d.loc, d.id, I32, "shape"))
                continue
            v = scope.const_int(d, "a tensor dimension", 1)
            if v is None:
                return None
            out.append(N.IntLit(d.loc, v, I32))
        return tuple(out)


FRAG_ELEMS = ("f32", "i32", "f16", "bf16")  # the element types of fragment parameters


def frag_param(p: N.Param, fn: N.FuncDef, scope: Scope, sink: DiagnosticSink) -> N.Param | None:
    """The typed fragment parameter `p` (an ArrayType in the space "frag" whose shape holds the shape
    symbols' names), its shape symbols declared in `scope`; None after an error."""
    if fn.kind != "device":
        sink.error(p.loc, f"only @device functions take fragments; a kernel declares its own "
                   f"({p.name} = tfrag({p.type_name}[...]))")
        return None
    if p.qual == "const" or p.default is not None:
        where = p.default.loc if p.default is not None else p.loc
        sink.error(where, f"a fragment parameter is 'name: frag T[dims]' or 'name: mut frag T[dims]', "
                   f"with no const and no default value ('{p.name}')")
        return None
    elem = SCALARS.get(p.type_name)
    if elem is None or elem.name not in FRAG_ELEMS:
        sink.error(p.type_loc, f"a fragment holds {', '.join(FRAG_ELEMS)} elements, not '{p.type_name}'")
        return None
    if p.dims is None or len(p.dims) not in (1, 2) or (elem.is_half and len(p.dims) != 2):
        sink.error(p.type_loc, f"fragment parameter '{p.name}' needs its dimensions: two (frag {elem}[BM, BN])"
                   f"{'' if elem.is_half else f', or one for a row vector (frag {elem}[BM])'}")
        return None
    shape: list[int | str] = []
    for d in p.dims:
        if isinstance(d, N.Name) and scope.lookup(d.id) is None and d.id not in BUILTIN_NAMES:
            scope.params.setdefault(d.id, Sym(d.id, "shape", I32, d.loc, extra={"frag": True}))
            shape.append(d.id)
            continue
        if isinstance(d, N.Name) and d.id in scope.params and scope.params[d.id].ref == "shape":
            shape.append(d.id)
            continue
        v = scope.const_int(d, "a fragment dimension (a constant or a shape symbol)", 1)
        if v is None:
            return None
        shape.append(v)
    return dataclasses.replace(p, ty=N.ArrayType(elem, tuple(shape), "frag"))


def check_inline_def(fn: N.FuncDef, syms: Mapping[str, Sym], sink: DiagnosticSink) -> bool:
    """The rules of a function that takes fragments, at its definition (typed parameters)."""
    ok = True
    if fn.ret is not None or fn.rets:
        sink.error(fn.ret_loc or fn.loc, f"'{fn.name}' takes fragments, so it is inlined and returns nothing; "
                   f"pass a mut fragment or a mut array for its results")
        ok = False
    readonly = {p.name: p for p in fn.params if p.frag and p.qual != "mut"}
    for n in (x for s in fn.body for x in walk(s)):
        if isinstance(n, N.Return):
            sink.error(n.loc, f"'{fn.name}' takes fragments, so it is inlined and cannot return; let the "
                       f"code after the return run under an if instead")
            ok = False
        written = _written_fragment(n)
        if written is not None and written.id in readonly:
            sink.error(written.loc, f"'{written.id}' is a read-only fragment parameter of {fn.name}(); declare "
                       f"it '{written.id}: mut frag ...' to write it", Note("parameter here", readonly[written.id].loc))
            ok = False
        if isinstance(n, N.Call) and isinstance(n.func, N.Name) and n.func.id in syms \
                and syms[n.func.id].extra.get("inline"):
            callee: N.FuncDef = syms[n.func.id].extra["def"]
            for a, q in zip(n.args, callee.params):
                if isinstance(a, N.Name) and a.id in readonly and q.frag and q.qual == "mut":
                    sink.error(a.loc, f"'{a.id}' is a read-only fragment parameter of {fn.name}(), but argument "
                               f"'{q.name}' of {callee.name}() is mut", Note("parameter here", readonly[a.id].loc))
                    ok = False
    return ok


def _written_fragment(n: object) -> N.Name | None:
    """The name a statement or call writes as a whole fragment: `F[:] = ...`, `tload(F, v)`, `tmma(F, ...)`."""
    if isinstance(n, (N.Assign, N.AugAssign)) and isinstance(n.target, N.Index) and isinstance(n.target.base, N.Name):
        return n.target.base
    if isinstance(n, N.Call) and isinstance(n.func, N.Name) and n.func.id in ("tload", "tmma") and n.args \
            and isinstance(n.args[0], N.Name):
        return n.args[0]
    return None


def typecheck(module: N.Module, sink: DiagnosticSink) -> N.Module:
    """The `typecheck` pass: type-check a module whose constants, const parameters and kernel
    headers are resolved."""
    return ModuleChecker(module, sink).run()
