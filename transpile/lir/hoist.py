"""Python scoping over C blocks, the last step of `lower`: a local that a block declares and code
outside that block uses is declared at the top of the function instead.

Before:  if c:                     After:  Decl(v)          (no initial value)
             Decl(v = 1)                   if c:
         else:                                 Assign(v = 1)
             Assign(v = 2)                 else:
         Decl(y = v)                           Assign(v = 2)
                                           Decl(y = v)

Register arrays (`tregs`) are hoisted the same way (their `Alloc` moves, their `Fill` stays).
`hoisted(fn)` is the analysis (any pass that moves code can rerun it); `hoist_function` applies it,
in name order.
"""

from __future__ import annotations

import dataclasses

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import bodies, children, map_body, stmt_exprs


class _Scopes:
    """One walk in source order: where each local (or register array) is declared, and which are
    used in a block that the declaring block does not contain (a use never precedes the
    declaration in source order: the type checker saw to that)."""

    def __init__(self) -> None:
        self.declared: dict[str, tuple[int, ...]] = {}  # local or register array -> its block path
        self.outside: set[str] = set()
        self.counter = 0

    def use(self, name: str, path: tuple[int, ...]) -> None:
        decl = self.declared.get(name)
        if decl is not None and path[: len(decl)] != decl:
            self.outside.add(name)

    def uses(self, e: L.Expr, path: tuple[int, ...]) -> None:
        if isinstance(e, L.Var):
            self.use(e.name, path)
            return
        if isinstance(e, (L.Load, L.Atomic)):
            self.use(e.buf, path)
        for c in children(e):
            self.uses(c, path)

    def block(self, stmts: tuple[L.Stmt, ...], path: tuple[int, ...]) -> None:
        for s in stmts:
            # Only what a nested block declares can be used outside it (top-level names never are).
            if isinstance(s, L.Decl) and path:
                self.declared.setdefault(s.var.name, path)
            elif isinstance(s, L.Alloc) and path:
                self.declared.setdefault(s.buf, path)
            elif isinstance(s, (L.Store, L.Fill)):
                self.use(s.buf, path)
            if self.declared:  # nothing to look for before a nested declaration
                for e in stmt_exprs(s):
                    self.uses(e, path)
            for b in bodies(s):
                self.counter += 1
                self.block(b, (*path, self.counter))


def hoisted(fn: L.Function) -> set[str]:
    """Locals and register arrays used outside the block that declares them."""
    sc = _Scopes()
    sc.block(fn.body, ())
    return sc.outside


def hoist_function(fn: L.Function) -> L.Function:
    names = hoisted(fn)
    if not names:
        return fn
    tops: dict[str, L.Stmt] = {}

    def move(s: L.Stmt) -> L.Stmt | tuple[L.Stmt, ...]:
        if isinstance(s, L.Decl) and s.var.name in names:
            tops.setdefault(s.var.name, L.Decl(s.loc, s.var, None))
            return (L.Assign(s.loc, s.var, s.init),) if s.init is not None else ()
        if isinstance(s, L.Alloc) and s.buf in names:
            tops.setdefault(s.buf, s)
            return ()
        return s

    body = map_body(fn.body, move)
    return dataclasses.replace(fn, body=tuple(tops[n] for n in sorted(tops)) + body)
