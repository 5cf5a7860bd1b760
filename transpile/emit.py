"""Rendering of the lowered module through the Jinja templates, and the kernel metadata the
runtime needs to launch what was emitted (parameter order, shapes, shared memory)."""

from __future__ import annotations

import functools
import importlib.resources
import re

import jinja2

from tessera import nodes as N
from tessera.dtypes import SCALARS, ScalarType, c_literal
from tessera.kernel_info import KernelInfo, ParamInfo
from tessera.transpile.consts import type_of_value
from tessera.transpile.lower import Options, dims_suffix, lower_function
from tessera.transpile.names import c_ident

VERSION = "0.1.0"


def _template_source(name: str) -> str:
    return importlib.resources.files("tessera.templates").joinpath(name).read_text("utf-8")


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FunctionLoader(_template_source),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True, autoescape=False)


def device_header() -> str:
    return _template_source("tessera_device.cuh")


def _safe_comment(text: str) -> str:
    # A user-controlled path goes into a // comment: keep it on one line with no escapes.
    return re.sub(r"[^A-Za-z0-9._/+-]", "?", text)[-120:]


def _param_infos(fn: N.FuncDef) -> tuple[ParamInfo, ...]:
    tensor_types = {k: t for k, t in fn.param_types if isinstance(t, N.TensorType)}
    out: list[ParamInfo] = []
    for p in fn.params:
        if p.qual == "const":
            continue
        if p.name in tensor_types:
            t = tensor_types[p.name]
            dims = tuple(d.value if isinstance(d, N.IntLit) else d.id for d in t.dims)
            out.append(ParamInfo(p.name, "tensor", t.elem.name, dims, t.mut))
        else:
            out.append(ParamInfo(p.name, "scalar", p.type_name))
    for s in fn.shape_symbols:
        out.append(ParamInfo(s, "shape", "i32"))
    return tuple(out)


def _c_param(p: ParamInfo, restrict: bool) -> str:
    ty: ScalarType = SCALARS[p.dtype]
    name = c_ident(p.name)
    if p.kind == "tensor":
        ptr = "* __restrict__ " if restrict else "* "
        return f"{ty.c_storage}{ptr}{name}" if p.mut else f"const {ty.c_storage}{ptr}{name}"
    return f"const {ty.c_compute} {name}"


def render_module(module: N.Module, opts: Options, restrict: bool = True) -> tuple[str, tuple[KernelInfo, ...]]:
    """The CUDA C of `module` and its kernels' metadata; `restrict` declares the tensor
    parameters __restrict__ (the launch then refuses overlapping arrays)."""
    constants = []
    tables = []
    functions = []
    infos: list[KernelInfo] = []
    for item in module.items:
        if isinstance(item, N.ConstDef) and item.folded is not None:
            ty = type_of_value(item.folded)
            constants.append({"ctype": ty.c_compute, "name": c_ident(item.name),
                              "value": c_literal(item.folded, ty), "line": item.loc.line})
        elif isinstance(item, N.TableDef) and item.folded:
            ty = SCALARS[item.elem]
            values = ", ".join(c_literal(v, ty) for v in item.folded)
            tables.append({"ctype": ty.c_compute, "name": c_ident(item.name), "dims": dims_suffix(item.shape),
                           "init": values, "line": item.loc.line})
        elif isinstance(item, N.FuncDef):
            body = lower_function(item, opts)
            if item.kind == "device":
                ret = SCALARS[item.ret].c_compute if item.ret else "void"
                params = ", ".join(f"{SCALARS[p.type_name].c_compute} {c_ident(p.name)}" for p in item.params)
                functions.append({"kernel": False, "name": item.c_name, "ret": ret, "params": params,
                                  "line": item.loc.line, "body": body})
                continue
            pinfo = _param_infos(item)
            layout = item.shared
            dyn = layout.total_bytes if layout and layout.dynamic else 0
            info = KernelInfo(item.name, item.c_name, pinfo, item.config.tile, dyn, item.const_values,
                              item.loc.line, restrict)
            infos.append(info)
            summary = f"group {'x'.join(map(str, item.config.tile))}"
            if layout and layout.total_bytes:
                summary += f", {layout.total_bytes} bytes shared" + (" (dynamic)" if layout.dynamic else "")
            functions.append({"kernel": True, "name": item.c_name, "threads": item.config.tile_count,
                              "min_groups": item.config.launch_bounds,
                              "params": ", ".join(_c_param(p, restrict) for p in pinfo) or "void",
                              "line": item.loc.line, "summary": summary, "body": body})
    text = _env().get_template("module.cu.j2").render(
        version=VERSION, source_name=_safe_comment(opts.source_name), arch=opts.arch,
        kernel_names=", ".join(i.c_name for i in infos) or "(none)",
        constants=constants, tables=tables, functions=functions)
    return text, tuple(infos)

