"""Printing a tile's vector access of a 1-D view (`VecMove`, spec section 15) as C.

The view's elements move between memory and a staging array of the element's storage type with
`tsr_vec_load` / `tsr_vec_store` (templates/device/vec.cuh), in accesses of the width that
plan-copies chose (`VecMove.plan`); the register array, which holds f16/bf16 values as floats,
converts from or to the staging array element by element:

    {  // line 7
        // a tile's vector load: 8 elements, 16-byte accesses
        alignas(16) __nv_bfloat16 tsr_vec[8];
        tsr_vec_load<__nv_bfloat16, 8, 16, false>(tsr_vec, X + (i) * (n) + (j), 1, (i) < m ? 1 : 0, (int)(n - (j)), 0);
        for (int tsr_k = 0; tsr_k < 8; ++tsr_k) r[tsr_k] = __bfloat162float(tsr_vec[tsr_k]);
    }
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.transpile.emit.exprs import shared_flag_name
from tessera.transpile.emit.memory.views import view_lists
from tessera.transpile.emit.terms import load_fn, store_fn
from tessera.transpile.lir import nodes as L
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def print_vec_move(bp: BodyPrinter, s: L.VecMove) -> None:
    plan = s.plan
    assert plan is not None, "plan-copies plans every vector access"
    mem = bp.pr.ctx.buffers[s.view.buf]
    n = next(x for x in s.view.extents if x is not None)
    ptr, strides, limits, lows = view_lists(bp.pr, s.view)
    ctype = mem.elem.c_storage
    # The race detector sees shared memory: a shared array's, and a device function's array
    # parameter's where the caller passed shared memory (its flag, in check_bounds builds).
    race = "true" if mem.space == "shared" else shared_flag_name(s.view.buf) if mem.space == "ref" else None
    race = race if bp.opts.check_bounds else None
    targs = f"{ctype}, {n}, {plan.vb}, {str(plan.check).lower()}"
    args = f"{strides[2]}, {limits[0]}, {limits[2]}, {lows[2]}"
    regs = c_ident(s.regs)
    bp.emit("{", s.loc)
    bp.depth += 1
    bp.emit(f"// a tile's vector {'store' if s.store else 'load'}: {n} elements, {plan.vb}-byte accesses")
    bp.emit(f"alignas(16) {ctype} tsr_vec[{n}];")
    loop = f"for (int tsr_k = 0; tsr_k < {n}; ++tsr_k)"
    call = f"tsr_vec_store<{{}}>({ptr}, tsr_vec, {{}});" if s.store else f"tsr_vec_load<{{}}>(tsr_vec, {ptr}, {{}});"
    if race is None:
        moved = call.format(targs, args)
    elif race == "true":
        moved = call.format(targs + ", true", f"{args}, {s.loc.line}")
    else:
        moved = f"if ({race}) {call.format(targs + ', true', f'{args}, {s.loc.line}')} else {call.format(targs, args)}"
    if s.store:
        f = store_fn(mem.elem)
        bp.emit(f"{loop} tsr_vec[tsr_k] = {f}({regs}[tsr_k]);" if f else f"{loop} tsr_vec[tsr_k] = {regs}[tsr_k];")
        bp.emit(moved)
    else:
        bp.emit(moved)
        f = load_fn(mem.elem)
        bp.emit(f"{loop} {regs}[tsr_k] = {f}(tsr_vec[tsr_k]);" if f else f"{loop} {regs}[tsr_k] = tsr_vec[tsr_k];")
    bp.depth -= 1
    bp.emit("}")


__all__ = ["print_vec_move"]
