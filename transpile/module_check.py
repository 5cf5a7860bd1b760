"""Module-level checks: constants (with -D overrides), constant tables, function signatures,
kernel parameters and shape symbols, `const` parameter values of the variant being built."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tessera import nodes as N
from tessera.dtypes import I32, SCALARS
from tessera.errors import DiagnosticSink, Loc, Note
from tessera.transpile.check_consts import value_range_error
from tessera.transpile.check_expr import BUILTIN_NAMES, Sym
from tessera.transpile.consts import NotConstant, Value, convert, evaluate, type_of_value
from tessera.transpile.kernel_header import check_decorators, check_header
from tessera.transpile.names import c_ident, variant_name
from tessera.transpile.typecheck import FunctionChecker, check_function

CONSTANT_MEMORY = 64 * 1024


def _kind(v: Value) -> str:
    return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float"


class ModuleChecker:
    def __init__(self, module: N.Module, sink: DiagnosticSink, defines: Mapping[str, Value],
                 variants: Mapping[str, Mapping[str, Value]], skip_unbound: bool = False) -> None:
        self.module = module
        self.sink = sink
        self.defines = dict(defines)
        self.variants = variants
        self.syms: dict[str, Sym] = {}
        self.used_defines: set[str] = set()
        self.const_bytes = 0
        self.skip_unbound = skip_unbound
        self.unbound: list[str] = []   # kernels left out because a const parameter has no value

    def declare(self, name: str, loc: Loc, sym: Sym) -> bool:
        if name in BUILTIN_NAMES or name == "tshared":
            self.sink.error(loc, f"'{name}' is a builtin name and cannot be redefined")
            return False
        if name in self.syms:
            self.sink.error(loc, f"'{name}' is already defined", Note("first defined here", self.syms[name].loc))
            return False
        self.syms[name] = sym
        return True

    def env(self) -> dict[str, Value]:
        return {k: s.value for k, s in self.syms.items() if s.ref == "const" and s.value is not None}

    def override(self, name: str, loc: Loc, value: Value | None, what: str) -> Value | None:
        if name not in self.defines:
            return value
        self.used_defines.add(name)
        new = self.defines[name]
        if value is not None and _kind(value) != _kind(new) and not (_kind(value) == "float" and _kind(new) == "int"):
            self.sink.error(loc, f"-D {name}={new!r} does not match the {_kind(value)} {what} '{name}'")
            return value
        return float(new) if value is not None and _kind(value) == "float" else new

    def run(self) -> N.Module:
        items: list[N.Item] = []
        for item in self.module.items:
            if isinstance(item, N.ConstDef):
                items.append(self.const_def(item))
            elif isinstance(item, N.TableDef):
                items.append(self.table_def(item))
        for item in self.module.items:
            if isinstance(item, N.FuncDef):
                fn = self.func(item)
                if fn is not None:
                    items.append(fn)
        for name in sorted(set(self.defines) - self.used_defines):
            self.sink.error(Loc(1, 1), f"-D {name}: no module constant or const parameter is named '{name}'")
        return dataclasses.replace(self.module, items=tuple(items))

    def const_def(self, c: N.ConstDef) -> N.ConstDef:
        try:
            value: Value | None = evaluate(c.value, self.env())
        except NotConstant as e:
            why = e.why if e.why and "compile-time" not in e.why else ""
            later = next((i for i in self.module.items if isinstance(i, N.ConstDef) and i.loc.line > c.loc.line
                          and isinstance(e.node, N.Name) and i.name == e.node.id), None)
            if later is not None:
                why = f"'{later.name}' is defined later, at line {later.loc.line}; a constant can only use constants above it"
            self.sink.error(e.loc or c.value.loc, "a module constant must be a compile-time constant"
                            + (f" ({why})" if why else ""))
            value = None
        value = self.override(c.name, c.loc, value, "constant")
        ty = type_of_value(value) if value is not None else I32
        why = value_range_error(value, ty) if value is not None else None
        if why:
            self.sink.error(c.loc, f"module constant '{c.name}': {why}")
        self.declare(c.name, c.loc, Sym(c.name, "const", ty, c.loc, value=value, weak=True))
        return dataclasses.replace(c, folded=value)

    def table_def(self, t: N.TableDef) -> N.TableDef:
        elem = SCALARS.get(t.elem)
        if elem is None:
            self.sink.error(t.elem_loc, f"unknown type '{t.elem}'")
            return t
        nested = next((v for v in t.values if isinstance(v, N.ListLit)), None)
        if nested is not None:
            self.sink.error(nested.loc, f"write the values of table '{t.name}' as one flat list in row-major order")
            return t
        shape: list[int] = []
        env = self.env()
        for d in t.dims:
            try:
                v = evaluate(d, env)
            except NotConstant:
                v = None
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                self.sink.error(d.loc, "a table dimension must be a positive integer constant")
                return t
            shape.append(v)
        total = 1
        for d in shape:
            total *= d
        if total != len(t.values):
            shown = total if total < 2**64 else "more than 2**64"  # many huge dimensions: too long to print
            self.sink.error(t.loc, f"table '{t.name}' has {shown} elements but {len(t.values)} values are given")
            return t
        folded = []
        for v in t.values:
            try:
                x = evaluate(v, env)
            except NotConstant:
                self.sink.error(v.loc, "a table value must be a compile-time constant")
                return t
            if elem.is_int and isinstance(x, float):
                self.sink.error(v.loc, f"table '{t.name}' of {elem} cannot hold the float {x!r}")
                return t
            why = value_range_error(x, elem)
            if why:
                self.sink.error(v.loc, f"table '{t.name}' of {elem}: {why}")
                return t
            folded.append(convert(x, elem))
        ty = N.ArrayType(elem, tuple(shape), "const")
        self.const_bytes += total * elem.c_compute_size
        if self.const_bytes > CONSTANT_MEMORY:
            self.sink.error(t.loc, f"constant tables take {self.const_bytes} bytes, over the {CONSTANT_MEMORY} bytes "
                            "of constant memory")
        self.declare(t.name, t.loc, Sym(t.name, "table", ty, t.loc))
        return dataclasses.replace(t, shape=tuple(shape), folded=tuple(folded))

    # -- functions
    def func(self, fn: N.FuncDef) -> N.FuncDef | None:
        kind = check_decorators(fn, self.sink)
        if kind is None:
            return None
        fn = dataclasses.replace(fn, kind=kind)
        sym = Sym(fn.name, "func", None, fn.loc, extra={"def": fn})
        if not self.declare(fn.name, fn.loc, sym):
            return None
        checker = FunctionChecker(self.sink, self.syms, fn)
        consts = self.params(fn, checker)
        if consts is None:
            return None
        if kind == "kernel":
            cfg = check_header(fn, checker, self.sink)
            if cfg is None:
                return None
            fn = dataclasses.replace(fn, config=cfg, const_values=consts,
                                     c_name=variant_name(fn.name, consts) if consts else c_ident(fn.name),
                                     shape_symbols=tuple(checker.shape_order))
        else:
            if fn.ret is not None and fn.ret not in SCALARS:
                self.sink.error(fn.ret_loc, f"unknown return type '{fn.ret}'")
                return None
            fn = dataclasses.replace(fn, c_name=c_ident(fn.name))
        fn = dataclasses.replace(fn, param_types=tuple((p.name, checker.params[p.name].ty) for p in fn.params
                                                       if p.qual != "const" and p.name in checker.params))
        later = {i.name: i.loc for i in self.module.items if isinstance(i, N.FuncDef) and i.name not in self.syms}
        checked = check_function(self.sink, self.syms, fn, checker.params, later)
        sym.extra["def"] = checked
        sym.extra["cooperative"] = any(u in checked.uses for u in ("tbarrier", "warp", "group_reduce", "tcopy",
                                                                    "coop_call"))
        return checked

    def params(self, fn: N.FuncDef, checker: FunctionChecker) -> tuple[tuple[str, Value], ...] | None:
        ok = True
        consts: list[tuple[str, Value]] = []
        checker.shape_order = []
        given = self.variants.get(fn.name, {})
        # Integer scalar parameters may size tensors (`def k(n: i32, x: f32[n])`); the launch checks
        # that the array's extent equals the value passed.
        self.fn_params = fn.params
        self.size_params = {p.name for p in fn.params if p.dims is None and not p.qual
                            and p.type_name in SCALARS and SCALARS[p.type_name].is_int}
        for p in fn.params:
            if p.name in checker.params:
                self.sink.error(p.loc, f"duplicate parameter '{p.name}'")
                ok = False
                continue
            if p.name in BUILTIN_NAMES or p.name == "tshared" or (p.name in self.syms and self.syms[p.name].ref != "func"):
                self.sink.error(p.loc, f"parameter '{p.name}' hides the "
                                f"{'builtin' if p.name in BUILTIN_NAMES or p.name == 'tshared' else 'module-level'} "
                                f"name '{p.name}'")
                ok = False
                continue
            ty = SCALARS.get(p.type_name)
            if ty is None:
                self.sink.error(p.type_loc, f"unknown type '{p.type_name}'")
                ok = False
                continue
            if fn.kind == "device" and (p.qual or p.dims is not None):
                self.sink.error(p.loc, "device function parameters are scalars passed by value")
                ok = False
                continue
            if p.qual == "const":
                value = self.const_param(fn, p, ty, given, checker)
                if value is None:
                    ok = False
                    continue
                consts.append((p.name, value))
                checker.params[p.name] = Sym(p.name, "const", ty, p.loc, value=value, weak=False)
                continue
            if p.default is not None:
                self.sink.error(p.default.loc, "only const parameters can have a default value")
                ok = False
            if p.dims is None:
                if p.qual == "mut":
                    self.sink.error(p.loc, f"scalar parameter '{p.name}' cannot be mut; only tensors can be stored to")
                    ok = False
                checker.params[p.name] = Sym(p.name, "param", ty, p.loc)
                continue
            dims = self.dims(p, checker)
            if dims is None:
                ok = False
                continue
            checker.params[p.name] = Sym(p.name, "param", N.TensorType(ty, dims, p.qual == "mut"), p.loc)
        for name in given:
            if not any(p.name == name and p.qual == "const" for p in fn.params):
                self.sink.error(fn.loc, f"kernel '{fn.name}' has no const parameter '{name}'")
                ok = False
        return tuple(consts) if ok else None

    def const_param(self, fn: N.FuncDef, p: N.Param, ty, given, checker) -> Value | None:
        if p.dims is not None:
            self.sink.error(p.loc, "a const parameter is a scalar")
            return None
        value: Value | None = None
        if p.default is not None:
            value = checker.const_value(p.default, f"the default of '{p.name}'")
            if value is None:
                return None
        if p.name in given:
            value = given[p.name]
        elif p.name in self.defines:
            value = self.override(p.name, p.loc, value if value is not None else self.defines[p.name],
                                  "const parameter")
        if value is None and self.skip_unbound:
            self.unbound.append(fn.name)
            return None
        if value is None:
            self.sink.error(p.loc, f"const parameter '{p.name}' of '{fn.name}' has no value; give it a default "
                            f"or pass -D {p.name}=VALUE")
            return None
        if ty.is_int and isinstance(value, float):
            self.sink.error(p.loc, f"const parameter '{p.name}' is {ty}, not a float ({value!r})")
            return None
        why = value_range_error(value, ty)
        if why:
            self.sink.error(p.loc, f"const parameter '{p.name}': {why}")
            return None
        return convert(value, ty)

    def dims(self, p: N.Param, checker: FunctionChecker) -> tuple[N.Expr, ...] | None:
        out: list[N.Expr] = []
        for d in p.dims:
            if isinstance(d, N.Name) and d.id in self.size_params:
                out.append(N.Name(d.loc, d.id, SCALARS[next(q.type_name for q in self.fn_params if q.name == d.id)],
                                  "param"))
                continue
            if isinstance(d, N.Name) and d.id not in self.syms and d.id not in checker.params:
                if d.id in BUILTIN_NAMES and d.id != "grid_groups":
                    self.sink.error(d.loc, f"'{d.id}' cannot be a shape symbol; it is a builtin name")
                    return None
                if d.id not in checker.shape_order and d.id != "grid_groups":
                    checker.shape_order.append(d.id)
                    checker.params[d.id] = Sym(d.id, "shape", I32, d.loc)
                out.append(N.Name(d.loc, d.id, I32, "builtin" if d.id == "grid_groups" else "shape"))
                continue
            if isinstance(d, N.Name) and d.id in checker.params and checker.params[d.id].ref == "shape":
                out.append(N.Name(d.loc, d.id, I32, "shape"))
                continue
            v = checker.const_int(d, "a tensor dimension", 1)
            if v is None:
                return None
            out.append(N.IntLit(d.loc, v, I32))
        return tuple(out)
