"""Element-type parameters (spec section 4): `def scale[T](x: T[n], y: mut T[n], a: T)` and the
restricted `def scale[T: (f16, bf16, f32)](...)`.

A generic function is never checked or emitted as written: each binding of its type parameters
is an *instance*, the function with every use of `T` (parameter and return types, annotations,
casts `T(x)`, `tshared.alloc(T[64])`, `tregs(T[4], 0)`, `bitcast(x, T)`) replaced by the bound
scalar type. Kernels are instantiated by `specialize` (the binding comes from the launch or from
`-D T=f16`), device functions by the type checker (bound from each call's arguments). Every
instance is then checked like any other function, and errors in it carry a note naming the binding.

    def scale[T](x: T[n], a: T)        with T = f16
    ->  def scale(x: f16[n], a: f16)   (type_values=(("T", "f16"),))

An instance that must be told apart from its siblings (device function instances, the kernel
instances `tesserac` emits for every allowed type) is renamed `scale[T=f16]`: not an identifier,
so no name in the program can be the same. Its C name comes from transpile/names.py like a kernel
variant's (`scale_T_f16`, made unique against every other name of the module).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping

from tessera.base.dtypes import SCALARS
from tessera.base.errors import DiagnosticSink, Note
from tessera.frontend import nodes as N
from tessera.transpile.checks.scope import BUILTIN_NAMES


def binding_text(values: tuple[tuple[str, str], ...]) -> str:
    """`T = f16, U = i32`."""
    return ", ".join(f"{k} = {v}" for k, v in values)


def instance_name(fn: N.FuncDef, values: tuple[tuple[str, str], ...]) -> str:
    """The name of an instance that is renamed (`lerp[T=f16]`), which no identifier can equal."""
    return f"{fn.name}[{', '.join(f'{k}={v}' for k, v in values)}]"


def substitute(fn: N.FuncDef, values: tuple[tuple[str, str], ...], rename: bool) -> N.FuncDef:
    """The instance of `fn` for `values` (every type parameter bound)."""
    mapping = dict(values)
    body = _sub(fn.body, mapping)
    params = _sub(fn.params, mapping)
    ret = mapping.get(fn.ret, fn.ret) if fn.ret is not None else None
    rets = tuple(mapping.get(r, r) for r in fn.rets)  # several results: `-> (T, i32)`
    return N.replace(fn, name=instance_name(fn, values) if rename else fn.name, params=params, ret=ret, rets=rets,
                     body=body, type_params=(), type_values=values, base_name=fn.name if rename else "")


def _sub(x: object, m: Mapping[str, str]) -> object:
    if isinstance(x, tuple):
        items = tuple(_sub(i, m) for i in x)
        return x if all(a is b for a, b in zip(items, x)) else items
    if isinstance(x, N.Name):
        return N.replace(x, id=m[x.id]) if x.id in m else x
    if not dataclasses.is_dataclass(x) or isinstance(x, (type, N.Loc)):
        return x
    changes: dict[str, object] = {}
    for f in dataclasses.fields(x):
        v = getattr(x, f.name)
        if f.name in ("type_name", "annotation") and isinstance(v, str):
            if v in m:
                changes[f.name] = m[v]
            continue
        if isinstance(v, tuple) or (dataclasses.is_dataclass(v) and not isinstance(v, type)):
            nv = _sub(v, m)
            if nv is not v:
                changes[f.name] = nv
    return N.replace(x, **changes) if changes else x


def rename(x: object, names: Mapping[str, N.Expr], local: Callable[[str], str | None]) -> object:
    """`x` (a function's body) with each name replaced: by the expression `names[id]`, else by
    `local(id)` unless that is None (a loop variable too); used to inline a function
    (device_calls.InlineCalls)."""
    if isinstance(x, tuple):
        return tuple(rename(i, names, local) for i in x)
    if isinstance(x, N.Name):
        if x.id in names:
            return N.replace(names[x.id], loc=x.loc)
        return x if local(x.id) is None else N.replace(x, id=local(x.id))
    if not dataclasses.is_dataclass(x) or isinstance(x, (type, N.Loc)):
        return x
    changes: dict[str, object] = {}
    for f in dataclasses.fields(x):
        v = getattr(x, f.name)
        if isinstance(x, N.For) and f.name == "var":
            changes["var"] = local(v) or v
        elif isinstance(v, tuple) or (dataclasses.is_dataclass(v) and not isinstance(v, type)):
            changes[f.name] = rename(v, names, local)
    return N.replace(x, **changes)


def check_type_params(fn: N.FuncDef, module: N.Module, sink: DiagnosticSink) -> bool:
    """Report type parameters that clash with other names, restriction lists with unknown types, and
    (device functions) type parameters no parameter uses. True when the function can be instantiated."""
    ok = True
    module_names: dict[str, tuple[str, N.Loc]] = {}
    for item in module.items:
        what = "module constant" if isinstance(item, N.ConstDef) else "constant table" \
            if isinstance(item, N.TableDef) else "kernel" if item.is_kernel else "device function"
        module_names.setdefault(item.name, (what, item.loc))
    seen: dict[str, N.Loc] = {}
    for tp in fn.type_params:
        name = tp.name
        if name in SCALARS:
            sink.error(tp.loc, f"type parameter '{name}' is a scalar type's name; name the parameter T (or another "
                       "new name) and restrict it instead: [T: (...)]")
            ok = False
        elif name in BUILTIN_NAMES or name == "tshared":
            sink.error(tp.loc, f"type parameter '{name}' clashes with the builtin name '{name}'")
            ok = False
        elif name in seen:
            sink.error(tp.loc, f"duplicate type parameter '{name}'", Note("first defined here", seen[name]))
            ok = False
        elif name in module_names:
            what, loc = module_names[name]
            sink.error(tp.loc, f"type parameter '{name}' clashes with the {what} '{name}'", Note("defined here", loc))
            ok = False
        else:
            clash = next((p for p in fn.params if p.name == name), None)
            dim = next((d for p in fn.params for d in p.dims or () if isinstance(d, N.Name) and d.id == name), None)
            if clash is not None:
                sink.error(tp.loc, f"type parameter '{name}' clashes with the parameter '{name}' of '{fn.name}'",
                           Note("parameter here", clash.loc))
                ok = False
            elif dim is not None:
                sink.error(tp.loc, f"type parameter '{name}' clashes with the shape symbol '{name}' of '{fn.name}'",
                           Note("shape symbol here", dim.loc))
                ok = False
        seen.setdefault(name, tp.loc)
        allowed: set[str] = set()
        for t, loc in zip(tp.allowed or (), tp.allowed_locs):
            if t not in SCALARS:
                sink.error(loc, f"unknown type '{t}' in the types of '{name}' (the scalar types are "
                           f"{', '.join(SCALARS)})")
                ok = False
            elif t in allowed:
                sink.error(loc, f"type '{t}' is listed twice for '{name}'")
                ok = False
            allowed.add(t)
        if not fn.is_kernel and not any(p.type_name == name for p in fn.params):
            sink.error(tp.loc, f"type parameter '{name}' of device function '{fn.name}' is the type of no parameter, "
                       "so no call can bind it")
            ok = False
    names = {tp.name for tp in fn.type_params}
    for target in _assigned(fn.body):
        if target[0] in names:
            sink.error(target[1], f"'{target[0]}' is a type parameter of '{fn.name}' and cannot be assigned")
            ok = False
    return ok


def _assigned(stmts: tuple[N.Stmt, ...]) -> Iterator[tuple[str, N.Loc]]:
    for s in stmts:
        if isinstance(s, (N.Assign, N.AugAssign)):
            targets = s.target.items if isinstance(s.target, N.TupleLit) else (s.target,)
            for t in targets:
                if isinstance(t, N.Name):
                    yield t.id, t.loc
        elif isinstance(s, N.For):
            yield s.var, s.var_loc or s.loc
            yield from _assigned(s.body)
        elif isinstance(s, N.While):
            yield from _assigned(s.body)
        elif isinstance(s, N.If):
            yield from _assigned(s.then)
            yield from _assigned(s.orelse)


def kernel_bindings(fn: N.FuncDef, sink: DiagnosticSink, given: Mapping[str, object],
                    defines: Mapping[str, object], skip_unbound: bool) -> list[tuple[tuple[str, str], ...]] | None:
    """The bindings of a kernel's type parameters to compile: the one given (by the launch or `-D`),
    else every allowed type of a restricted parameter. None when the kernel is left out (unbound,
    with `skip_unbound`) or has errors (reported)."""
    choices: list[list[tuple[str, str]]] = []
    ok = True
    for tp in fn.type_params:
        value = given.get(tp.name, defines.get(tp.name))
        if value is None:
            if skip_unbound:
                return None
            if tp.allowed is None:
                sink.error(tp.loc, f"type parameter '{tp.name}' of kernel '{fn.name}' has no type: pass -D "
                           f"{tp.name}=f32 (or another scalar type), or restrict it to the types to emit: "
                           f"[{tp.name}: (f16, f32)]")
                ok = False
                continue
            choices.append([(tp.name, t) for t in tp.allowed])
            continue
        if not isinstance(value, str) or value not in SCALARS:
            sink.error(tp.loc, f"-D {tp.name}={value!r}: type parameter '{tp.name}' takes a scalar type "
                       f"({', '.join(SCALARS)})")
            ok = False
            continue
        if tp.allowed is not None and value not in tp.allowed:
            sink.error(tp.loc, f"{tp.name} = {value} is not one of the types allowed for '{tp.name}' of '{fn.name}' "
                       f"({', '.join(tp.allowed)})")
            ok = False
            continue
        choices.append([(tp.name, value)])
    if not ok:
        return None
    return [tuple(c) for c in itertools.product(*choices)]
