"""The `resolve-constants` pass: module constants and constant tables evaluated once, with the
`-D NAME=VALUE` overrides of the command line.

Before:  const BM = 32 * 2                 (and -D BM=128)
         const T: f32[2] = [1.0, 0.5 * 3]
After:   ConstDef(BM, folded=128)
         TableDef(T, shape=(2,), folded=(1.0, 1.5))

A constant may use only the constants above it. Duplicate names are reported by typecheck (the
first definition counts here too).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from tessera.base.dtypes import SCALARS
from tessera.base.errors import DiagnosticSink
from tessera.frontend import nodes as N
from tessera.transpile.const_eval import evaluate, evaluate_constant
from tessera.transpile.consts import NotConstant, Value, convert, type_of_value, value_range_error

CONSTANT_MEMORY = 64 * 1024


def value_kind(v: Value) -> str:
    return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float"


def override(sink: DiagnosticSink, defines: Mapping[str, Value], name: str, loc: N.Loc, value: Value | None,
             what: str) -> Value | None:
    """The value of a module constant or const parameter after `-D` (whose kind must agree)."""
    if name not in defines:
        return value
    new = defines[name]
    if isinstance(new, str):  # `-D T=f16`: for type parameters only
        sink.error(loc, f"-D {name}={new}: a type is given only to a type parameter, and '{name}' is a {what}")
        return value
    if value is not None and value_kind(value) != value_kind(new) \
            and not (value_kind(value) == "float" and value_kind(new) == "int"):
        sink.error(loc, f"-D {name}={new!r} does not match the {value_kind(value)} {what} '{name}'")
        return value
    return float(new) if value is not None and value_kind(value) == "float" else new


class _Resolver:
    def __init__(self, module: N.Module, sink: DiagnosticSink, defines: Mapping[str, Value]) -> None:
        self.module = module
        self.sink = sink
        self.defines = defines
        self.env: dict[str, Value] = {}
        self.const_bytes = 0

    def run(self) -> N.Module:
        items: list[N.Item] = []
        for item in self.module.items:
            if isinstance(item, N.ConstDef):
                items.append(self.const_def(item))
            elif isinstance(item, N.TableDef):
                items.append(self.table_def(item))
            else:
                items.append(item)
        return dataclasses.replace(self.module, items=tuple(items))

    def const_def(self, c: N.ConstDef) -> N.ConstDef:
        literal = True  # made of literals alone: a float value must then fit f32, as its literal
        try:
            value: Value | None
            value, literal = evaluate_constant(c.value, self.env)
        except NotConstant as e:
            why = e.why if e.why and "compile-time" not in e.why else ""
            later = next((i for i in self.module.items if isinstance(i, N.ConstDef) and i.loc.line > c.loc.line
                          and isinstance(e.node, N.Name) and i.name == e.node.id), None)
            if later is not None:
                why = (f"'{later.name}' is defined later, at line {later.loc.line}; a constant can only use "
                       "constants above it")
            if e.error:
                self.sink.error(e.loc or c.value.loc, why)
            else:
                self.sink.error(e.loc or c.value.loc, "a module constant must be a compile-time constant"
                                + (f" ({why})" if why else ""))
            value = None
        if c.name in self.defines:
            literal = True
        value = override(self.sink, self.defines, c.name, c.loc, value, "constant")
        if value is not None:
            ty = SCALARS["f32"] if literal and isinstance(value, float) else type_of_value(value)
            range_error = value_range_error(value, ty)
            if range_error:
                self.sink.error(c.loc, f"module constant '{c.name}': {range_error}")
            if c.name not in self.env:
                self.env[c.name] = value
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
        for d in t.dims:
            try:
                v = evaluate(d, self.env)
            except NotConstant:
                v = None
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                self.sink.error(d.loc, "a table dimension must be a positive integer constant")
                return t
            shape.append(v)
        total = math.prod(shape)
        if total != len(t.values):
            shown = total if total < 2**64 else "more than 2**64"  # many huge dimensions: too long to print
            self.sink.error(t.loc, f"table '{t.name}' has {shown} elements but {len(t.values)} values are given")
            return t
        folded = []
        for item in t.values:
            try:
                x = evaluate(item, self.env)
            except NotConstant:
                self.sink.error(item.loc, "a table value must be a compile-time constant")
                return t
            if elem.is_int and isinstance(x, float):
                self.sink.error(item.loc, f"table '{t.name}' of {elem} cannot hold the float {x!r}")
                return t
            why = value_range_error(x, elem)
            if why:
                self.sink.error(item.loc, f"table '{t.name}' of {elem}: {why}")
                return t
            folded.append(convert(x, elem))
        self.const_bytes += total * elem.c_compute_size
        if self.const_bytes > CONSTANT_MEMORY:
            self.sink.error(t.loc, f"constant tables take {self.const_bytes} bytes, over the {CONSTANT_MEMORY} bytes "
                            "of constant memory")
        return dataclasses.replace(t, shape=tuple(shape), folded=tuple(folded))


def resolve_constants(module: N.Module, sink: DiagnosticSink, defines: Mapping[str, Value]) -> N.Module:
    return _Resolver(module, sink, defines).run()
