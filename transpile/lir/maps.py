"""What a map kernel's element loop (spec section 8) does with its tensors: the analyses of the
plan-maps pass (transpile/passes/plan_accesses.py), whose results the printer of the element loop
(transpile/emit/maps.py) reads from the loop itself.

- `map_tensors`: the tensors whose elements the body reads before writing them (the aligned
  variant loads them first, a whole step at a time) and those it writes, each in order of first use.
- `pair_type`: "f16" or "bf16" when the whole body computes in that type with + - * and negation
  only (on its tensors' elements, locals, scalar parameters and constants), so that pair
  instructions give exactly the per-operation rounding of the language; else None.
"""

from __future__ import annotations

from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import statements, stmt_walk

PAIR_TYPES = ("f16", "bf16")
PAIR_OPS = ("+", "-", "*")  # binary operations with a correctly rounded pair instruction


def element_loop(fn: L.Function) -> L.ElementLoop | None:
    """The loop of a map kernel (None for other functions)."""
    return next((s for s in fn.body if isinstance(s, L.ElementLoop)), None)


def map_tensors(loop: L.ElementLoop) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read, written): see the module docstring."""
    read: list[str] = []
    written: list[str] = []
    for s in statements(loop.body):
        for e in stmt_walk(s):
            if isinstance(e, L.Load) and not e.index and e.buf not in read and e.buf not in written:
                read.append(e.buf)
        if isinstance(s, L.Store) and not s.index:
            if s.op is not None and s.buf not in read and s.buf not in written:
                read.append(s.buf)
            if s.buf not in written:
                written.append(s.buf)
    return tuple(read), tuple(written)


def pair_type(fn: L.Function, loop: L.ElementLoop) -> str | None:
    """See the module docstring."""
    read, written = map_tensors(loop)
    tensors = set(read + written)
    elems = {b.elem.name for b in fn.buffers if b.name in tensors}
    if len(elems) != 1 or loop.width % 2:
        return None
    half = elems.pop()
    if half not in PAIR_TYPES:
        return None
    for st in statements(loop.body):
        if isinstance(st, L.Decl):
            ok = st.var.dtype.name == half
        elif isinstance(st, (L.Assign, L.Store)):
            ok = st.op in (None, *PAIR_OPS) and (st.op_type is None or st.op_type.name == half)
        else:
            ok = False
        for e in stmt_walk(st):
            ok = ok and e.dtype.name == half and (
                isinstance(e, (L.Const, L.Var)) or (isinstance(e, L.Load) and not e.index)
                or (isinstance(e, L.Binary) and e.op in PAIR_OPS) or (isinstance(e, L.Unary) and e.op == "-"))
        if not ok:
            return None
    return half


__all__ = ["PAIR_OPS", "PAIR_TYPES", "element_loop", "map_tensors", "pair_type"]
