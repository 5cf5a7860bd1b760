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

from tessera.transpile import lir as L
from tessera.transpile.lir_visit import bodies, stmt_exprs, walk


class _Scopes:
    def __init__(self) -> None:
        self.declared: dict[str, tuple[int, ...]] = {}  # local or register array -> its block path
        self.used: dict[str, list[tuple[int, ...]]] = {}
        self.counter = 0

    def note_use(self, name: str, path: tuple[int, ...]) -> None:
        self.used.setdefault(name, []).append(path)

    def block(self, stmts: tuple[L.Stmt, ...], path: tuple[int, ...]) -> None:
        for s in stmts:
            if isinstance(s, L.Decl):
                self.declared.setdefault(s.var.name, path)
            elif isinstance(s, L.Alloc):
                self.declared.setdefault(s.buf, path)
            for e in stmt_exprs(s):
                for x in walk(e):
                    if isinstance(x, L.Var):
                        self.note_use(x.name, path)
                    elif isinstance(x, (L.Load, L.Atomic)):
                        self.note_use(x.buf, path)
            if isinstance(s, (L.Store, L.Fill)):
                self.note_use(s.buf, path)
            for b in bodies(s):
                self.counter += 1
                self.block(b, (*path, self.counter))


def hoisted(fn: L.Function) -> set[str]:
    """Locals and register arrays used outside the block that declares them."""
    sc = _Scopes()
    sc.block(fn.body, ())
    out = set()
    for name, decl in sc.declared.items():
        if any(p[: len(decl)] != decl for p in sc.used.get(name, ())):
            out.add(name)
    return out


def hoist_function(fn: L.Function) -> L.Function:
    names = hoisted(fn)
    if not names:
        return fn
    tops: dict[str, L.Stmt] = {}

    def rewrite(stmts: tuple[L.Stmt, ...]) -> tuple[L.Stmt, ...]:
        out: list[L.Stmt] = []
        for s in stmts:
            if isinstance(s, L.Decl) and s.var.name in names:
                tops.setdefault(s.var.name, L.Decl(s.loc, s.var, None))
                if s.init is not None:
                    out.append(L.Assign(s.loc, s.var, s.init))
                continue
            if isinstance(s, L.Alloc) and s.buf in names:
                tops.setdefault(s.buf, s)
                continue
            if isinstance(s, L.If):
                s = dataclasses.replace(s, then=rewrite(s.then), orelse=rewrite(s.orelse))
            elif isinstance(s, (L.While, L.For)):
                s = dataclasses.replace(s, body=rewrite(s.body))
            out.append(s)
        return tuple(out)

    body = rewrite(fn.body)
    return dataclasses.replace(fn, body=tuple(tops[n] for n in sorted(tops)) + body)
