"""Rendering a planned lowered module through the Jinja template (templates/module.cu.j2), and the
kernel metadata the runtime needs to launch what was emitted (parameter order, shapes, shared
memory, alignment variants, the CPU mode). Every function of the module is printed as the passes
left it (the alignment variants and the CPU backend's region mode are functions and plans by
now); the template only lays the file out; C text comes from emit/exprs.py (expressions),
emit/stmts.py and cpu/regions.py (bodies), and the file starts with the device header sections the
module uses (emit/header_parts.py)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from tessera.base.dtypes import SCALARS, c_literal
from tessera.base.kernel_info import KernelInfo, ParamInfo
from tessera.base.options import CompileOptions
from tessera.base.version import VERSION
from tessera.transpile.cpu.regions import print_regions, vector_clones
from tessera.transpile.emit import wgmma_asm
from tessera.transpile.emit.exprs import Context, CPrinter, shared_flag_name, stride_name
from tessera.transpile.emit.header_parts import SECTIONS, sections
from tessera.transpile.emit.memory.declarations import dims_suffix
from tessera.transpile.emit.stmts import finite, print_body
from tessera.transpile.emit.template import module_renderer, template_text
from tessera.transpile.emit.tma import map_param
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.cnames import function_name, module_names
from tessera.transpile.lir.maps import broadcast_tensors, element_loop
from tessera.transpile.lir.shared_layout import shared_layout
from tessera.transpile.lir.tma import active_copies, tensor_maps
from tessera.transpile.lir.visit import all_exprs, statements, walk
from tessera.transpile.names import c_ident

_SECTION_FILES = {s.name: s.file for s in SECTIONS}


def device_header(names: Sequence[str]) -> str:
    """The text of the device header sections `names` (header_parts), as an emitted file that
    includes them holds it."""
    return "".join(template_text(_SECTION_FILES[n]) for n in names)


def _safe_comment(text: str) -> str:
    # A user-controlled path goes into a // comment: keep it on one line with no escapes.
    return re.sub(r"[^A-Za-z0-9._/+-]", "?", text)[-120:]


def param_infos(fn: L.Function) -> tuple[ParamInfo, ...]:
    out: list[ParamInfo] = []
    for p in fn.params:
        if p.kind == "tensor":
            b = fn.buffer(p.name)
            assert b is not None
            dims = tuple(int(d.value) if isinstance(d, L.Const) else
                         ("grid_groups" if isinstance(d, L.Intrinsic) else d.name)  # type: ignore[union-attr]
                         for d in b.shape)
            out.append(ParamInfo(p.name, "tensor", p.dtype.name, dims, b.mut))
        else:
            out.append(ParamInfo(p.name, p.kind, p.dtype.name))
    return tuple(out)


def _c_param(p: ParamInfo, restrict: bool) -> str:
    ty = SCALARS[p.dtype]
    name = c_ident(p.name)
    qual = " __restrict__" if restrict else ""
    if p.kind == "tensor":
        return f"{ty.c_storage}*{qual} {name}" if p.mut else f"const {ty.c_storage}*{qual} {name}"
    return f"const {ty.c_compute} {name}"


def _device_param(fn: L.Function, p: L.Param, check_bounds: bool) -> str:
    """A device function's parameter; an array parameter is a pointer to its first element, its row
    strides in elements (all dimensions but the last) and, in check_bounds builds, whether it points
    to shared memory (CPrinter.argument passes them)."""
    if p.kind != "array":
        return f"{p.dtype.c_compute} {c_ident(p.name)}"
    b = fn.buffer(p.name)
    assert b is not None
    parts = [f"{'' if b.mut else 'const '}{p.dtype.c_storage}* {c_ident(p.name)}",
             *(f"int {stride_name(p.name, k)}" for k in range(len(b.shape) - 1))]
    if check_bounds:
        parts.append(f"bool {shared_flag_name(p.name)}")
    return ", ".join(parts)


def _recursive(fn: L.Function) -> bool:
    return any(isinstance(e, L.Call) and e.func == fn.name for e in all_exprs(fn.body)) or any(
        isinstance(s, L.Invoke) and s.func == fn.name for s in statements(fn.body))


def _sized_arrays(fn: L.Function, names: tuple[str, ...]) -> tuple[tuple[str, int, tuple[int | str, ...], int], ...]:
    """The launch-sized shared arrays as KernelInfo describes them."""
    out = []
    for name in names:
        b = fn.buffer(name)
        assert b is not None
        dims = tuple(int(d.value) if isinstance(d, L.Const) else
                     next(x.name for x in walk(d) if isinstance(x, L.Var)) for d in b.shape)
        out.append((name, b.elem.size, dims, b.pad))
    return tuple(out)


def render_module(module: L.Module, opts: CompileOptions) -> tuple[str, tuple[KernelInfo, ...]]:
    source_name = os.path.basename(module.path)
    names = module_names(module)
    declared = {c.name: c.dtype for c in module.consts if finite(c)}
    tables = {t.name: t.as_buffer() for t in module.tables}
    constants = [{"ctype": c.dtype.c_compute, "name": names[c.name], "value": c_literal(c.value, c.dtype),
                  "line": c.loc.line, "finite": finite(c)} for c in module.consts]
    table_rows = [{"ctype": t.elem.c_compute, "name": names[t.name], "dims": dims_suffix(t.shape),
                   "init": ", ".join(c_literal(v, t.elem) for v in t.values), "line": t.loc.line}
                  for t in module.tables]
    functions = []
    infos: list[KernelInfo] = []
    for fn in module.functions:
        # A const parameter is the function's own name (it may share one with a function: `def BM(..., BM: const
        # i32)`); module constants cannot be hidden by one.
        ctx = Context({**names, **{c.name: c_ident(c.name) for c in fn.consts}},
                      {**declared, **{c.name: c.dtype for c in fn.consts if finite(c)}},
                      {**tables, **{b.name: b for b in fn.buffers}}, opts.check_bounds)
        regions = fn.regions is not None
        body = (print_regions if regions else print_body)(fn, CPrinter(fn, ctx), opts, source_name)
        cname = function_name(names, fn)
        if fn.kind == "device":
            params = ", ".join([_device_param(fn, p, opts.check_bounds) for p in fn.params]
                               + [f"{t.c_compute}* tsr_result{k}" for k, t in enumerate(fn.rets)])
            functions.append({"kernel": False, "name": cname, "ret": fn.ret.c_compute if fn.ret else "void",
                              "params": params, "line": fn.loc.line, "body": body,
                              "inline": "__noinline__" if _recursive(fn) else "__forceinline__"})
            continue
        pinfo = param_infos(fn)
        layout = shared_layout(fn)
        dyn = layout.total_bytes if layout.dynamic else 0
        tensors, symbols = (fn.alignment.tensors, fn.alignment.symbols) if fn.alignment else ((), ())
        loop = element_loop(fn)
        map_info = (loop.width, loop.written[0]) if loop is not None else (0, "")
        infos.append(KernelInfo(fn.name, cname, pinfo, fn.tile, dyn, tuple((c.name, c.value) for c in fn.consts),
                                fn.loc.line, opts.restrict, fn.aligned, tensors, symbols, *map_info,
                                _sized_arrays(fn, layout.sized), regions,
                                broadcast_tensors(fn, loop) if loop is not None else (),
                                tensor_maps(fn)))
        summary = f"group {'x'.join(map(str, fn.tile))}"
        if loop is not None:
            summary += f", map kernel, {loop.width} element{'s' if loop.width > 1 else ''} per tile and step"
        if fn.aligned:
            summary += (", for 16-byte-aligned " + ", ".join(tensors) + "".join(f", {s} % 16 == 0" for s in symbols))
        if layout.total_bytes:
            summary += f", {layout.total_bytes} bytes shared" + (" (dynamic)" if layout.dynamic else "")
        if regions:
            summary += ", CPU region mode"
        if layout.sized:
            summary += ", shared " + ", ".join(layout.sized) + " sized at launch"
        if tensor_maps(fn):
            summary += f", {len(active_copies(fn))} bulk tensor copies (TMA)"
        # Without launch_bounds(n), `__launch_bounds__(tiles, 1)`: with the tile count alone, ptxas aims at
        # several resident groups and caps registers (and spills) below what one group may have.
        name, body = vector_clones(fn, cname, body) if regions else (cname, body)  # compiled for AVX2 too
        functions.append({"kernel": True, "name": name, "threads": fn.tile_count, "min_groups": fn.launch_bounds or 1,
                          "params": (", ".join(_c_param(p, opts.restrict) for p in pinfo) or "void")
                          + "".join(f" TSR_TMAP_PARAM({map_param(k)})" for k in range(len(tensor_maps(fn)))),
                          "line": fn.loc.line, "summary": summary, "body": body})
    header = sections(module, opts)
    text = module_renderer()(
        version=VERSION, source_name=_safe_comment(source_name), arch=opts.arch,
        kernel_names=", ".join(i.c_name for i in infos) or "(none)",
        sections=", ".join(header), device_header=device_header(header) + wgmma_asm.functions(module),
        constants=constants, tables=table_rows, functions=functions)
    return text, tuple(infos)
