"""Generic traversal and rewriting of the lowered IR: children of a node, every sub-expression,
the expressions and nested bodies of a statement, and bottom-up rebuilding with a function.
Passes and analyses use these instead of writing their own walk per node type."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from tessera.frontend.nodes import replace as _replace
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.affine import affine

_EXPR_TYPES = (L.Const, L.Var, L.Unary, L.Binary, L.Compare, L.Logical, L.Select, L.Cast, L.Affine, L.Load,
               L.Intrinsic, L.Collective, L.Atomic, L.Call, L.ArrayArg)
_EXPR_CLASSES = frozenset(_EXPR_TYPES)
_BODY_FIELDS = {"then", "orelse", "body"}


def is_expr(x: object) -> bool:
    return type(x) in _EXPR_CLASSES


# Per node class, the fields that may hold expressions: ("name", kind) with kind "expr" (one),
# "exprs" (a tuple of them), "view" (a View's starts) or "body" (nested statements). Read from the
# field annotations once, so that a new node type needs nothing here.
_SPECS: dict[type, tuple[tuple[str, str], ...]] = {}


def _spec(node: Any) -> tuple[tuple[str, str], ...]:
    cls = type(node)
    spec = _SPECS.get(cls)
    if spec is None:
        out: list[tuple[str, str]] = []
        for f in dataclasses.fields(cls):
            ann = str(f.type)
            if f.name in _BODY_FIELDS:
                out.append((f.name, "body"))
            elif ann.startswith("View"):
                out.append((f.name, "view"))
            elif ann.startswith("tuple[") and "Expr" in ann:
                out.append((f.name, "exprs"))
            elif "Expr" in ann or ann in ("Const", "Var"):
                out.append((f.name, "expr"))
        spec = _SPECS[cls] = tuple(out)
    return spec


def children(e: L.Expr) -> tuple[L.Expr, ...]:
    """The direct sub-expressions of an expression (of an `Affine`: the expression as written,
    which its terms are parts of)."""
    if type(e) is L.Affine:
        return (e.source,)
    kids: list[L.Expr] = []
    for name, kind in _spec(e):
        v = getattr(e, name)
        if kind == "expr":
            if v is not None:
                kids.append(v)
        else:
            kids.extend(v)
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
    for name, kind in _spec(s):
        v = getattr(s, name)
        if kind == "expr":
            if v is not None:
                out.append(v)
        elif kind == "exprs":
            out.extend(v)
        elif kind == "view":
            out.extend(v.starts)
    return tuple(out)


def bodies(s: L.Stmt) -> tuple[tuple[L.Stmt, ...], ...]:
    if isinstance(s, L.If):
        return (s.then, s.orelse)
    if isinstance(s, (L.While, L.For, L.ElementLoop)):
        return (s.body,)
    return ()


def statements(body: tuple[L.Stmt, ...]) -> Iterator[L.Stmt]:
    """Every statement of a body, nested ones included, in source order."""
    for s in body:
        yield s
        for b in bodies(s):
            yield from statements(b)


def stmt_walk(s: L.Stmt) -> Iterator[L.Expr]:
    """Every expression a statement evaluates itself, sub-expressions included."""
    for e in stmt_exprs(s):
        yield from walk(e)


def all_exprs(body: tuple[L.Stmt, ...]) -> Iterator[L.Expr]:
    for s in statements(body):
        yield from stmt_walk(s)


def map_expr(e: L.Expr, fn: Callable[[L.Expr], L.Expr]) -> L.Expr:
    """Rebuild `e` bottom-up: `fn` is applied to each node after its children were rebuilt (a node
    whose children did not change is not copied)."""
    if isinstance(e, L.Affine):
        source = map_expr(e.source, fn)
        return fn(e if source is e.source else affine(source))  # the form of the rewritten expression
    return fn(_rebuilt(e, _mapped_fields(e, fn)))


def map_stmt_exprs(s: L.Stmt, fn: Callable[[L.Expr], L.Expr]) -> L.Stmt:
    """`s` with `map_expr(., fn)` applied to the expressions it evaluates itself (bodies untouched)."""
    result: L.Stmt = _rebuilt(s, _mapped_fields(s, fn))
    return result


def _mapped_fields(node: Any, fn: Callable[[L.Expr], L.Expr]) -> dict[str, Any]:
    """The fields of `node` whose expressions `fn` changed, rebuilt."""
    changes: dict[str, Any] = {}
    for name, kind in _spec(node):
        v = getattr(node, name)
        if kind == "expr":
            if v is not None:
                new = map_expr(v, fn)
                if new is not v:
                    changes[name] = new
        elif kind == "exprs":
            items = tuple(map_expr(x, fn) for x in v)
            if any(a is not b for a, b in zip(items, v)):
                changes[name] = items
        elif kind == "view":
            starts = tuple(map_expr(x, fn) for x in v.starts)
            if any(a is not b for a, b in zip(starts, v.starts)):
                changes[name] = _replace(v, starts=starts)
    return changes


def _rebuilt(node: Any, changes: dict[str, Any]) -> Any:
    """`node` with `changes` (the same node when there are none)."""
    return _replace(node, **changes) if changes else node


def map_body(body: tuple[L.Stmt, ...], fn: Callable[[L.Stmt], L.Stmt | tuple[L.Stmt, ...]]) -> tuple[L.Stmt, ...]:
    """Rebuild a body bottom-up: nested bodies first, then `fn` on each statement (which may return
    several statements, or none). A body in which nothing changed is returned as it is."""
    out: list[L.Stmt] = []
    for s in body:
        if isinstance(s, L.If):
            then, orelse = map_body(s.then, fn), map_body(s.orelse, fn)
            if then is not s.then or orelse is not s.orelse:
                s = _replace(s, then=then, orelse=orelse)
        elif isinstance(s, (L.While, L.For, L.ElementLoop)):
            inner = map_body(s.body, fn)
            if inner is not s.body:
                s = _replace(s, body=inner)
        r = fn(s)
        out.extend(r if isinstance(r, tuple) else (r,))
    return body if len(out) == len(body) and all(a is b for a, b in zip(out, body)) else tuple(out)
