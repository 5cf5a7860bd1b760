"""Region mode's locals kept once for the whole group (found by the plan-cpu-regions pass,
region_plan.py; printed by regions.py): a local with one value for every tile of the group
(`_uniform_locals`: each assignment a region-level statement of a uniform value), every assignment
of which ends its region. Such a local is one C variable instead of an array with an element per
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
"""

from __future__ import annotations

from collections.abc import Iterator

from tessera.transpile.cpu.structure import Regions
from tessera.transpile.lir import nodes as L


def trailing(stmts: list[L.Stmt], names: frozenset[str] | set[str]) -> int:
    """How many statements at the end of region `stmts` assign (or declare) one of `names`."""
    count = 0
    for s in reversed(stmts):
        if not (isinstance(s, (L.Assign, L.Decl)) and s.var.name in names):
            break
        count += 1
    return count


def _regions(plan: Regions, body: tuple[L.Stmt, ...]) -> Iterator[list[L.Stmt]]:
    for p in plan.pieces(body):
        if isinstance(p, list):
            yield p
        elif plan.splits(p):
            assert isinstance(p, (L.For, L.While))
            yield from _regions(plan, p.body)


def group_locals(plan: Regions, uniform: set[str], exclude: set[str]) -> dict[str, str]:
    """The locals among `uniform` (minus `exclude`) declared at region level whose every assignment
    ends its region (name -> C type, in program order)."""
    body = plan.fn.body
    decls = {s.var.name: s.var.dtype.c_compute for s in plan.region_level(body) if isinstance(s, L.Decl)}
    found = {n for n in decls if n in uniform and n not in exclude}
    regions = list(_regions(plan, body))
    while True:  # a local that leaves the set can shorten another's trailing statements
        keep = set(found)
        for r in regions:
            for s in r[:len(r) - trailing(r, found)]:
                if isinstance(s, (L.Assign, L.Decl)):
                    keep.discard(s.var.name)
        if keep == found:
            return {n: c for n, c in decls.items() if n in found}
        found = keep
