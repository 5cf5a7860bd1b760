"""The names a function body sees and the constants among them (spec section 6): a name's symbol
(`Sym`), the lookup through the function's scopes and then the module's, compile-time evaluation
over the constants in scope, the report of an undefined name and the check of a name to define.

The type checker's core (typecheck.FunctionChecker) owns one `Scope` that its parts share; the
kernel-headers pass and module_check use one alone to evaluate a header's or a signature's constants.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tessera.base.dtypes import SCALARS, ScalarType
from tessera.base.errors import DiagnosticSink, Loc, Note
from tessera.frontend import nodes as N
from tessera.transpile.builtins import RESERVED
from tessera.transpile.const_eval import evaluate
from tessera.transpile.consts import NotConstant, Value

if TYPE_CHECKING:
    from tessera.transpile.checks.expr import Expressions
    from tessera.transpile.checks.typecheck import FunctionChecker

BUILTIN_NAMES = RESERVED | frozenset(SCALARS)
# Python's names for conversions, with what to write instead.
PYTHON_TYPES = {"float": "write f32(x) (or f64(x)) to convert to a float",
                "int": "write i32(x) (or i64(x)) to convert to an integer"}


@dataclass
class Sym:
    name: str
    ref: str  # local param shape const table shared regs func loopvar
    ty: N.Type | None
    loc: Loc
    value: Value | None = None
    weak: bool = False
    block: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


class Scope:
    """The names in scope: `params` (the parameters, shape symbols and const parameters), then
    `locals` when a body is checked, then the module's symbols."""

    def __init__(self, sink: DiagnosticSink, module_syms: dict[str, Sym], params: dict[str, Sym],
                 locals_: dict[str, Sym] | None = None, tile: tuple[int, ...] = ()) -> None:
        self.sink = sink
        self.module_syms = module_syms
        self.params = params
        self.scopes = [params] if locals_ is None else [params, locals_]
        self.tile = tile  # the group shape (a kernel's; empty elsewhere): group_tile_count() is constant
        # Names whose definition was rejected with an error: their uses are not reported again.
        self.quiet: set[str] = set()
        self.later_funcs: dict[str, Loc] = {}  # the functions defined further down the file
        self._const_env: tuple[tuple[int, int], dict[str, Value], dict[str, ScalarType]] | None = None

    def lookup(self, name: str) -> Sym | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.module_syms.get(name)

    # ---- constants
    def const_env(self) -> tuple[dict[str, Value], dict[str, ScalarType]]:
        """The values of the constants in scope: the module's and the parameters' (locals are never
        constants, nor can they hide one), and the types of those that are not literal-like (const
        parameters); rebuilt only when one of those two scopes has grown."""
        key = (len(self.module_syms), len(self.params))
        cached = self._const_env
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        env: dict[str, Value] = {}
        types: dict[str, ScalarType] = {}
        for scope in (self.module_syms, self.params):
            for k, s in scope.items():
                env.pop(k, None)
                types.pop(k, None)
                if s.ref == "const" and s.value is not None:
                    env[k] = s.value
                    if not s.weak and isinstance(s.ty, ScalarType):
                        types[k] = s.ty
        self._const_env = (key, env, types)
        return env, types

    def const_value(self, e: N.Expr, what: str) -> Value | None:
        try:
            return evaluate(e, *self.const_env())
        except NotConstant as nc:
            why = f" ({nc.why})" if nc.why and "not a compile-time constant" not in nc.why else ""
            loc = nc.loc or e.loc
            name = _name_at(e, loc)
            sym = self.lookup(name.id) if name is not None else None
            if name is not None and sym is not None and sym.ref in _RUNTIME_WHAT:
                why = f" ('{name.id}' is {_RUNTIME_WHAT[sym.ref]})"
                if sym.ref == "param" and isinstance(sym.ty, ScalarType):
                    why = f" ('{name.id}' is a parameter passed at launch; declare it '{name.id}: const {sym.ty}' " \
                          "for a compile-time value)"
            self.sink.error(loc, f"{what} must be a compile-time constant{why}")
            return None

    def try_const(self, e: N.Expr) -> Value | None:
        """The value of `e` if it is a compile-time constant, else None (reports nothing)."""
        v = self.const_or_why(e)
        return None if isinstance(v, NotConstant) else v

    def const_or_why(self, e: N.Expr) -> Value | NotConstant:
        """The value of `e` if it is a compile-time constant, else why not (reports nothing)."""
        if isinstance(e, N.Call) and isinstance(e.func, N.Name) and self.tile:
            n = math.prod(self.tile)
            if e.func.id == "group_tile_count":
                return n
        try:
            return evaluate(e, *self.const_env())
        except NotConstant as nc:
            return nc

    def const_int(self, e: N.Expr, what: str, lo: int | None = None, hi: int | None = None) -> int | None:
        v = self.const_value(e, what)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            self.sink.error(e.loc, f"{what} must be an integer constant, not {v!r}")
            return None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
            self.sink.error(e.loc, f"{what} must be {rng}, not {v}")
            return None
        return v

    # ---- names
    def undefined(self, loc: Loc, name: str) -> None:
        if name in self.quiet:
            return
        if name in PYTHON_TYPES:
            self.sink.error(loc, f"'{name}' is not a .tsr type; {PYTHON_TYPES[name]}")
            return
        if name in self.later_funcs:
            where = self.later_funcs[name]
            self.sink.error(loc, f"'{name}' is defined later in the file (line {where.line}); a function can "
                            "call only the device functions defined above it", Note("defined here", where))
            return
        if self.sink.full:  # not shown: skip the costly search for a suggestion
            self.sink.error(loc, f"undefined name '{name}'")
            return
        known = set(BUILTIN_NAMES) | set(self.module_syms)
        for scope in self.scopes:
            known |= set(scope)
        close = difflib.get_close_matches(name, sorted(known - {name}), n=1)
        notes = (Note(f"did you mean '{close[0]}'?"),) if close else ()
        self.sink.error(loc, f"undefined name '{name}'", *notes)

    def check_new_name(self, name: str, loc: Loc) -> bool:
        """Whether a local, loop variable or array may take `name` (reported when not)."""
        if name in BUILTIN_NAMES or name == "tshared":
            self.sink.error(loc, f"'{name}' is a builtin name and cannot be redefined")
            return False
        s = self.module_syms.get(name)
        if s is not None:
            what = {"const": "a module constant", "table": "a constant table", "func": "a function"}.get(s.ref, "defined")
            self.sink.error(loc, f"'{name}' is {what} and cannot be assigned", Note("defined here", s.loc))
            return False
        return True


_RUNTIME_WHAT = {
    "shape": "a shape symbol, known only at launch",
    "param": "a parameter passed at launch",
    "local": "a variable", "loopvar": "a loop variable",
}


def _name_at(e: object, loc: Loc | None) -> N.Name | None:
    """The name at `loc` inside expression `e` (where a constant evaluation stopped)."""
    if isinstance(e, N.Name):
        return e if e.loc == loc else None
    if not dataclasses.is_dataclass(e):
        return None
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        for x in v if isinstance(v, tuple) else (v,):
            if isinstance(x, (N.Name, N.BinOp, N.Unary, N.Call, N.Compare, N.BoolOp, N.Ternary, N.Index,
                              N.TupleLit, N.Keyword)):
                found = _name_at(x, loc)
                if found is not None:
                    return found
    return None


class Part:
    """What every part of the type checker holds: the core it belongs to (typecheck.FunctionChecker),
    the core's diagnostics and scope, and the expression part (the first part the core makes)."""

    def __init__(self, fc: FunctionChecker) -> None:
        self.fc = fc
        self.sink = fc.sink
        self.scope = fc.scope

    @property
    def exprs(self) -> Expressions:
        return self.fc.exprs
