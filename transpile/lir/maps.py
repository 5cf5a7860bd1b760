"""What a map kernel's element loop (spec section 8) does with its tensors: the analyses of the
plan-maps pass (transpile/passes/plan_accesses.py), whose results the printer of the element loop
(transpile/emit/maps.py) reads from the loop itself.

- `map_tensors`: the tensors whose elements the body reads before writing them (the aligned
  variant loads them first, a whole step at a time) and those it writes, each in order of first use.
- `broadcast_dims`, `broadcast_tensors`, `contiguous`: how the tensors the body reads broadcast to
  the map's shape (spec section 15), which the printer follows to index them.
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


def _same_dim(a: L.Expr, b: L.Expr) -> bool:
    if isinstance(a, L.Const) and isinstance(b, L.Const):
        return int(a.value) == int(b.value)
    return isinstance(a, L.Var) and isinstance(b, L.Var) and a.name == b.name


def broadcast_dims(shape: tuple[L.Expr, ...], out: tuple[L.Expr, ...]) -> tuple[tuple[int, str], ...] | None:
    """How a tensor of `shape` the map reads broadcasts to the map's shape `out` (NumPy's rules):
    per dimension of the tensor, the dimension of `out` it aligns with (from the last) and "same"
    (the same extent), "one" (a constant 1: the element is repeated along it) or "launch" (a shape
    symbol other than the map's, which the launch checks to be the same or 1). None where it does
    not broadcast (more dimensions, or two constants that differ and are not 1)."""
    if len(shape) > len(out):
        return None
    lead = len(out) - len(shape)
    dims: list[tuple[int, str]] = []
    for k, d in enumerate(shape):
        o = out[lead + k]
        if _same_dim(d, o):
            dims.append((lead + k, "same"))
        elif isinstance(d, L.Const) and int(d.value) == 1:
            dims.append((lead + k, "one"))
        elif isinstance(d, L.Const) and isinstance(o, L.Const):
            return None
        else:
            dims.append((lead + k, "launch"))
    return tuple(dims)


def broadcast_tensors(fn: L.Function, loop: L.ElementLoop) -> tuple[str, ...]:
    """The tensors the map reads whose shape is not the map's (they broadcast), in order of use."""
    read, _ = map_tensors(loop)
    return tuple(t for t in read if (b := fn.buffer(t)) is not None and b.shape != loop.shape)


def contiguous(b: L.Buffer, loop: L.ElementLoop) -> bool:
    """Whether a broadcast tensor's elements for consecutive positions along the map's last
    dimension are consecutive (its last dimension is the map's): the aligned variant, where the
    map's rows are whole vector steps, loads them with vector accesses."""
    dims = broadcast_dims(b.shape, loop.shape)
    last = loop.shape[-1] if loop.shape else None
    whole_steps = isinstance(last, L.Var) or (isinstance(last, L.Const) and int(last.value) % loop.width == 0)
    return dims is not None and bool(dims) and dims[-1] == (len(loop.shape) - 1, "same") and whole_steps


def row_symbols(fn: L.Function, loop: L.ElementLoop) -> tuple[str, ...]:
    """What the aligned variant of a map kernel assumes of its shape symbols: the map's last
    dimension a multiple of 16 (so of the width) where a tensor it reads is `contiguous`."""
    last = loop.shape[-1] if loop.shape else None
    if isinstance(last, L.Var) and any(contiguous(b, loop) for t in broadcast_tensors(fn, loop)
                                       if (b := fn.buffer(t)) is not None):
        return (last.name,)
    return ()


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


__all__ = ["PAIR_OPS", "PAIR_TYPES", "broadcast_dims", "broadcast_tensors", "contiguous", "element_loop",
           "map_tensors", "pair_type", "row_symbols"]
