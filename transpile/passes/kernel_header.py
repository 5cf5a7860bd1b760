"""The `kernel-headers` pass: decorators checked (`@kernel` or `@device`, `@autotune`), kernel headers evaluated.

Before:  @kernel tile[(BM // 4, 4)] shared(16_KiB)        (with BM = 64)
         def k(...)
After:   FuncDef(k, kind="kernel", config=KernelConfig(tile=(16, 4), shared_budget=16384))

A function whose decorators are wrong is left out of the module (after its error); a kernel whose
header is wrong keeps `config=None`.
"""

from __future__ import annotations

import dataclasses
import math

from tessera.base.dtypes import I32, SCALARS
from tessera.base.errors import DiagnosticSink, Loc
from tessera.base.limits import MAX_VECTORIZE
from tessera.frontend import nodes as N
from tessera.transpile.checks.scope import Scope, Sym
from tessera.transpile.consts import Value, module_env, type_of_value
from tessera.transpile.passes.autotune_spec import check_autotune

CLAUSES = ("tile", "shared", "vectorize", "launch_bounds")


def check_decorators(fn: N.FuncDef, sink: DiagnosticSink) -> str | None:
    """The function's kind ("kernel" or "device") from its decorators, or None after an error."""
    names = [d.name for d in fn.decorators]
    for d in fn.decorators:
        if d.name not in ("kernel", "device", "autotune"):
            sink.error(d.loc, f"unknown decorator '@{d.name}'; expected @kernel, @device or @autotune")
            return None
    if names.count("kernel") + names.count("device") != 1:
        sink.error(fn.decorators[-1].loc, "a function needs exactly one of @kernel or @device")
        return None
    if "device" in names:
        d = fn.decorators[names.index("device")]
        if d.args is not None or d.clauses:
            sink.error(d.loc, "@device takes no arguments")
            return None
        return "device"
    d = fn.decorators[names.index("kernel")]
    if d.args is not None:
        sink.error(d.loc, "@kernel takes clauses, not arguments: @kernel tile[(128,)] shared(16_KiB)")
        return None
    return "kernel"


def check_header(fn: N.FuncDef, checker: Scope, sink: DiagnosticSink) -> N.KernelConfig | None:
    deco = next(d for d in fn.decorators if d.name == "kernel")
    tile: tuple[int, ...] | None = None
    shared: int | None = None
    vectorize: int | None = None
    bounds: int | None = None
    seen: set[str] = set()
    ok = True
    for c in deco.clauses:
        assert isinstance(c.func, N.Name), c.func  # build_ir makes a clause a call of its name
        name = c.func.id
        if name not in CLAUSES:
            sink.error(c.loc, f"unknown kernel clause '{name}'; expected one of {', '.join(CLAUSES)}")
            ok = False
            continue
        if name in seen:
            sink.error(c.loc, f"'{name}' is given twice")
            ok = False
            continue
        seen.add(name)
        if c.kwargs:
            sink.error(c.kwargs[0].loc, f"{name}(...) takes no keyword arguments")
            ok = False
            continue
        if name == "tile":
            if not (len(c.args) == 1 and isinstance(c.args[0], N.TupleLit)):
                sink.error(c.loc, "write the group shape as tile[(x,)], tile[(x, y)] or tile[(x, y, z)]")
                ok = False
                continue
            items = c.args[0].items
            if not 1 <= len(items) <= 3:
                sink.error(c.loc, f"a group shape has 1 to 3 dimensions, not {len(items)}")
                ok = False
                continue
            dims = [d for d in (checker.const_int(i, "a tile dimension", 1, 1024) for i in items) if d is not None]
            if len(dims) < len(items):
                ok = False
                continue
            total = math.prod(dims)
            if total > 1024:
                sink.error(c.loc, f"a group has at most 1024 tiles, this one has {total}")
                ok = False
                continue
            if len(dims) == 3 and dims[2] > 64:
                sink.error(items[2].loc, "the z dimension of a group is at most 64")
                ok = False
                continue
            tile = tuple(dims)
            continue
        if isinstance(c.func, N.Name) and len(c.args) == 1 and isinstance(c.args[0], N.TupleLit):
            sink.error(c.loc, f"write {name}(value), not {name}[...]")
            ok = False
            continue
        if len(c.args) != 1:
            sink.error(c.loc, f"{name}(...) takes one argument")
            ok = False
            continue
        if name == "shared":
            shared = checker.const_int(c.args[0], "the shared-memory budget", 1)
            ok = ok and shared is not None
        elif name == "vectorize":
            vectorize = checker.const_int(c.args[0], "the vector width", 1, MAX_VECTORIZE)
            if vectorize is not None and vectorize & (vectorize - 1):
                sink.error(c.args[0].loc, f"the vector width must be a power of two (1, 2, 4, 8 or 16), not {vectorize}")
                vectorize = None
            ok = ok and vectorize is not None
        else:
            bounds = checker.const_int(c.args[0], "launch_bounds", 1, 32)
            ok = ok and bounds is not None
    if tile is None and "tile" not in seen:
        sink.error(deco.loc, "a kernel needs a group shape: @kernel tile[(128,)]")
        return None
    if not ok or tile is None:
        return None
    return N.KernelConfig(tile, shared, vectorize, bounds)


def constant_scope(sink: DiagnosticSink, env: dict[str, Value], fn: N.FuncDef) -> Scope:
    """An evaluator of constant expressions in `fn`'s header and signature: the module's constants
    and the function's const parameters are known; naming another parameter or a shape symbol is
    reported as such."""
    module_syms = {k: Sym(k, "const", type_of_value(v), Loc(1, 1), value=v, weak=True) for k, v in env.items()}
    consts = dict(fn.const_values)
    params: dict[str, Sym] = {}
    for p in fn.params:
        ty = SCALARS.get(p.type_name)
        if p.qual == "const":
            params[p.name] = Sym(p.name, "const", ty, p.loc, value=consts.get(p.name))
        else:
            params[p.name] = Sym(p.name, "param", ty if p.dims is None else None, p.loc)
        for d in p.dims or ():
            if isinstance(d, N.Name) and d.id not in env and d.id not in params:
                params[d.id] = Sym(d.id, "shape", I32, d.loc)
    return Scope(sink, module_syms, params)


def evaluate_headers(module: N.Module, sink: DiagnosticSink) -> N.Module:
    env = module_env(module)
    items: list[N.Item] = []
    for item in module.items:
        if isinstance(item, N.FuncDef):
            kind = check_decorators(item, sink)
            if kind is None:
                continue
            if any(d.name == "autotune" for d in item.decorators) and check_autotune(item, env, sink) is None:
                continue
            config = None
            if kind == "kernel":
                # A kernel whose header is wrong stays, without a config: typecheck still checks its
                # parameters (independent errors are reported together), then leaves it out.
                config = check_header(item, constant_scope(sink, env, item), sink)
            item = dataclasses.replace(item, kind=kind, config=config)
        items.append(item)
    return dataclasses.replace(module, items=tuple(items))
