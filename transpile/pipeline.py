"""The ordered pass pipeline: every pass maps a module to a module (the checking passes report into
the context's sink). Two IR levels: the syntax tree (tessera.frontend.nodes) up to `check-cooperation`, the
lowered IR (lir) from `lower` on. `PASS_NAMES` are the names of `tesserac --dump-after PASS`.

    parse -> resolve-constants | specialize -> kernel-headers -> typecheck -> check-cooperation
          -> lower -> fold-constants -> pipeline-copies -> plan-fragments -> plan-shared
          -> plan-alignment -> plan-copies -> plan-maps -> plan-cpu-regions
          -> (render: the printers of emit/ and cpu/ print what the plans say)

The passes before the bar depend only on the source and the `-D` values (`FRONT_END`): a source is
parsed and resolved once and specialized per set of const parameter values (tessera.transpile.driver).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from tessera.base.errors import Diagnostic, DiagnosticSink
from tessera.base.irnode import ir_node
from tessera.base.options import CompileOptions
from tessera.frontend import nodes as N
from tessera.transpile.checks.cooperation import check_cooperation
from tessera.transpile.checks.module_check import typecheck
from tessera.transpile.consts import Value
from tessera.transpile.cpu.region_plan import plan_cpu_regions
from tessera.transpile.lir.fold import fold_constants
from tessera.transpile.names import source_text
from tessera.transpile.passes.kernel_header import evaluate_headers
from tessera.transpile.passes.lower import lower
from tessera.transpile.passes.pipeline_copies import pipeline_copies
from tessera.transpile.passes.plan_accesses import plan_alignment, plan_copies, plan_maps
from tessera.transpile.passes.plan_fragments import plan_fragments
from tessera.transpile.passes.plan_shared import plan_shared
from tessera.transpile.passes.resolve_constants import resolve_constants
from tessera.transpile.passes.specialize import specialize


@ir_node
class PassContext:
    sink: DiagnosticSink
    options: CompileOptions
    defines: Mapping[str, Value]
    variants: Mapping[str, Mapping[str, Value]]
    skip_unbound: bool = False  # leave out kernels whose const parameters have no value yet


@ir_node
class Pass:
    name: str
    run: Callable[[Any, PassContext], Any]


PASSES: tuple[Pass, ...] = (
    Pass("parse", lambda m, ctx: m),
    Pass("resolve-constants", lambda m, ctx: resolve_constants(m, ctx.sink, ctx.defines)),
    Pass("specialize", lambda m, ctx: specialize(m, ctx.sink, ctx.defines, ctx.variants, ctx.skip_unbound)),
    Pass("kernel-headers", lambda m, ctx: evaluate_headers(m, ctx.sink)),
    Pass("typecheck", lambda m, ctx: typecheck(m, ctx.sink)),
    Pass("check-cooperation", lambda m, ctx: check_cooperation(m, ctx.sink)),
    Pass("lower", lambda m, ctx: lower(m)),
    Pass("fold-constants", lambda m, ctx: fold_constants(m)),
    Pass("pipeline-copies", lambda m, ctx: pipeline_copies(m, ctx.sink, ctx.options.arch)),
    Pass("plan-fragments", lambda m, ctx: plan_fragments(m, ctx.sink, ctx.options.arch)),
    Pass("plan-shared", lambda m, ctx: plan_shared(m, ctx.sink, ctx.options)),
    Pass("plan-alignment", lambda m, ctx: plan_alignment(m, ctx.options.alignment)),
    Pass("plan-copies", lambda m, ctx: plan_copies(m)),
    Pass("plan-maps", lambda m, ctx: plan_maps(m)),
    Pass("plan-cpu-regions", lambda m, ctx: plan_cpu_regions(m, ctx.options)),
)
PASS_NAMES = tuple(p.name for p in PASSES)
FRONT_END = ("parse", "resolve-constants")
TYPING = ("parse", "resolve-constants", "specialize", "kernel-headers", "typecheck")


def run_passes(module: Any, ctx: PassContext, stop_after: str | None = None, start_after: str | None = None,
               verify: Callable[[str, Any], None] | None = None, raise_errors: bool = True) -> Any:
    """Run the pipeline (from after `start_after`, up to and including `stop_after`) and raise
    CompileError with every diagnostic. The checking passes keep going after errors so that
    independent errors in different passes are reported together; a pass that stumbles over a tree
    an earlier error left incomplete just ends the run. `verify(name, module)` runs after each pass
    (the tests' IR verifier). With `raise_errors=False` the diagnostics stay in the sink."""
    started = start_after is None
    typing_errors = list(ctx.sink.items)  # errors that may leave the typed tree incomplete
    for p in PASSES:
        if not started:
            started = p.name == start_after
            continue
        if p.name == "lower" and ctx.sink.has_errors:
            # Lower what typed cleanly, so that the later passes' errors are reported too.
            module = without_errors(module, typing_errors)
        if ctx.sink.has_errors:
            try:
                module = p.run(module, ctx)
            except Exception:  # noqa: BLE001 - a consequence of the errors already reported
                break
        else:
            module = p.run(module, ctx)
        if verify is not None and not ctx.sink.has_errors:
            verify(p.name, module)
        if p.name in TYPING:
            typing_errors = list(ctx.sink.items)
        if p.name == stop_after:
            break
    ctx.sink.items[:] = [_source_names(d) for d in ctx.sink.items]
    if raise_errors:
        ctx.sink.raise_if_errors()
    return module


def _source_names(d: Diagnostic) -> Diagnostic:
    """`d` naming each local of an inlined device function as the source does (names.source_text)."""
    notes = tuple(dataclasses.replace(n, message=source_text(n.message)) for n in d.notes)
    return dataclasses.replace(d, message=source_text(d.message), notes=notes)


def without_errors(module: N.Module, errors: list[Diagnostic]) -> N.Module:
    """The module without the functions that have one of `errors` inside them."""
    items = list(module.items)
    starts = [min([i.loc.line, *(d.loc.line for d in i.decorators)]) if isinstance(i, N.FuncDef) else i.loc.line
              for i in items]
    lines = [d.loc.line for d in errors if d.severity == "error"]
    kept: list[N.Item] = []
    for k, item in enumerate(items):
        end = starts[k + 1] if k + 1 < len(items) else 1 << 62
        if isinstance(item, N.FuncDef) and any(starts[k] <= ln < end for ln in lines):
            continue
        kept.append(item)
    return dataclasses.replace(module, items=tuple(kept))
