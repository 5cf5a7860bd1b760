"""`tessera.autotune`: the switches of the autotuner and its cache (spec section 9).

    tessera.autotune.enable(True)          # tune kernels with @autotune at launch (the default)
    tessera.autotune.measure_on_cpu(True)  # without a GPU, time candidates on the CPU backend
    tessera.autotune.generalize(False)     # never reuse the configuration of a nearby key
    tessera.autotune.save_cache("sm90.json"); tessera.autotune.load_cache("sm90.json")
    print(tessera.autotune.explain(mod.sgemm, M=4096, N=4096, K=4096))
    tessera.autotune.clear()

This module holds the settings and the one record store, and turns a launch into a
`select.Launch`; deciding is `tessera/autotune/select.py`'s job.
"""

from __future__ import annotations

import hashlib
import math
import operator
from typing import Any

from tessera.autotune.search import STATS, candidates, count
from tessera.autotune.store import TuneStore
from tessera.base.errors import LaunchError, TesseraError
from tessera.base.forksafe import ForkSafeLock
from tessera.base.tune_space import TuneSpace

__all__ = ["clear", "enable", "explain", "generalize", "load_cache", "measure_on_cpu", "save_cache", "stats"]

_settings: dict[str, Any] = {"enabled": True, "cpu": False, "generalize": True, "top_k": 4, "repeat": 5}
_store = TuneStore()
_memo: dict[tuple, Any] = {}
_memo_lock = ForkSafeLock()


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TesseraError(f"tessera.autotune.{name}() takes True or False, not {value!r}"[:200])
    return value


def enable(flag: bool = True, *, top_k: int | None = None) -> None:
    """Tune kernels with `@autotune` at launch (True, the default), or use the const parameters'
    defaults (False). `top_k`: how many of the best-ranked candidates are measured (default 4)."""
    _settings["enabled"] = _flag("enable", flag)
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
            raise TesseraError(f"tessera.autotune.enable(): top_k must be an int from 1 to 1000, not {top_k!r}"[:200])
        _settings["top_k"] = top_k
    _forget()


def measure_on_cpu(flag: bool = True) -> None:
    """Without a GPU, time the best-ranked candidates on the CPU backend (off by default: CPU
    times say little about GPU times, so the cost model's first choice is used)."""
    _settings["cpu"] = _flag("measure_on_cpu", flag)
    _forget()


def generalize(flag: bool = True) -> None:
    """Let a key never tuned reuse the configuration of the nearest tuned key (within a factor of 2
    in every key value). On by default."""
    _settings["generalize"] = _flag("generalize", flag)
    _forget()


def save_cache(path: str) -> int:
    """Write every tuning record to `path` (JSON); returns how many."""
    if not isinstance(path, str):
        raise TesseraError(f"tessera.autotune.save_cache() takes a path as a str, not {type(path).__name__}")
    try:
        return _store.export(path)
    except OSError as e:
        raise TesseraError(f"cannot write {path!r}: {e.strerror or e}") from None
    except ValueError:  # a NUL in the path
        raise TesseraError(f"tessera.autotune.save_cache(): path {path!r} is not a valid path") from None


def load_cache(path: str) -> int:
    """Add the records of a file written by `save_cache` to this process and the cache folder.
    Malformed records and those that do not fit their architecture are dropped with a warning
    (`tessera.autotune.store.AutotuneWarning`); returns how many were kept."""
    if not isinstance(path, str):
        raise TesseraError(f"tessera.autotune.load_cache() takes a path as a str, not {type(path).__name__}")
    try:
        n = _store.import_file(path)
    except OSError as e:
        raise TesseraError(f"cannot read {path!r}: {e.strerror or e}") from None
    except ValueError:  # a NUL in the path
        raise TesseraError(f"tessera.autotune.load_cache(): path {path!r} is not a valid path") from None
    _forget()
    return n


def clear() -> None:
    """Forget every tuning result: in this process and the per-architecture files of the cache folder."""
    _store.clear(files=True)
    _forget()


def stats() -> dict[str, int]:
    """Counters of this process: candidate_compiles, tunings, measurements, cache_hits, reuses."""
    return dict(STATS)


def _forget() -> None:
    with _memo_lock:
        _memo.clear()


def source_hash(source: bytes) -> str:
    """The hash of a module's source without its @autotune decorators: changing a search space
    keeps the records of the configurations it still lists."""
    lines = source.split(b"\n")
    depth = 0
    kept = []
    for line in lines:
        if depth > 0 or line.lstrip().startswith(b"@autotune"):
            code = line.split(b"#", 1)[0]
            depth = max(0, depth + code.count(b"(") + code.count(b"[") - code.count(b")") - code.count(b"]"))
            kept.append(b"")
            continue
        kept.append(line)
    return hashlib.sha256(b"\n".join(kept)).hexdigest()


def _argument(space: TuneSpace, kernel: str, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    if name in kwargs:
        return kwargs[name]
    if name in space.params and space.params.index(name) < len(args):
        return args[space.params.index(name)]
    raise LaunchError(f"{kernel}() is missing argument: {name}")


def _shape_and_type(kernel: str, name: str, value: Any) -> tuple[tuple[int, ...], str]:
    import numpy as np

    from tessera.runtime.launch_args import tsr_type_of

    if not isinstance(value, np.ndarray):
        from tessera.runtime.device_arrays import ForeignArrayError, adapt

        try:
            found = adapt(value)  # another library's array: a NumPy view, or a device array's description
        except ForeignArrayError as e:
            raise LaunchError(f"{kernel}(): parameter '{name}': cannot take this {type(value).__name__}: {e}") from None
        if found is None:
            raise LaunchError(f"{kernel}(): parameter '{name}': expected an array, got {type(value).__name__}")
        value = found
    return tuple(int(d) for d in value.shape), tsr_type_of(value.dtype) or str(value.dtype)


def launch_facts(space: TuneSpace, kernel: str, args: tuple, kwargs: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """The shape symbols and the tensor parameters' element types of a launch."""
    shapes: dict[str, int] = {}
    dtypes: dict[str, str] = {}
    for sym, param, axis in space.sources:
        shape, dtype = _shape_and_type(kernel, param, _argument(space, kernel, param, args, kwargs))
        dtypes[param] = dtype
        if axis >= len(shape):
            raise LaunchError(f"{kernel}(): parameter '{param}' has {len(shape)} dimensions, fewer than its type's")
        shapes.setdefault(sym, shape[axis])
    return shapes, dtypes


def groups_function(kernel: str, grid: Any):
    """The number of groups a candidate's launch has, from `grid` (a function of the constants,
    an int or a tuple), None where the launch derives it."""
    from tessera.runtime.launch_args import normalize_grid

    def groups_of(consts: dict[str, Any]) -> int | None:
        g = grid(dict(consts)) if callable(grid) else grid
        if g is None:
            return None
        x, y, z = normalize_grid(kernel, g)
        return x * y * z
    return groups_of


def launch_config(k: Any, space: TuneSpace, args: tuple, kwargs: dict[str, Any], given: dict[str, Any],
                  grid: Any) -> dict[str, Any]:
    """The tuned constants of a launch of `k` (a tessera.api.Kernel): `given` holds the caller's
    const values (and type bindings); the tuned axes it fixes are not searched."""
    if not _settings["enabled"] or all(n in given for n in space.names):
        return {}
    choice = _choose(k, space, args, kwargs, given, grid)
    return {n: v for n, v in choice.config.items() if n in space.names}


def _launch(k: Any, space: TuneSpace, args: tuple, kwargs: dict[str, Any], given: dict[str, Any], grid: Any,
            shapes: dict[str, int], dtypes: dict[str, str]):
    from tessera.autotune.measure import measure
    from tessera.autotune.select import Launch, recheck_variant
    from tessera.runtime.cache.fingerprint import fingerprint

    mod = k.module
    fixed = {n: v for n, v in given.items() if n in space.names}
    other = {n: v for n, v in given.items() if n not in space.names}
    numeric = tuple((n, v) for n, v in sorted(other.items()) if not isinstance(v, str))
    configs = [c + numeric for c in candidates(space, fixed)]
    measuring = mod.backend == "cuda" or _settings["cpu"]
    where = "cpu"
    if mod.backend == "cuda":
        from tessera.runtime.cuda.driver import device

        where = f"cuda: {device().name}"
    repeat = _settings["repeat"]
    return Launch(k.name, mod.arch, source_hash(mod.source), fingerprint(),
                  tuple(sorted((s, shapes[s]) for s in space.key)), tuple(sorted(dtypes.items())), configs, shapes,
                  mod.front_end, other, groups_function(k.name, grid),
                  recheck_variant(mod, k.name, mod.arch, {n: v for n, v in other.items() if isinstance(v, str)}),
                  (lambda cfg: measure(k, cfg, args, kwargs, grid, repeat)) if measuring else None, where,
                  _settings["top_k"], _settings["generalize"])


def _choose(k: Any, space: TuneSpace, args: tuple, kwargs: dict[str, Any], given: dict[str, Any], grid: Any):
    from tessera.autotune.select import choose

    shapes, dtypes = launch_facts(space, k.name, args, kwargs)
    # The decision of a launch seen before is remembered: looked up before anything else is made.
    memo_key = (id(k.module), k.name, k.module.arch, tuple(sorted((s, shapes[s]) for s in space.key)),
                tuple(sorted(dtypes.items())), tuple(sorted(map(str, given.items()))))
    with _memo_lock:
        hit = _memo.get(memo_key)
    if hit is not None and hit[0] is k.module:
        return hit[1]
    ln = _launch(k, space, args, kwargs, given, grid, shapes, dtypes)
    before = STATS.get("tunings", 0)
    choice = choose(_store, ln)
    count("reuses" if "nearest" in choice.origin else "cache_hits" if STATS.get("tunings", 0) == before else "tuned")
    with _memo_lock:
        if len(_memo) > 4096:  # decisions are cheap to remake from the records
            _memo.clear()
        _memo[memo_key] = (k.module, choice)
    return choice


def _key_value(kernel: str, name: str, value: Any) -> int:
    """A key value for `explain`: a shape symbol's value, as a launch could bind it."""
    try:
        n = None if isinstance(value, bool) else operator.index(value)  # an int or a NumPy integer
    except TypeError:
        n = None
    if n is None or not 0 <= n < 2**31:
        raise TesseraError(f"explain({kernel}): {name} must be an int from 0 to {2**31 - 1} (a shape symbol's "
                           f"value), not {value!r}"[:300])
    return n


def explain(kernel: Any, **shapes: int) -> str:
    """Which configuration a launch of `kernel` with these key values would use, from where and
    why (nothing is compiled or tuned)."""
    from tessera.autotune.select import best, neighbours
    from tessera.runtime.cache.fingerprint import fingerprint

    mod: Any = getattr(kernel, "module", None)
    space = getattr(kernel, "tune_space", None) if mod is not None else None
    if mod is None or space is None:
        raise TesseraError(f"explain() takes a kernel with @autotune, not {kernel!r}"[:200])
    missing = [s for s in space.key if s not in shapes]
    if missing:
        raise TesseraError(f"explain({kernel.name}): give the key value{'s' * (len(missing) > 1)} "
                           f"{', '.join(missing)} as keywords ({', '.join(f'{s}=...' for s in space.key)})")
    key = tuple(sorted((s, _key_value(kernel.name, s, shapes[s])) for s in space.key))
    unknown = sorted(set(shapes) - set(space.key))
    if unknown:
        raise TesseraError(f"explain({kernel.name}): {unknown[0]!r} is not a key of its @autotune "
                           f"(key: {', '.join(space.key)})"[:300])
    src, fp = source_hash(mod.source), fingerprint()
    mine = [r for r in _store.records(mod.arch).values() if (r.source, r.kernel, r.fingerprint) == (src, kernel.name, fp)]
    head = f"{kernel.name} on {mod.arch}, key {', '.join(f'{n}={v}' for n, v in key)}:"
    total = math.prod(len(v) for _, v in space.axes)
    exact = [r for r in mine if r.key == key]
    if not _settings["enabled"]:
        return f"{head}\n  autotuning is off (tessera.autotune.enable(False)): the const parameters' defaults are used"
    if exact:
        lines = [head]
        for dtypes in sorted({r.dtypes for r in exact}):
            recs = [r for r in exact if r.dtypes == dtypes]
            win = best(recs)
            pruned = [r for r in recs if r.pruned]
            types = ", ".join(f"{n}: {t}" for n, t in dtypes)
            if win is None:
                lines.append(f"  [{types}] every candidate was pruned")
                continue
            how = (f"measured {win.time_ms:.4g} ms on {win.measured_on}" if win.time_ms is not None
                   else f"the cost model's first choice (estimate {win.estimate_us:.4g} us, "
                        f"{dict(win.model).get('bound', '?')}-bound)")
            lines.append(f"  [{types}] {', '.join(f'{n}={v}' for n, v in win.config)}: from the autotuning cache, "
                         f"tuned for this key, {how}")
            lines.append(f"    {len(recs)} of {total} candidates have records, {len(pruned)} pruned" +
                         "".join(f"\n      pruned {', '.join(f'{n}={v}' for n, v in r.config)}: {r.pruned}"
                                 for r in pruned[:8]))
        return "\n".join(lines)
    if _settings["generalize"] and mine:
        from tessera.autotune.select import Launch

        probe = Launch(kernel.name, mod.arch, src, fp, key, mine[0].dtypes, [], {}, lambda: None, {},
                       lambda c: None, lambda r: None)
        near = neighbours(_store, probe)
        if near:
            dist, nkey = near[0]
            win = best([r for r in mine if r.key == nkey and r.dtypes == mine[0].dtypes])
            if win is not None:
                return (f"{head}\n  not tuned for this key; a launch reuses {', '.join(f'{n}={v}' for n, v in win.config)} "
                        f"from the nearest tuned key {', '.join(f'{n}={v}' for n, v in nkey)} (log-distance {dist:.3f}), "
                        "after checking that it fits")
    return f"{head}\n  not tuned for this key: the next launch tunes {total} candidate(s)"
