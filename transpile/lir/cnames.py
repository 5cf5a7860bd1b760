"""The C names of a lowered module's constants, tables and functions (the printers' and the IR
dump's one source for them): transpile/names.py `global_names` over the module, where every name
the compiler makes up (a kernel variant `k_BM64`, a generic function's instance `lerp_T_f32`, an
aligned variant `k_a16`) avoids every name the module declares, its functions' parameters, shape
symbols and locals included. A body sees its own names first, so a parameter named `lerp_T_f32`
would otherwise hide the function its calls of `lerp` print as.
"""

from __future__ import annotations

from collections.abc import Iterator

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import all_exprs
from tessera.transpile.names import c_ident, global_names, unique, var_name


def _declared(fn: L.Function) -> Iterator[str]:
    """The C names of what `fn` declares: parameters, buffers, const parameters and variables."""
    for name in (*(p.name for p in fn.params), *(b.name for b in fn.buffers), *(c.name for c in fn.consts)):
        yield c_ident(name)
    for e in all_exprs(fn.body):
        if isinstance(e, L.Var):
            yield var_name(e.name)


def _aligned_key(name: str) -> str:
    return name + "+a16"  # no function name has a '+'


def module_names(module: L.Module) -> dict[str, str]:
    """C names of the module's constants, tables and functions by IR name (and of each kernel's
    aligned variant: `function_name`)."""
    inner = frozenset(n for f in module.functions for n in _declared(f))
    functions = dict.fromkeys((f.name, f.base_name or f.name, (*((c.name, c.value) for c in f.consts), *f.type_values))
                              for f in module.functions)
    names = global_names(tuple(c.name for c in module.consts), tuple(t.name for t in module.tables), tuple(functions),
                         inner)
    taken = {*inner, *names.values()}
    for f in module.functions:
        if f.aligned:
            names[_aligned_key(f.name)] = unique(names[f.name] + "_a16", taken)
    return names


def function_name(names: dict[str, str], fn: L.Function) -> str:
    """The C name of `fn` (its aligned variant's where it is one)."""
    return names[_aligned_key(fn.name) if fn.aligned else fn.name]
