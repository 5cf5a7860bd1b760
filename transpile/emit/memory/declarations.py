"""The C declarations of a function's arrays: an array's constant shape as C dimensions, and its
shared memory. The prologue of a kernel declares the scratch of group reductions and the shared
memory the layout asks for (lir/shared_layout.py): the dynamic shared-memory base (with the end
of the arrays sized at launch), or a pool of the arrays that share memory; an `Alloc` of a shared
array then points into it (a launch-sized array at the end so far, another at its slot), or
declares the array's own `__shared__` variable (`static_shared_decl`; region mode binds the
array to its member of the group's arrays instead, transpile/cpu/group_memory.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.base.errors import Loc
from tessera.transpile.emit import tma
from tessera.transpile.emit.memory.views import const_shape
from tessera.transpile.emit.terms import UNARY
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.shared_layout import shared_layout
from tessera.transpile.lir.tma import tma_destinations
from tessera.transpile.names import c_ident

if TYPE_CHECKING:
    from tessera.transpile.emit.stmts import BodyPrinter


def dims_suffix(shape: tuple[int, ...], pad: int = 0) -> str:
    return "".join(f"[{d + (pad if i == len(shape) - 1 else 0)}]" for i, d in enumerate(shape))


def static_shared_decl(fn: L.Function, b: L.Buffer, cname: str = "") -> tuple[int, str]:
    """The alignment and the C declarator (`float sh[128]`) of shared array `b` declared on its own
    (`cname`: under that name instead of its own)."""
    align = 1024 if b.swizzle else 128 if b.name in tma_destinations(fn) else 16  # wgmma / bulk copies
    return align, f"{b.elem.c_storage} {cname or c_ident(b.name)}{dims_suffix(const_shape(b), b.pad)}"


def print_shared_prologue(bp: BodyPrinter) -> None:
    """A kernel's shared memory, before its statements: the group reductions' scratch, then the
    dynamic shared memory or the pool of arrays that share memory, where the layout has them."""
    layout = shared_layout(bp.fn)
    if layout.scratch_bytes:
        bp.emit(f"__shared__ __align__(16) unsigned char tsr_reduce_scratch[{layout.scratch_bytes}];"
                "  // group reductions")
    if layout.dynamic and layout.sized:
        bp.emit(f"{tma.dynamic_smem(bp.fn)}(tsr_dynamic_smem);"
                f"  // {layout.total_bytes} bytes of shared memory, then the arrays sized at launch")
        bp.emit(f"unsigned long long tsr_smem_end = {layout.total_bytes};  // where the next launch-sized "
                "array starts")
    elif layout.dynamic and layout.slots and bp.fn.wgmma:  # swizzled arrays: 1024-byte aligned
        bp.emit("TSR_DYNAMIC_SMEM_1024(tsr_dynamic_smem);"
                f"  // {layout.total_bytes} bytes of shared memory, above the 48 KiB static limit")
    elif layout.dynamic and layout.slots:
        bp.emit(f"{tma.dynamic_smem(bp.fn)}(tsr_dynamic_smem);"
                f"  // {layout.total_bytes} bytes of shared memory, above the 48 KiB static limit")
    elif layout.shares:
        pool_align = 1024 if bp.fn.wgmma else tma.pool_align(bp.fn)
        bp.emit(f"__shared__ __align__({pool_align}) unsigned char tsr_shared_pool[{layout.total_bytes}];"
                "  // the shared arrays, some sharing memory")


def print_shared_alloc(bp: BodyPrinter, b: L.Buffer, loc: Loc) -> None:
    """The `Alloc` of shared array `b`: a pointer into the dynamic shared memory or the pool, or its
    own variable (`bp.static_shared`)."""
    layout = shared_layout(bp.fn)
    ctype = b.elem.c_storage
    name = c_ident(b.name)
    if b.name in layout.sized:
        dims = [bp.pr.wrap(d, UNARY) for d in b.shape]
        if b.pad:
            dims[-1] = f"({dims[-1]} + {b.pad})"
        count = " * ".join(f"(unsigned long long){d}" for d in dims)
        bp.emit(f"{ctype}* {name} = reinterpret_cast<{ctype}*>(tsr_dynamic_smem + tsr_smem_end);  "
                "// sized at launch", loc)
        bp.emit(f"tsr_smem_end += ({count} * {b.elem.size} + 15) / 16 * 16;", loc)
        return
    if layout.dynamic or layout.shares:
        shape = const_shape(b)
        slot = layout.slot(b.name)
        rows = dims_suffix(shape[1:], b.pad) if len(shape) > 1 else ""
        ptr = f"(*{name}){rows}" if rows else f"*{name}"
        cast = f"{ctype} (*){rows}" if rows else f"{ctype}*"
        base = "tsr_dynamic_smem" if layout.dynamic else "tsr_shared_pool"
        shares = layout.sharing(b.name)
        note = f", shares memory with {', '.join(shares)}" if shares else ""
        bp.emit(f"{ctype} {ptr} = reinterpret_cast<{cast}>({base} + {slot.offset});  "
                f"// {slot.nbytes} bytes{note}", loc)
    else:
        bp.static_shared(b, loc)


__all__ = ["dims_suffix", "print_shared_alloc", "print_shared_prologue", "static_shared_decl"]
