"""`@autotune(NAME=[values...], ..., key=[M, N])`: the search space of a kernel, read and checked.

Before:  @autotune(BM=[64, 128], stages=[2, 3], key=[M, N])     (BM, stages const parameters)
         @kernel tile[(256,)]
         def k(A: f32[M, K], ...)
After:   TuneSpace(axes=(("BM", (64, 128)), ("stages", (2, 3))), key=("M", "N"), sources=...)

The space depends only on the source and the module constants, so the runtime reads it from the
front end (`tune_spaces`) and the `kernel-headers` pass reports its errors in every variant
(`check_autotune`). Values are compile-time constants checked against the parameter's type; the
key names shape symbols of the kernel's tensor parameters (all of them when left out).
"""

from __future__ import annotations

from tessera.base.dtypes import SCALARS
from tessera.base.errors import DiagnosticSink, SourceFile
from tessera.base.tune_space import TuneSpace
from tessera.frontend import nodes as N
from tessera.transpile.const_eval import evaluate
from tessera.transpile.consts import NotConstant, Value, convert, module_env, value_range_error

MAX_CANDIDATES = 4096  # combinations of one space; beyond this tuning would take hours


def shape_symbols(fn: N.FuncDef, env: dict[str, Value]) -> dict[str, tuple[str, int]]:
    """The kernel's shape symbols, each with the first (tensor parameter, axis) that binds it."""
    out: dict[str, tuple[str, int]] = {}
    consts = {p.name for p in fn.params if p.qual == "const"}
    for p in fn.params:
        for axis, d in enumerate(p.dims or ()):
            if isinstance(d, N.Name) and d.id not in env and d.id not in consts and d.id != "grid_groups":
                out.setdefault(d.id, (p.name, axis))
    return out


def check_autotune(fn: N.FuncDef, env: dict[str, Value], sink: DiagnosticSink) -> TuneSpace | None:
    """The space of `fn`'s `@autotune`, None when it has none or after an error."""
    decos = [d for d in fn.decorators if d.name == "autotune"]
    if not decos:
        return None
    deco = decos[0]
    if len(decos) > 1:
        sink.error(decos[1].loc, "a kernel has at most one @autotune")
        return None
    if not fn.is_kernel:
        sink.error(deco.loc, "@autotune is for kernels; a device function is tuned with the kernel that calls it")
        return None
    if deco.args is None or deco.clauses:
        sink.error(deco.loc, "write @autotune(NAME=[values, ...], ..., key=[M, N]) with the tuned const parameters")
        return None
    if deco.args:
        sink.error(deco.args[0].loc, "@autotune takes keyword arguments only: NAME=[values, ...] and key=[...]")
        return None
    params = {p.name: p for p in fn.params}
    symbols = shape_symbols(fn, env)
    axes: list[tuple[str, tuple[Value, ...]]] = []
    key: tuple[str, ...] | None = None
    seen: set[str] = set()
    ok = True
    for kw in deco.kwargs:
        if kw.name in seen:
            sink.error(kw.loc, f"'{kw.name}' is given twice in @autotune")
            ok = False
            continue
        seen.add(kw.name)
        if kw.name == "key":
            key = _key(kw, symbols, sink)
            ok = ok and key is not None
            continue
        values = _axis(kw, params.get(kw.name), fn.name, env, sink)
        if values is None:
            ok = False
            continue
        axes.append((kw.name, values))
    if not ok:
        return None
    if not axes:
        sink.error(deco.loc, "@autotune lists no const parameter to tune: write @autotune(BM=[64, 128], ...)")
        return None
    count = 1
    for _, values in axes:
        count *= len(values)
    if count > MAX_CANDIDATES:
        sink.error(deco.loc, f"@autotune has {count} combinations, over the limit of {MAX_CANDIDATES}; "
                   "list fewer values")
        return None
    if key is None:
        key = tuple(symbols)
    consts = {p.name for p in fn.params if p.qual == "const"}
    sources = tuple((d.id, p.name, axis) for p in fn.params for axis, d in enumerate(p.dims or ())
                    if isinstance(d, N.Name) and d.id in symbols and d.id not in consts)
    return TuneSpace(tuple(axes), key, sources,
                     tuple(p.name for p in fn.params if p.qual != "const"))


def _key(kw: N.Keyword, symbols: dict[str, tuple[str, int]], sink: DiagnosticSink) -> tuple[str, ...] | None:
    if not isinstance(kw.value, N.ListLit):
        sink.error(kw.value.loc, "key= is a list of shape symbols: key=[M, N, K]")
        return None
    names: list[str] = []
    for item in kw.value.items:
        if not isinstance(item, N.Name):
            sink.error(item.loc, "key= lists shape symbols by name: key=[M, N, K]")
            return None
        if item.id not in symbols:
            known = ", ".join(symbols) or "none"
            sink.error(item.loc, f"'{item.id}' in key= is not a shape symbol of the kernel's tensor parameters "
                       f"(shape symbols: {known})")
            return None
        if item.id in names:
            sink.error(item.loc, f"'{item.id}' is listed twice in key=")
            return None
        names.append(item.id)
    return tuple(names)


def _axis(kw: N.Keyword, p: N.Param | None, kernel: str, env: dict[str, Value],
          sink: DiagnosticSink) -> tuple[Value, ...] | None:
    """The checked candidate values of one tuned parameter."""
    if p is None or p.qual != "const":
        what = "is not a parameter" if p is None else "is a parameter passed at launch, not a const parameter"
        sink.error(kw.loc, f"'{kw.name}' {what} of '{kernel}'; @autotune tunes const parameters "
                   f"(declare it '{kw.name}: const i32 = ...')")
        return None
    ty = SCALARS.get(p.type_name)
    if ty is None:
        return None  # an unknown type: typecheck reports it
    if not isinstance(kw.value, N.ListLit):
        sink.error(kw.value.loc, f"the candidates of '{kw.name}' are a list: {kw.name}=[64, 128]")
        return None
    if not kw.value.items:
        sink.error(kw.value.loc, f"the list of candidates of '{kw.name}' is empty")
        return None
    values: list[Value] = []
    for item in kw.value.items:
        try:
            v = evaluate(item, env)
        except NotConstant as nc:
            why = f" ({nc.why})" if nc.why and "not a compile-time constant" not in nc.why else ""
            sink.error(nc.loc or item.loc, f"a candidate of '{kw.name}' must be a compile-time constant{why}")
            return None
        wrong = (ty.is_int and not isinstance(v, int)) or (ty.kind == "bool" and not isinstance(v, bool)) \
            or (ty.is_int and isinstance(v, bool)) or (ty.is_float and isinstance(v, bool))
        if wrong:
            sink.error(item.loc, f"a candidate of '{kw.name}' must be {ty}, not {_kind(v)} {v!r}")
            return None
        out_of_range = value_range_error(v, ty)
        if out_of_range:
            sink.error(item.loc, f"a candidate of '{kw.name}': {out_of_range}")
            return None
        v = convert(v, ty)
        if v in values:
            sink.error(item.loc, f"{v!r} is listed twice among the candidates of '{kw.name}'")
            return None
        values.append(v)
    return tuple(values)


def _kind(v: Value) -> str:
    return "a bool" if isinstance(v, bool) else "an int" if isinstance(v, int) else "a float"


def tune_spaces(module: N.Module, source: SourceFile) -> dict[str, TuneSpace]:
    """The search space of every kernel with a valid `@autotune` (errors are the pass's to report)."""
    env = module_env(module)
    sink = DiagnosticSink(source)
    out: dict[str, TuneSpace] = {}
    for item in module.items:
        if isinstance(item, N.FuncDef) and item.is_kernel:
            space = check_autotune(item, env, sink)
            if space is not None:
                out[item.name] = space
    return out
