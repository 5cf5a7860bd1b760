"""The dispatch of the builtins' typing rules (spec sections 5, 7 and 12): the builtin table
(transpile/builtins.py) names each builtin's rule (`Builtin.rule`), and `rule_table` maps every
such name to the one implementation the type checker's parts provide (each part's `rules()`);
also the helpers every rule shares (arity, `scope=`, whole warps, the typed call).

A rule is called with the call and the builtin's name (several builtins share a rule:
`exp` and `sqrt` are both `math1`) and returns the typed call, or the call as written after an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from tessera.base.errors import DiagnosticSink
from tessera.frontend import nodes as N
from tessera.transpile.builtins import SCOPES, TABLE, Builtin

if TYPE_CHECKING:
    from tessera.transpile.checks.typecheck import FunctionChecker

Rule = Callable[[N.Call, str], N.Expr]


class RuleProvider(Protocol):
    def rules(self) -> dict[str, Rule]:
        """The typing rules this part implements, by the name the builtin table gives them."""
        ...


def rule_table(parts: Iterable[RuleProvider], builtins: Iterable[Builtin] = TABLE) -> dict[str, Rule]:
    """Each typing rule the builtin table names, with its one implementation among `parts`. A rule
    that two parts implement, that none does, or that no builtin uses is an error."""
    parts = tuple(parts)
    table: dict[str, Rule] = {}
    for part in parts:
        rules = part.rules()
        twice = sorted(rules.keys() & table.keys())
        if twice:
            first = next(type(p).__name__ for p in parts if twice[0] in p.rules())
            raise ValueError(f"the typing rule '{twice[0]}' is implemented twice: by {first} and by "
                             f"{type(part).__name__}")
        table.update(rules)
    used = _TABLE_RULES if builtins is TABLE else {b.rule: b.name for b in builtins}
    if table.keys() != used.keys():
        missing = [f"'{rule}' (of {name})" for rule, name in used.items() if rule not in table]
        if missing:
            raise ValueError(f"no part implements the typing rule {', '.join(missing)}")
        owner = {rule: type(p).__name__ for p in parts for rule in p.rules()}
        unused = [f"'{rule}' ({owner[rule]})" for rule in table if rule not in used]
        raise ValueError(f"no builtin uses the typing rule {', '.join(unused)}")
    return table


_TABLE_RULES = {b.rule: b.name for b in TABLE}  # each typing rule, with a builtin that uses it


# ---- what every rule shares
def typed_call(e: N.Call, name: str, args: Iterable[N.Expr], ty: N.Type | None,
               kwargs: Iterable[N.Keyword] = ()) -> N.Call:
    """The checked call of builtin `name`: its name with `ref="builtin"`, typed arguments and result."""
    return N.Call(e.loc, N.Name(e.func.loc, name, ref="builtin"), tuple(args), tuple(kwargs), ty)


def check_arity(sink: DiagnosticSink, e: N.Call, name: str, lo: int, hi: int | None = None,
                kw: tuple[str, ...] = ()) -> bool:
    """Whether `e` has `lo` to `hi` positional arguments and keyword arguments among `kw` only."""
    hi = lo if hi is None else hi
    n = len(e.args)
    for k in e.kwargs:
        if k.name not in kw:
            sink.error(k.loc, f"{name}() got an unexpected keyword argument '{k.name}'")
            return False
    if n < lo or n > hi:
        want = f"{lo}" if lo == hi else f"{lo} to {hi}"
        sink.error(e.loc, f"{name}() takes {want} argument{'s' if hi != 1 else ''}, got {n}")
        return False
    return True


def scope_arg(sink: DiagnosticSink, e: N.Call, name: str, pos_index: int | None) -> str | None:
    """The memory scope a call names (`scope=` or the argument at `pos_index`): "device" when none;
    None after an error."""
    node = None
    for k in e.kwargs:
        if k.name == "scope":
            node = k.value
    if node is None and pos_index is not None and len(e.args) > pos_index:
        node = e.args[pos_index]
    if node is None:
        return "device"
    if not isinstance(node, N.StrLit) or node.value not in SCOPES:
        sink.error(node.loc, f"scope of {name}() must be one of \"group\", \"device\", \"mesh\"")
        return None
    return node.value


def check_warps(fc: FunctionChecker, e: N.Call, name: str) -> None:
    """A warp operation in a kernel whose group is not whole warps is an error."""
    if fc.in_kernel and fc.tile and math.prod(fc.tile) % 32 != 0:
        what = name if name.endswith(" and") else f"{name}()"
        fc.sink.error(e.loc, f"{what} needs whole warps: the group has {math.prod(fc.tile)} tiles, "
                      "not a multiple of 32")
