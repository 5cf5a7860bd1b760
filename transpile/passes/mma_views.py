"""The checks of `tmma`'s operand views that need the lowered IR (a part of the plan-fragments
pass, spec section 14 v3). The type checker has checked the views' extents against the fragment
and the starts that are constants (transpile/checks/frags.py, MmaViews); here:

- an operand read with `ldmatrix` needs each row to start on 16 bytes: the start of the view's
  contiguous dimension must be a multiple of 16 bytes of elements (`As[:, kk:kk + 16]` of f16 with
  `kk` a multiple of 8), proven from divisibility (lir/copy_plan.Divisors: a loop variable by what
  divides its start and step, ...);
- a start whose range is known (a loop variable with constant bounds, plus or times constants)
  must keep the view inside its array. Other starts are checked at run time in check_bounds
  builds (emit/frags.py prints the checks).
Errors are located at the `tmma` statement and name the operand."""

from __future__ import annotations

from tessera.base.errors import DiagnosticSink
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.copy_plan import Divisors
from tessera.transpile.lir.frag_layout import uses_ldmatrix
from tessera.transpile.lir.visit import statements


def check_mma_views(fn: L.Function, sink: DiagnosticSink) -> bool:
    """Whether every operand view of `fn`'s tmma statements passes (else its error is reported)."""
    divisors = Divisors(fn)
    ranges = _loop_ranges(fn)
    for s in statements(fn.body):
        if not isinstance(s, L.Mma):
            continue
        for view, role, what in ((s.a, "a", "first"), (s.b, "b", "second")):
            b = fn.buffer(view.buf)
            assert b is not None
            for k, (start, extent) in enumerate(zip(view.starts, view.extents)):
                dim = b.shape[k]
                assert isinstance(dim, L.Const)
                span = _range(start, ranges)
                reach = 1 if extent is None else extent
                if span is not None and (span[0] < 0 or span[1] + reach > int(dim.value)):
                    sink.error(s.loc, f"the {what} operand of tmma() reaches outside '{b.name}' in dimension {k} "
                               f"(its start goes from {span[0]} to {span[1]}, the extent is {reach}, the array "
                               f"has {int(dim.value)}): tmma() reads views that lie inside their shared array")
                    return False
            last = view.starts[-1]
            unit = 16 // b.elem.size
            if uses_ldmatrix(b.elem, role, s.trans_b) and divisors.of(last) % unit:
                sink.error(s.loc, f"the {what} operand of tmma() is read with ldmatrix, whose rows start on 16 "
                           f"bytes: the view's start in the last dimension of '{b.name}' must be a multiple of "
                           f"{unit} elements ({b.elem}), and this one is not known to be")
                return False
    return True


def _loop_ranges(fn: L.Function) -> dict[str, tuple[int, int]]:
    """The loop variables with constant bounds (and no other assignment): their first and last values."""
    assigned = {s.var.name for s in statements(fn.body) if isinstance(s, (L.Assign, L.Decl))}
    out: dict[str, tuple[int, int]] = {}
    for s in statements(fn.body):
        if not isinstance(s, L.For) or s.var.name in assigned or s.var.name in out:
            continue
        if not all(isinstance(x, L.Const) for x in (s.start, s.stop, s.step)):
            continue
        start, stop, step = (int(x.value) for x in (s.start, s.stop, s.step))  # type: ignore[union-attr]
        values = range(start, stop, step)
        if len(values) > 0:
            out[s.var.name] = (min(values[0], values[-1]), max(values[0], values[-1]))
    return out


def _range(e: L.Expr, ranges: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
    """The smallest and largest value of `e` where they are known."""
    if isinstance(e, L.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return int(e.value), int(e.value)
    if isinstance(e, L.Var):
        return ranges.get(e.name)
    if isinstance(e, L.Affine):
        return _range(e.source, ranges)
    if isinstance(e, L.Cast) and e.dtype.is_int and e.x.dtype.is_int:
        return _range(e.x, ranges)
    if isinstance(e, L.Binary) and e.op in ("+", "-", "*"):
        a, b = _range(e.a, ranges), _range(e.b, ranges)
        if a is None or b is None:
            return None
        if e.op == "+":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "-":
            return a[0] - b[1], a[1] - b[0]
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    return None


__all__ = ["check_mma_views"]
