"""Which configuration a launch of a tuned kernel uses: from the records, a neighbour, or by tuning.

For the launch's key (its key shape symbols' values, element types, the caller's fixed values)
the candidates of the space are looked up in the store (`store.py`):
1. every candidate has a record for this key: the best one is used (the fastest measured, else
   the cost model's first), after a re-check against the compiled variant and the target;
2. none has, and reuse across keys is on: the nearest tuned key (log-distance over the key
   values, every value within a factor of 2) lends its best configuration if it fits;
3. otherwise the candidates without a record are compiled, pruned and ranked (`search.py`),
   the best-ranked are measured when measuring is on, and their records are stored. Candidates
   that have records already are not compiled again (a candidate added to the space costs one
   compile, and the others' records stay valid).
A record that fails the re-check is dropped with a warning and its candidate judged again; a
record is never launched unchecked.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tessera.autotune.record import Record
from tessera.autotune.search import Config, GroupsOf, Judged, config_text, count, judge_all
from tessera.autotune.store import TuneStore, misfit, resources_of, warn
from tessera.base.errors import CompileError, LaunchError
from tessera.transpile.consts import Value


@dataclass(frozen=True)
class Choice:
    record: Record
    origin: str       # where it came from, in words

    @property
    def config(self) -> dict[str, Value]:
        return dict(self.record.config)


@dataclass
class Launch:
    """What the selection needs to know about one launch."""

    kernel: str
    arch: str
    source: str                                   # the source hash
    fingerprint: str
    key: tuple[tuple[str, int], ...]
    dtypes: tuple[tuple[str, str], ...]
    configs: list[Config]                         # the candidates, the caller's other constants included
    shapes: Mapping[str, int]
    front: Callable[[], Any]                      # the front end, for compiling candidates
    other: Mapping[str, Value]                    # the caller's constants that are not tuned (and type bindings)
    groups_of: GroupsOf
    recheck: Callable[[Record], str | None]       # why the compiled variant does not fit, or None
    measure: Callable[[dict[str, Value]], float] | None = None
    measured_on: str = ""
    top_k: int = 4
    generalize: bool = True
    progress: bool = True
    log: list[str] = field(default_factory=list)

    def record(self, config: Config, **figures: Any) -> Record:
        return Record(self.source, self.kernel, self.key, self.dtypes, self.fingerprint, self.arch,
                      tuple(sorted(config)), **figures)


def best(records: list[Record]) -> Record | None:
    """The fastest measured record, else the one the cost model ranks first."""
    live = [r for r in records if not r.pruned]
    timed = [r for r in live if r.time_ms is not None]
    if timed:
        return min(timed, key=lambda r: (r.time_ms, r.estimate_us, r.config))
    return min(live, key=lambda r: (r.estimate_us, r.config)) if live else None


def _of_group(store: TuneStore, ln: Launch, key: tuple[tuple[str, int], ...]) -> dict[Config, Record]:
    wanted = {tuple(sorted(c)) for c in ln.configs}
    group = (ln.source, ln.kernel, key, ln.dtypes, ln.fingerprint, ln.arch)
    return {r.config: r for r in store.records(ln.arch).values() if r.group == group and r.config in wanted}


def neighbours(store: TuneStore, ln: Launch) -> list[tuple[float, tuple[tuple[str, int], ...]]]:
    """Tuned keys of this kernel within a factor of 2 in every key value, nearest first."""
    mine = dict(ln.key)
    found: dict[tuple, float] = {}
    for r in store.records(ln.arch).values():
        if (r.source, r.kernel, r.dtypes, r.fingerprint) != (ln.source, ln.kernel, ln.dtypes, ln.fingerprint):
            continue
        other = dict(r.key)
        if r.key == ln.key or set(other) != set(mine) or r.key in found:
            continue
        if all(v > 0 and mine[n] > 0 and 0.5 <= mine[n] / v <= 2.0 for n, v in other.items()):
            found[r.key] = math.sqrt(sum(math.log(mine[n] / v) ** 2 for n, v in other.items()))
    return sorted(((d, k) for k, d in found.items()), key=lambda x: (x[0], x[1]))


def _figures(j: Judged) -> dict[str, Any]:
    return {"resources": tuple(sorted(j.resources.to_json().items())) if j.resources else (),
            "model": tuple(sorted(j.estimate.to_json().items())) if j.estimate else (),
            "pruned": f"{j.rule}: {j.reason}" if j.pruned else ""}


def _checked(store: TuneStore, ln: Launch, win: Record) -> str | None:
    """Why `win` must not be launched (it was dropped, with a warning), or None."""
    why = misfit(win) or ln.recheck(win)
    if why is not None:
        warn(f"the autotuning record of {ln.kernel} ({config_text(win.config)}) does not fit {ln.arch}: {why}; "
             "it is dropped and the configuration judged again")
        store.update(ln.arch, remove=[win.identity])
    return why


def tune(store: TuneStore, ln: Launch, have: dict[Config, Record]) -> None:
    """Judge the candidates without a record, measure the best-ranked when measuring, store the records."""
    missing = [c for c in ln.configs if tuple(sorted(c)) not in have]
    judged = judge_all(ln.front(), ln.arch, ln.kernel, missing, ln.other, ln.shapes, ln.groups_of, ln.progress)
    new = {tuple(sorted(j.config)): ln.record(j.config, **_figures(j)) for j in judged}
    count("tunings")
    pool = {**have, **new}
    if ln.measure is not None:
        ranked = sorted((r for r in pool.values() if not r.pruned), key=lambda r: (r.estimate_us, r.config))
        for r in [r for r in ranked if r.time_ms is None][:ln.top_k]:
            ms = ln.measure(dict(r.config))
            count("measurements")
            if math.isfinite(ms):
                new[r.config] = dataclasses.replace(r, time_ms=ms, measured_on=ln.measured_on)
            else:
                new[r.config] = dataclasses.replace(r, pruned="failed: the launch failed when timed")
    store.update(ln.arch, new.values())
    ln.log.append(f"tuned {len(judged)} candidate(s), {sum(j.pruned for j in judged)} pruned")


def choose(store: TuneStore, ln: Launch) -> Choice:
    """The configuration for this launch (see the module docstring)."""
    for _ in range(4):
        have = _of_group(store, ln, ln.key)
        if len(have) == len({tuple(sorted(c)) for c in ln.configs}):
            win = best(list(have.values()))
            if win is None:
                reasons = "; ".join(f"{config_text(r.config)}: {r.pruned}" for r in list(have.values())[:4])
                raise LaunchError(f"{ln.kernel}(): every autotuning candidate was pruned for {ln.arch} ({reasons})")
            if _checked(store, ln, win) is None:
                how = (f"measured {win.time_ms:.4g} ms on {win.measured_on}" if win.time_ms is not None
                       else f"the cost model's first choice, estimate {win.estimate_us:.4g} us")
                return Choice(win, f"tuned for this key ({how})")
            continue
        if not have and ln.generalize:
            for dist, key in neighbours(store, ln):
                win = best(list(_of_group(store, ln, key).values()))
                if win is not None and _checked(store, ln, win) is None:
                    near = ", ".join(f"{n}={v}" for n, v in key)
                    return Choice(win, f"reused from the nearest tuned key {near} (log-distance {dist:.3f}, "
                                       "every key value within a factor of 2)")
        tune(store, ln, have)
    raise LaunchError(f"{ln.kernel}(): autotuning found no configuration that fits {ln.arch}")


def recheck_variant(module: Any, kernel: str, arch: str,
                    types: Mapping[str, str] | None = None) -> Callable[[Record], str | None]:
    """A re-check of a record against the variant the launch would compile (with the launch's type
    bindings `types`, for a generic kernel): it compiles, and its group size and shared memory
    agree with the record's figures."""
    def check(r: Record) -> str | None:
        res = resources_of(r)
        try:
            info = module.variant(kernel, {**(types or {}), **dict(r.config)}).kernel(kernel)
        except (CompileError, LaunchError) as e:
            return f"it does not compile ({str(e).strip().splitlines()[0][:200]})"
        if res is None:
            return "it has no resource figures"
        tiles = math.prod(info.tile)
        if tiles != res.tiles or info.dynamic_smem > res.shared:
            return (f"its figures ({res.tiles} tiles, {res.shared} bytes of shared memory) disagree with the "
                    f"compiled variant ({tiles} tiles, {info.dynamic_smem} bytes)")
        return None
    return check
