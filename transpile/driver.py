"""The compile driver: source text to CUDA C plus kernel metadata, used by the CLI and the API.

A source is parsed and its module constants resolved once (`front_end`); each variant (a set of
const parameter values, an architecture, options) then runs the remaining passes on that tree
(`compile_variant`). `compile_source` does both. Nothing here keeps state between calls, so
compiles may run on several threads at once.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tessera.base.errors import CompileError, Diagnostic, DiagnosticSink, InternalCompilerError, SourceFile
from tessera.base.irnode import ir_node
from tessera.base.kernel_info import KernelInfo
from tessera.base.limits import read_source
from tessera.base.options import DEFAULT_OPTIONS, CompileOptions
from tessera.frontend import nodes as N
from tessera.frontend.parser import decode_source, parse, too_deep
from tessera.transpile.consts import Value
from tessera.transpile.lir import nodes as L
from tessera.transpile.pipeline import FRONT_END, PassContext, run_passes
from tessera.transpile.render import render_module


def _freeze_at_exit() -> None:
    """Collect the garbage there is (its finalizers run as they would at exit), then freeze
    what is left: the interpreter's teardown then frees the compiler's classes, parse tables and
    IR by reference counts only, without the collections over them (a cold first load's process
    ended 0.09-0.10 s after its launch returned, 0.015-0.025 s with this)."""
    gc.collect()
    gc.freeze()


atexit.register(_freeze_at_exit)


@ir_node
class CompileResult:
    source: SourceFile
    module: N.Module | L.Module  # the lowered module (or the tree after --dump-after's pass)
    cuda: str
    kernels: tuple[KernelInfo, ...]

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)


@ir_node
class FrontEnd:
    """A source parsed and its module constants resolved (with these `-D` values), ready to be
    specialized into any number of variants."""

    source: SourceFile
    module: N.Module
    defines: Mapping[str, Value]
    diagnostics: tuple[Diagnostic, ...]  # errors found so far (reported by every variant)
    suppressed: int = 0  # errors found beyond the sink's limit (counted in every variant)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.module.items if isinstance(f, N.FuncDef) and f.is_kernel)

    def type_params(self) -> dict[str, dict[str, list]]:
        """For each kernel with type parameters, what a launch needs to bind them
        (runtime/launch_args.bind_types): the type parameters and, per launch parameter in order,
        the type parameter that is its (element) type."""
        out: dict[str, dict[str, list]] = {}
        for f in self.module.items:
            if isinstance(f, N.FuncDef) and f.is_kernel and f.type_params:
                names = {t.name for t in f.type_params}
                out[f.name] = {"params": [[t.name, list(t.allowed) if t.allowed is not None else None]
                                          for t in f.type_params],
                               "uses": [[p.name, p.type_name if p.type_name in names else "", p.dims is not None]
                                        for p in f.params if p.qual != "const"]}
        return out

    def tune_spaces(self) -> dict[str, dict]:
        """For each kernel with a valid `@autotune`, its search space (JSON form, for the caches)."""
        from tessera.transpile.passes.autotune_spec import tune_spaces

        return {k: s.to_json() for k, s in tune_spaces(self.module, self.source).items()}

    def const_params(self) -> dict[str, tuple[str, ...]]:
        return {f.name: tuple(p.name for p in f.params if p.qual == "const") for f in self.module.items
                if isinstance(f, N.FuncDef) and f.is_kernel}


def load_source(path: str) -> SourceFile:
    """A source file read within the size limit and decoded. Raises OSError or CompileError (too
    large, not UTF-8, a NUL byte)."""
    return decode_source(read_source(path), path)


_T = TypeVar("_T")


def _guarded(src: SourceFile, work: Callable[[], _T]) -> _T:
    """Run `work()`; anything but a CompileError is our bug, reported as such."""
    try:
        return work()
    except CompileError:
        raise
    except RecursionError:
        raise CompileError([too_deep(src)], src) from None
    except Exception as e:  # noqa: BLE001 - anything else is our bug, reported as such
        raise InternalCompilerError(f"{type(e).__name__}: {e}") from e


def front_end(src: SourceFile, defines: Mapping[str, Value] | None = None, *,
              stop_after: str | None = None) -> FrontEnd:
    """Parse and resolve one source (raises CompileError for syntax errors; other errors are kept
    and reported by every variant)."""
    def work() -> FrontEnd:
        module = parse(src)
        defs = dict(defines or {})
        ctx = PassContext(DiagnosticSink(src), DEFAULT_OPTIONS, defs, {})
        if stop_after != "parse":
            module = run_passes(module, ctx, FRONT_END[-1], start_after="parse", raise_errors=False)
        return FrontEnd(src, module, defs, tuple(ctx.sink.items), ctx.sink.suppressed)
    return _guarded(src, work)


def compile_variant(front: FrontEnd, options: CompileOptions = DEFAULT_OPTIONS, *,
                    variants: Mapping[str, Mapping[str, Value]] | None = None, stop_after: str | None = None,
                    skip_unbound: bool = False, only_kernel: str | None = None,
                    verify: Callable[[str, Any], None] | None = None) -> CompileResult:
    """Specialize, check, lower and emit one variant: `variants` gives kernels' const parameter
    values (and type bindings); `skip_unbound` leaves out the kernels whose const parameters have no
    value; `only_kernel` emits one kernel (and what it uses); `stop_after` ends after that pass
    (the result's module is the IR there, its C empty); `verify(pass, module)` runs after each pass.
    Raises CompileError with every diagnostic."""
    src = front.source

    def work() -> CompileResult:
        sink = DiagnosticSink(src)
        for d in front.diagnostics:
            sink.add(d)
        sink.suppressed += front.suppressed
        ctx = PassContext(sink, options, front.defines, variants or {}, skip_unbound)
        if stop_after in FRONT_END:
            sink.raise_if_errors()
            return CompileResult(src, front.module, "", ())
        module = run_passes(front.module, ctx, stop_after, start_after=FRONT_END[-1], verify=verify)
        if stop_after is not None:
            return CompileResult(src, module, "", ())
        assert isinstance(module, L.Module)
        emitted = module
        if only_kernel is not None:
            emitted = L.Module(module.path, module.consts, module.tables, tuple(
                f for f in module.functions if f.kind != "kernel" or only_kernel in (f.name, f.base_name)))
        text, infos = render_module(emitted, options)
        return CompileResult(src, module, text, infos)

    return _guarded(src, work)


def compile_source(src: SourceFile, options: CompileOptions = DEFAULT_OPTIONS, *,
                   defines: Mapping[str, Value] | None = None, variants: Mapping[str, Mapping[str, Value]] | None = None,
                   stop_after: str | None = None, skip_unbound: bool = False, only_kernel: str | None = None,
                   verify: Callable[[str, Any], None] | None = None) -> CompileResult:
    """Compile one source (front end and one variant). Raises CompileError with every diagnostic."""
    front = front_end(src, defines, stop_after=stop_after)
    return compile_variant(front, options, variants=variants, stop_after=stop_after, skip_unbound=skip_unbound,
                           only_kernel=only_kernel, verify=verify)
