"""Scalar parameters that a function's body assigns (part of the `lower` pass).

A scalar parameter is passed by value, so the body may assign it as a CUDA function may assign its
parameters (`h ^= h >> 16` in a hash mixer, `n >>= 1` in a loop). The type checker makes such a
parameter a local of the function (checks/assignments.py `assigned_names`); here the lowered body
gets that local under a name of its own, declared first from the parameter:

    def mix(h: u32) -> u32:        static __device__ unsigned int mix(unsigned int h)
        h ^= h >> 16          ->   {   unsigned int tsr_local_h = h;
        return h                       tsr_local_h ^= tsr_local_h >> 16u; return tsr_local_h; }

The parameter keeps its name and its C declaration (a kernel's stays `const`, its name is the one
a launch passes by keyword), and a tensor dimension that names it keeps the value passed at launch.
"""

from __future__ import annotations

from tessera.frontend import nodes as N
from tessera.transpile.checks.assignments import assigned_names
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.visit import map_body, map_stmt_exprs


def local_name(param: str) -> str:
    """The lowered name of the local that stands for an assigned parameter (C: `tsr_local_<param>`)."""
    return f"%local_{param}"


def with_param_locals(fn: N.FuncDef, params: list[L.Param], body: tuple[L.Stmt, ...]) -> tuple[L.Stmt, ...]:
    """`body` with each assigned scalar parameter replaced by its local, declared at the top."""
    assigned = assigned_names(fn.body)
    scalars = [p for p in params if p.kind == "scalar" and p.name in assigned]
    if not scalars:
        return body
    names = {p.name: local_name(p.name) for p in scalars}

    def rename(e: L.Expr) -> L.Expr:
        return L.Var(names[e.name], e.dtype) if isinstance(e, L.Var) and e.name in names else e

    renamed = map_body(body, lambda s: map_stmt_exprs(s, rename))
    decls = tuple(L.Decl(p.loc, L.Var(names[p.name], p.dtype), L.Var(p.name, p.dtype)) for p in scalars)
    return decls + renamed
