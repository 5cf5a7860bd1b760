"""Lowering a function's frame (part of the `lower` pass, transpile/passes/lower.py): its signature
(parameters, shape symbols appended in order of first use, the buffers of tensor and array
parameters, const parameters) and, for a map kernel, the loop over its elements that wraps the
lowered statements."""

from __future__ import annotations

from tessera.base.dtypes import I32, I64, ScalarType
from tessera.frontend import nodes as N
from tessera.transpile.lir import nodes as L


def signature(fn: N.FuncDef) -> tuple[list[L.Param], list[L.Buffer], list[L.NamedConst]]:
    """The lowered parameters (shape symbols last), the buffers of array parameters and the const parameters."""
    params: list[L.Param] = []
    buffers: list[L.Buffer] = []
    consts: list[L.NamedConst] = []
    values = dict(fn.const_values)
    shapes: list[L.Param] = []
    for p in fn.params:
        if p.qual == "const":
            assert isinstance(p.ty, ScalarType)
            consts.append(L.NamedConst(p.name, values[p.name], p.ty, p.loc))
        elif isinstance(p.ty, N.TensorType):
            device = fn.kind == "device"  # an array parameter: a tensor or shared array of the caller's
            dims: list[L.Expr] = []
            for d in p.ty.dims:
                if isinstance(d, N.IntLit):
                    dims.append(L.Const(d.value, I32))
                elif isinstance(d, N.Name) and d.ref == "builtin":
                    dims.append(L.Intrinsic("grid_groups", (), I32))
                else:
                    assert isinstance(d, N.Name) and isinstance(d.ty, ScalarType)
                    dims.append(L.Var(d.id, d.ty))
                    if d.ref == "shape" and all(s.name != d.id for s in shapes):
                        shapes.append(L.Param(d.id, "shape", I32, d.loc))
            params.append(L.Param(p.name, "array" if device else "tensor", p.ty.elem, p.loc))
            buffers.append(L.Buffer(p.name, "ref" if device else "global", p.ty.elem, tuple(dims), p.loc,
                                    mut=p.ty.mut))
        else:
            assert isinstance(p.ty, ScalarType)
            params.append(L.Param(p.name, "scalar", p.ty, p.loc))
    return params + shapes, buffers, consts


def element_loop(fn: N.FuncDef, body: tuple[L.Stmt, ...], buffers: dict[str, L.Buffer]) -> L.ElementLoop:
    """A map kernel's statements as the body of the loop over its elements (the tensors' elements
    are the `()`-indexed loads and stores the typed tree's `Index(X, ())` lowered to)."""
    first = next(s for s in body if isinstance(s, L.Store) and not s.index)
    count: L.Expr | None = None
    for d in buffers[first.buf].shape:
        dim = L.converted(d, I64)
        count = dim if count is None else L.Binary("*", count, dim, I64)
    assert count is not None and fn.config is not None
    return L.ElementLoop(body[0].loc, count, fn.config.vectorize or 1, body, buffers[first.buf].shape)
