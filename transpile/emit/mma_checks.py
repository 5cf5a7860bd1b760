"""The run-time checks of `tmma`'s operand views in check_bounds builds (spec section 14, v3): a
view whose start is not a constant must lie inside its shared array (the plan-fragments pass
refuses the starts it can prove outside, transpile/passes/mma_views.py). Each such start is
checked with the bounds check of indexing, against the last start that keeps the view inside:

    tsr_check_index(kk, 64 - 16 + 1, "mm", "As", 1, 14);  // tmma(acc, As[:, kk:kk + 16], ...)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.transpile.emit.terms import c_string
from tessera.transpile.lir import nodes as L

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def _checked_starts(s: L.Mma) -> list[tuple[L.View, int, L.Expr, int | None]]:
    """(view, dimension, start, extent) of each operand start that is checked at run time: not a
    constant (the type checker checked those), in a view the program wrote (not a whole array, nor
    a stage the pipeline chose)."""
    return [(v, k, start, extent) for v in (s.a, s.b) if v.checked
            for k, (start, extent) in enumerate(zip(v.starts, v.extents)) if not isinstance(start, L.Const)]


def needs_checks(s: L.Stmt) -> bool:
    """Whether `s` is a tmma whose views are checked at run time (in check_bounds builds)."""
    return isinstance(s, L.Mma) and bool(_checked_starts(s))


def print_view_checks(bp: BodyPrinter, s: L.Mma) -> None:
    """The checks of the operand views of `s` (check_bounds builds only; nothing otherwise)."""
    if not bp.pr.ctx.check_bounds:
        return
    for view, k, start, extent in _checked_starts(s):
        b = bp.pr.ctx.buffers[view.buf]
        last = f"{bp.pr.expr(b.shape[k])} - {extent or 1} + 1"
        bp.emit(f"tsr_check_index({bp.pr.expr(start)}, {last}, {c_string(bp.fn.name)}, {c_string(view.buf)}, "
                f"{k}, {s.loc.line});", s.loc)


__all__ = ["needs_checks", "print_view_checks"]
