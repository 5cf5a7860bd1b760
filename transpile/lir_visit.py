"""Generic traversal and rewriting of the lowered IR: children of a node, every sub-expression,
the expressions and nested bodies of a statement, and bottom-up rebuilding with a function.
Passes and analyses use these instead of writing their own walk per node type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from tessera.transpile import lir as L

_EXPR_TYPES = (L.Const, L.Var, L.Unary, L.Binary, L.Compare, L.Logical, L.Select, L.Cast, L.Affine, L.Load,
               L.Intrinsic, L.Collective, L.Atomic, L.Call)
_BODY_FIELDS = {"then", "orelse", "body"}


def is_expr(x: object) -> bool:
    return isinstance(x, _EXPR_TYPES)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(node: Any) -> tuple[str, ...]:
    """The names of a node's fields other than its location and type (cached per class)."""
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("loc", "dtype"))
    return names


def children(e: L.Expr) -> tuple[L.Expr, ...]:
    """The direct sub-expressions of an expression (an Affine's atoms and coefficients too)."""
    if isinstance(e, L.Affine):
        out: list[L.Expr] = []
        for atom, c in e.terms:
            out += (atom, c)
        return (*out, e.offset)
    kids: list[L.Expr] = []
    for name in _fields(e):
        v = getattr(e, name)
        if is_expr(v):
            kids.append(v)
        elif isinstance(v, tuple):
            kids.extend(x for x in v if is_expr(x))
    return tuple(kids)


def walk(e: L.Expr) -> Iterator[L.Expr]:
    """`e` and every expression below it, parents first."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def stmt_exprs(s: L.Stmt) -> tuple[L.Expr, ...]:
    """The expressions a statement evaluates itself (not those of its nested bodies), including
    the starts of a copy's views, the target of an assignment and the variable of a loop."""
    out: list[L.Expr] = []
    for name in _fields(s):
        if name in _BODY_FIELDS:
            continue
        v = getattr(s, name)
        if is_expr(v):
            out.append(v)
        elif isinstance(v, L.View):
            out.extend(v.starts)
        elif isinstance(v, tuple):
            out.extend(x for x in v if is_expr(x))
    return tuple(out)


def bodies(s: L.Stmt) -> tuple[tuple[L.Stmt, ...], ...]:
    if isinstance(s, L.If):
        return (s.then, s.orelse)
    if isinstance(s, (L.While, L.For)):
        return (s.body,)
    return ()


def statements(body: tuple[L.Stmt, ...]) -> Iterator[L.Stmt]:
    """Every statement of a body, nested ones included, in source order."""
    for s in body:
        yield s
        for b in bodies(s):
            yield from statements(b)


def all_exprs(body: tuple[L.Stmt, ...]) -> Iterator[L.Expr]:
    for s in statements(body):
        for e in stmt_exprs(s):
            yield from walk(e)


def map_expr(e: L.Expr, fn: Callable[[L.Expr], L.Expr]) -> L.Expr:
    """Rebuild `e` bottom-up: `fn` is applied to each node after its children were rebuilt."""
    if isinstance(e, L.Affine):
        terms = tuple((map_expr(a, fn), map_expr(c, fn)) for a, c in e.terms)
        new: L.Expr = dataclasses.replace(e, terms=terms, offset=map_expr(e.offset, fn))  # type: ignore[arg-type]
        return fn(new)
    changes: dict[str, Any] = {}
    for name in _fields(e):
        v = getattr(e, name)
        if is_expr(v):
            changes[name] = map_expr(v, fn)
        elif isinstance(v, tuple) and any(is_expr(x) for x in v):
            changes[name] = tuple(map_expr(x, fn) if is_expr(x) else x for x in v)
    return fn(_rebuilt(e, changes))


def map_stmt_exprs(s: L.Stmt, fn: Callable[[L.Expr], L.Expr]) -> L.Stmt:
    """`s` with `map_expr(., fn)` applied to the expressions it evaluates itself (bodies untouched)."""
    changes: dict[str, Any] = {}
    for name in _fields(s):
        if name in _BODY_FIELDS:
            continue
        v = getattr(s, name)
        if is_expr(v):
            changes[name] = map_expr(v, fn)
        elif isinstance(v, L.View):
            changes[name] = dataclasses.replace(v, starts=tuple(map_expr(x, fn) for x in v.starts))
        elif isinstance(v, tuple) and any(is_expr(x) for x in v):
            changes[name] = tuple(map_expr(x, fn) if is_expr(x) else x for x in v)
    return _rebuilt(s, changes)


def _rebuilt(node: Any, changes: dict[str, Any]) -> Any:
    """`node` with `changes` (the same node when there are none)."""
    return dataclasses.replace(node, **changes) if changes else node


def map_body(body: tuple[L.Stmt, ...], fn: Callable[[L.Stmt], L.Stmt | tuple[L.Stmt, ...]]) -> tuple[L.Stmt, ...]:
    """Rebuild a body bottom-up: nested bodies first, then `fn` on each statement (which may return
    several statements, or none)."""
    out: list[L.Stmt] = []
    for s in body:
        if isinstance(s, L.If):
            s = dataclasses.replace(s, then=map_body(s.then, fn), orelse=map_body(s.orelse, fn))
        elif isinstance(s, (L.While, L.For)):
            s = dataclasses.replace(s, body=map_body(s.body, fn))
        r = fn(s)
        out.extend(r if isinstance(r, tuple) else (r,))
    return tuple(out)
