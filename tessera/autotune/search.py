"""The candidates of a search space, compiled and judged in parallel before anything runs.

Each candidate is one variant (`compiler.compile_variant` on the shared front end: the source is
parsed once) compiled to CUDA C and then by NVRTC for the target (no GPU needed), which gives
ptxas' registers, spills and static shared memory (kept per process for each variant's CUDA C: they do
not depend on the launch's shapes, so tuning another key of the same kernel runs NVRTC only for C
it has not seen). The pruning rules (`tune_model.prune_reason`)
drop what cannot run well, each with its reason; the survivors get a cost-model estimate for the
launch's shapes. Compiles run on a thread pool (the compiler keeps no shared mutable state);
a progress bar (tqdm, on standard error, only when it is a terminal) shows them.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tessera.autotune.arch import arch_spec
from tessera.autotune.model import Estimate, Resources, estimate, prune_reason
from tessera.base.errors import CompileError, TesseraError
from tessera.base.forksafe import ForkSafeLock
from tessera.base.options import CompileOptions
from tessera.base.tune_space import TuneSpace
from tessera.transpile.consts import Value
from tessera.transpile.lir import nodes as L

Config = tuple[tuple[str, Value], ...]
GroupsOf = Callable[[dict[str, Value]], "int | None"]

_stats_lock = ForkSafeLock()
STATS = {"candidate_compiles": 0}
# (arch, C name, sha256 of the CUDA C) -> NVRTC's (registers, spills, static shared bytes), or the
# first line of its compile error
_figures: dict[tuple[str, str, str], tuple[int, int, int] | str] = {}


def count(name: str, n: int = 1) -> None:
    with _stats_lock:
        STATS[name] = STATS.get(name, 0) + n


def candidates(space: TuneSpace, fixed: Mapping[str, Value]) -> list[Config]:
    """Every combination of the space's values, in source order; an axis the caller fixed keeps
    the caller's value only."""
    axes = [(n, (fixed[n],) if n in fixed else vals) for n, vals in space.axes]
    return [tuple(zip([n for n, _ in axes], combo)) for combo in itertools.product(*(v for _, v in axes))]


@dataclass(frozen=True)
class Judged:
    """One candidate after compiling: its resources and estimate, or why it was pruned."""

    config: Config
    resources: Resources | None
    estimate: Estimate | None
    rule: str = ""          # the pruning rule, "" for a survivor
    reason: str = ""

    @property
    def pruned(self) -> bool:
        return bool(self.rule)


def _compile_rule(e: CompileError) -> tuple[str, str]:
    """The pruning rule of a candidate that does not compile, from the first error."""
    first = e.diagnostics[0].message if e.diagnostics else (e.text.splitlines() or ["does not compile"])[0]
    if "bytes of shared memory" in first or "budget" in first:
        return "shared memory", first
    if "tile" in first and ("group" in first or "1024" in first):
        return "tiles per group", first
    return "does not compile", first


def judge(front: Any, arch: str, kernel: str, config: Config, other: Mapping[str, Value],
          shapes: Mapping[str, int], groups_of: GroupsOf) -> Judged:
    """Compile one candidate for `arch` (transpile, then NVRTC) and judge it."""
    from tessera.autotune.cost_count import count_work, global_footprint
    from tessera.runtime.cuda.nvrtc import compile_cuda
    from tessera.transpile.driver import compile_variant

    consts = {**other, **dict(config)}
    count("candidate_compiles")
    try:
        result = compile_variant(front, CompileOptions(arch=arch, alignment="generic"), variants={kernel: consts},
                                 only_kernel=kernel)
    except CompileError as e:
        rule, reason = _compile_rule(e)
        return Judged(config, None, None, rule, reason)
    info = result.kernel(kernel)
    assert isinstance(result.module, L.Module)
    fn = next(f for f in result.module.kernels if kernel in (f.name, f.base_name))
    key = (arch, info.c_name, hashlib.sha256(result.cuda.encode()).hexdigest())
    with _stats_lock:
        figures = _figures.get(key)
    if figures is None:
        try:
            nv = compile_cuda(result.cuda, name=f"{kernel}.cu", arch=arch)
            ptx = nv.kernel(info.c_name)
            figures = (ptx.registers, ptx.spill_stores + ptx.spill_loads, ptx.shared_bytes)
        except CompileError as e:
            figures = (e.text.splitlines() or ["NVRTC failed"])[0]
        except (KeyError, TesseraError):  # no ptxas report (PTX only): resources from the compiler alone
            figures = (0, 0, 0)
        with _stats_lock:
            _figures[key] = figures
    if isinstance(figures, str):
        return Judged(config, None, None, "does not compile", figures)
    regs, spills, static = figures
    res = Resources(math.prod(info.tile), regs, spills, static + info.dynamic_smem)
    spec = arch_spec(arch)
    why = prune_reason(spec, res)
    if why is not None:
        return Judged(config, res, None, *why)
    groups = groups_of(dict(info.const_values)) or _default_groups(info, shapes)
    work = count_work(fn, shapes, groups)
    return Judged(config, res, estimate(spec, res, work, groups, global_footprint(fn, shapes)))


def _default_groups(info: Any, shapes: Mapping[str, int]) -> int:
    """The grid a launch without one gets: from grid_groups, or a map kernel's element count."""
    if "grid_groups" in shapes:
        return shapes["grid_groups"]
    if info.map_width:
        p = next(p for p in info.params if p.name == info.map_tensor)
        n = math.prod(d if isinstance(d, int) else shapes.get(d, 1) for d in p.dims)
        return max(1, -(-n // (math.prod(info.tile) * info.map_width)))
    return 1


def judge_all(front: Any, arch: str, kernel: str, configs: Sequence[Config], other: Mapping[str, Value],
              shapes: Mapping[str, int], groups_of: GroupsOf, progress: bool = True) -> list[Judged]:
    """Judge every candidate on a thread pool, in the order given."""
    if not configs:
        return []
    bar = _bar(len(configs), f"tuning {kernel} ({arch})") if progress else None
    workers = max(1, min(len(configs), os.cpu_count() or 1, 8))

    def one(cfg: Config) -> Judged:
        try:
            return judge(front, arch, kernel, cfg, other, shapes, groups_of)
        finally:
            if bar is not None:
                bar.update(1)

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tessera-tune") as pool:
            return list(pool.map(one, configs))
    finally:
        if bar is not None:
            bar.close()


def _bar(total: int, desc: str) -> Any:
    """A tqdm progress bar on standard error, silent when it is not a terminal."""
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    quiet = not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    return tqdm(total=total, desc=desc, unit="candidate", disable=quiet, leave=False, file=sys.stderr)


def config_text(config: Config) -> str:
    return ", ".join(f"{n}={v}" for n, v in config)
