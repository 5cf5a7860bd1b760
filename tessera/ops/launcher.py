"""How the operators of `tessera.ops` run their kernels: the `.tsr` files shipped in
`tessera/ops/kernels/` (package data), compiled once per backend and configuration, tuned by
`@autotune` (spec section 9: the persistent cache, the cost model without a GPU).

`config` asks the autotuner which constants a launch would use, without launching (an operator
that composes kernels, such as matmul's unfused epilogue, needs to know first); `launch` runs one
kernel with its tuned constants. Modules are cached per kernel file and backend: a kernel file
is parsed once per process, a variant compiled once per configuration (and kept on disk by the
runtime's cache). `LAST` keeps the most recent configuration of each kernel, for
`bench/ops_bench.py` and `figures`.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

from tessera.api import Kernel, Module
from tessera.api import compile as compile_module
from tessera.base.forksafe import ForkSafeLock

_modules: dict[tuple[str, str, str], Module] = {}
_lock = ForkSafeLock()
LAST: dict[str, dict[str, Any]] = {}   # kernel name -> its last launch's constants (tuned ones included)


def source(file: str) -> str:
    """The text of a kernel file shipped with the package."""
    return resources.files("tessera.ops").joinpath("kernels").joinpath(file).read_text(encoding="utf-8")


def module(file: str, on_device: bool) -> Module:
    """The module of a kernel file for this call's backend: CUDA for arrays in CUDA memory, else the
    `backend="auto"` choice (CUDA where there is a GPU, the CPU backend otherwise; $TESSERA_BACKEND
    overrides it)."""
    backend = "cuda" if on_device else "auto"
    key = (file, backend, os.environ.get("TESSERA_BACKEND", ""))
    with _lock:
        mod = _modules.get(key)
        if mod is None:
            mod = _modules[key] = compile_module(source(file), backend, path=f"tessera/ops/kernels/{file}")
        return mod


def kernel(file: str, name: str, on_device: bool) -> Kernel:
    return module(file, on_device)[name]


def config(k: Kernel, args: tuple, consts: dict[str, Any], types: dict[str, str], grid: Any) -> dict[str, Any]:
    """The tuned constants a launch of `k` with these arguments would use (the autotuner's choice
    for the launch's key, tuned now if it never was); {} for a kernel without @autotune or with
    autotuning off. `consts` are the caller's fixed constants, `types` the type bindings."""
    from tessera.autotune import launch_config

    space = k.tune_space
    if space is None:
        return {}
    return launch_config(k, space, args, {}, {**consts, **types}, grid)


def launch(k: Kernel, args: tuple, consts: dict[str, Any], grid: Any, tuned: dict[str, Any] | None = None,
           types: dict[str, str] | None = None) -> dict[str, Any]:
    """Launch `k` with the caller's constants and the tuned ones (`tuned`, else asked for now);
    returns the constants used."""
    if tuned is None:
        tuned = config(k, args, consts, types or {}, grid)
    used = {**consts, **tuned}
    k(*args, grid=grid, **used)
    LAST[k.name] = {**used, **(types or {})}
    return used


def figures(file: str, name: str, consts: dict[str, Any], arch: str) -> dict[str, Any]:
    """A variant's static figures from an NVRTC build for `arch` (no GPU needed): registers, shared
    memory and spills per tile, and NVRTC's warnings."""
    from tessera.base.options import CompileOptions
    from tessera.runtime.cuda.nvrtc import compile_cuda
    from tessera.transpile.driver import compile_variant

    options = CompileOptions(arch=arch, alignment="generic")
    result = compile_variant(module(file, False).front_end(), options, variants={name: consts}, only_kernel=name)
    info = result.kernel(name)
    nv = compile_cuda(result.cuda, name=f"{name}.cu", arch=arch)
    ptx = nv.kernel(info.c_name)
    return {"registers": ptx.registers, "shared": ptx.shared_bytes + info.dynamic_smem,
            "spills": ptx.spill_stores + ptx.spill_loads, "warnings": nv.warnings}
