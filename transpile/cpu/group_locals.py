"""Region mode's locals kept once for the whole group (found by the plan-cpu-regions pass,
region_plan.py; printed by regions.py): a local with one value for every tile of the group
(`_uniform_locals`: each assignment a region-level statement of a uniform value), every assignment
of which ends (or leads, below) its region. Such a local is one C variable instead of an array with an element per
tile, and its assignments run once, after the region's loop over the tiles, with tile 0's values
(the same as any tile's: the value is uniform). The tree of a shared-memory reduction is the
common case:

    h = 64
    while h > 0:
        if t < h: sh[t] += sh[t + h]
        tbarrier()
        h //= 2

Here `h` is one `int`: the loop over the tiles tests `t < h` against it (which the C compiler can
split at `h`), and `h //= 2` runs once per level instead of once per tile. Every other statement of
the region runs before the assignments in each tile, and reads the value the local had when the
region began in every tile: the same as before.

An assignment of such a local may also run once *before* the region's loop over the tiles (it
*leads* the region) where no statement of the region before it (that does not lead itself) assigns
a local it reads or reads or assigns the local itself: then each tile would compute it from the
values the region began with, which are the group's (the value is uniform: quiet.py has shown that
no tile writes the memory it reads between the barriers around it). A local read from shared
memory after a barrier and then used by a stride loop in the same region is the common case:

    mean = sh[0] / f32(C)
    v = 0.0
    for c in range(t, C, 128): ...
"""

from __future__ import annotations

from collections.abc import Iterator

from tessera.transpile.cpu.structure import Regions, assigned, refs, var_names
from tessera.transpile.lir import nodes as L


def trailing(stmts: list[L.Stmt], names: frozenset[str] | set[str]) -> int:
    """How many statements at the end of region `stmts` assign (or declare) one of `names`."""
    count = 0
    for s in reversed(stmts):
        if not (isinstance(s, (L.Assign, L.Decl)) and s.var.name in names):
            break
        count += 1
    return count


def split(stmts: list[L.Stmt], names: frozenset[str] | set[str]) -> tuple[list[L.Stmt], list[L.Stmt], list[L.Stmt]]:
    """Region `stmts` as the assignments of `names` that lead it (run once before the loop over the
    tiles), the statements of that loop, and those that end it (run once after: `trailing`)."""
    tail = trailing(stmts, names)
    lead: list[L.Stmt] = []
    body: list[L.Stmt] = []
    written: set[str] = set()  # locals that statements of the loop so far assign ...
    used: set[str] = set()  # ... and use
    for s in stmts[:len(stmts) - tail]:
        if isinstance(s, (L.Assign, L.Decl)) and s.var.name in names:
            value = s.init if isinstance(s, L.Decl) else s.value
            reads = var_names((value,) if value is not None else ()) | ({s.var.name} if isinstance(s, L.Assign)
                                                                          and s.op is not None else set())
            if not reads & written and s.var.name not in used | written:
                lead.append(s)
                continue
        body.append(s)
        written |= assigned((s,))
        used |= refs([s])
    return lead, body, stmts[len(stmts) - tail:]


def _regions(plan: Regions, body: tuple[L.Stmt, ...]) -> Iterator[list[L.Stmt]]:
    for p in plan.pieces(body):
        if isinstance(p, list):
            yield p
        elif plan.splits(p):
            assert isinstance(p, (L.For, L.While))
            yield from _regions(plan, p.body)


def group_locals(plan: Regions, uniform: set[str], exclude: set[str]) -> dict[str, str]:
    """The locals among `uniform` (minus `exclude`) declared at region level whose every assignment
    leads or ends its region (name -> C type, in program order)."""
    body = plan.fn.body
    decls = {s.var.name: s.var.dtype.c_compute for s in plan.region_level(body) if isinstance(s, L.Decl)}
    found = {n for n in decls if n in uniform and n not in exclude}
    regions = list(_regions(plan, body))
    while True:  # a local that leaves the set can shorten another's trailing statements
        keep = set(found)
        for r in regions:
            for s in split(r, found)[1]:
                if isinstance(s, (L.Assign, L.Decl)):
                    keep.discard(s.var.name)
        if keep == found:
            return {n: c for n, c in decls.items() if n in found}
        found = keep
