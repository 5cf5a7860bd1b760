"""Which memory the tiles may write while one of them runs a region-level assignment: the memory
spaces ("shared", "global") written by any statement that can run between the barriers around it
(region_plan.py's uniform locals use it). A local assigned `mean = sh[0] / f32(C)` by every tile
has one value for the whole group when no statement between those barriers writes shared memory:
in fiber mode each tile runs the whole stretch between two barriers before the next tile starts,
so a write anywhere in it, before or after the assignment, could be seen by some tiles' reads and
not by others'.

The stretch around a statement of a body: back and forth to the nearest barrier of that body; a loop
with a barrier on the way is crossed (it may run no iteration) after adding its body's statements
before its first barrier (going forth) or after its last one (going back), or all of its body where
its barriers are only in loops inside it. Reaching the start or the end of the body of a loop with
a barrier continues in the loop's other iterations (the body's end or start) and before or after
the loop. Register arrays are private to each tile: their writes do not count.
"""

from __future__ import annotations

from tessera.transpile.cpu.structure import barrier_loop
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements, stmt_walk, walk

_MEMORY = ("shared", "global")


class _Writes:
    def __init__(self, fn: L.Function) -> None:
        self.fn = fn

    def space(self, buf: str) -> str:
        b = self.fn.buffer(buf)
        return b.space if b is not None else "global"

    def own(self, s: L.Stmt) -> set[str]:
        """The spaces statement `s` writes itself (its header's atomics, not its nested bodies)."""
        out = {self.space(x.buf) for x in stmt_walk(s) if isinstance(x, L.Atomic)}
        if isinstance(s, (L.Store, L.Fill)):
            out.add(self.space(s.buf))
        elif isinstance(s, L.Copy):
            out.add(self.space(s.dst.buf))
        elif isinstance(s, L.VecMove) and s.store:
            out.add(self.space(s.view.buf))
        return out & set(_MEMORY)

    def all(self, body: tuple[L.Stmt, ...]) -> set[str]:
        return {w for s in statements(body) for w in self.own(s)}

    def scan(self, body: tuple[L.Stmt, ...], i: int, step: int) -> tuple[set[str], bool]:
        """The spaces written from body[i + step] on (step -1: back) to the first barrier of `body`,
        and whether the scan reached the body's edge without one."""
        acc: set[str] = set()
        j = i + step
        while 0 <= j < len(body):
            s = body[j]
            if isinstance(s, L.Barrier):
                return acc, False
            if barrier_loop(s):
                part, through = self.scan(s.body, len(s.body) if step < 0 else -1, step)
                acc |= part | self.own(s) | (self.all(s.body) if through else set())
            else:
                acc |= self.all((s,))
            j += step
        return acc, True

    def around(self, path: list[tuple[tuple[L.Stmt, ...], int]]) -> set[str]:
        """The spaces written around the statement at `path` (innermost body first: each
        enclosing loop with a barrier's body and the index in it)."""
        acc: set[str] = set()
        for step in (-1, 1):
            for depth, (body, i) in enumerate(path):
                part, through = self.scan(body, i, step)
                acc |= part
                if not through:
                    break
                if depth + 1 < len(path):  # the loop's other iterations, then before or after it
                    other, whole = self.scan(body, len(body) if step < 0 else -1, step)
                    acc |= other | (self.all(body) if whole else set())
                    outer, k = path[depth + 1]
                    acc |= self.own(outer[k])
        return acc


def quiet_spaces(fn: L.Function) -> dict[int, set[str]]:
    """id() of each region-level assignment or declaration of kernel `fn` -> the memory spaces
    that no statement around it writes (module docstring)."""
    w = _Writes(fn)
    out: dict[int, set[str]] = {}

    def visit(body: tuple[L.Stmt, ...], outer: list[tuple[tuple[L.Stmt, ...], int]]) -> None:
        for i, s in enumerate(body):
            if isinstance(s, (L.Decl, L.Assign)):
                out[id(s)] = set(_MEMORY) - w.around([(body, i), *outer])
            if barrier_loop(s):
                visit(s.body, [(body, i), *outer])

    visit(fn.body, [])
    return out


def reads_quiet(e: L.Expr, fn: L.Function, quiet: set[str]) -> bool:
    """Whether every memory read in `e` is of a space in `quiet` (register arrays: never)."""
    for x in walk(e):
        if isinstance(x, L.Load):
            b = fn.buffer(x.buf)
            if b is None or b.space not in quiet:
                return False
    return True


__all__ = ["quiet_spaces", "reads_quiet"]
