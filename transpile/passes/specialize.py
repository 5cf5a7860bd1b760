"""The `specialize` pass: fixes the `const` parameters of each kernel to the values of the variant
being compiled (from the caller, then `-D`, then the default).

Before:  def matmul(A: f32[M, K], BM: const i32 = 64)         (variant BM=128)
After:   FuncDef(matmul, const_values=(("BM", 128),))

A kernel with type parameters (`def scale[T]`) becomes one instance per binding (transpile/checks/generics.py):
the binding given by the caller or `-D T=f16`, else every allowed type of a restricted parameter
(several instances are renamed `scale[T=f16]`, ...; their C names are `scale_T_f16`, ...). Generic device functions are kept as they are
(the type checker instantiates them per call).

Kernels whose const parameters have no value are dropped when the caller asked for that
(`skip_unbound`: the Python API compiles those on their first launch), else reported. A `-D` that
names neither a module constant nor a const parameter is reported here, where both are known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tessera.base.dtypes import SCALARS, ScalarType
from tessera.base.errors import DiagnosticSink, Loc
from tessera.frontend import nodes as N
from tessera.transpile.checks.generics import check_type_params, kernel_bindings, substitute
from tessera.transpile.const_eval import evaluate
from tessera.transpile.consts import NotConstant, Value, convert, module_env, value_range_error
from tessera.transpile.passes.resolve_constants import override


class _Specializer:
    def __init__(self, sink: DiagnosticSink, defines: Mapping[str, Value], env: dict[str, Value],
                 skip_unbound: bool) -> None:
        self.sink = sink
        self.defines = defines
        self.env = env
        self.skip_unbound = skip_unbound

    def function(self, fn: N.FuncDef, given: Mapping[str, Value]) -> N.FuncDef | None:
        """The function with its const values, or None when it is left out (unbound)."""
        consts: list[tuple[str, Value]] = []
        env = dict(self.env)
        types: dict[str, ScalarType] = {}  # the const parameters' types (module constants are literal-like)
        seen: set[str] = set()
        unbound = False
        for p in fn.params:
            if p.qual != "const" or p.name in seen:
                seen.add(p.name)
                continue
            seen.add(p.name)
            ty = SCALARS.get(p.type_name)
            if ty is None:
                continue  # an unknown type: typecheck reports it
            if p.dims is not None:
                self.sink.error(p.loc, "a const parameter is a scalar")
                continue
            value = self.value(fn, p, ty, given, env, types)
            if value is _UNBOUND:
                unbound = True
                continue
            if value is None:
                continue
            assert not isinstance(value, _Unbound)
            consts.append((p.name, value))
            env[p.name] = value
            types[p.name] = ty
        type_names = {t for t, _ in fn.type_values}
        for name in given:
            if name not in type_names and not any(p.name == name and p.qual == "const" for p in fn.params):
                self.sink.error(fn.loc, f"kernel '{fn.name}' has no const parameter '{name}'")
        if unbound:
            return None
        return dataclasses.replace(fn, const_values=tuple(consts))

    def value(self, fn: N.FuncDef, p: N.Param, ty: ScalarType, given: Mapping[str, Value],
              env: dict[str, Value], types: dict[str, ScalarType]) -> Value | _Unbound | None:
        value: Value | None = None
        if p.default is not None and p.name not in given:
            value = self.default(fn, p, env, types)
            if value is None:
                return None
        if p.name in given:
            value = given[p.name]
        elif p.name in self.defines:
            value = override(self.sink, self.defines, p.name, p.loc,
                             value if value is not None else self.defines[p.name], "const parameter")
        if value is None and self.skip_unbound:
            return _UNBOUND
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

    def default(self, fn: N.FuncDef, p: N.Param, env: dict[str, Value],
                types: dict[str, ScalarType]) -> Value | None:
        assert p.default is not None
        try:
            return evaluate(p.default, env, types)
        except NotConstant as nc:
            loc = nc.loc or p.default.loc
            why = f" ({nc.why})" if nc.why and "not a compile-time constant" not in nc.why else ""
            if isinstance(nc.node, N.Name) and any(q.name == nc.node.id and q.qual != "const" for q in fn.params):
                why = f" ('{nc.node.id}' is a parameter passed at launch)"
            self.sink.error(loc, f"the default of '{p.name}' must be a compile-time constant{why}")
            return None


class _Unbound:
    pass


_UNBOUND = _Unbound()


def specialize(module: N.Module, sink: DiagnosticSink, defines: Mapping[str, Value],
               variants: Mapping[str, Mapping[str, Value]], skip_unbound: bool) -> N.Module:
    spec = _Specializer(sink, defines, module_env(module), skip_unbound)
    items: list[N.Item] = []
    known = {i.name for i in module.items if isinstance(i, N.ConstDef)}
    for item in module.items:
        if isinstance(item, N.FuncDef):
            known |= {p.name for p in item.params if p.qual == "const"}
            if item.type_params:
                known |= {t.name for t in item.type_params if item.is_kernel}
                if not check_type_params(item, module, sink):
                    continue
            if item.is_kernel:
                given = variants.get(item.name, {})
                instances = [item]
                if item.type_params:
                    bindings = kernel_bindings(item, sink, given, defines, skip_unbound)
                    if bindings is None:
                        continue
                    instances = [substitute(item, b, rename=len(bindings) > 1) for b in bindings]
                for inst in instances:
                    fn = spec.function(inst, given)
                    if fn is not None:
                        items.append(fn)
                continue
        items.append(item)
    for name in sorted(set(defines) - known):
        sink.error(Loc(1, 1), f"-D {name}: no module constant or const parameter is named '{name}'")
    return dataclasses.replace(module, items=tuple(items))
