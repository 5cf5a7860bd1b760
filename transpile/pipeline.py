"""The ordered pass pipeline: each pass maps a Module to a Module (the checks report into
the sink). `PASSES` names them for `tesserac --dump-after PASS`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tessera import nodes as N
from tessera.errors import DiagnosticSink
from tessera.transpile.consts import Value
from tessera.transpile.divergence import check_cooperation
from tessera.transpile.shared_plan import plan_shared
from tessera.transpile.typecheck import typecheck


@dataclass(frozen=True)
class PassContext:
    sink: DiagnosticSink
    arch: str
    defines: Mapping[str, Value]
    variants: Mapping[str, Mapping[str, Value]]
    skip_unbound: bool = False  # leave out kernels whose const parameters have no value yet


Pass = Callable[[N.Module, PassContext], N.Module]

PASSES: tuple[tuple[str, Pass], ...] = (
    ("parse", lambda m, ctx: m),
    ("typecheck", lambda m, ctx: typecheck(m, ctx.sink, ctx.defines, ctx.variants, ctx.skip_unbound)),
    ("check-cooperation", lambda m, ctx: check_cooperation(m, ctx.sink)),
    ("plan-shared", lambda m, ctx: plan_shared(m, ctx.sink, ctx.arch)),
)
PASS_NAMES = tuple(name for name, _ in PASSES)


def run_passes(module: N.Module, ctx: PassContext, stop_after: str | None = None) -> N.Module:
    """Run the pipeline and raise CompileError with every diagnostic. The checking passes keep
    going after errors so that independent errors in different passes are reported together; a
    pass that stumbles over IR an earlier error left incomplete just ends the run."""
    for name, fn in PASSES:
        if ctx.sink.has_errors:
            try:
                module = fn(module, ctx)
            except Exception:  # noqa: BLE001 - a consequence of the errors already reported
                break
        else:
            module = fn(module, ctx)
        if name == stop_after:
            break
    ctx.sink.raise_if_errors()
    return module
