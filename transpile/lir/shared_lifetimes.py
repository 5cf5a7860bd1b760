"""Lifetimes of a kernel's shared arrays (spec section 15): which pairs of arrays may be live in the
same barrier interval, so that they must not share memory (`conflicts`).

The kernel's lowered body becomes a control-flow graph of its statements (loops with their back
edges, `break`, `continue`, `return`). Barriers (`tbarrier()`, a `twait` that acts as one) cut it
into segments: a segment is every barrier-free path from one barrier (or the kernel's start) to the
next (or the kernel's end). Barriers are reached by every tile of the group together (spec section
7), so in each interval between two of them all tiles run paths of one segment, and a path that
returns early runs beside all of them. An array takes part in a segment when

- a statement on one of its paths touches the array (a load, store, atomic, copy, fragment load or
  store, fill or call that names it; a `twait` touches every destination of an asynchronous copy,
  whose data lands until then, and so does the kernel's end, or a `return`, that a copy reaches
  with no `twait(0)` on the way), or
- it holds data across the segment: some access reaches the segment's first barrier and the last
  barrier reaches some access. Writes are not taken to end a value, so an array used on both sides
  of a loop's back edge stays live through the whole loop.

Two arrays conflict when they take part in one segment. An array the kernel never touches
conflicts with every other one (it keeps memory of its own). Device functions are not looked into:
a call is one statement that touches the arrays it is given, and a barrier inside it ends nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import bodies, statements, stmt_walk


def touched(s: L.Stmt) -> set[str]:
    """The buffers a statement (not its nested bodies) names: its own `buf`, its views', its
    expressions' (loads, atomics, array arguments). Read from the fields, so that a new statement
    form that names a buffer through a `buf` field or a `View` needs nothing here."""
    out: set[str] = set()
    for f in dataclasses.fields(s):
        if f.name in ("then", "orelse", "body"):
            continue
        v = getattr(s, f.name)
        if f.name == "buf" and isinstance(v, str):
            out.add(v)
        elif isinstance(v, L.View):
            out.add(v.buf)
    out.update(e.buf for e in stmt_walk(s) if isinstance(e, (L.Load, L.Atomic, L.ArrayArg)))
    return out


class _Graph:
    """Nodes are statements (their accessed arrays) and barriers; edges follow control flow."""

    def __init__(self, arrays: frozenset[str], async_dsts: frozenset[str]) -> None:
        self.arrays, self.async_dsts = arrays, async_dsts
        self.succ: list[set[int]] = []
        self.acc: list[frozenset[str]] = []
        self.barrier: list[bool] = []
        self.returns: list[int] = []
        self.issues: list[tuple[int, str]] = []  # asynchronous copies: (node, destination)
        self.drains: set[int] = set()            # waits for every committed copy (`twait(0)`)

    def node(self, preds: set[int], acc: set[str] | frozenset[str] = frozenset(), barrier: bool = False) -> int:
        n = len(self.succ)
        self.succ.append(set())
        self.acc.append(frozenset(acc) & self.arrays)
        self.barrier.append(barrier)
        for p in preds:
            self.succ[p].add(n)
        return n

    def body(self, stmts: tuple[L.Stmt, ...], preds: set[int], loop: tuple[int, set[int]] | None) -> set[int]:
        """Add `stmts` after `preds`; return the nodes control falls out of."""
        for s in stmts:
            preds = self.stmt(s, preds, loop)
        return preds

    def stmt(self, s: L.Stmt, preds: set[int], loop: tuple[int, set[int]] | None) -> set[int]:
        if isinstance(s, L.If):
            c = self.node(preds, touched(s))
            return self.body(s.then, {c}, loop) | self.body(s.orelse, {c}, loop)
        if bodies(s):  # For, While, ElementLoop: a header that each iteration comes back to
            head = self.node(preds, touched(s))
            inner: tuple[int, set[int]] = (head, set())
            for n in self.body(bodies(s)[0], {head}, inner):
                self.succ[n].add(head)
            return {head} | inner[1]
        if isinstance(s, (L.Break, L.Continue)):
            assert loop is not None
            n = self.node(preds)
            if isinstance(s, L.Break):
                loop[1].add(n)
            else:
                self.succ[n].add(loop[0])
            return set()
        if isinstance(s, L.Return):
            self.returns.append(self.node(preds, touched(s)))
            return set()
        if isinstance(s, L.Alloc):  # a declaration, not an access
            return preds
        if isinstance(s, L.Barrier):
            return {self.node(preds, barrier=True)}
        if isinstance(s, L.AsyncWait):
            n = self.node(preds, self.async_dsts)
            if s.pending == 0:
                self.drains.add(n)
            return {self.node({n}, barrier=True)} if s.barrier else {n}
        n = self.node(preds, touched(s))
        if isinstance(s, L.Copy) and s.async_:
            self.issues.append((n, s.dst.buf))
        return {n}

    def closure(self, starts: Iterator[int] | set[int], edges: list[set[int]], through_barriers: bool,
                stops: set[int] | frozenset[int] = frozenset()) -> set[int]:
        """The nodes reachable from `starts` in one or more steps (stopping at barriers unless
        `through_barriers`, and at `stops`; a node stopped at is included)."""
        seen: set[int] = set()
        stack = [m for n in starts for m in edges[n]]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if (through_barriers or not self.barrier[n]) and n not in stops:
                stack.extend(edges[n])
        return seen

    def in_flight_at_exits(self, exits: list[int]) -> None:
        """Let the kernel's exits touch the destinations of asynchronous copies that may reach
        them without a `twait(0)`: such data lands at some time until then."""
        for n, dst in self.issues:
            for x in self.closure({n}, self.succ, True, self.drains) & set(exits):
                self.acc[x] |= {dst} & self.arrays


def conflicts(fn: L.Function) -> frozenset[frozenset[str]]:
    """The pairs of `fn`'s constant-size shared arrays that may be live in the same barrier
    interval (and so need memory of their own)."""
    names = [b.name for b in fn.buffers if b.space == "shared" and all(isinstance(d, L.Const) for d in b.shape)]
    if len(names) < 2:
        return frozenset()
    async_dsts = frozenset(s.dst.buf for s in statements(fn.body) if isinstance(s, L.Copy) and s.async_)
    g = _Graph(frozenset(names), async_dsts)
    entry = g.node(set(), barrier=True)
    last = g.node(g.body(fn.body, {entry}, None))
    g.node({last}, barrier=True)  # the kernel's end: every tile reaches it
    g.in_flight_at_exits([last, *g.returns])
    pred: list[set[int]] = [set() for _ in g.succ]
    for n, succ in enumerate(g.succ):
        for m in succ:
            pred[m].add(n)
    barriers = [n for n, b in enumerate(g.barrier) if b]
    to_barrier = {e: g.closure({e}, pred, False) for e in barriers}   # barrier-free paths into e
    to_return = set(g.returns) | g.closure(set(g.returns), pred, False)
    users = {a: {n for n, acc in enumerate(g.acc) if a in acc} for a in names}
    after = {a: g.closure(users[a], g.succ, True) for a in names}     # reached from an access
    before = {a: g.closure(users[a], pred, True) for a in names}      # reaching an access
    out: set[frozenset[str]] = set()
    for b in barriers:
        ahead = g.closure({b}, g.succ, False)
        early = {n for n in ahead if n in to_return}
        ends = [n for n in ahead if g.barrier[n]]
        for e in ends or [b]:  # no end barrier: paths that all return
            seg = {n for n in ahead if n in to_barrier[e] and not g.barrier[n]} | early
            live = {a for n in seg for a in g.acc[n]} | {a for a in names if b in after[a] and e in before[a]}
            out |= {frozenset((x, y)) for x in live for y in live if x < y}
    unused = [a for a in names if not users[a]]
    out |= {frozenset((a, x)) for a in unused for x in names if x != a}
    return frozenset(out)


__all__ = ["conflicts", "touched"]
