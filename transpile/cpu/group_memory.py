"""Region mode's arrays that live as long as a group: the per-tile copies of locals
(`tsr_rgs_NAME[tiles]`, region_plan.py's per-tile locals) and the shared arrays declared on their
own (`tsr_shm_NAME`), as members of one `static thread_local` struct per kernel, reached through
one pointer taken once (`tsr_gm`).

On the host, such an array is thread-local (a worker thread runs one group at a time), and a
shared library finds a thread-local variable's address by a call (`__tls_get_addr`), which GCC
repeats at every access inside a loop instead of keeping the address: a tree's `sh[t] += sh[t + h]`
made a call per tile. One struct, whose address is taken once and hidden from the optimizer (an
empty `asm`), costs one call per group. Every access names its member through that pointer
(`tsr_gm->tsr_rgs_acc[t]`, `tsr_gm->tsr_shm_As[ty][k]`: CPrinter.array_names), so that GCC tells
the members apart as fields of one object, which its vectorizer needs (through a pointer or
reference bound to a member once, it could not: a 16x16 matmul's dot product stopped
vectorizing). The shared array's own name is bound to its member too, for the statements that
take its address (copies, device-function arguments). The address is hidden only where tensor parameters are
`__restrict__` (the default): otherwise GCC could no longer tell the group's arrays from the
parameters' memory.
"""

from __future__ import annotations

from tessera.transpile.emit.memory.declarations import static_shared_decl
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.shared_layout import shared_layout
from tessera.transpile.lir.visit import statements
from tessera.transpile.names import c_ident


def static_shared(fn: L.Function) -> list[L.Buffer]:
    """The shared arrays of `fn` that have a declaration of their own (not in a pool, not dynamic)."""
    layout = shared_layout(fn)
    if layout.dynamic or layout.shares:
        return []
    out = []
    for s in statements(fn.body):
        if isinstance(s, L.Alloc):
            b = fn.buffer(s.buf)
            assert b is not None
            if b.space == "shared" and b.name not in layout.sized:
                out.append(b)
    return out


def group_memory(fn: L.Function, per_tile: dict[str, str], cname: dict[str, str], tiles: int,
                 hide: bool) -> list[str]:
    """The C lines that declare the struct and bind `tsr_gm`. `per_tile`: name -> C type of an
    element; `cname`: their C names; `hide`: hide the struct's address from the optimizer."""
    members: list[str] = []
    for name, ctype in per_tile.items():
        elem, _, dims = ctype.partition("[")
        members.append(f"{elem} tsr_rgs_{cname[name]}[{tiles}]{'[' + dims if dims else ''};  // per tile")
    shared = static_shared(fn)
    for b in shared:
        align, decl = static_shared_decl(fn, b, f"tsr_shm_{c_ident(b.name)}")
        members.append(f"alignas({align}) {decl};  // shared")
    if not members:
        return []
    lines = ["static thread_local struct {  // the group's arrays (transpile/cpu/group_memory.py)",
             *(f"    {m}" for m in members), "} tsr_gmem;", "auto* tsr_gm = &tsr_gmem;"]
    if hide:
        lines.append('asm("" : "+r"(tsr_gm));  // its address taken once, not at every access')
    return lines


def shared_member(b: L.Buffer) -> str:
    """The C lvalue of shared array `b` (one of `static_shared`): its member of the group's struct."""
    return f"tsr_gm->tsr_shm_{c_ident(b.name)}"


def per_tile_element(cname: str, tile: str) -> str:
    """The C lvalue of per-tile local `cname`'s copy for tile `tile`."""
    return f"tsr_gm->tsr_rgs_{cname}[{tile}]"


__all__ = ["group_memory", "per_tile_element", "shared_member", "static_shared"]
