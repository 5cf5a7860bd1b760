"""The compile driver: source text to CUDA C plus kernel metadata, used by the CLI and the API."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tessera import nodes as N
from tessera.errors import CompileError, DiagnosticSink, InternalCompilerError, SourceFile
from tessera.kernel_info import KernelInfo
from tessera.parser import decode_source, parse, too_deep
from tessera.transpile.consts import Value
from tessera.transpile.emit import render_module
from tessera.transpile.lower import Options
from tessera.transpile.pipeline import PassContext, run_passes


@dataclass(frozen=True)
class CompileResult:
    source: SourceFile
    module: N.Module
    cuda: str
    kernels: tuple[KernelInfo, ...]

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


def load_source(path: str) -> SourceFile:
    with open(path, "rb") as f:
        data = f.read()
    return decode_source(data, path)


def compile_source(src: SourceFile, *, arch: str = "sm_90", defines: Mapping[str, Value] | None = None,
                   variants: Mapping[str, Mapping[str, Value]] | None = None, debug: bool = False,
                   line_info: bool = False, check_bounds: bool = False, stop_after: str | None = None,
                   skip_unbound: bool = False, only_kernel: str | None = None,
                   restrict: bool = True) -> CompileResult:
    """Compile one source. Raises CompileError with every diagnostic found. `restrict=False`
    emits tensor parameters without __restrict__ (arrays passed to a launch may overlap)."""
    try:
        module = parse(src)
        ctx = PassContext(DiagnosticSink(src), arch, dict(defines or {}), variants or {}, skip_unbound)
        module = run_passes(module, ctx, stop_after)
        if stop_after is not None:
            return CompileResult(src, module, "", ())
        opts = Options(arch=arch, debug=debug, line_info=line_info, check_bounds=check_bounds,
                       source_name=os.path.basename(src.path))
        emitted = module
        if only_kernel is not None:
            emitted = N.Module(module.path, tuple(i for i in module.items if not (
                isinstance(i, N.FuncDef) and i.kind == "kernel" and i.name != only_kernel)))
        text, infos = render_module(emitted, opts, restrict)
        return CompileResult(src, module, text, infos)
    except CompileError:
        raise
    except RecursionError:
        raise CompileError([too_deep(src)], src) from None
    except Exception as e:  # noqa: BLE001 - anything else is our bug, reported as such
        raise InternalCompilerError(f"{type(e).__name__}: {e}") from e
